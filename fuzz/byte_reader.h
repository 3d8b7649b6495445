// What every harness in fuzz/ shares: a front-to-back reader of the fuzzer's bytes, the byte codes
// that turn one byte into a small or an extreme integer, and the one way a harness reports a
// broken promise (a message, then abort(), which libFuzzer records as a crash).
//
// The reader never fails: past the end it returns zeros, so every byte string decodes to some
// input, and a seed written by hand (fuzz/corpus/make_seeds.py) reads the same way as the code
// below, field by field from the front. (libFuzzer's FuzzedDataProvider takes integers from the
// back, which makes hand-written seeds hard to read.)
#ifndef GEMTB_FUZZ_BYTE_READER_H_
#define GEMTB_FUZZ_BYTE_READER_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

namespace gemtb::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  int8_t I8() { return static_cast<int8_t>(U8()); }
  bool Bool() { return (U8() & 1) != 0; }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(U8()) << (8 * i);
    return v;
  }
  // A length byte, then up to that many bytes (fewer at the end of the input).
  std::string String() {
    const size_t n = U8();
    std::string s;
    for (size_t i = 0; i < n && pos_ < size_; ++i) s.push_back(static_cast<char>(U8()));
    return s;
  }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The integers where int64 arithmetic breaks: sign edges, 2^31 (the attention length cap), 2^32,
// 2^53 (fp64 integers), 2^62 (products of two overflow).
inline constexpr int64_t kExtremes[16] = {
    std::numeric_limits<int64_t>::min(),
    std::numeric_limits<int64_t>::min() + 1,
    -(int64_t{1} << 62),
    -(int64_t{1} << 31) - 1,
    -(int64_t{1} << 31),
    (int64_t{1} << 31) - 1,
    int64_t{1} << 31,
    (int64_t{1} << 31) + 1,
    int64_t{1} << 32,
    int64_t{1} << 40,
    (int64_t{1} << 53) + 1,
    int64_t{1} << 62,
    std::numeric_limits<int64_t>::max() - 1,
    std::numeric_limits<int64_t>::max(),
    int64_t{1} << 20,
    65536,
};

// A byte as a dimension or count: 0..modulus-1 for bytes below 240, else an extreme.
inline int64_t SizeCode(uint8_t b, int64_t modulus) {
  return b < 240 ? static_cast<int64_t>(b) % modulus : kExtremes[b - 240];
}

// A byte as a signed integer: -120..119 for bytes below 240, else an extreme.
inline int64_t SignedCode(uint8_t b) {
  return b < 240 ? static_cast<int64_t>(b) - 120 : kExtremes[b - 240];
}

// A broken promise: print why and abort, so that libFuzzer saves the input as a crash.
[[noreturn]] inline void Fail(std::string_view what) {
  std::fprintf(stderr, "\n*** gemtb fuzz: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

inline void Check(bool ok, std::string_view what) {
  if (!ok) Fail(what);
}

}  // namespace gemtb::fuzz

#endif  // GEMTB_FUZZ_BYTE_READER_H_
