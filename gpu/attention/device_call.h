// The attention kernels on device-resident tensors: one call's validation, pairing and tile lists
// are built once, then any number of launches run on tensors the caller owns on the device. This is
// what `gemtb bench attention` times; api.h's Forward/Backward wrap it with host copies, so the
// kernels that `gemtb check attention` verifies are the ones the benchmark times.
#ifndef GEMTB_GPU_ATTENTION_DEVICE_CALL_H_
#define GEMTB_GPU_ATTENTION_DEVICE_CALL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/attention/api.h"
#include "gpu/attention/kernel_policy.h"

namespace gemtb::gpu {

// Device pointers of one call's inputs, laid out as api.h's host tensors.
struct DeviceInputs {
  const uint16_t* q = nullptr;  // [TQ, H, D]
  const uint16_t* k = nullptr;  // [TK, Hkv, D]
  const uint16_t* v = nullptr;  // [TK, Hkv, D]
};

// Device outputs and scratch of a backward: dq/dk/dv shaped as q/k/v; d_rows [H, TO] (softmax only).
struct DeviceGradients {
  uint16_t* dq = nullptr;
  uint16_t* dk = nullptr;
  uint16_t* dv = nullptr;
  float* d_rows = nullptr;
};

class DeviceCall {
 public:
  // Validates `args` as Forward does, except that the values of q, k and v are not read and may be
  // absent (empty spans): only their shapes matter. Chooses the kernels (ChooseKernels, or
  // args.kernels where it names one), builds the forward tile lists, and the backward ones when
  // `with_backward`, and uploads them.
  static absl::StatusOr<std::unique_ptr<DeviceCall>> Create(const AttentionArgs& args, bool with_backward);
  ~DeviceCall();
  DeviceCall(const DeviceCall&) = delete;
  DeviceCall& operator=(const DeviceCall&) = delete;

  // Element counts of q, k/v and O, and the rows of LSE's second axis (TO).
  int64_t q_elements() const;
  int64_t kv_elements() const;
  int64_t o_elements() const;
  int64_t out_rows() const;
  int64_t heads() const;
  bool softmax() const;
  // The kernels this call launches (kernel_policy.h's names: "mma_sync", "hopper_tma", ...; the
  // backward's is "none" without the backward lists). hopper_tma runs as hopper_ws on tensors
  // that are not 16-byte aligned.
  const KernelPlan& plan() const;
  std::string forward_kernel_name() const;
  std::string backward_kernel_name() const;

  // Launches the forward on the default stream (no synchronisation): O [TO, H, D] and, for softmax,
  // LSE [H, TO] (lse may be null otherwise). Rows no tile covers are written too (O = 0, LSE = -inf).
  absl::Status Forward(const DeviceInputs& in, uint16_t* o, float* lse) const;

  // Launches the backward (needs `with_backward`): d_o has O's shape; o and lse are this call's
  // forward outputs (read for softmax only).
  absl::Status Backward(const DeviceInputs& in, const uint16_t* o, const float* lse,
                        const uint16_t* d_o, const DeviceGradients& grads) const;

 private:
  struct State;
  explicit DeviceCall(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_DEVICE_CALL_H_
