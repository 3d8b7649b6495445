// The host-built tile lists (gpu/attention/tile_scheduler.h) must cover every valid (query, key)
// pair of every output sequence exactly once per kernel, list no tile without a valid pair, and
// keep each tile within its sequences; the stored-dS plan gives each dS block it writes or
// reads a slot of its own. Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "gpu/attention/backward_stored_ds_plan.h"
#include "gpu/attention/tile_scheduler.h"
#include "tests/testing/attention_cases.h"

namespace gemtb {
namespace {

gpu::Pairing PairingOf(const check::AttentionCase& c) {
  gpu::Pairing p;
  for (const check::SequencePair& s : check::PairSequences(c)) {
    gpu::SeqInfo info;
    info.q_begin = s.q_begin;
    info.kv_begin = s.k_begin;
    info.out_begin = s.o_begin;
    info.lq = static_cast<int32_t>(s.lq);
    info.lk = static_cast<int32_t>(s.lk);
    p.seqs.push_back(info);
    p.kv_seq.push_back(s.kv_sequence);
  }
  p.kv_offsets = c.kv_offsets.data;
  p.broadcast_q = c.options.broadcast_q;
  return p;
}

// Valid pairs (b, i, j) of the case, each with count 0.
std::map<std::tuple<int64_t, int64_t, int64_t>, int> ValidPairs(const check::AttentionCase& c) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, int> pairs;
  const auto seqs = check::PairSequences(c);
  for (size_t b = 0; b < seqs.size(); ++b) {
    for (int64_t i = 0; i < seqs[b].lq; ++i) {
      const KeyRange r = ValidKeys(c.options, i, seqs[b].lq, seqs[b].lk);
      for (int64_t j = r.begin; j < r.end; ++j) pairs[{static_cast<int64_t>(b), i, j}] = 0;
    }
  }
  return pairs;
}

check::CaseConfig Config(int64_t max_length) {
  check::CaseConfig config;
  config.max_length = max_length;
  config.max_sequences = 4;
  config.dense_bias = config.rel_bias = config.time_bias = config.rope = false;
  return config;
}

// Marks the valid pairs inside rows [i0, i1) x keys [j0, j1) of sequence b; returns how many.
int Cover(std::map<std::tuple<int64_t, int64_t, int64_t>, int>& pairs, const check::AttentionCase& c,
          int64_t b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const auto s = check::PairSequences(c)[b];
  int found = 0;
  for (int64_t i = i0; i < std::min(i1, s.lq); ++i) {
    const KeyRange r = ValidKeys(c.options, i, s.lq, s.lk);
    for (int64_t j = std::max(j0, r.begin); j < std::min({j1, r.end, s.lk}); ++j) {
      ++pairs.at({b, i, j});
      ++found;
    }
  }
  return found;
}

void ExpectEachPairOnce(const std::map<std::tuple<int64_t, int64_t, int64_t>, int>& pairs,
                        const std::string& kernel, const check::AttentionCase& c) {
  for (const auto& [pair, count] : pairs) {
    ASSERT_EQ(count, 1) << kernel << ": pair (b,i,j)=(" << std::get<0>(pair) << ","
                        << std::get<1>(pair) << "," << std::get<2>(pair) << ") covered " << count
                        << " times; case: " << c;
  }
}

TEST(TileScheduler, EveryValidPairIsInExactlyOneTileOfEachKernel) {
  std::mt19937_64 rng(11);
  for (int rep = 0; rep < 400; ++rep) {
    const check::AttentionCase c = check::RandomAttentionCase(rng, Config(rep % 2 ? 200 : 12));
    const gpu::Pairing pairing = PairingOf(c);

    auto fwd_pairs = ValidPairs(c);
    for (const gpu::ForwardTile& t : gpu::BuildForwardTiles(pairing, c.options)) {
      ASSERT_GT(Cover(fwd_pairs, c, t.b, t.i0, t.i0 + gpu::kBlockM, t.k_lo, t.k_hi), 0)
          << "forward tile without a valid pair; case: " << c;
    }
    ExpectEachPairOnce(fwd_pairs, "forward", c);

    const gpu::TileLists lists = gpu::BuildBackwardTiles(pairing, c.options);
    auto dq_pairs = ValidPairs(c);
    for (const gpu::DqTile& t : lists.dq) {
      ASSERT_GT(t.reader_count, 0);
      for (int r = 0; r < t.reader_count; ++r) {
        const gpu::DqReader& reader = lists.dq_readers[t.reader_begin + r];
        if (r > 0) {
          ASSERT_LT(lists.dq_readers[t.reader_begin + r - 1].b, reader.b) << "readers in increasing b";
        }
        ASSERT_GT(Cover(dq_pairs, c, reader.b, t.i0, t.i0 + gpu::kBlockM, reader.k_lo, reader.k_hi), 0)
            << "dQ reader without a valid pair; case: " << c;
      }
    }
    ExpectEachPairOnce(dq_pairs, "dQ", c);

    auto dkv_pairs = ValidPairs(c);
    for (const gpu::DkvTile& t : lists.dkv) {
      ASSERT_GT(t.seg_count, 0);
      for (int s = 0; s < t.seg_count; ++s) {
        const gpu::DkvSegment& seg = lists.dkv_segments[t.seg_begin + s];
        ASSERT_EQ(pairing.seqs[seg.b].kv_begin, t.kv_begin) << "segment reads another K/V sequence";
        ASSERT_GT(Cover(dkv_pairs, c, seg.b, seg.i0, seg.i1, t.j0, t.j0 + gpu::kBlockN), 0)
            << "dK/dV segment without a valid pair; case: " << c;
      }
    }
    ExpectEachPairOnce(dkv_pairs, "dK/dV", c);
  }
}

// The stored-dS plan (gpu/attention/backward_stored_ds_plan.h): every dK/dV segment starts
// on a 64-row block and gains only rows without a valid key in its tile; every block the dK/dV
// kernel writes (each step of each segment) and the dQ pass loads (its readers' key spans from the
// block holding their first key) has its own slot inside the workspace; none under broadcast_q.
TEST(TileScheduler, StoredDsPlanGivesEachWrittenOrReadBlockItsOwnSlot) {
  std::mt19937_64 rng(12);
  for (int rep = 0; rep < 300; ++rep) {
    const check::AttentionCase c = check::RandomAttentionCase(rng, Config(rep % 2 ? 300 : 70));
    const gpu::Pairing pairing = PairingOf(c);
    const gpu::TileLists lists = gpu::BuildBackwardTiles(pairing, c.options);
    const gpu::StoredDsPlan plan =
        gpu::PlanStoredDs(pairing.seqs, lists, pairing.broadcast_q, /*heads=*/1);
    if (pairing.broadcast_q) {
      EXPECT_EQ(plan.elements, 0) << c;
      continue;
    }
    if (lists.dkv.empty()) continue;
    ASSERT_GT(plan.elements, 0) << c;
    ASSERT_EQ(plan.segments.size(), lists.dkv_segments.size());
    const int64_t blocks = plan.elements / gpu::kDsBlockElements;
    std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> slot_of;  // (b, qb, kb) -> slot
    std::map<int64_t, std::tuple<int64_t, int64_t, int64_t>> block_of;
    const auto take = [&](int64_t b, int64_t qb, int64_t kb) {
      const int64_t slot = plan.block_base[plan.block_base[b] + qb] + kb;
      ASSERT_GE(slot, 0) << c;
      ASSERT_LT(slot, blocks) << c;
      const auto key = std::make_tuple(b, qb, kb);
      const auto [it, fresh] = block_of.emplace(slot, key);
      ASSERT_TRUE(fresh || it->second == key) << "two blocks share slot " << slot << "; case: " << c;
      slot_of[key] = slot;
    };
    for (const gpu::DkvTile& t : lists.dkv) {
      for (int s = 0; s < t.seg_count; ++s) {
        const gpu::DkvSegment& orig = lists.dkv_segments[t.seg_begin + s];
        const gpu::DkvSegment& seg = plan.segments[t.seg_begin + s];
        ASSERT_EQ(seg.i0 % gpu::kDsBlock, 0);
        ASSERT_LE(seg.i0, orig.i0);
        const gpu::SeqInfo& sq = pairing.seqs[seg.b];
        for (int64_t i = seg.i0; i < orig.i0; ++i) {
          const KeyRange r = ValidKeys(c.options, i, sq.lq, sq.lk);
          ASSERT_FALSE(r.begin < r.end && r.begin < t.j0 + gpu::kBlockN && r.end > t.j0)
              << "row " << i << " added in front of a segment has a valid key in the tile; case: " << c;
        }
        for (int64_t q0 = seg.i0; q0 < seg.i1; q0 += gpu::kDsBlock) take(seg.b, q0 / gpu::kDsBlock, t.j0 / gpu::kDsBlock);
      }
    }
    for (const gpu::DqTile& t : lists.dq) {
      for (int r = 0; r < t.reader_count; ++r) {
        const gpu::DqReader& rd = lists.dq_readers[t.reader_begin + r];
        for (int64_t j0 = rd.k_lo - rd.k_lo % gpu::kDsBlock; j0 < rd.k_hi; j0 += gpu::kDsBlock) {
          take(rd.b, t.i0 / gpu::kDsBlock, j0 / gpu::kDsBlock);
        }
      }
    }
  }
}

// A dQ tile with more than kDqReadersPerPart readers (broadcast_q) is split into parts of at most
// that many readers, each writing its own workspace slot; one DqReduce per split tile names the
// consecutive slots of its parts in reader order and the rows they cover. Whole tiles write no slot.
TEST(TileScheduler, SplitDqTilesHaveOneReduceOverTheirSlotsInOrder) {
  std::mt19937_64 rng(14);
  int split_cases = 0;
  for (int rep = 0; rep < 300; ++rep) {
    check::CaseConfig config = Config(rep % 2 ? 200 : 12);
    config.max_sequences = 6;
    const check::AttentionCase c = check::RandomAttentionCase(rng, config);
    const gpu::Pairing pairing = PairingOf(c);
    const gpu::TileLists lists = gpu::BuildBackwardTiles(pairing, c.options);
    std::vector<int> slot_uses(static_cast<size_t>(lists.dq_partial_slots), 0);
    std::map<int32_t, std::vector<const gpu::DqTile*>> parts_of_i0;
    for (const gpu::DqTile& t : lists.dq) {
      ASSERT_LE(t.reader_count, gpu::kDqReadersPerPart) << "case: " << c;
      if (t.partial < 0) continue;
      ASSERT_TRUE(pairing.broadcast_q) << "only broadcast_q tiles have several readers; case: " << c;
      ASSERT_LT(t.partial, lists.dq_partial_slots);
      ++slot_uses[static_cast<size_t>(t.partial)];
      parts_of_i0[t.i0].push_back(&t);
    }
    for (int uses : slot_uses) ASSERT_EQ(uses, 1) << "every slot written by exactly one part; case: " << c;
    ASSERT_EQ(lists.dq_reduce.size(), parts_of_i0.size()) << "case: " << c;
    for (const gpu::DqReduce& r : lists.dq_reduce) {
      ++split_cases;
      const auto& parts = parts_of_i0.at(r.i0);
      ASSERT_EQ(static_cast<int>(parts.size()), r.slot_count);
      ASSERT_GT(r.slot_count, 1);
      ASSERT_EQ(r.q_begin, pairing.seqs[0].q_begin);
      ASSERT_EQ(r.rows, std::min(gpu::kBlockM, pairing.seqs[0].lq - r.i0));
      for (const gpu::DqTile* t : parts) {
        const int32_t slot = t->partial - r.slot_begin;
        ASSERT_GE(slot, 0);
        ASSERT_LT(slot, r.slot_count);
        // Slot order is reader order: part k holds readers [k*n, (k+1)*n) of the tile.
        const gpu::DqTile* first = parts.front();
        for (const gpu::DqTile* other : parts) first = other->reader_begin < first->reader_begin ? other : first;
        ASSERT_EQ(t->reader_begin - first->reader_begin, slot * gpu::kDqReadersPerPart);
      }
    }
  }
  EXPECT_GT(split_cases, 0) << "no case split a dQ tile: the test checks nothing";
}

// The Hopper forward's 128-row tiles (kHopperBlockM) cover every valid pair exactly once too, each
// tile starting at a multiple of 128 rows.
TEST(TileScheduler, HopperForwardTilesCoverEveryValidPairOnce) {
  std::mt19937_64 rng(13);
  for (int rep = 0; rep < 300; ++rep) {
    const check::AttentionCase c = check::RandomAttentionCase(rng, Config(rep % 2 ? 300 : 12));
    const gpu::Pairing pairing = PairingOf(c);
    auto pairs = ValidPairs(c);
    for (const gpu::ForwardTile& t : gpu::BuildForwardTiles(pairing, c.options, gpu::kHopperBlockM)) {
      ASSERT_EQ(t.i0 % gpu::kHopperBlockM, 0) << "case: " << c;
      ASSERT_GT(Cover(pairs, c, t.b, t.i0, t.i0 + gpu::kHopperBlockM, t.k_lo, t.k_hi), 0)
          << "Hopper forward tile without a valid pair; case: " << c;
    }
    ExpectEachPairOnce(pairs, "Hopper forward", c);
  }
}

TEST(TileScheduler, TilesAreOrderedHeaviestFirst) {
  std::mt19937_64 rng(12);
  const check::AttentionCase c = check::RandomAttentionCase(rng, Config(300));
  const gpu::Pairing pairing = PairingOf(c);
  const std::vector<gpu::ForwardTile> tiles = gpu::BuildForwardTiles(pairing, c.options);
  for (size_t t = 1; t < tiles.size(); ++t) {
    auto work = [&](const gpu::ForwardTile& x) {
      return std::min<int64_t>(gpu::kBlockM, pairing.seqs[x.b].lq - x.i0) * (x.k_hi - x.k_lo);
    };
    EXPECT_GE(work(tiles[t - 1]), work(tiles[t]));
  }
}

// OrderByStepsThenSequence permutes the list (same tiles), puts more K/V steps first and, among equal
// steps, keeps each sequence's tiles together in row order.
TEST(TileScheduler, StepOrderKeepsTilesAndGroupsSequences) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 20; ++trial) {
    const check::AttentionCase c = check::RandomAttentionCase(rng, Config(300));
    const gpu::Pairing pairing = PairingOf(c);
    const std::vector<gpu::ForwardTile> heavy = gpu::BuildForwardTiles(pairing, c.options, gpu::kHopperBlockM);
    std::vector<gpu::ForwardTile> tiles = heavy;
    gpu::OrderByStepsThenSequence(tiles, 64);
    const auto key = [](const gpu::ForwardTile& t) { return std::tuple(t.b, t.i0, t.k_lo, t.k_hi); };
    std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t>> a, b;
    for (const gpu::ForwardTile& t : heavy) a.push_back(key(t));
    for (const gpu::ForwardTile& t : tiles) b.push_back(key(t));
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b) << "trial " << trial;
    const auto steps = [](const gpu::ForwardTile& t) { return (t.k_hi - t.k_lo + 63) / 64; };
    for (size_t i = 1; i < tiles.size(); ++i) {
      const gpu::ForwardTile& p = tiles[i - 1];
      const gpu::ForwardTile& q = tiles[i];
      ASSERT_GE(steps(p), steps(q)) << "trial " << trial << " position " << i;
      if (steps(p) == steps(q)) {
        ASSERT_LT(std::pair(p.b, p.i0), std::pair(q.b, q.i0)) << "trial " << trial << " position " << i;
      }
    }
  }
  // Cross-attention-like: equal steps everywhere, so the list is in sequence and row order, each
  // sequence's partial last tile right after its full ones (the heavy-first list puts it last).
  std::vector<gpu::ForwardTile> cross = {{1, 128, 0, 256}, {0, 0, 0, 256}, {1, 0, 0, 256}, {0, 128, 0, 256}};
  gpu::OrderByStepsThenSequence(cross, 128);
  for (size_t i = 0; i < cross.size(); ++i) {
    EXPECT_EQ(cross[i].b, static_cast<int32_t>(i / 2));
    EXPECT_EQ(cross[i].i0, static_cast<int32_t>(128 * (i % 2)));
  }
}

// The snake deal keeps the list's tiles and reverses exactly the odd bands; dealt to CTAs by stride
// it evens their sums of work where the plain deal gives the first CTA the most of every band.
TEST(TileScheduler, SnakeBandsReverseOddBandsAndEvenTheDeal) {
  std::vector<gpu::ForwardTile> tiles;
  for (int32_t i = 0; i < 23; ++i) tiles.push_back({i, 0, 0, 100 - 3 * i});  // heavy first, k_hi - k_lo falls
  const std::vector<gpu::ForwardTile> plain = tiles;
  gpu::DealInSnakeBands(tiles, 5);
  ASSERT_EQ(tiles.size(), plain.size());
  for (size_t p = 0; p < tiles.size(); ++p) {
    const size_t band = p / 5, first = band * 5, last = std::min<size_t>(first + 5, plain.size()) - 1;
    const size_t from = band % 2 == 0 ? p : first + (last - p);
    EXPECT_EQ(tiles[p].b, plain[from].b) << "position " << p;
  }
  const auto spread = [](const std::vector<gpu::ForwardTile>& list) {
    std::vector<int64_t> sum(5, 0);
    for (size_t p = 0; p < list.size(); ++p) sum[p % 5] += list[p].k_hi - list[p].k_lo;
    return *std::max_element(sum.begin(), sum.end()) - *std::min_element(sum.begin(), sum.end());
  };
  EXPECT_LT(spread(tiles), spread(plain));
  std::vector<gpu::ForwardTile> one = plain;
  gpu::DealInSnakeBands(one, 1);  // a band of one tile: nothing to deal
  for (size_t p = 0; p < one.size(); ++p) EXPECT_EQ(one[p].b, plain[p].b);
}

}  // namespace
}  // namespace gemtb
