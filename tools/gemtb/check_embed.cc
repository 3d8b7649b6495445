// gemtb check embed: random cases per family (pooling x optimizer x dtype x hashing x bounds) on
// the GPU embedding kernels against the oracle. Everything on this path is exact (integer
// logic and explicitly rounded fp32), so each case passes only with 0 differing bytes in the forward outputs,
// the updated tables and the optimizer state; a last family of malformed KJTs must give the
// oracle's named error. Every case has its own seed, printed with any failure.
#include <oneapi/tbb/parallel_for.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/check/embed_cases.h"
#include "tools/check/embed_compare.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#if GEMTB_HAVE_CUDA
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/api.h"
#include "tools/check/embed_gpu.h"
#endif

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "check embed";
constexpr char kMalformed[] = "malformed_kjt";

struct Tally {
  int64_t cases = 0, pass = 0, fail = 0;
  int64_t forward_bytes = 0, table_bytes = 0, state_bytes = 0, error_mismatches = 0;
};

absl::Status Run(const std::vector<std::string>& args, bool* all_pass) {
  int64_t cases = 20, seed = 1, malformed = -1, max_seconds = 0;
  std::optional<int64_t> case_seed;
  std::string family_text = "all", json_path;
  bool verbose = false;
  FlagSet flags("gemtb check embed --cases N [--seed S] [--family F] [--case-seed X]",
                "Draws N random cases per family (pooling x optimizer x dtype x hashing x bounds: sum, mean,\n"
                "weighted_sum, none x sgd, rowwise_adagrad, adam x fp32, fp16, bf16 x identity, mod,\n"
                "splitmix64 x error, zero, remap0; 324 families), each with 1-3 tables, shared tables,\n"
                "duplicate, invalid and long-bag ids, prior optimizer state and SR on or off; runs the\n"
                "forward and one fused backward step on the GPU and on the oracle and counts differing\n"
                "bytes (outputs, tables, optimizer state): all must be 0. Then --malformed cases of\n"
                "malformed KJTs, whose GPU-side error must equal the oracle's. Prints failures with their\n"
                "replay flags and a table per family; exit 0 only if every case passes (1 otherwise, 2\n"
                "without CUDA or a GPU).");
  flags.Int64("cases", &cases, "cases per family (default 20)");
  flags.Int64("seed", &seed, "run seed (default 1); each case's seed derives from it");
  flags.String("family", &family_text, "all (default) or comma-separated families, e.g. sum/sgd/fp32/identity/error");
  flags.OptionalInt64("case-seed", &case_seed, "replay one case of one --family with this case seed");
  flags.Int64("malformed", &malformed, "malformed-KJT cases (default: --cases; 0 skips)");
  flags.Int64("max-seconds", &max_seconds,
              "stop starting new chunks after this many seconds (0 = no limit); an incomplete run exits 1");
  flags.String("json", &json_path, "also write the counts and failures as JSON to this file");
  flags.Bool("verbose", &verbose, "print every case, not only failures");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  if (cases < 0) return absl::InvalidArgumentError(absl::StrCat("--cases=", cases, ": must be >= 0"));
  if (malformed < 0) malformed = cases;
  absl::StatusOr<std::vector<check::EmbedFamily>> families = check::ParseEmbedFamilies(family_text);
  if (!families.ok()) return families.status();
  if (case_seed && families->size() != 1) return absl::InvalidArgumentError("--case-seed: needs exactly one --family");
#if !GEMTB_HAVE_CUDA
  *all_pass = false;
  return absl::FailedPreconditionError(
      "this gemtb was built without CUDA (nvcc not found at configure time): no GPU kernels to check");
#else
  GEMTB_RETURN_IF_ERROR(gpu::embedding::EmbeddingDeviceAvailable());
  // Every case allocates a few dozen small arrays: from a retained pool, not the driver.
  GEMTB_RETURN_IF_ERROR(gpu::RetainFreedDeviceMemory());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<check::EmbedFamily> all = check::AllEmbedFamilies();
  std::vector<std::string> names;
  std::map<std::string, Tally> tally;
  nlohmann::json failures = nlohmann::json::array();
  auto record = [&](const std::string& name, const check::EmbedCase& c, int64_t cs, const check::EmbedDiff& d,
                    const std::string& replay) {
    Tally& t = tally[name];
    ++t.cases;
    t.forward_bytes += d.forward_bytes;
    t.table_bytes += d.table_bytes;
    t.state_bytes += d.state_bytes;
    t.error_mismatches += d.error_differs ? 1 : 0;
    if (d.Identical()) {
      ++t.pass;
      if (verbose) std::cout << "pass " << c.description << std::endl;
      return;
    }
    ++t.fail;
    std::cout << "FAIL " << c.description << "\n";
    for (const std::string& m : d.messages) std::cout << "    " << m << "\n";
    std::cout << "    replay: " << replay << "\n";
    failures.push_back({{"family", name}, {"case_seed", cs}, {"case", c.description}, {"messages", d.messages},
                        {"replay", replay}});
  };
  // Cases go through in chunks: drawn and run on the oracle in parallel, on the GPU in order. The
  // rounds go over every family before the next chunk, so a time limit leaves the families even.
  constexpr int64_t kChunk = 32;
  struct Job {
    std::string name;
    int64_t total;
    std::function<check::EmbedCase(int64_t)> draw;
    std::function<int64_t(int64_t)> seed_of;
    std::function<std::string(int64_t)> replay_of;
  };
  std::vector<Job> jobs;
  for (const check::EmbedFamily& family : *families) {
    const size_t index = static_cast<size_t>(
        std::find_if(all.begin(), all.end(), [&](const check::EmbedFamily& f) { return f.Name() == family.Name(); }) -
        all.begin());
    jobs.push_back({family.Name(), case_seed ? 1 : cases, [family](int64_t s) { return check::DrawEmbedCase(s, family); },
                    [&, index](int64_t i) { return case_seed ? *case_seed : check::EmbedCaseSeed(seed, index, i); },
                    [family](int64_t s) {
                      return absl::StrCat("gemtb check embed --family ", family.Name(), " --case-seed ", s);
                    }});
  }
  if (!case_seed && malformed > 0) {
    jobs.push_back({kMalformed, malformed, [](int64_t s) { return check::DrawMalformedEmbedCase(s); },
                    [&](int64_t i) { return check::EmbedCaseSeed(seed, all.size(), i); },
                    [](int64_t s) { return absl::StrCat("(malformed KJT, case seed ", s, ")"); }});
  }
  for (const Job& job : jobs) {
    names.push_back(job.name);
    tally[job.name];
  }
  bool stopped = false;
  int64_t most = 0;
  for (const Job& job : jobs) most = std::max(most, job.total);
  for (int64_t c0 = 0; c0 < most && !stopped; c0 += kChunk) {
    for (const Job& job : jobs) {
      if (max_seconds > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > max_seconds) {
        stopped = true;
        break;
      }
      const int64_t n = std::min(kChunk, job.total - c0);
      if (n <= 0) continue;
      std::vector<check::EmbedCase> batch(n);
      std::vector<check::EmbedRun> want(n);
      std::vector<int64_t> seeds(n);
      tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {
        seeds[i] = job.seed_of(c0 + i);
        batch[i] = job.draw(seeds[i]);
        want[i] = check::RunEmbedOracle(batch[i]);
      });
      for (int64_t i = 0; i < n; ++i) {
        record(job.name, batch[i], seeds[i], check::CompareEmbedRuns(want[i], check::RunEmbedGpu(batch[i])),
               job.replay_of(seeds[i]));
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "\n"
            << absl::StrFormat("%-52s %6s %6s %5s  %s\n", "family", "cases", "pass", "fail",
                               "differing bytes: forward tables state | error mismatches");
  Tally sum;
  nlohmann::json per_family = nlohmann::json::object();
  for (const std::string& name : names) {
    const Tally& t = tally[name];
    std::cout << absl::StrFormat("%-52s %6d %6d %5d  %d %d %d | %d\n", name, t.cases, t.pass, t.fail, t.forward_bytes,
                                 t.table_bytes, t.state_bytes, t.error_mismatches);
    per_family[name] = {{"cases", t.cases}, {"pass", t.pass}, {"fail", t.fail},
                        {"differing_bytes", {{"forward", t.forward_bytes}, {"tables", t.table_bytes},
                                             {"state", t.state_bytes}}},
                        {"error_mismatches", t.error_mismatches}};
    sum.cases += t.cases;
    sum.pass += t.pass;
    sum.fail += t.fail;
    sum.forward_bytes += t.forward_bytes;
    sum.table_bytes += t.table_bytes;
    sum.state_bytes += t.state_bytes;
    sum.error_mismatches += t.error_mismatches;
  }
  std::cout << absl::StrFormat("%-52s %6d %6d %5d  %d %d %d | %d   (%.1f s)\n", "total", sum.cases, sum.pass, sum.fail,
                               sum.forward_bytes, sum.table_bytes, sum.state_bytes, sum.error_mismatches, seconds);
  *all_pass = sum.fail == 0 && !stopped;
  if (stopped) {
    std::cout << "STOPPED after --max-seconds=" << max_seconds << ": not every case ran (counts above are what did)\n";
  }
  if (!json_path.empty()) {
    nlohmann::json j = {{"seed", seed},
                        {"cases_per_family", case_seed ? 1 : cases},
                        {"malformed_cases", case_seed ? 0 : malformed},
                        {"families", per_family},
                        {"total", {{"cases", sum.cases}, {"pass", sum.pass}, {"fail", sum.fail},
                                   {"differing_bytes", sum.forward_bytes + sum.table_bytes + sum.state_bytes},
                                   {"error_mismatches", sum.error_mismatches}}},
                        {"failures", failures},
                        {"stopped_at_time_limit", stopped},
                        {"seconds", seconds}};
    GEMTB_RETURN_IF_ERROR(WriteJsonReport(json_path, j));
  }
  return absl::OkStatus();
#endif
}

}  // namespace

int RunCheckEmbed(const std::vector<std::string>& args) {
  bool all_pass = true;
  const absl::Status status = Run(args, &all_pass);
  return CheckCommandExit(kCommand, status, all_pass);
}

}  // namespace gemtb::cli
