// The trainer's inputs checked before any step: rates and Adam constants, the checkpoint path, a
// resume with other options (named, with both values), and a training set on disk read back as the
// same batches the generator makes.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/data/batch.h"
#include "model/data/shape_from_config.h"
#include "model/description/model_config.h"
#include "reference/io/npy.h"
#include "reference/model/checkpoint.h"
#include "reference/model/npy_dataset.h"
#include "reference/model/trainer.h"

namespace gemtb::reference::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

gemtb::model::ModelConfig Tiny() {
  absl::StatusOr<gemtb::model::ModelConfig> c = gemtb::model::LoadModelConfig("tiny");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

absl::Status CreateWith(void (*edit)(TrainOptions&)) {
  TrainOptions o;
  o.batch = 4;
  edit(o);
  return Trainer::Create(Tiny(), o).status();
}

TEST(TrainerOptions, NonFiniteOrOutOfRangeValuesAreRejectedByName) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  struct Case {
    void (*edit)(TrainOptions&);
    const char* field;
  };
  static float bad_value;
  const Case cases[] = {
      {[](TrainOptions& o) { o.lr = bad_value; }, "lr: "},
      {[](TrainOptions& o) { o.table_lr = bad_value; }, "table_lr: "},
  };
  for (float v : {inf, nan, -1.0f}) {
    bad_value = v;
    for (const Case& c : cases) {
      const absl::Status s = CreateWith(c.edit);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field << v;
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.field)) << v;
    }
  }
  EXPECT_THAT(std::string(CreateWith([](TrainOptions& o) { o.eps = 0; }).message()), HasSubstr("eps: 0"));
  EXPECT_THAT(std::string(CreateWith([](TrainOptions& o) { o.beta1 = 1; }).message()), HasSubstr("beta1: 1"));
  EXPECT_THAT(std::string(CreateWith([](TrainOptions& o) { o.total_steps = 0; }).message()),
              HasSubstr("total_steps: 0"));
  EXPECT_TRUE(CreateWith([](TrainOptions& o) { o.lr = 0; }).ok());
}

TEST(TrainerOptions, ResumeNamesTheDifferingOptionAndBothValues) {
  TrainOptions a_options, b_options;
  a_options.batch = b_options.batch = 4;
  b_options.lr = 0.002f;
  absl::StatusOr<std::unique_ptr<Trainer>> a = Trainer::Create(Tiny(), a_options);
  absl::StatusOr<std::unique_ptr<Trainer>> b = Trainer::Create(Tiny(), b_options);
  ASSERT_TRUE(a.ok() && b.ok());
  const absl::Status s = (*b)->LoadStateArrays((*a)->StateArrays());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("lr differs: the checkpoint has 0.001, this run 0.002"));
  b_options = a_options;
  b_options.total_steps = 123;
  b = Trainer::Create(Tiny(), b_options);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(std::string((*b)->LoadStateArrays((*a)->StateArrays()).message()),
              HasSubstr("total_steps differs: the checkpoint has 7000, this run 123"));
}

TEST(CheckpointPath, MissingOrUnusableFolderIsReportedBeforeAnyWrite) {
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("gemtb_ckpath_", ::getpid());
  fs::create_directories(dir);
  EXPECT_TRUE(CheckCheckpointPath((dir / "c.bin").string()).ok());
  const absl::Status missing = CheckCheckpointPath((dir / "no" / "c.bin").string());
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.message()), HasSubstr((dir / "no").string() + " does not exist"));
  EXPECT_THAT(std::string(CheckCheckpointPath(dir.string()).message()), HasSubstr("is a folder"));
  EXPECT_FALSE(fs::exists(dir / "c.bin"));
  fs::remove_all(dir);
}

io::NpyArray Int32(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  io::NpyArray a;
  a.dtype = io::NpyDType::kInt32;
  a.shape = std::move(shape);
  a.data.resize(v.size() * sizeof(int32_t));
  std::memcpy(a.data.data(), v.data(), a.data.size());  // little-endian host (x86-64)
  return a;
}

TEST(NpyDataset, BatchesReadBackAsTheGeneratorMadeThemAndWrapAround) {
  const gemtb::model::ModelConfig config = Tiny();
  absl::StatusOr<data::Generator> gen = data::MakeGenerator("tiny");
  ASSERT_TRUE(gen.ok()) << gen.status();
  constexpr int64_t N = 12;
  const data::Batch all = data::GenerateBatch(*gen, 7, 0, N);
  const int64_t J = static_cast<int64_t>(config.sequences.size()), T = static_cast<int64_t>(config.NumTasks());
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("gemtb_npyset_", ::getpid());
  fs::create_directories(dir);
  auto write = [&](const char* name, const io::NpyArray& a) {
    const std::vector<uint8_t> bytes = io::SerializeNpy(a);
    std::ofstream((dir / name).string(), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                                 static_cast<std::streamsize>(bytes.size()));
  };
  write("lengths.npy", Int32(all.lengths, {static_cast<int64_t>(all.lengths.size())}));
  write("ids.npy", io::EncodeInt64(all.values, {static_cast<int64_t>(all.values.size())}));
  write("seq_lengths.npy", Int32(all.seq_lengths, {J, N}));
  write("dense.npy", io::EncodeFloat(std::vector<double>(all.dense.begin(), all.dense.end()), {N, config.dense.m},
                                     io::NpyDType::kFloat32));
  write("labels.npy", io::EncodeUInt8(all.label, {N, T}));
  write("masks.npy", io::EncodeUInt8(all.mask, {N, T}));
  write("probs.npy", io::EncodeFloat(all.prob, {N, T}, io::NpyDType::kFloat64));
  absl::StatusOr<NpyDataset> set = LoadNpyDataset(dir.string(), data::ShapeFromConfig(config));
  fs::remove_all(dir);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_TRUE(set->has_probs);

  // Samples 4..7 as one batch, and 10, 11, 0, 1 across the end of the set.
  for (const auto& [first, want_first] : {std::pair<int64_t, int64_t>{4, 4}, {N + 10, 10}}) {
    const data::Batch got = DatasetBatch(*set, first, 4);
    std::vector<data::Sample> samples(4);
    for (int64_t b = 0; b < 4; ++b) gen->Generate(7, (want_first + b) % N, &samples[static_cast<size_t>(b)]);
    data::Batch want;
    data::AssembleBatch(gen->shape(), samples.data(), 4, &want);
    EXPECT_EQ(got.keys, want.keys);
    EXPECT_EQ(got.lengths, want.lengths) << first;
    EXPECT_EQ(got.values, want.values) << first;
    EXPECT_EQ(got.seq_lengths, want.seq_lengths) << first;
    EXPECT_EQ(got.dense, want.dense) << first;
    EXPECT_EQ(got.label, want.label) << first;
    EXPECT_EQ(got.mask, want.mask) << first;
    EXPECT_EQ(got.prob, want.prob) << first;
  }
}

}  // namespace
}  // namespace gemtb::reference::model
