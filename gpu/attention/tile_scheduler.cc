#include "gpu/attention/tile_scheduler.h"

#include <algorithm>
#include <numeric>

namespace gemtb::gpu {
namespace {

struct KeySpan {
  int32_t lo = 0, hi = 0;
  bool empty() const { return lo >= hi; }
};

// Union of the valid key ranges of rows [i0, i1) of a (lq, lk) pair; empty rows add nothing.
KeySpan RowsKeyUnion(const AttentionOptions& o, int64_t lq, int64_t lk, int64_t i0, int64_t i1) {
  KeySpan u;
  bool any = false;
  for (int64_t i = i0; i < i1; ++i) {
    const RowKeyRange r = ClampedKeys(o, i, lq, lk);
    if (r.begin >= r.end) continue;
    u.lo = any ? std::min(u.lo, r.begin) : r.begin;
    u.hi = any ? std::max(u.hi, r.end) : r.end;
    any = true;
  }
  return any ? u : KeySpan{};
}

bool Meets(const RowKeyRange& r, int64_t j0, int64_t j1) {
  return r.begin < r.end && r.begin < j1 && r.end > j0;
}

// The query rows [i0, i1) of a (lq, lk) pair with at least one valid key in [j0, j1); i0 == i1 if
// none. Both ends of the key ranges are non-decreasing in the row, so the rows whose range ends
// after j0 and begins before j1 are one interval, found by bisection, then trimmed to rows that
// really meet [j0, j1) (an empty range can sit inside it).
std::pair<int64_t, int64_t> RowsMeetingKeys(const AttentionOptions& o, int64_t lq, int64_t lk,
                                            int64_t j0, int64_t j1) {
  int64_t lo = 0, hi = lq;  // first row with end > j0
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (ClampedKeys(o, mid, lq, lk).end > j0) hi = mid; else lo = mid + 1;
  }
  const int64_t first = lo;
  hi = lq;  // first row with begin >= j1
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (ClampedKeys(o, mid, lq, lk).begin >= j1) hi = mid; else lo = mid + 1;
  }
  int64_t i0 = first, i1 = lo;
  while (i0 < i1 && !Meets(ClampedKeys(o, i0, lq, lk), j0, j1)) ++i0;
  while (i1 > i0 && !Meets(ClampedKeys(o, i1 - 1, lq, lk), j0, j1)) --i1;
  return {i0, i1};
}

// Indices 0..n-1 ordered by decreasing work (stable: equal work keeps list order).
template <typename Work>
std::vector<size_t> HeavyFirst(size_t n, Work work) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return work(a) > work(b); });
  return order;
}

template <typename T>
std::vector<T> Permuted(const std::vector<T>& v, const std::vector<size_t>& order) {
  std::vector<T> out;
  out.reserve(v.size());
  for (size_t i : order) out.push_back(v[i]);
  return out;
}

}  // namespace

std::vector<ForwardTile> BuildForwardTiles(const Pairing& pairing, const AttentionOptions& options,
                                           int block_m) {
  std::vector<ForwardTile> tiles;
  for (size_t b = 0; b < pairing.seqs.size(); ++b) {
    const SeqInfo& s = pairing.seqs[b];
    for (int32_t i0 = 0; i0 < s.lq; i0 += block_m) {
      const KeySpan span = RowsKeyUnion(options, s.lq, s.lk, i0, std::min(s.lq, i0 + block_m));
      if (span.empty()) continue;
      tiles.push_back({static_cast<int32_t>(b), i0, span.lo, span.hi});
    }
  }
  const auto work = [&](size_t t) {
    const ForwardTile& x = tiles[t];
    const int64_t rows = std::min(block_m, pairing.seqs[x.b].lq - x.i0);
    return rows * (x.k_hi - x.k_lo);
  };
  return Permuted(tiles, HeavyFirst(tiles.size(), work));
}

void OrderByStepsThenSequence(std::vector<ForwardTile>& tiles, int block_n) {
  std::sort(tiles.begin(), tiles.end(), [block_n](const ForwardTile& a, const ForwardTile& b) {
    const int sa = KeySteps(a.k_lo, a.k_hi, block_n), sb = KeySteps(b.k_lo, b.k_hi, block_n);
    if (sa != sb) return sa > sb;
    if (a.b != b.b) return a.b < b.b;
    return a.i0 < b.i0;
  });
}

void DealInSnakeBands(std::vector<ForwardTile>& tiles, int64_t band) {
  if (band < 2) return;
  const int64_t n = static_cast<int64_t>(tiles.size());
  for (int64_t begin = band; begin < n; begin += 2 * band) {
    std::reverse(tiles.begin() + begin, tiles.begin() + std::min(n, begin + band));
  }
}

TileLists BuildBackwardTiles(const Pairing& pairing, const AttentionOptions& options) {
  TileLists out;
  const int64_t num_out = static_cast<int64_t>(pairing.seqs.size());

  // dQ: one list of query tiles per query sequence, with its readers in increasing b.
  std::vector<DqTile> dq;
  std::vector<int64_t> dq_work;
  auto add_dq_tile = [&](int32_t i0, const std::vector<int64_t>& readers) {
    const int32_t reader_begin = static_cast<int32_t>(out.dq_readers.size());
    std::vector<int64_t> reader_work;
    for (int64_t b : readers) {
      const SeqInfo& s = pairing.seqs[b];
      const KeySpan span = RowsKeyUnion(options, s.lq, s.lk, i0, std::min(s.lq, i0 + kBlockM));
      if (span.empty()) continue;
      out.dq_readers.push_back({static_cast<int32_t>(b), span.lo, span.hi, 0});
      reader_work.push_back(std::min(kBlockM, s.lq - i0) * static_cast<int64_t>(span.hi - span.lo));
    }
    const int32_t count = static_cast<int32_t>(reader_work.size());
    if (count == 0) return;
    if (count <= kDqReadersPerPart) {
      dq.push_back({i0, reader_begin, count, -1});
      dq_work.push_back(std::accumulate(reader_work.begin(), reader_work.end(), int64_t{0}));
      return;
    }
    // Split: all readers of one CTA would serialise (broadcast_q: every b reads these rows).
    const SeqInfo& first = pairing.seqs[out.dq_readers[reader_begin].b];
    const int32_t slot_begin = static_cast<int32_t>(out.dq_partial_slots);
    const int32_t parts = (count + kDqReadersPerPart - 1) / kDqReadersPerPart;
    for (int32_t part = 0; part < parts; ++part) {
      const int32_t r0 = part * kDqReadersPerPart;
      const int32_t n = std::min(kDqReadersPerPart, count - r0);
      dq.push_back({i0, reader_begin + r0, n, slot_begin + part});
      dq_work.push_back(std::accumulate(reader_work.begin() + r0, reader_work.begin() + r0 + n, int64_t{0}));
    }
    out.dq_reduce.push_back({first.q_begin, i0, std::min(kBlockM, first.lq - i0), slot_begin, parts});
    out.dq_partial_slots += parts;
  };
  if (pairing.broadcast_q) {
    std::vector<int64_t> all(num_out);
    std::iota(all.begin(), all.end(), int64_t{0});
    const int32_t lq = num_out > 0 ? pairing.seqs[0].lq : 0;
    for (int32_t i0 = 0; i0 < lq; i0 += kBlockM) add_dq_tile(i0, all);
  } else {
    for (int64_t b = 0; b < num_out; ++b) {
      for (int32_t i0 = 0; i0 < pairing.seqs[b].lq; i0 += kBlockM) add_dq_tile(i0, {b});
    }
  }
  out.dq = Permuted(dq, HeavyFirst(dq.size(), [&](size_t t) { return dq_work[t]; }));

  // dK/dV: per K/V sequence, key tiles with the query rows of each reader that meet them.
  std::vector<DkvTile> dkv;
  std::vector<int64_t> dkv_work;
  const int64_t num_kv = static_cast<int64_t>(pairing.kv_offsets.size()) - 1;
  for (int64_t kb = 0; kb < num_kv; ++kb) {
    const int64_t kv_begin = pairing.kv_offsets[kb];
    const int32_t lk = static_cast<int32_t>(pairing.kv_offsets[kb + 1] - kv_begin);
    std::vector<int64_t> readers;
    for (int64_t b = 0; b < num_out; ++b) {
      if (pairing.kv_seq[b] == kb) readers.push_back(b);
    }
    for (int32_t j0 = 0; j0 < lk; j0 += kBlockN) {
      const int64_t j1 = std::min<int64_t>(lk, j0 + kBlockN);
      DkvTile tile{kv_begin, lk, j0, static_cast<int32_t>(out.dkv_segments.size()), 0};
      int64_t work = 0;
      for (int64_t b : readers) {
        const SeqInfo& s = pairing.seqs[b];
        const auto [i0, i1] = RowsMeetingKeys(options, s.lq, s.lk, j0, j1);
        if (i0 >= i1) continue;
        out.dkv_segments.push_back({static_cast<int32_t>(b), static_cast<int32_t>(i0),
                                    static_cast<int32_t>(i1), 0});
        ++tile.seg_count;
        work += i1 - i0;
      }
      if (tile.seg_count == 0) continue;
      dkv.push_back(tile);
      dkv_work.push_back(work);
    }
  }
  out.dkv = Permuted(dkv, HeavyFirst(dkv.size(), [&](size_t t) { return dkv_work[t]; }));
  return out;
}

}  // namespace gemtb::gpu
