// The attention activations, one row each: the ABI code, the name every file
// and flag uses, the class of formula (what an executor must evaluate), where the derivative jumps,
// and whether it acts on each score alone. Every list of activations in gemtb reads this table; to
// add one, see model/README.md.
#ifndef GEMTB_MODEL_ATTENTION_ACTIVATION_TABLE_H_
#define GEMTB_MODEL_ATTENTION_ACTIVATION_TABLE_H_

#include <optional>
#include <string_view>

#include "model/common/enum_names.h"

namespace gemtb {

// ABI codes fixed by the case files; upstream GDPA's own order is mapped at its boundary, never here.
enum class Activation : int {
  kSoftmax = 0,
  kIdentity = 1,
  kGelu = 2,  // erf form
  kGeluTanh = 3,
  kSilu = 4,
  kRelu = 5,
  kReluSquare = 6,
  kLeakyRelu = 7,  // slope 0.01
  kHardswish = 8,
};
inline constexpr int kNumActivations = 9;

enum class ActivationFormula {
  kRowSoftmax,      // exp of each score over its row's normalizer: needs the whole row (softmax)
  kLinear,          // the score itself
  kTranscendental,  // smooth, through exp, erf or tanh (gelu, gelu_tanh, silu)
  kPiecewise,       // piecewise polynomial (relu, relu_square, leaky_relu, hardswish)
};

struct ActivationInfo {
  Activation act;
  std::string_view name;
  ActivationFormula formula;
  int num_kinks;       // scores where f' jumps (executors take the left derivative there)
  double kinks[2];
  bool pointwise;      // f(score) alone, no row-wise state (all but softmax)
};

// Indexed by ABI code.
inline constexpr ActivationInfo kActivations[kNumActivations] = {
    {Activation::kSoftmax, "softmax", ActivationFormula::kRowSoftmax, 0, {0.0, 0.0}, false},
    {Activation::kIdentity, "identity", ActivationFormula::kLinear, 0, {0.0, 0.0}, true},
    {Activation::kGelu, "gelu", ActivationFormula::kTranscendental, 0, {0.0, 0.0}, true},
    {Activation::kGeluTanh, "gelu_tanh", ActivationFormula::kTranscendental, 0, {0.0, 0.0}, true},
    {Activation::kSilu, "silu", ActivationFormula::kTranscendental, 0, {0.0, 0.0}, true},
    {Activation::kRelu, "relu", ActivationFormula::kPiecewise, 1, {0.0, 0.0}, true},
    {Activation::kReluSquare, "relu_square", ActivationFormula::kPiecewise, 0, {0.0, 0.0}, true},
    {Activation::kLeakyRelu, "leaky_relu", ActivationFormula::kPiecewise, 1, {0.0, 0.0}, true},
    {Activation::kHardswish, "hardswish", ActivationFormula::kPiecewise, 2, {-3.0, 3.0}, true},
};

constexpr const ActivationInfo& InfoOf(Activation act) {
  const int code = static_cast<int>(act);
  return kActivations[code >= 0 && code < kNumActivations ? code : 0];
}

constexpr std::string_view ActivationName(Activation act) {
  const int code = static_cast<int>(act);
  return code >= 0 && code < kNumActivations ? kActivations[code].name : "?";
}

constexpr std::optional<Activation> ParseActivation(std::string_view name) {
  for (const ActivationInfo& row : kActivations) {
    if (row.name == name) return row.act;
  }
  return std::nullopt;
}

// The names as an EnumName table, for the JSON reader and messages.
inline constexpr EnumName<Activation> kActivationNames[kNumActivations] = {
    {kActivations[0].act, kActivations[0].name}, {kActivations[1].act, kActivations[1].name},
    {kActivations[2].act, kActivations[2].name}, {kActivations[3].act, kActivations[3].name},
    {kActivations[4].act, kActivations[4].name}, {kActivations[5].act, kActivations[5].name},
    {kActivations[6].act, kActivations[6].name}, {kActivations[7].act, kActivations[7].name},
    {kActivations[8].act, kActivations[8].name}};

// The table is in ABI order (kActivations[code].act has that code).
constexpr bool ActivationTableInCodeOrder() {
  for (int code = 0; code < kNumActivations; ++code) {
    if (static_cast<int>(kActivations[code].act) != code) return false;
  }
  return true;
}
static_assert(ActivationTableInCodeOrder());

}  // namespace gemtb

#endif  // GEMTB_MODEL_ATTENTION_ACTIVATION_TABLE_H_
