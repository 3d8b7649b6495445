// The committed golden folders are runnable as README.md says: `gemtb ref attention --case DIR`,
// `gemtb ref embed --spec DIR/spec.json ...` and `gemtb ref quantize --in ...` on a folder's inputs
// write exactly the folder's stored outputs. This is the path a user checking their own kernel takes,
// and it runs the commands' own file loading instead of the producers' in-memory inputs.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/gemtb/command.h"
#include "golden/registry.h"

namespace gemtb::cli {
namespace {

namespace fs = std::filesystem;
using golden::GoldenProducer;
using golden::GoldenProducers;
using nlohmann::json;

const fs::path kGolden = GEMTB_GOLDEN_DIR;

std::string ReadText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs `command` writing into a fresh folder and expects every output file the manifest lists for
// `producer` under `stored_prefix` (e.g. "out/") to be byte-identical to the command's file.
void ExpectCommandReproduces(const std::string& producer, int (*command)(const std::vector<std::string>&),
                             std::vector<std::string> args, const std::string& stored_prefix) {
  // One folder per test: ctest may run this binary's tests in parallel processes.
  const fs::path out = fs::path(::testing::TempDir()) /
                       (std::string("gemtb_golden_cases_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(out);
  args.insert(args.end(), {"--out-dir", out.string()});
  ::testing::internal::CaptureStderr();
  const int rc = command(args);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rc, kExitOk) << producer << ": " << err;
  const json manifest = json::parse(ReadText(kGolden / "manifest.json"));
  int compared = 0;
  for (const json& p : manifest["producers"]) {
    if (p["name"] != producer) continue;
    for (const json& f : p["files"]) {
      if (f["role"] != "output") continue;
      const std::string path = f["path"];
      const std::string relative = path.substr(producer.size() + 1);
      ASSERT_EQ(relative.rfind(stored_prefix, 0), 0u) << path;
      const fs::path written = out / relative.substr(stored_prefix.size());
      ASSERT_TRUE(fs::exists(written)) << producer << ": the command did not write " << written;
      EXPECT_TRUE(ReadText(written) == ReadText(kGolden / path)) << path << " differs from the command's output";
      ++compared;
    }
  }
  EXPECT_GT(compared, 0) << producer;
  fs::remove_all(out);
}

TEST(GoldenCases, AttentionFoldersRunUnderRefAttention) {
  int cases = 0;
  for (const GoldenProducer& p : GoldenProducers()) {
    if (p.kind != "attention") continue;
    std::vector<std::string> args = {"--case", (kGolden / p.name).string(), "--mode", p.params.value("mode", "oracle")};
    if (p.params.value("backward", true)) args.push_back("--backward");
    ExpectCommandReproduces(p.name, RunRefAttention, args, "");
    ++cases;
  }
  EXPECT_GE(cases, 36);
}

TEST(GoldenCases, EmbeddingFoldersRunUnderRefEmbed) {
  int cases = 0;
  for (const GoldenProducer& p : GoldenProducers()) {
    if (p.kind != "embedding") continue;
    const fs::path dir = kGolden / p.name;
    std::vector<std::string> args = {"--spec", (dir / "spec.json").string(), "--lengths", (dir / "lengths.npy").string(),
                                     "--ids", (dir / "ids.npy").string()};
    if (fs::exists(dir / "weights.npy")) args.insert(args.end(), {"--weights", (dir / "weights.npy").string()});
    if (p.params.value("step", false)) {
      args.insert(args.end(), {"--grads", (dir / "grads").string(), "--step", "--step-index",
                               std::to_string(p.params.value("step_index", 0))});
    }
    ExpectCommandReproduces(p.name, RunRefEmbed, args, "out/");
    ++cases;
  }
  EXPECT_GE(cases, 5);
}

TEST(GoldenCases, QuantizeFoldersRunUnderRefQuantize) {
  int cases = 0;
  for (const GoldenProducer& p : GoldenProducers()) {
    if (p.kind != "quantize") continue;
    const json& q = p.params;
    std::vector<std::string> args = {"--in", (kGolden / "quantize/inputs" / (q.value("input", "x") + ".npy")).string(),
                                     "--format", q.at("format").get<std::string>()};
    if (q.value("block", "none") != "none") args.insert(args.end(), {"--block", q.at("block").get<std::string>()});
    for (const char* key : {"axis", "seed", "stream", "rht"}) {
      if (q.contains(key)) args.insert(args.end(), {std::string("--") + key, std::to_string(q.at(key).get<int64_t>())});
    }
    if (q.contains("scale_mode")) args.insert(args.end(), {"--scale-mode", q.at("scale_mode").get<std::string>()});
    if (q.contains("rounding")) args.insert(args.end(), {"--rounding", q.at("rounding").get<std::string>()});
    ExpectCommandReproduces(p.name, RunRefQuantize, args, "");
    ++cases;
  }
  EXPECT_GE(cases, 20);
}

}  // namespace
}  // namespace gemtb::cli
