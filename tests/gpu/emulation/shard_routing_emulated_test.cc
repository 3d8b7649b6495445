// The GPU sharded module's routing (gpu/embedding/shard_routing.h) and its kernels
// (gpu/embedding/shard_kernels.cuh, run by the CPU fiber emulation), without a GPU: every position
// routes its local batch's ids, each held shard runs as a one-table module on the oracle's unsharded
// TBE (G_r summed in the sources' blocks of samples), and embeddings and gradients travel by the
// routing's plans, executed by the module's copy, gather-sum and scatter kernels, through a
// simulated all-to-all. Outputs and the tables after a step equal the oracle's sharded executor's
// byte for byte for TW, RW, CW (per-shard state), TWRW and GRID on 2 to 4 positions. Tables are
// fp32 here: the oracle's one-table module would key stochastic rounding by the shard's own indices
// where the device uses the whole table's (ShardPlacement), and column shards sharing Adagrad state
// need the device's split update; tests/gpu/embedding_sharded_test.cc checks both on a GPU.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/embedding/kjt_check.h"
#include "gpu/embedding/shard_kernels.cuh"
#include "gpu/embedding/shard_routing.h"
#include "gtest/gtest.h"
#include "model/embedding/embedding_math.h"
#include "model/sharding/sharding_plan_json.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/sharded_executor.h"
#include "tests/embedding/sharding_cases.h"
#include "tools/check/kjt_view.h"

namespace gemtb::gpu::embedding {
namespace {

using reference::sharding_cases::Batch;
using reference::sharding_cases::MakeBatch;
using reference::sharding_cases::MakeConfig;
using reference::sharding_cases::ParsePlan;
using reference::sharding_cases::SubBatch;
using reference::sharding_cases::UniformPlanJson;

constexpr int64_t kLocalBatch = 3;

EmbeddingConfig Fp32Config() {
  EmbeddingConfig c = MakeConfig();
  for (TableConfig& t : c.tables) t.dtype = ElementType::kFloat32;
  return c;
}

// Every table under `type` (column shards: 3 of 12 columns, 2 of 8, 1 of 4), table 2 of TW on the
// last position, column shards with their own Adagrad state.
ShardingPlanSpec UniformPlan(const EmbeddingConfig& config, const std::string& type, int m, int gph) {
  nlohmann::json plan = UniformPlanJson(config, type);
  if (type == "TW") plan["tables"][config.tables[2].name]["owner"] = m - 1;
  if (type == "CW" || type == "GRID") plan["cw_state"] = "per_shard";
  return ParsePlan(config, plan, m, gph);
}

// Every run of `runs` by the module's copy kernel, arrays by number.
void CopyAll(const std::vector<std::vector<float>*>& arrays, const std::vector<CopyRun>& runs, bool reverse,
             const std::vector<int64_t>& row_offsets = {}) {
  int64_t rows = 0;
  for (const CopyRun& r : runs) {  // what the kernel may touch, checked first
    ASSERT_EQ(r.first_row, rows);
    rows += r.rows;
    const std::vector<float>& src = *arrays[static_cast<size_t>(reverse ? r.dst_array : r.src_array)];
    const std::vector<float>& dst = *arrays[static_cast<size_t>(reverse ? r.src_array : r.dst_array)];
    // The last row of each side (indexed rows: the largest offset).
    int64_t dst_last = r.dst + (r.rows - 1) * r.dst_stride;
    if (r.dst_rows >= 0) {
      ASSERT_LE(r.dst_rows + r.rows, static_cast<int64_t>(row_offsets.size()));
      dst_last = *std::max_element(row_offsets.begin() + r.dst_rows, row_offsets.begin() + r.dst_rows + r.rows);
    }
    const int64_t src_last = r.src + (r.rows - 1) * r.src_stride;
    ASSERT_LE((reverse ? dst_last : src_last) + r.count, static_cast<int64_t>(src.size()));
    ASSERT_LE((reverse ? src_last : dst_last) + r.count, static_cast<int64_t>(dst.size()));
  }
  std::vector<float*> table;
  for (std::vector<float>* a : arrays) table.push_back(a->data());
  const int64_t n = static_cast<int64_t>(runs.size());
  const unsigned blocks = static_cast<unsigned>((rows * 32 + 255) / 256);
  emu::SetGridDim({blocks, 1, 1});
  for (unsigned bx = 0; bx < blocks; ++bx) {
    emu::RunBlock({bx, 0, 0}, 256, [&] {
      shard_kernels::CopyRunsKernel(table.data(), runs.data(), n, rows, row_offsets.data(), reverse);
    });
  }
}

// A block per (segment, sample), as the launches run the pooled kernels.
template <typename Body>
void RunSegments(size_t segments, int64_t batch, const Body& body) {
  emu::SetGridDim({static_cast<unsigned>(segments), static_cast<unsigned>(batch), 1});
  for (unsigned by = 0; by < batch; ++by) {
    for (unsigned bx = 0; bx < segments; ++bx) emu::RunBlock({bx, by, 0}, 128, body);
  }
}

// One held shard's rectangle of the whole tables' state.
reference::TableState SliceState(const reference::TableState& whole, const TableConfig& tc, const Shard& s) {
  reference::TableState out;
  const int64_t rows = std::max<int64_t>(s.rows(), 1), cols = s.cols();
  auto slice = [&](const std::vector<float>& a, int64_t width) {
    std::vector<float> o(static_cast<size_t>(rows * width), 0.0f);
    if (a.empty()) return std::vector<float>{};
    for (int64_t r = 0; r < s.rows(); ++r) {
      for (int64_t c = 0; c < width; ++c) {
        o[static_cast<size_t>(r * width + c)] =
            a[static_cast<size_t>((s.row_begin + r) * (width == 1 ? 1 : tc.dim) + (width == 1 ? 0 : s.col_begin) + c)];
      }
    }
    return o;
  };
  out.weights = slice(whole.weights, cols);
  out.adagrad = slice(whole.adagrad, 1);
  out.adam_m = slice(whole.adam_m, cols);
  out.adam_v = slice(whole.adam_v, cols);
  out.adam_step = whole.adam_step;
  return out;
}

bool SameBits(const float* a, const float* b, int64_t n) {
  return n == 0 || std::memcmp(a, b, static_cast<size_t>(n) * 4) == 0;
}

// The routing's whole step on the CPU, compared with the oracle's sharded executor.
void ExpectRoutedStepMatchesOracle(const EmbeddingConfig& config, const ShardingPlanSpec& plan, int m, int gph,
                                   const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t b = kLocalBatch;
  const Batch global = MakeBatch(config, m * b, 4000 + static_cast<uint64_t>(m));
  const reference::EmbeddingState initial = reference::InitEmbeddingState(config);
  absl::StatusOr<reference::ShardedRun> want =
      reference::RunSharded(config, plan, m, gph, initial, global.kjt, &global.grads, 1);
  ASSERT_TRUE(want.ok()) << want.status();
  reference::KjtLayout global_layout;
  ASSERT_TRUE(reference::ValidateKjt(global.kjt, config, &global_layout).ok());

  std::vector<ShardRouting> routing;
  std::vector<Batch> local;
  std::vector<RequesterStep> req;
  for (int p = 0; p < m; ++p) {
    absl::StatusOr<ShardRouting> r = ShardRouting::Create(config, plan, m, gph, p, b);
    ASSERT_TRUE(r.ok()) << r.status();
    routing.push_back(*std::move(r));
    std::vector<int64_t> samples;
    for (int64_t i = 0; i < b; ++i) samples.push_back(p * b + i);
    local.push_back(SubBatch(config, global, samples));
    absl::StatusOr<KjtLayout> kl = CheckKjt(config, check::KjtViewOf(local.back().kjt));
    ASSERT_TRUE(kl.ok()) << kl.status();
    absl::StatusOr<RequesterStep> step = routing.back().RouteIds(check::KjtViewOf(local.back().kjt), *kl);
    ASSERT_TRUE(step.ok()) << step.status();
    req.push_back(*std::move(step));
  }
  // Holders: ids in, each held shard's forward on the oracle, the message to every requester.
  std::vector<HolderStep> hold;
  std::vector<std::vector<reference::EmbeddingState>> shard_state(static_cast<size_t>(m));
  std::vector<std::vector<reference::KeyedJaggedTensor>> shard_kjt(static_cast<size_t>(m));
  std::vector<std::vector<reference::EmbeddingOutput>> shard_out(static_cast<size_t>(m));  // shapes for the backward
  std::vector<std::vector<float>> holder_send(static_cast<size_t>(m));
  for (int q = 0; q < m; ++q) {
    std::vector<absl::Span<const uint8_t>> received;
    for (int p = 0; p < m; ++p) received.push_back(req[static_cast<size_t>(p)].IdBytesTo(q));
    absl::StatusOr<HolderStep> h = routing[static_cast<size_t>(q)].ReceiveIds(received);
    ASSERT_TRUE(h.ok()) << h.status();
    hold.push_back(*std::move(h));
    const HolderStep& hs = hold.back();
    std::vector<std::vector<float>> arrays(1);
    int64_t total = 0;
    for (int64_t c : hs.exchange_counts) total += c;
    arrays[0].assign(static_cast<size_t>(total), -1.0f);
    std::vector<std::vector<float>> none_arrays;
    const std::vector<HeldShard>& held = routing[static_cast<size_t>(q)].held();
    for (size_t i = 0; i < held.size(); ++i) {
      const HeldShard& sh = held[i];
      const Shard& s = routing[0].layout().shards[static_cast<size_t>(sh.shard)];
      reference::EmbeddingState st;
      st.tables.push_back(
          SliceState(initial.tables[static_cast<size_t>(sh.table)], config.tables[static_cast<size_t>(sh.table)], s));
      st.step = initial.step;
      reference::KeyedJaggedTensor k;
      k.keys = hs.inputs[i].keys;
      k.stride = m * b;
      k.lengths = hs.inputs[i].lengths;
      k.values = hs.inputs[i].values;
      k.weights = hs.inputs[i].weights;
      k.has_weights = hs.inputs[i].weighted;
      absl::StatusOr<reference::EmbeddingOutput> out = reference::EmbeddingForward(sh.config, st, k);
      ASSERT_TRUE(out.ok()) << out.status();
      arrays.push_back(out->pooled);
      for (const std::vector<float>& seq : out->sequence) none_arrays.push_back(seq);
      shard_out[static_cast<size_t>(q)].push_back(*std::move(out));
      shard_state[static_cast<size_t>(q)].push_back(std::move(st));
      shard_kjt[static_cast<size_t>(q)].push_back(std::move(k));
    }
    for (std::vector<float>& a : none_arrays) arrays.push_back(std::move(a));
    std::vector<std::vector<float>*> ptrs;
    for (auto& a : arrays) ptrs.push_back(&a);
    CopyAll(ptrs, hs.runs, false);
    holder_send[static_cast<size_t>(q)] = std::move(arrays[0]);
  }
  // The all-to-all: requester p's buffer is every holder's message to p, in holder order.
  auto message = [&](const std::vector<int64_t>& counts, const std::vector<float>& buffer, int to) {
    int64_t at = 0;
    for (int i = 0; i < to; ++i) at += counts[static_cast<size_t>(i)];
    return std::vector<float>(buffer.begin() + at, buffer.begin() + at + counts[static_cast<size_t>(to)]);
  };
  for (int p = 0; p < m; ++p) {
    const RequesterStep& rs = req[static_cast<size_t>(p)];
    std::vector<float> recv;
    for (int q = 0; q < m; ++q) {
      ASSERT_EQ(rs.exchange_counts[static_cast<size_t>(q)],
                hold[static_cast<size_t>(q)].exchange_counts[static_cast<size_t>(p)])
          << "floats from holder " << q << " to requester " << p;
      const std::vector<float> part =
          message(hold[static_cast<size_t>(q)].exchange_counts, holder_send[static_cast<size_t>(q)], p);
      recv.insert(recv.end(), part.begin(), part.end());
    }
    // Assembly by the module's kernels: pooled segments (row blocks in order, MEAN divided), NONE rows.
    const int64_t w = routing[static_cast<size_t>(p)].pooled_width();
    std::vector<float> pooled(static_cast<size_t>(b * w), -7.0f);
    RunSegments(rs.segments.size(), b, [&] {
      shard_kernels::PooledGatherKernel(rs.segments.data(), rs.pieces.data(), recv.data(), rs.bag_counts.data(), b, w,
                                        pooled.data());
    });
    ASSERT_TRUE(SameBits(pooled.data(), want->output.pooled.data() + p * b * w, b * w))
        << "pooled output of position " << p;
    std::vector<std::vector<float>> arrays(1 + local[static_cast<size_t>(p)].grads.sequence.size());
    arrays[0] = recv;
    for (size_t k = 0; k < local[static_cast<size_t>(p)].grads.sequence.size(); ++k) {
      arrays[k + 1].assign(local[static_cast<size_t>(p)].grads.sequence[k].size(), 0.0f);
    }
    std::vector<std::vector<float>*> ptrs;
    for (auto& a : arrays) ptrs.push_back(&a);
    CopyAll(ptrs, rs.sequence_runs, false, rs.sequence_row_offsets);
    for (size_t k = 1; k < arrays.size(); ++k) {
      const int key = routing[0].sequence_keys()[k - 1];
      const int64_t dim = config.tables[static_cast<size_t>(config.features[static_cast<size_t>(key)].table)].dim;
      const int64_t base = global_layout.offsets[key * m * b];
      const int64_t first = global_layout.offsets[key * m * b + p * b] - base;
      ASSERT_TRUE(SameBits(arrays[k].data(), want->output.sequence[k - 1].data() + first * dim,
                           static_cast<int64_t>(arrays[k].size())))
          << "sequence output " << k - 1 << " of position " << p;
    }
  }
  // Backward: each requester's gradients into the exchange layout, the all-to-all, each holder's
  // shards' gradients, their step on the oracle with the sources' blocks.
  std::vector<std::vector<float>> req_send(static_cast<size_t>(m));
  for (int p = 0; p < m; ++p) {
    const RequesterStep& rs = req[static_cast<size_t>(p)];
    const Batch& lb = local[static_cast<size_t>(p)];
    const int64_t w = routing[static_cast<size_t>(p)].pooled_width();
    int64_t total = 0;
    for (int64_t c : rs.exchange_counts) total += c;
    std::vector<std::vector<float>> arrays(1 + lb.grads.sequence.size());
    arrays[0].assign(static_cast<size_t>(total), -3.0f);
    for (size_t k = 0; k < lb.grads.sequence.size(); ++k) arrays[k + 1] = lb.grads.sequence[k];
    RunSegments(rs.segments.size(), b, [&] {
      shard_kernels::PooledScatterKernel(rs.segments.data(), rs.pieces.data(), lb.grads.pooled.data(),
                                         rs.bag_counts.data(), b, w, arrays[0].data());
    });
    std::vector<std::vector<float>*> ptrs;
    for (auto& a : arrays) ptrs.push_back(&a);
    CopyAll(ptrs, rs.sequence_runs, true, rs.sequence_row_offsets);
    req_send[static_cast<size_t>(p)] = std::move(arrays[0]);
  }
  std::vector<reference::EmbeddingState> after = {initial};
  reference::EmbeddingState& got = after[0];
  for (int q = 0; q < m; ++q) {
    const HolderStep& hs = hold[static_cast<size_t>(q)];
    std::vector<float> recv;
    for (int p = 0; p < m; ++p) {
      const std::vector<float> part =
          message(req[static_cast<size_t>(p)].exchange_counts, req_send[static_cast<size_t>(p)], q);
      recv.insert(recv.end(), part.begin(), part.end());
    }
    const std::vector<HeldShard>& held = routing[static_cast<size_t>(q)].held();
    std::vector<std::vector<float>> arrays(1);
    arrays[0] = recv;
    const std::vector<reference::EmbeddingOutput>& shapes = shard_out[static_cast<size_t>(q)];
    for (const reference::EmbeddingOutput& o : shapes) arrays.emplace_back(o.pooled.size(), 0.0f);
    for (const reference::EmbeddingOutput& o : shapes) {
      for (const std::vector<float>& seq : o.sequence) arrays.emplace_back(seq.size(), 0.0f);
    }
    std::vector<std::vector<float>*> ptrs;
    for (auto& a : arrays) ptrs.push_back(&a);
    CopyAll(ptrs, hs.runs, true);
    size_t next_none = 1 + held.size();
    for (size_t i = 0; i < held.size(); ++i) {
      reference::EmbeddingGrads g;
      g.pooled = arrays[1 + i];
      for (size_t j = 0; j < shapes[i].sequence.size(); ++j) g.sequence.push_back(arrays[next_none++]);
      reference::SumPartition partition;
      partition.batch_blocks.assign(static_cast<size_t>(m), b);
      reference::EmbeddingState& st = shard_state[static_cast<size_t>(q)][i];
      ASSERT_TRUE(
          reference::EmbeddingBackwardStep(held[i].config, st, shard_kjt[static_cast<size_t>(q)][i], g, partition)
              .ok());
      // Back into the whole tables (per-shard Adagrad state: compared per column shard below).
      const Shard& s = routing[0].layout().shards[static_cast<size_t>(held[i].shard)];
      const TableConfig& tc = config.tables[static_cast<size_t>(held[i].table)];
      reference::TableState& whole = got.tables[static_cast<size_t>(held[i].table)];
      const reference::TableState& part = st.tables[0];
      for (int64_t r = 0; r < s.rows(); ++r) {
        for (int64_t c = 0; c < s.cols(); ++c) {
          const size_t wi = static_cast<size_t>((s.row_begin + r) * tc.dim + s.col_begin + c);
          const size_t pi = static_cast<size_t>(r * s.cols() + c);
          whole.weights[wi] = part.weights[pi];
          if (!part.adam_m.empty()) whole.adam_m[wi] = part.adam_m[pi], whole.adam_v[wi] = part.adam_v[pi];
        }
        if (!part.adagrad.empty()) {
          const float a = part.adagrad[static_cast<size_t>(r)];
          if (s.col_shard == 0) whole.adagrad[static_cast<size_t>(s.row_begin + r)] = a;
          if (!want->per_shard_adagrad.empty() &&
              !want->per_shard_adagrad[static_cast<size_t>(held[i].table)].empty()) {
            const std::vector<float>& per_shard = want->per_shard_adagrad[static_cast<size_t>(held[i].table)];
            EXPECT_EQ(std::memcmp(&a, &per_shard[static_cast<size_t>(s.col_shard * tc.rows + s.row_begin + r)], 4), 0)
                << "Adagrad state of table " << held[i].table << " column shard " << s.col_shard << " row "
                << s.row_begin + r;
          }
        }
      }
      whole.adam_step = part.adam_step;
    }
  }
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const reference::TableState& a = got.tables[t];
    const reference::TableState& e = want->state.tables[t];
    EXPECT_TRUE(SameBits(a.weights.data(), e.weights.data(), static_cast<int64_t>(e.weights.size())))
        << "weights of table " << t;
    EXPECT_TRUE(SameBits(a.adagrad.data(), e.adagrad.data(), static_cast<int64_t>(e.adagrad.size())))
        << "Adagrad of table " << t;
    EXPECT_TRUE(SameBits(a.adam_m.data(), e.adam_m.data(), static_cast<int64_t>(e.adam_m.size())))
        << "Adam m of table " << t;
    EXPECT_TRUE(SameBits(a.adam_v.data(), e.adam_v.data(), static_cast<int64_t>(e.adam_v.size())))
        << "Adam v of table " << t;
    EXPECT_EQ(a.adam_step.b1, e.adam_step.b1) << "table " << t;
  }
}

TEST(GpuShardRouting, EveryOneDimensionalTypeEqualsTheOraclesShardedStep) {
  const EmbeddingConfig config = Fp32Config();
  for (const char* type : {"TW", "RW", "CW", "TWRW", "GRID"}) {
    for (int m = 2; m <= 4; ++m) {
      const int gph = m % 2 == 0 ? 2 : 1;
      ExpectRoutedStepMatchesOracle(config, UniformPlan(config, type, m, gph), m, gph,
                                    std::string(type) + " M=" + std::to_string(m));
    }
  }
}

}  // namespace
}  // namespace gemtb::gpu::embedding
