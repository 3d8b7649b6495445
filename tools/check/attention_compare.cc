#include "tools/check/attention_compare.h"

#include <utility>

namespace gemtb::check {

absl::StatusOr<std::vector<ReferenceTensor>> ReferenceOutputs(
    const reference::AttentionInputs& inputs, const AttentionOptions& options,
    const std::optional<reference::TensorView<double>>& d_o, int threads) {
  const ElementType dtype = inputs.input_type;
  std::vector<ReferenceTensor> tensors;
  for (reference::Precision precision : {reference::Precision::kOracle, reference::Precision::kEmulate}) {
    const reference::ExecutionOptions exec{precision, threads};
    absl::StatusOr<reference::AttentionForwardResult> fwd = reference::AttentionForward(inputs, options, exec);
    if (!fwd.ok()) return fwd.status();
    std::vector<ReferenceTensor> found = {{"o.npy", fwd->o, {}, fwd->o_shape, dtype, false, false},
                                          {"lse.npy", fwd->lse, {}, fwd->lse_shape, ElementType::kFloat32, false, true}};
    if (d_o) {
      absl::StatusOr<reference::AttentionBackwardResult> bwd =
          reference::AttentionBackward(inputs, options, *d_o, *fwd, exec);
      if (!bwd.ok()) return bwd.status();
      found.push_back({"dq.npy", bwd->dq, {}, bwd->dq_shape, dtype, true, false});
      found.push_back({"dk.npy", bwd->dk, {}, bwd->dk_shape, dtype, true, false});
      found.push_back({"dv.npy", bwd->dv, {}, bwd->dv_shape, dtype, true, false});
      found.push_back({"ddense.npy", bwd->d_bias_dense, {}, bwd->d_bias_dense_shape, ElementType::kFloat32, true, false});
      found.push_back({"drel.npy", bwd->d_bias_rel, {}, bwd->d_bias_rel_shape, ElementType::kFloat32, true, false});
      found.push_back({"dts.npy", bwd->d_bias_ts, {}, bwd->d_bias_ts_shape, ElementType::kFloat32, true, false});
    }
    if (precision == reference::Precision::kOracle) {
      tensors = std::move(found);
    } else {
      for (size_t t = 0; t < tensors.size(); ++t) tensors[t].emu = std::move(found[t].ref);
    }
  }
  return tensors;
}

std::vector<Verdict> JudgeTensor(const ReferenceTensor& t, absl::Span<const double> got) {
  const std::string name = t.file.substr(0, t.file.size() - 4);
  std::vector<Verdict> verdicts;
  if (t.lse) {
    verdicts.push_back(LseMatches(name, got, t.ref));
  } else {
    verdicts.push_back(GpuPrimary(name, got, t.emu, t.ref, t.dtype));
    verdicts.push_back(
        GpuSecondaryRelL2(name, got, t.ref, t.gradient ? kGradientRelL2Tolerance : kForwardRelL2Tolerance));
  }
  return verdicts;
}

}  // namespace gemtb::check
