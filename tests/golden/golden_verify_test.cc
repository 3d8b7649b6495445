// `gemtb golden verify|regen`, in-process: the committed set verifies; a copy with one value moved
// by one ulp (in each dtype the set stores) fails, naming the file and the element; a malformed
// manifest is bad input (exit 2); regen refuses without --force and rebuilds what it is asked to.
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/common/sha256.h"
#include "nlohmann/json.hpp"
#include "reference/io/npy.h"
#include "tools/gemtb/command.h"
#include "golden/registry.h"

namespace gemtb::cli {
namespace {

namespace fs = std::filesystem;
using golden::GoldenProducer;
using golden::GoldenProducers;
using ::testing::HasSubstr;

const fs::path kGolden = GEMTB_GOLDEN_DIR;

struct Outcome {
  int exit_code;
  std::string err;
};

Outcome Call(int (*command)(const std::vector<std::string>&), const std::vector<std::string>& args) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int rc = command(args);
  (void)::testing::internal::GetCapturedStdout();
  return {rc, ::testing::internal::GetCapturedStderr()};
}

std::string ReadText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteText(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// A private copy of the committed manifest, plus the folders a test brings (Bring).
class GoldenCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("gemtb_golden_") + info->test_suite_name() + "_" + info->name();
    for (char& ch : name) {
      if (ch == '/') ch = '_';
    }
    dir_ = fs::path(::testing::TempDir()) / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(kGolden / "manifest.json", dir_ / "manifest.json");
  }

  // Copies the committed folder `prefix` (a producer's folder or a family) into the private copy;
  // verify --only PREFIX reads nothing else.
  void Bring(const std::string& prefix) {
    fs::create_directories((dir_ / prefix).parent_path());
    fs::copy(kGolden / prefix, dir_ / prefix, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Moves element `index` of DIR/path by one unit in the last place (the next representable value
  // away from zero for floats, the next code for integer codes) and returns the moved element's index.
  void MoveOneUlp(const std::string& path, int64_t index) {
    const fs::path file = dir_ / path;
    absl::StatusOr<io::NpyArray> a = io::ReadNpy(file.string());
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_LT(index, a->NumElements()) << path;
    // Little-endian: adding 1 to the lowest byte with carry adds 1 to the element's bit pattern.
    const int size = io::NpyItemSize(a->dtype);
    for (int b = 0; b < size; ++b) {
      uint8_t& byte = a->data[index * size + b];
      if (++byte != 0) break;
    }
    const std::vector<uint8_t> bytes = io::SerializeNpy(*a);
    WriteText(file, std::string(bytes.begin(), bytes.end()));
  }

  // Makes the manifest agree with the file on disk, so that only the recomputation can catch it.
  void RehashInManifest(const std::string& path) {
    nlohmann::json m = nlohmann::json::parse(ReadText(dir_ / "manifest.json"));
    const std::string bytes = ReadText(dir_ / path);
    bool found = false;
    for (auto& p : m["producers"]) {
      for (auto& f : p["files"]) {
        if (f["path"] == path) {
          f["sha256"] = Sha256Hex(bytes);
          f["bytes"] = bytes.size();
          found = true;
        }
      }
    }
    ASSERT_TRUE(found) << path;
    WriteText(dir_ / "manifest.json", m.dump(1));
  }

  Outcome Verify(const std::string& only = "") {
    std::vector<std::string> args = {"--dir", dir_.string()};
    if (!only.empty()) args.insert(args.end(), {"--only", only});
    return Call(RunGoldenVerify, args);
  }

  fs::path dir_;
};

TEST(GoldenSet, CommittedSetVerifies) {
  const Outcome out = Call(RunGoldenVerify, {"--dir", kGolden.string()});
  EXPECT_EQ(out.exit_code, kExitOk) << out.err;
}

TEST(GoldenSet, RegistryCoversEveryActivationMaskPairWithUniqueFolders) {
  std::set<std::string> names;
  for (const GoldenProducer& p : GoldenProducers()) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate " << p.name;
    EXPECT_TRUE(golden::IsGoldenKind(p.kind)) << p.name;
  }
  // No producer's folder holds another's.
  for (const std::string& a : names) {
    for (const std::string& b : names) {
      if (a != b) {
        EXPECT_NE(b.rfind(a + "/", 0), 0u) << a << " contains " << b;
      }
    }
  }
  for (const char* act : {"softmax", "identity", "gelu", "gelu_tanh", "silu", "relu", "relu_square", "leaky_relu", "hardswish"}) {
    for (const char* mask : {"none", "causal", "window", "block"}) {
      EXPECT_TRUE(names.count(std::string("attention/") + act + "_" + mask)) << act << " " << mask;
    }
  }
}

struct UlpCase {
  const char* path;
  const char* producer;
  int64_t index;
  const char* dtype;
};

class OneUlp : public GoldenCopy, public ::testing::WithParamInterface<UlpCase> {};

// The manifest is made to agree with the edited file, so the failure comes from recomputing.
TEST_P(OneUlp, RecomputationCatchesAOneUlpChangeAndNamesFileAndElement) {
  const UlpCase& c = GetParam();
  Bring(c.producer);
  ASSERT_EQ(std::string(io::NpyDescr(io::ReadNpy((dir_ / c.path).string())->dtype)), c.dtype);
  MoveOneUlp(c.path, c.index);
  RehashInManifest(c.path);
  const Outcome out = Verify(c.producer);
  EXPECT_EQ(out.exit_code, kExitCheckFailed) << out.err;
  EXPECT_THAT(out.err, HasSubstr((dir_ / c.path).string()));
  EXPECT_THAT(out.err, HasSubstr("first differing element " + std::to_string(c.index)));
  EXPECT_THAT(out.err, HasSubstr("1 of "));  // exactly one element differs
}

// Left as is, the manifest's SHA-256 catches the change too.
TEST_P(OneUlp, ManifestChecksumCatchesAOneUlpChange) {
  const UlpCase& c = GetParam();
  Bring(c.producer);
  MoveOneUlp(c.path, c.index);
  const Outcome out = Verify(c.producer);
  EXPECT_EQ(out.exit_code, kExitCheckFailed) << out.err;
  EXPECT_THAT(out.err, HasSubstr((dir_ / c.path).string() + ": SHA-256"));
}

INSTANTIATE_TEST_SUITE_P(
    EveryStoredDtype, OneUlp,
    ::testing::Values(UlpCase{"attention/softmax_causal/o.npy", "attention/softmax_causal", 9, "<f8"},
                      UlpCase{"attention/silu_window/dk.npy", "attention/silu_window", 17, "<f8"},
                      UlpCase{"attention/softmax_none/q.npy", "attention/softmax_none", 3, "<f8"},  // an input
                      UlpCase{"attention/emulate_fp32_softmax_none/o.npy", "attention/emulate_fp32_softmax_none", 5, "<f4"},
                      UlpCase{"embedding/pooling_fp32/out/pooled.npy", "embedding/pooling_fp32", 4, "<f4"},
                      UlpCase{"attention/emulate_bf16_softmax_causal/dq.npy", "attention/emulate_bf16_softmax_causal", 11, "<u2"},
                      UlpCase{"embedding/step_bf16_sr/out/table_adam.npy", "embedding/step_bf16_sr", 6, "<u2"},
                      UlpCase{"attention/emulate_fp16_gelu_tanh_causal/o.npy", "attention/emulate_fp16_gelu_tanh_causal", 2, "<f2"},
                      UlpCase{"quantize/e4m3_mx32_rceil/codes.npy", "quantize/e4m3_mx32_rceil", 40, "|u1"},
                      UlpCase{"embedding/hashing/ids.npy", "embedding/hashing", 1, "<i8"},
                      UlpCase{"training/tiny_3_steps/params.npy", "training/tiny_3_steps", 100000, "<f4"},
                      UlpCase{"training/tiny_3_steps/losses.npy", "training/tiny_3_steps", 2, "<f8"}),
    [](const ::testing::TestParamInfo<UlpCase>& param_info) {
      std::string name = param_info.param.path;
      for (char& ch : name) {
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST_F(GoldenCopy, EditedCaseJsonIsNamed) {
  Bring("attention/relu_block");
  const fs::path p = dir_ / "attention/relu_block/case.json";
  std::string text = ReadText(p);
  const size_t at = text.find("\"block\": 4");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 10, "\"block\": 5");
  WriteText(p, text);
  RehashInManifest("attention/relu_block/case.json");
  const Outcome out = Verify("attention/relu_block");
  EXPECT_EQ(out.exit_code, kExitCheckFailed);
  EXPECT_THAT(out.err, HasSubstr("relu_block/case.json: first difference on line"));
}

TEST_F(GoldenCopy, MissingFileFailsNamingIt) {
  Bring("quantize");
  fs::remove(dir_ / "quantize/bf16_sr/values.npy");
  const Outcome out = Verify("quantize/");
  EXPECT_EQ(out.exit_code, kExitCheckFailed);
  EXPECT_THAT(out.err, HasSubstr("quantize/bf16_sr/values.npy: missing"));
}

TEST_F(GoldenCopy, ChangedParametersInTheManifestFail) {
  Bring("attention/opt_scales");
  nlohmann::json m = nlohmann::json::parse(ReadText(dir_ / "manifest.json"));
  for (auto& p : m["producers"]) {
    if (p["name"] == "attention/opt_scales") p["params"]["pre_scale"] = 0.75;
  }
  WriteText(dir_ / "manifest.json", m.dump(1));
  const Outcome out = Verify("attention/opt_scales");
  EXPECT_EQ(out.exit_code, kExitCheckFailed);
  EXPECT_THAT(out.err, HasSubstr("attention/opt_scales': kind/params in the manifest differ"));
}

// Each edit turns manifest.json into something verify must refuse as bad input.
TEST_F(GoldenCopy, MalformedManifestExitsTwo) {
  const std::string good = ReadText(dir_ / "manifest.json");
  const nlohmann::json m = nlohmann::json::parse(good);
  auto edited = [&](auto edit) {
    nlohmann::json copy = m;
    edit(copy);
    return copy.dump(1);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {good.substr(0, good.size() / 2), "not valid JSON"},
      {"[]", "must be an object"},
      {edited([](nlohmann::json& j) { j["format"] = "something-else"; }), "format"},
      {edited([](nlohmann::json& j) { j.erase("producers"); }), "producers"},
      {edited([](nlohmann::json& j) { j["producers"][0]["kind"] = "nonsense"; }), "producers[0].kind"},
      {edited([](nlohmann::json& j) { j["producers"][0]["files"][0]["path"] = "../../etc/passwd"; }), "producers[0].files[0].path"},
      {edited([](nlohmann::json& j) { j["producers"][1]["files"][2]["sha256"] = "xyz"; }), "producers[1].files[2].sha256"},
      {edited([](nlohmann::json& j) { j["producers"][2]["files"][0]["bytes"] = -1; }), "producers[2].files[0].bytes"},
      {edited([](nlohmann::json& j) { j["producers"][3]["files"][1]["shape"] = "x"; }), "producers[3].files[1].shape"},
      {edited([](nlohmann::json& j) { j["producers"][1]["name"] = j["producers"][0]["name"]; }), "appears twice"},
  };
  for (const auto& [text, expected] : cases) {
    WriteText(dir_ / "manifest.json", text);
    const Outcome out = Verify();
    EXPECT_EQ(out.exit_code, kExitBadInput) << expected << ": " << out.err;
    EXPECT_THAT(out.err, HasSubstr("manifest.json"));
    EXPECT_THAT(out.err, HasSubstr(expected));
  }
  fs::remove(dir_ / "manifest.json");
  EXPECT_EQ(Verify().exit_code, kExitBadInput);
}

TEST(GoldenSet, OnlyThatSelectsNothingIsBadInput) {
  EXPECT_EQ(Call(RunGoldenVerify, {"--dir", kGolden.string(), "--only", "atention/"}).exit_code, kExitBadInput);
  EXPECT_EQ(Call(RunGoldenRegen, {"--dir", kGolden.string(), "--only", "atention/", "--force"}).exit_code, kExitBadInput);
}

TEST_F(GoldenCopy, RegenRefusesWithoutForceAndWritesNothing) {
  Bring("quantize");
  fs::remove(dir_ / "quantize/e5m2_rne/codes.npy");
  const std::string manifest = ReadText(dir_ / "manifest.json");
  const Outcome out = Call(RunGoldenRegen, {"--dir", dir_.string(), "--only", "quantize/e5m2_rne"});
  EXPECT_EQ(out.exit_code, kExitBadInput);
  EXPECT_THAT(out.err, HasSubstr("--force"));
  EXPECT_FALSE(fs::exists(dir_ / "quantize/e5m2_rne/codes.npy"));
  EXPECT_EQ(ReadText(dir_ / "manifest.json"), manifest);
}

TEST_F(GoldenCopy, RegenOnlyRestoresTheSelectedProducersAndKeepsTheRest) {
  Bring("quantize");
  MoveOneUlp("quantize/e5m2_rne/values.npy", 3);
  fs::remove(dir_ / "quantize/e5m2_rne/codes.npy");
  const std::string committed = ReadText(kGolden / "quantize/e5m2_rne/values.npy");
  const Outcome out = Call(RunGoldenRegen, {"--dir", dir_.string(), "--only", "quantize/e5m2", "--force"});
  ASSERT_EQ(out.exit_code, kExitOk) << out.err;
  EXPECT_EQ(ReadText(dir_ / "quantize/e5m2_rne/values.npy"), committed);
  EXPECT_TRUE(fs::exists(dir_ / "quantize/e5m2_rne/codes.npy"));
  const Outcome verify = Verify("quantize/");
  EXPECT_EQ(verify.exit_code, kExitOk) << verify.err;
}

}  // namespace
}  // namespace gemtb::cli
