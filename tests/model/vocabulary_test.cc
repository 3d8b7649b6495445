// model/'s typed vocabulary: the activation table, the dtype table and the name tables, against
// lists written out here.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/attention/activation_table.h"
#include "model/attention/attention_mask.h"
#include "model/common/dtype.h"
#include "model/common/element_type.h"
#include "model/embedding/embedding_config.h"

namespace gemtb {
namespace {

TEST(ActivationTable, NamesInAbiOrderAndRoundTrip) {
  const std::vector<std::string> spec = {"softmax", "identity",    "gelu",       "gelu_tanh", "silu",
                                         "relu",    "relu_square", "leaky_relu", "hardswish"};
  ASSERT_EQ(static_cast<int>(spec.size()), kNumActivations);
  for (int code = 0; code < kNumActivations; ++code) {
    const Activation act = static_cast<Activation>(code);
    EXPECT_EQ(ActivationName(act), spec[code]);
    EXPECT_EQ(ParseActivation(spec[code]), act);
  }
  EXPECT_EQ(ParseActivation("tanh"), std::nullopt);
}

TEST(ActivationTable, OnlySoftmaxIsNotPointwise) {
  for (const ActivationInfo& row : kActivations) {
    EXPECT_EQ(row.pointwise, row.act != Activation::kSoftmax) << row.name;
    EXPECT_EQ(row.formula == ActivationFormula::kRowSoftmax, row.act == Activation::kSoftmax) << row.name;
  }
}

TEST(ActivationTable, KinksWhereTheDerivativeJumps) {
  // relu'(0): 0 | 1; leaky_relu'(0): 0.01 | 1; hardswish'(-3): 0 | -0.5, hardswish'(3): 1.5 | 1.
  EXPECT_EQ(InfoOf(Activation::kRelu).num_kinks, 1);
  EXPECT_EQ(InfoOf(Activation::kRelu).kinks[0], 0.0);
  EXPECT_EQ(InfoOf(Activation::kLeakyRelu).num_kinks, 1);
  EXPECT_EQ(InfoOf(Activation::kLeakyRelu).kinks[0], 0.0);
  EXPECT_EQ(InfoOf(Activation::kHardswish).num_kinks, 2);
  EXPECT_EQ(InfoOf(Activation::kHardswish).kinks[0], -3.0);
  EXPECT_EQ(InfoOf(Activation::kHardswish).kinks[1], 3.0);
  // relu_square' = 2 max(x, 0) is continuous; the smooth acts have none.
  for (Activation act : {Activation::kSoftmax, Activation::kIdentity, Activation::kGelu, Activation::kGeluTanh,
                         Activation::kSilu, Activation::kReluSquare}) {
    EXPECT_EQ(InfoOf(act).num_kinks, 0) << ActivationName(act);
  }
}

TEST(DtypeTable, BytesPerElementIncludeTheBlockScale) {
  EXPECT_EQ(DtypeBytes(Dtype::kFp64), 8.0);
  EXPECT_EQ(DtypeBytes(Dtype::kFp32), 4.0);
  EXPECT_EQ(DtypeBytes(Dtype::kFp16), 2.0);
  EXPECT_EQ(DtypeBytes(Dtype::kBf16), 2.0);
  EXPECT_EQ(DtypeBytes(Dtype::kFp8E4M3), 1.0);
  EXPECT_EQ(DtypeBytes(Dtype::kFp8E5M2), 1.0);
  EXPECT_EQ(DtypeBytes(Dtype::kMx4), 0.5 + 1.0 / 32.0);  // E2M1 + one E8M0 per 32
}

TEST(DtypeTable, NamesRoundTripAndExecutorTypesMapBack) {
  for (const DtypeInfo& row : kDtypes) EXPECT_EQ(ParseDtype(row.name), row.dtype) << row.name;
  EXPECT_EQ(ParseDtype("fp8"), Dtype::kFp8E4M3);
  EXPECT_EQ(ParseDtype("float32"), std::nullopt);
  for (ElementType t : {ElementType::kFloat64, ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16}) {
    EXPECT_EQ(ElementTypeOf(DtypeOf(t)), t);
  }
  EXPECT_EQ(ElementTypeOf(Dtype::kMx4), std::nullopt);
  EXPECT_EQ(DtypeName(DtypeOf(ElementType::kBFloat16)), "bf16");
}

TEST(NameTables, EmbeddingAndMaskNames) {
  EXPECT_EQ(NameIn(kTableDtypeNames, ElementType::kFloat16), "fp16");
  EXPECT_EQ(ParseIn(kTableDtypeNames, "fp64"), std::nullopt);  // tables are fp32, fp16 or bf16
  EXPECT_EQ(ParseIn(kPoolingNames, "weighted_sum"), Pooling::kWeightedSum);
  EXPECT_EQ(NameIn(kOptimizerKindNames, OptimizerKind::kRowwiseAdagrad), "rowwise_adagrad");
  EXPECT_EQ(NamesOf(kOptimizerKindNames), "sgd, rowwise_adagrad, adam");
  EXPECT_EQ(ParseMaskKind("causal"), MaskKind::kCausal);
  EXPECT_EQ(MaskKindName(MaskKind::kBlock), "block");
}

}  // namespace
}  // namespace gemtb
