// The sharded module's replica and row kernels (gpu/embedding/shard_kernels.cuh) on the CPU fiber
// emulation, against host loops written from their contracts: the replicas' mean (seqsum in replica
// order, divided, rounded to storage), the column shards' partial square sums added in order,
// widening and narrowing storage values, and row copies through index lists with bases.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cstring>
#include <random>
#include <vector>

#include "gpu/embedding/host_tables.h"
#include "gpu/embedding/shard_kernels.cuh"
#include "gtest/gtest.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::gpu::embedding::shard_kernels {
namespace {

// A 1-D grid of `blocks` blocks of `threads`.
template <typename Body>
void RunGrid(int64_t blocks, int threads, const Body& body) {
  emu::SetGridDim({static_cast<unsigned>(blocks), 1, 1});
  for (int64_t bx = 0; bx < blocks; ++bx) emu::RunBlock({static_cast<unsigned>(bx), 0, 0}, threads, body);
}

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(ShardKernelsEmulated, ReplicaMeanAddsInReplicaOrderDividesAndRounds) {
  const int replicas = 3;
  const int64_t count = 301;
  const std::vector<float> pieces = Random(static_cast<size_t>(replicas * count), 1);
  for (ElementType dtype : {ElementType::kFloat32, ElementType::kBFloat16, ElementType::kFloat16}) {
    for (bool round : {false, true}) {
      std::vector<float> want(static_cast<size_t>(count)), got(static_cast<size_t>(count), -1.0f);
      for (int64_t e = 0; e < count; ++e) {
        float acc = pieces[static_cast<size_t>(e)];
        for (int r = 1; r < replicas; ++r)
          acc = gemtb::embedding::AddRn(acc, pieces[static_cast<size_t>(r * count + e)]);
        float v = gemtb::embedding::DivRn(acc, static_cast<float>(replicas));
        want[static_cast<size_t>(e)] = round ? gemtb::embedding::StoreRne(v, dtype) : v;
      }
      RunGrid((count + 255) / 256, 256,
              [&] { ReplicaMeanKernel(pieces.data(), replicas, count, round, dtype, got.data()); });
      EXPECT_TRUE(SameBits(got, want)) << "dtype " << static_cast<int>(dtype) << " round " << round;
    }
  }
}

TEST(ShardKernelsEmulated, PartialSumsAddInColumnShardOrder) {
  const int groups = 4;
  const int64_t count = 77;
  const std::vector<float> gathered = Random(static_cast<size_t>(groups * count), 2);
  std::vector<float> want(static_cast<size_t>(count)), got(static_cast<size_t>(count), -1.0f);
  for (int64_t u = 0; u < count; ++u) {
    float acc = gathered[static_cast<size_t>(u)];
    for (int g = 1; g < groups; ++g) acc = gemtb::embedding::AddRn(acc, gathered[static_cast<size_t>(g * count + u)]);
    want[static_cast<size_t>(u)] = acc;
  }
  RunGrid((count + 255) / 256, 256, [&] { SumPartialsKernel(gathered.data(), groups, count, got.data()); });
  EXPECT_TRUE(SameBits(got, want));
}

TEST(ShardKernelsEmulated, NarrowOfWidenGivesTheStorageBytesBack) {
  const int64_t n = 4 * 53;
  for (ElementType dtype : {ElementType::kFloat32, ElementType::kBFloat16, ElementType::kFloat16}) {
    const std::vector<uint8_t> storage = ToStorage(Random(static_cast<size_t>(n), 3), dtype);
    std::vector<float> wide(static_cast<size_t>(n), -1.0f);
    std::vector<uint8_t> back(storage.size(), 0xAB);
    RunGrid((n / 4 + 255) / 256, 256, [&] { WidenKernel(FlatTable(storage.data(), dtype, n), wide.data()); });
    RunGrid((n / 4 + 255) / 256, 256, [&] { NarrowKernel(wide.data(), FlatTable(back.data(), dtype, n)); });
    EXPECT_EQ(back, storage) << "dtype " << static_cast<int>(dtype);
  }
}

TEST(ShardKernelsEmulated, RowCopiesFollowTheirIndexListsAndBases) {
  const int64_t width = 6;  // 32-bit words per row
  const std::vector<float> src = Random(static_cast<size_t>(10 * width), 4);
  const std::vector<int64_t> src_rows = {107, 103, 109};  // rows 7, 3, 9 of src after the base 100
  const std::vector<int64_t> dst_rows = {21, 25, 20};     // rows 1, 5, 0 of dst after the base 20
  std::vector<float> dst(static_cast<size_t>(6 * width), 0.0f), want = dst;
  for (size_t j = 0; j < 3; ++j) {
    for (int64_t w = 0; w < width; ++w) {
      want[static_cast<size_t>((dst_rows[j] - 20) * width + w)] =
          src[static_cast<size_t>((src_rows[j] - 100) * width + w)];
    }
  }
  RunGrid(3, 128, [&] {
    CopyRowsKernel(reinterpret_cast<const uint32_t*>(src.data()), src_rows.data(), 100,
                   reinterpret_cast<uint32_t*>(dst.data()), dst_rows.data(), 20, width);
  });
  EXPECT_TRUE(SameBits(dst, want));
}

}  // namespace
}  // namespace gemtb::gpu::embedding::shard_kernels
