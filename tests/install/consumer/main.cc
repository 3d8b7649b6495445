// Calls the installed oracle: identity attention of one sequence, O must equal (QK^T)V.
#include <cmath>
#include <cstdio>
#include <vector>

#include "reference/attention/attention.h"

int main() {
  using namespace gemtb;
  std::vector<double> q = {1, 2, 3, 4}, k = {0.5, -1, 2, 0.25}, v = {1, 0, 0, 1};  // [2,1,2] each
  std::vector<int64_t> off = {0, 2};
  reference::AttentionInputs in;
  in.q = {q, {2, 1, 2}};
  in.k = {k, {2, 1, 2}};
  in.v = {v, {2, 1, 2}};
  in.q_offsets = {off, {2}};
  in.kv_offsets = {off, {2}};
  in.max_lq = in.max_lk = 2;
  AttentionOptions options;
  options.act = Activation::kIdentity;
  auto out = reference::AttentionForward(in, options);
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", std::string(out.status().message()).c_str());
    return 1;
  }
  // S = QK^T = [[1*0.5+2*-1, 1*2+2*0.25], [3*0.5+4*-1, 3*2+4*0.25]] = [[-1.5, 2.5], [-2.5, 7]]; V = I.
  const double want[] = {-1.5, 2.5, -2.5, 7};
  for (int i = 0; i < 4; ++i) {
    if (out->o[i] != want[i]) {
      std::fprintf(stderr, "o[%d] = %g, want %g\n", i, out->o[i], want[i]);
      return 1;
    }
  }
  std::puts("installed gemtb::reference works");
  return 0;
}
