// The trainer's collectives on the GPUs of this machine: the copy-engine all-gather (members on
// distinct GPUs where there are several, else two members on GPU 0) against the expected
// concatenation over calls of different sizes, in place and not; an NCCL group of one rank through a
// real TCP store (every collective, a split, the argument checks). Skipped without a GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "gpu/comm/copy_engine_all_gather.h"
#include "gpu/comm/nccl_group.h"
#include "gtest/gtest.h"
#include "model/launch/tcp_store.h"

namespace gemtb::gpu::comm {
namespace {

int VisibleGpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Member m's input of call c: bytes that differ per member, call and position.
std::vector<uint8_t> Input(int member, int call, int64_t bytes) {
  std::vector<uint8_t> v(static_cast<size_t>(bytes));
  for (int64_t k = 0; k < bytes; ++k) v[k] = static_cast<uint8_t>(member * 37 + call * 11 + k * 7 + (k >> 8));
  return v;
}

TEST(CopyEngineAllGather, GathersEveryMembersBytesOverRepeatedCalls) {
  const int gpus = VisibleGpus();
  if (gpus == 0) GTEST_SKIP() << "needs a GPU";
  std::vector<int> devices;
  if (gpus >= 2) {
    for (int d = 0; d < std::min(gpus, 4); ++d) devices.push_back(d);
  } else {
    // Two members on one GPU: 4 streams, each its own hardware queue (CUDA_DEVICE_MAX_CONNECTIONS is 8
    // by default). More streams would share queues, and one blocked in a flag wait could hold back
    // the member on its queue that was to set the flag.
    devices = {0, 0};
  }
  const int p = static_cast<int>(devices.size());
  const int64_t slot = 1 << 20;
  auto members = CopyEngineAllGather::CreateInProcess(devices, slot);
  ASSERT_TRUE(members.ok()) << members.status();
  std::vector<cudaStream_t> streams(p);
  std::vector<void*> inputs(p);
  for (int i = 0; i < p; ++i) {
    ASSERT_EQ(cudaSetDevice(devices[i]), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&inputs[i], slot), cudaSuccess);
  }
  // Sizes: whole slot, odd, small, in place twice (the window's own slot as the input).
  const std::vector<int64_t> sizes = {slot, 999'983, 4096, 65536, 12345};
  for (int call = 0; call < static_cast<int>(sizes.size()); ++call) {
    const int64_t bytes = sizes[call];
    const bool in_place = call >= 3;
    for (int i = 0; i < p; ++i) {
      ASSERT_EQ(cudaSetDevice(devices[i]), cudaSuccess);
      const std::vector<uint8_t> in = Input(i, call, bytes);
      void* src = in_place ? static_cast<char*>((*members)[i]->window()) + i * bytes : inputs[i];
      ASSERT_EQ(cudaMemcpyAsync(src, in.data(), bytes, cudaMemcpyHostToDevice, streams[i]), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(streams[i]), cudaSuccess);
    }
    for (int i = 0; i < p; ++i) {
      void* src = in_place ? static_cast<char*>((*members)[i]->window()) + i * bytes : inputs[i];
      ASSERT_TRUE((*members)[i]->AllGather(src, bytes, streams[i]).ok());
    }
    for (int i = 0; i < p; ++i) {
      ASSERT_EQ(cudaSetDevice(devices[i]), cudaSuccess);
      std::vector<uint8_t> got(static_cast<size_t>(p * bytes));
      ASSERT_EQ(cudaMemcpyAsync(got.data(), (*members)[i]->window(), got.size(), cudaMemcpyDeviceToHost, streams[i]),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(streams[i]), cudaSuccess);
      for (int j = 0; j < p; ++j) {
        const std::vector<uint8_t> want = Input(j, call, bytes);
        ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin() + j * bytes))
            << "call " << call << " (" << bytes << " bytes): member " << i << "'s slot " << j << " differs";
      }
    }
  }
  EXPECT_EQ((*members)[0]->AllGather(inputs[0], slot + 1, streams[0]).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*members)[0]->AllGather(inputs[0], 0, streams[0]).code(), absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < p; ++i) {
    cudaSetDevice(devices[i]);
    cudaStreamDestroy(streams[i]);
    cudaFree(inputs[i]);
  }
}

// Pieces at the caller's places (one FSDP unit of a member-contiguous array): each member sends
// what its part holds of a byte range, possibly nothing; every window holds the range afterwards
// and is untouched outside it.
TEST(CopyEngineAllGather, PiecesLandAtTheirPlaces) {
  const int gpus = VisibleGpus();
  if (gpus == 0) GTEST_SKIP() << "needs a GPU";
  std::vector<int> devices = gpus >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0, 0};
  const int p = 2;
  const int64_t slot = 1 << 16;  // member i holds bytes [i slot, (i + 1) slot) of the whole array
  auto members = CopyEngineAllGather::CreateInProcess(devices, slot);
  ASSERT_TRUE(members.ok()) << members.status();
  std::vector<cudaStream_t> streams(p);
  std::vector<void*> parts(p);
  for (int i = 0; i < p; ++i) {
    ASSERT_EQ(cudaSetDevice(devices[i]), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&parts[i], slot), cudaSuccess);
    const std::vector<uint8_t> part = Input(i, 0, slot);
    ASSERT_EQ(cudaMemcpy(parts[i], part.data(), slot, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset((*members)[i]->window(), 0xAB, p * slot), cudaSuccess);
  }
  // A range across both parts, then one inside member 0's part (member 1 sends nothing).
  for (const auto& [first, end] : {std::pair<int64_t, int64_t>{slot - 1000, slot + 3000}, {100, 612}}) {
    for (int i = 0; i < p; ++i) {
      ASSERT_EQ(cudaSetDevice(devices[i]), cudaSuccess);
      const int64_t lo = std::max(first, i * slot), hi = std::max(lo, std::min(end, (i + 1) * slot));
      ASSERT_TRUE((*members)[i]->AllGatherPieces(static_cast<char*>(parts[i]) + (lo - i * slot), lo, hi - lo,
                                                 streams[i]).ok());
    }
    for (int i = 0; i < p; ++i) {
      ASSERT_EQ(cudaSetDevice(devices[i]), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(streams[i]), cudaSuccess);
    }
  }
  std::vector<uint8_t> whole;
  for (int i = 0; i < p; ++i) {
    const std::vector<uint8_t> part = Input(i, 0, slot);
    whole.insert(whole.end(), part.begin(), part.end());
  }
  for (int i = 0; i < p; ++i) {
    ASSERT_EQ(cudaSetDevice(devices[i]), cudaSuccess);
    std::vector<uint8_t> got(static_cast<size_t>(p * slot));
    ASSERT_EQ(cudaMemcpy(got.data(), (*members)[i]->window(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t k = 0; k < p * slot; ++k) {
      const bool inside = (k >= slot - 1000 && k < slot + 3000) || (k >= 100 && k < 612);
      ASSERT_EQ(got[k], inside ? whole[k] : 0xAB) << "member " << i << "'s window, byte " << k;
    }
  }
  EXPECT_EQ((*members)[0]->AllGatherPieces(parts[0], p * slot - 10, 11, streams[0]).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*members)[0]->AllGatherPieces(parts[0], -1, 1, streams[0]).code(), absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < p; ++i) {
    cudaSetDevice(devices[i]);
    cudaStreamDestroy(streams[i]);
    cudaFree(parts[i]);
  }
}

TEST(CopyEngineAllGather, RejectsBadArguments) {
  if (VisibleGpus() == 0) GTEST_SKIP() << "needs a GPU";
  EXPECT_EQ(CopyEngineAllGather::CreateInProcess({}, 1024).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CopyEngineAllGather::CreateInProcess({0}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CopyEngineAllGather::CreateInProcess({VisibleGpus()}, 1024).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A one-rank job: its own store on a free port, the group on GPU 0.
struct OneRankJob {
  std::unique_ptr<launch::TcpStoreServer> server;
  std::unique_ptr<launch::TcpStoreClient> client;
  OneRankJob() {
    auto s = launch::TcpStoreServer::Start(0, 1);
    EXPECT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
    auto c = launch::TcpStoreClient::Connect({"127.0.0.1", server->port()}, 0, 1, launch::Millis(20000));
    EXPECT_TRUE(c.ok()) << c.status();
    client = *std::move(c);
  }
  ~OneRankJob() {
    if (client) (void)client->Close();
    if (server) (void)server->Shutdown(launch::Millis(5000));
  }
};

std::vector<float> Download(const float* d, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(NcclGroup, OneRankRunsEveryCollectiveAndSplits) {
  if (VisibleGpus() == 0) GTEST_SKIP() << "needs a GPU";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  OneRankJob job;
  auto group = NcclGroup::Create(*job.client, "test", launch::Millis(60000));
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->rank(), 0);
  EXPECT_EQ((*group)->size(), 1);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const size_t n = 1000;
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), 0.5f);
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  NcclGroup& g = **group;
  for (int op = 0; op < 7; ++op) {
    // The in-place all-gather (op 4) starts from the rank's own part; the others from zeros.
    ASSERT_EQ(op == 4 ? cudaMemcpy(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice) : cudaMemset(b, 0, n * sizeof(float)),
              cudaSuccess);
    absl::Status s;
    switch (op) {
      case 0: s = g.AllReduce(a, b, n, Dtype::kFp32, ReduceOp::kSum, stream); break;
      case 1: s = g.AllGather(a, b, n, Dtype::kFp32, stream); break;
      case 2: s = g.ReduceScatter(a, b, n, Dtype::kFp32, ReduceOp::kAvg, stream); break;
      case 3: s = g.Broadcast(a, b, n, Dtype::kFp32, 0, stream); break;
      case 4: s = g.AllGatherV(b, {int64_t(n)}, {0}, Dtype::kFp32, stream); break;
      // The sharded tables' point-to-point collectives: with one rank, its own part copied.
      case 5: {
        const std::vector<int64_t> bytes = {int64_t(n * sizeof(float))}, at = {0};
        s = g.AllToAllV({0}, a, bytes, at, b, bytes, at, stream);
        break;
      }
      case 6: s = g.AllGatherAmong({0}, a, int64_t(n * sizeof(float)), b, stream); break;
    }
    ASSERT_TRUE(s.ok()) << "op " << op << ": " << s;
    ASSERT_TRUE(g.Synchronize(stream, "test op").ok());
    EXPECT_EQ(Download(b, n), host) << "op " << op;
  }
  auto sub = g.Split(0, 0, "test.sub");
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ((*sub)->size(), 1);
  ASSERT_TRUE((*sub)->AllReduce(a, b, n, Dtype::kFp32, ReduceOp::kSum, stream).ok());
  ASSERT_TRUE((*sub)->Synchronize(stream, "sub all_reduce").ok());
  EXPECT_EQ(Download(b, n), host);
  // Arguments the group refuses before NCCL sees them.
  EXPECT_EQ(g.AllReduce(a, b, n, Dtype::kFp8E4M3, ReduceOp::kSum, stream).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.AllGather(a, b, -1, Dtype::kFp32, stream).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Broadcast(a, b, n, Dtype::kFp32, 1, stream).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.AllGatherV(a, {1, 1}, {0, 1}, Dtype::kFp32, stream).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.AllGatherAmong({1}, a, 4, b, stream).code(), absl::StatusCode::kInvalidArgument);  // not in the group
  EXPECT_EQ(g.AllGatherAmong({0, 0}, a, 4, b, stream).code(), absl::StatusCode::kInvalidArgument);  // twice
  EXPECT_EQ(g.AllToAllV({0}, a, {4}, {0}, b, {8}, {0}, stream).code(), absl::StatusCode::kInvalidArgument);  // 4 != 8
  EXPECT_FALSE(g.aborted());
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace gemtb::gpu::comm
