// SHA-256 (FIPS 180-4 §6.2), header-only: the checksums of golden/manifest.json. Our own code, written
// from the standard; checked against its examples ("abc", the empty message, the 448-bit message).
//
//   Sha256 h;  h.Update(bytes);  std::string hex = Sha256Hex(h.Finish());
//   or simply Sha256Hex(bytes).
#ifndef GEMTB_MODEL_COMMON_SHA256_H_
#define GEMTB_MODEL_COMMON_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gemtb {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256() { Reset(); }

  void Reset() {
    state_ = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
              0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    buffered_ = 0;
    length_bytes_ = 0;
  }

  void Update(const uint8_t* data, size_t size) {
    length_bytes_ += size;
    // Top up a partial block first, then hash whole blocks straight from the input.
    if (buffered_ > 0) {
      const size_t take = size < 64 - buffered_ ? size : 64 - buffered_;
      for (size_t i = 0; i < take; ++i) buffer_[buffered_ + i] = data[i];
      buffered_ += take;
      data += take;
      size -= take;
      if (buffered_ < 64) return;
      Compress(buffer_.data());
      buffered_ = 0;
    }
    while (size >= 64) {
      Compress(data);
      data += 64;
      size -= 64;
    }
    for (size_t i = 0; i < size; ++i) buffer_[i] = data[i];
    buffered_ = size;
  }
  void Update(std::string_view text) {
    Update(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  }

  // Pads (§5.1.1: a 1 bit, zeros, the 64-bit big-endian bit length) and returns the digest. The
  // object must be Reset() before reuse.
  Sha256Digest Finish() {
    const uint64_t bit_length = length_bytes_ * 8;
    const uint8_t one = 0x80;
    Update(&one, 1);
    const uint8_t zero = 0;
    while (buffered_ != 56) Update(&zero, 1);
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bit_length >> (56 - 8 * i));
    Update(length, 8);
    Sha256Digest digest;
    for (int i = 0; i < 8; ++i) {
      for (int b = 0; b < 4; ++b) digest[4 * i + b] = static_cast<uint8_t>(state_[i] >> (24 - 8 * b));
    }
    return digest;
  }

 private:
  static constexpr uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  // §6.2.2: one 512-bit block.
  void Compress(const uint8_t* block) {
    static constexpr uint32_t kK[64] = {
        0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
        0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
        0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
        0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
        0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
        0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
        0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
        0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};
    uint32_t w[64];
    for (int t = 0; t < 16; ++t) {
      w[t] = (uint32_t{block[4 * t]} << 24) | (uint32_t{block[4 * t + 1]} << 16) |
             (uint32_t{block[4 * t + 2]} << 8) | uint32_t{block[4 * t + 3]};
    }
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t big_s1 = Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25);
      const uint32_t ch = (e & f) ^ (~e & g);
      const uint32_t t1 = h + big_s1 + ch + kK[t] + w[t];
      const uint32_t big_s0 = Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22);
      const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const uint32_t t2 = big_s0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_bytes_ = 0;
};

// Lower-case hex of a digest.
inline std::string Sha256Hex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xF];
  }
  return out;
}

inline std::string Sha256Hex(const uint8_t* data, size_t size) {
  Sha256 h;
  h.Update(data, size);
  return Sha256Hex(h.Finish());
}

inline std::string Sha256Hex(std::string_view text) {
  Sha256 h;
  h.Update(text);
  return Sha256Hex(h.Finish());
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_COMMON_SHA256_H_
