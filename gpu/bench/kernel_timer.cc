#include "gpu/bench/kernel_timer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"

#if GEMTB_HAVE_CUPTI
#include <cupti.h>
#endif

namespace gemtb::gpu::bench {
namespace {

#if GEMTB_HAVE_CUPTI
// CUPTI hands records over in buffers from its own threads; they land here.
struct Recorder {
  std::mutex mu;
  std::vector<DeviceActivity> records;
  bool callbacks_registered = false;
  bool running = false;
};
Recorder& TheRecorder() {
  static Recorder* r = new Recorder;
  return *r;
}

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer == nullptr ? 0 : kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Recorder& rec = TheRecorder();
  std::vector<DeviceActivity> got;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    DeviceActivity a;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      a.kind = DeviceActivity::Kind::kKernel;
      a.start_ns = k->start;
      a.end_ns = k->end;
      if (k->name != nullptr) a.name = k->name;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      a.kind = DeviceActivity::Kind::kMemset;
      a.start_ns = m->start;
      a.end_ns = m->end;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      a.kind = DeviceActivity::Kind::kMemcpy;
      a.start_ns = m->start;
      a.end_ns = m->end;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* r = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      a.kind = DeviceActivity::Kind::kHostCall;
      a.start_ns = r->start;
      a.end_ns = r->end;
      const char* name = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, r->cbid, &name) == CUPTI_SUCCESS && name != nullptr) {
        a.name = name;
      }
    } else {
      continue;
    }
    got.push_back(std::move(a));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(rec.mu);
  rec.records.insert(rec.records.end(), got.begin(), got.end());
}

absl::Status CuptiOk(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return absl::InternalError(absl::StrCat("CUPTI ", what, ": ", text == nullptr ? "unknown error" : text));
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_MEMCPY};
#endif

}  // namespace

bool KernelTimer::Available() { return GEMTB_HAVE_CUPTI != 0; }

absl::StatusOr<std::unique_ptr<KernelTimer>> KernelTimer::Start(bool host_calls) {
#if !GEMTB_HAVE_CUPTI
  return absl::UnimplementedError("kernel timing: this build has no CUPTI (CUDA::cupti not found at configure time)");
#else
  Recorder& rec = TheRecorder();
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    if (rec.running) return absl::FailedPreconditionError("kernel timing: another KernelTimer is recording");
    rec.records.clear();
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("kernel timing: cudaDeviceSynchronize: ", cudaGetErrorString(e)));
  }
  if (!rec.callbacks_registered) {
    if (absl::Status s = CuptiOk(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted), "register");
        !s.ok()) {
      return s;
    }
    rec.callbacks_registered = true;
  }
  for (CUpti_ActivityKind k : kKinds) {
    if (absl::Status s = CuptiOk(cuptiActivityEnable(k), "enable"); !s.ok()) {
      for (CUpti_ActivityKind d : kKinds) cuptiActivityDisable(d);
      return s;
    }
  }
  if (host_calls) {
    if (absl::Status s = CuptiOk(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable (runtime calls)"); !s.ok()) {
      for (CUpti_ActivityKind d : kKinds) cuptiActivityDisable(d);
      return s;
    }
  }
  rec.running = true;
  std::unique_ptr<KernelTimer> t(new KernelTimer);
  t->running_ = true;
  return t;
#endif
}

absl::StatusOr<std::vector<DeviceActivity>> KernelTimer::Stop() {
#if !GEMTB_HAVE_CUPTI
  return absl::UnimplementedError("kernel timing: this build has no CUPTI");
#else
  if (!running_) return absl::FailedPreconditionError("kernel timing: Stop called twice");
  running_ = false;
  const cudaError_t sync = cudaDeviceSynchronize();
  const CUptiResult flush = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);  // whether or not Start enabled it
  Recorder& rec = TheRecorder();
  std::vector<DeviceActivity> out;
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    rec.running = false;
    out.swap(rec.records);
  }
  if (sync != cudaSuccess) {
    return absl::InternalError(absl::StrCat("kernel timing: cudaDeviceSynchronize: ", cudaGetErrorString(sync)));
  }
  if (absl::Status s = CuptiOk(flush, "flush"); !s.ok()) return s;
  std::sort(out.begin(), out.end(),
            [](const DeviceActivity& a, const DeviceActivity& b) { return a.start_ns < b.start_ns; });
  return out;
#endif
}

uint64_t KernelTimer::NowNs() {
#if GEMTB_HAVE_CUPTI
  uint64_t now = 0;
  if (cuptiGetTimestamp(&now) == CUPTI_SUCCESS) return now;
#endif
  return 0;
}

KernelTimer::~KernelTimer() {
  if (running_) (void)Stop();
}

}  // namespace gemtb::gpu::bench
