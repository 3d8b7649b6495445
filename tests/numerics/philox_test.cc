// Philox4x32-10 (model/numerics/philox.h) against Random123's known-answer vectors and against the
// cuRAND Philox4_32_10 state machine.
#include "model/numerics/philox.h"
#include "model/numerics/philox_blocks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gemtb::numerics {
namespace {

void ExpectBlock(const Philox4x32& got, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  EXPECT_EQ(got.v[0], a);
  EXPECT_EQ(got.v[1], b);
  EXPECT_EQ(got.v[2], c);
  EXPECT_EQ(got.v[3], d);
}

// DEShawResearch/random123 tests/kat_vectors, the three "philox4x32 10" lines.
TEST(Philox, KnownAnswerVectorsFromRandom123) {
  ExpectBlock(Philox4x32_10({{0, 0, 0, 0}}, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu,
              0x9b00dbd8u);
  ExpectBlock(Philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu,
                            0xffffffffu),
              0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
  ExpectBlock(Philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u,
                            0x299f31d0u),
              0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

// Key = (seed_lo, seed_hi), counter = (e_lo, e_hi, stream_lo, stream_hi), e = element / 4, word
// element % 4 — with every 64-bit half non-trivial.
TEST(Philox, WordLayoutSplitsSeedStreamAndElement) {
  const uint64_t seed = 0x0123456789ABCDEFull;
  const uint64_t stream = 0xFEDCBA9876543210ull;
  for (const uint64_t element : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4},
                                 uint64_t{0x3FFFFFFFFull}, uint64_t{0x400000000ull} + 6,
                                 ~uint64_t{0}}) {
    const uint64_t e = element / 4;
    const Philox4x32 block = Philox4x32_10(
        {{static_cast<uint32_t>(e & 0xFFFFFFFFu), static_cast<uint32_t>(e >> 32), 0x76543210u,
          0xFEDCBA98u}},
        0x89ABCDEFu, 0x01234567u);
    EXPECT_EQ(PhiloxWord(seed, stream, element), block.v[element % 4]) << element;
    EXPECT_EQ(PhiloxSrBits(seed, stream, element), block.v[element % 4] & 0xFFFFu) << element;
  }
}

// A transcription of cuRAND's curandStatePhilox4_32_10 (curand_philox4x32_x.h): curand_init sets
// ctr = 0, key = seed halves, adds the subsequence to the high 64 bits of ctr and the offset / 4 to
// the low 64 bits (with carry), STATE = offset % 4; each curand() returns output[STATE] and moves on,
// incrementing the 128-bit counter after the fourth word.
struct CurandPhiloxModel {
  uint32_t ctr[4] = {0, 0, 0, 0};
  uint32_t key[2];
  uint32_t state = 0;
  Philox4x32 output{};

  CurandPhiloxModel(uint64_t seed, uint64_t subsequence, uint64_t offset)
      : key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)} {
    Add(2, subsequence);
    state = static_cast<uint32_t>(offset & 3);
    Add(0, offset / 4);
    Refresh();
  }
  void Add(int word, uint64_t n) {  // 128-bit add of n << (32·word)
    uint64_t carry = n;
    for (int w = word; w < 4 && carry != 0; ++w) {
      const uint64_t sum = uint64_t{ctr[w]} + (carry & 0xFFFFFFFFu);
      ctr[w] = static_cast<uint32_t>(sum);
      carry = (carry >> 32) + (sum >> 32);
    }
  }
  void Refresh() { output = Philox4x32_10({{ctr[0], ctr[1], ctr[2], ctr[3]}}, key[0], key[1]); }
  uint32_t Next() {
    const uint32_t r = output.v[state++];
    if (state == 4) {
      state = 0;
      Add(0, 1);
      Refresh();
    }
    return r;
  }
};

TEST(Philox, MatchesCurandSubsequenceAndOffsetSemantics) {
  struct Start {
    uint64_t seed, stream, offset;
  };
  for (const Start& s : {Start{0, 0, 0}, Start{42, 7, 3}, Start{0xDEADBEEFCAFEull, 1ull << 40, 13},
                         Start{1, 2, 0xFFFFFFFFull * 4 + 2}}) {  // crosses the ctr.x → ctr.y carry
    CurandPhiloxModel model(s.seed, s.stream, s.offset);
    for (uint64_t k = 0; k < 64; ++k) {
      ASSERT_EQ(model.Next(), PhiloxWord(s.seed, s.stream, s.offset + k))
          << s.seed << " " << s.stream << " " << s.offset << " +" << k;
    }
  }
}

// Guards against a constant or trivially structured stream: nearby inputs give unrelated words.
TEST(Philox, DistinctInputsGiveDistinctWords) {
  const uint32_t base = PhiloxWord(5, 6, 7);
  EXPECT_NE(base, PhiloxWord(5, 6, 8));
  EXPECT_NE(base, PhiloxWord(5, 7, 7));
  EXPECT_NE(base, PhiloxWord(4, 6, 7));
  EXPECT_NE(base, PhiloxWord(5 + (1ull << 32), 6, 7));
  EXPECT_NE(base, PhiloxWord(5, 6 + (1ull << 32), 7));
  EXPECT_NE(base, PhiloxWord(5, 6, 7 + (1ull << 34)));
  // Over 4096 words, each bit position is set roughly half the time.
  int ones[32] = {};
  for (uint64_t e = 0; e < 4096; ++e) {
    const uint32_t w = PhiloxWord(9, 1, e);
    for (int b = 0; b < 32; ++b) ones[b] += static_cast<int>((w >> b) & 1u);
  }
  for (int b = 0; b < 32; ++b) {
    EXPECT_GT(ones[b], 1800) << b;
    EXPECT_LT(ones[b], 2300) << b;
  }
}

// PhiloxBlocks (philox_blocks.h) gives PhiloxBlock's words block by block on every path: runs of
// 0..20 blocks (whole and partial groups of eight) from counters that do and do not carry into the
// high word inside a group, and streams and seeds with both halves set.
void ExpectSameAsPhiloxBlock(void (*blocks)(uint64_t, uint64_t, uint64_t, int, uint32_t*)) {
  const uint64_t seeds[] = {0, 20260803, 0xFEDCBA9876543210ull};
  const uint64_t streams[] = {0, 7, 0x0123456789ABCDEFull};
  const uint64_t firsts[] = {0, 1, 5, 1000003, 0xFFFFFFFFull - 3, 0xFFFFFFFFull, 0x1FFFFFFF9ull, 0xFFFFFFFFFFFFFFF0ull};
  for (uint64_t seed : seeds) {
    for (uint64_t stream : streams) {
      for (uint64_t first : firsts) {
        for (int n = 0; n <= 20; ++n) {
          std::vector<uint32_t> words(4 * static_cast<size_t>(n) + 1, 0xA5A5A5A5u);
          blocks(seed, stream, first, n, words.data());
          for (int j = 0; j < n; ++j) {
            const Philox4x32 want = PhiloxBlock(seed, stream, first + static_cast<uint64_t>(j));
            for (int q = 0; q < 4; ++q) {
              ASSERT_EQ(words[4 * j + q], want.v[q]) << "seed " << seed << " stream " << stream << " first " << first
                                                     << " n " << n << " block " << j << " word " << q;
            }
          }
          EXPECT_EQ(words.back(), 0xA5A5A5A5u) << "wrote past block " << n;
        }
      }
    }
  }
}

TEST(PhiloxBlocks, ScalarPathEqualsPhiloxBlock) { ExpectSameAsPhiloxBlock(PhiloxBlocksScalar); }

TEST(PhiloxBlocks, DispatchedPathEqualsPhiloxBlock) { ExpectSameAsPhiloxBlock(PhiloxBlocks); }

TEST(PhiloxBlocks, Avx2PathEqualsPhiloxBlock) {
#ifdef GEMTB_PHILOX_AVX2
  if (!PhiloxHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2";
  ExpectSameAsPhiloxBlock(PhiloxBlocksAvx2);
#else
  GTEST_SKIP() << "not an x86-64 build";
#endif
}

}  // namespace
}  // namespace gemtb::numerics
