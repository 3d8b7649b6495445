// 32-bit flags in device memory that a stream writes or waits on without a kernel: the driver's
// stream memory operations (cuStreamWriteValue32 / cuStreamWaitValue32), which the GPU's front end
// executes in stream order. The copy-engine all-gather signals "slot landed" and "window free" with
// them, so that no SM takes part in moving or synchronising its bytes.
//
// The driver functions are looked up once through the runtime (cudaGetDriverEntryPointByVersion), so
// nothing links libcuda directly.
#ifndef GEMTB_GPU_COMM_STREAM_FLAGS_H_
#define GEMTB_GPU_COMM_STREAM_FLAGS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::comm {

// Enqueues on `stream`: *flag = value, after the stream's earlier work and after a memory fence, so
// a reader that sees `value` also sees every byte the stream wrote before. `flag` may be a peer's
// memory (peer access or a CUDA IPC mapping).
absl::Status StreamWriteFlag(cudaStream_t stream, uint32_t* flag, uint32_t value);

// Enqueues on `stream`: later work waits until (int32)(*flag - value) >= 0 (wrap-safe "at least").
absl::Status StreamWaitFlag(cudaStream_t stream, const uint32_t* flag, uint32_t value);

}  // namespace gemtb::gpu::comm

#endif  // GEMTB_GPU_COMM_STREAM_FLAGS_H_
