// SHA-256 against the examples of FIPS 180-4 (NIST's "SHA256.pdf" example values) and the
// long-message vector; incremental hashing must equal one-shot hashing at every split.
#include "model/common/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace gemtb {
namespace {

TEST(Sha256, MatchesFipsExampleAbc) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, MatchesEmptyMessageDigest) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, MatchesFips448BitMessageExample) {
  // 56 bytes: the padding spills into a second block.
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, MatchesFips896BitMessageExample) {
  EXPECT_EQ(Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                      "mnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, MatchesMillionAsVector) {
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalUpdatesEqualOneShotAtEverySplit) {
  std::string text;
  for (int i = 0; i < 200; ++i) text.push_back(static_cast<char>('a' + (i * 7) % 26));
  const std::string whole = Sha256Hex(text);
  for (size_t split = 0; split <= text.size(); ++split) {
    Sha256 h;
    h.Update(std::string_view(text).substr(0, split));
    h.Update(std::string_view(text).substr(split));
    ASSERT_EQ(Sha256Hex(h.Finish()), whole) << "split at " << split;
  }
}

TEST(Sha256, OneFlippedBitChangesTheDigest) {
  std::string text(64, 'x');
  const std::string before = Sha256Hex(text);
  text[31] ^= 1;
  EXPECT_NE(Sha256Hex(text), before);
}

}  // namespace
}  // namespace gemtb
