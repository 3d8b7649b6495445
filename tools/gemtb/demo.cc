// gemtb demo: a short tour of the oracle, the main job until the simulator lands. It draws a jagged
// bf16 batch with the benchmark length rule, runs the fp64 oracle and the kernel-emulating mode
// forward and backward, shows the naive same-precision error a bf16 kernel is allowed to make, checks
// that 1 thread and all threads give the same bytes, and writes a case folder that
// `gemtb ref attention --case` and `gemtb ref compare --case` accept.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/attention/benchmark_lengths.h"
#include "model/common/status_macros.h"
#include "model/numerics/float_formats.h"
#include "model/random/normal.h"
#include "nlohmann/json.hpp"
#include "reference/attention/attention.h"
#include "tools/check/criteria.h"
#include "reference/io/attention_case.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "demo";

std::vector<double> RandomBf16(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<double> x(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) x[e] = numerics::RoundDoubleToBf16(PhiloxNormal(seed, stream, e));
  return x;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

using DemoFile = std::variant<io::NpyArray, std::string>;  // an array, or text

// The demo's folders (case/, emulate/) are its own: a rerun replaces each as a whole.
absl::Status WriteDemoFolder(const std::string& out_dir, const std::string& dir,
                             const std::vector<std::pair<std::string, DemoFile>>& files) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--out-dir=", out_dir, ": ", ec.message()));
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", dir, {.force = true, .fail_write_at = {}});
  if (!output.ok()) return output.status();
  for (const auto& [name, file] : files) {
    if (const auto* array = std::get_if<io::NpyArray>(&file)) output->AddNpy(name, *array);
    if (const auto* text = std::get_if<std::string>(&file)) output->AddText(name, *text);
  }
  return output->Commit();
}

absl::Status Run(const std::vector<std::string>& args, bool* help) {
  int64_t batch = 16, max_len = 256, heads = 4, kv_heads = 2, dim = 64, seed = 1;
  std::string act = "softmax", mask = "causal", out_dir = "gemtb-demo";
  FlagSet flags("gemtb demo [--batch B --max-len M --act NAME --mask KIND --out-dir D]",
                "A tour of the attention oracle on a random jagged bf16 batch (lengths by the\n"
                "benchmark rule, sparsity 0.5): fp64 oracle vs kernel-emulating mode, forward and\n"
                "backward, thread-count determinism, and a case folder for `gemtb ref compare`.");
  flags.Int64("batch", &batch, "sequences (default 16)");
  flags.Int64("max-len", &max_len, "max sequence length (default 256)");
  flags.Int64("heads", &heads, "query heads (default 4)");
  flags.Int64("kv-heads", &kv_heads, "key/value heads, GQA (default 2)");
  flags.Int64("dim", &dim, "head dim (default 64)");
  flags.String("act", &act, "activation (default softmax)");
  flags.String("mask", &mask, "none|causal|window|block (default causal)");
  flags.Int64("seed", &seed, "Philox seed of lengths and values (default 1)");
  flags.String("out-dir", &out_dir, "where the case folder and outputs go (default gemtb-demo)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  for (const auto& [name, value, lo, hi] : {std::tuple{"--batch", batch, 1, 4096}, {"--max-len", max_len, 1, 65536},
                                            {"--heads", heads, 1, 64}, {"--kv-heads", kv_heads, 1, 64},
                                            {"--dim", dim, 1, 512}, {"--seed", seed, 0, 1 << 30}}) {
    if (value < lo || value > hi) {
      return absl::InvalidArgumentError(absl::StrCat(name, "=", value, ": want ", lo, "..", hi));
    }
  }
  const std::vector<int64_t> lengths = BenchmarkLengths(batch, max_len, 0.5, static_cast<uint64_t>(seed), 0);
  const std::vector<int64_t> offsets = OffsetsFromLengths(lengths);
  const int64_t rows = offsets.back();

  // Write the case folder first: the demo runs the oracle through the same loader users do.
  const std::filesystem::path dir(out_dir);
  const std::string case_dir = (dir / "case").string();
  const uint64_t s = static_cast<uint64_t>(seed);
  std::vector<std::pair<std::string, DemoFile>> inputs = {
      {"q.npy", io::EncodeFloat(RandomBf16(rows * heads * dim, s, 1), {rows, heads, dim}, io::NpyDType::kBFloat16)},
      {"k.npy", io::EncodeFloat(RandomBf16(rows * kv_heads * dim, s, 2), {rows, kv_heads, dim}, io::NpyDType::kBFloat16)},
      {"v.npy", io::EncodeFloat(RandomBf16(rows * kv_heads * dim, s, 3), {rows, kv_heads, dim}, io::NpyDType::kBFloat16)},
      {"do.npy", io::EncodeFloat(RandomBf16(rows * heads * dim, s, 4), {rows, heads, dim}, io::NpyDType::kBFloat16)},
      {"offsets.npy", io::EncodeInt64(offsets, {static_cast<int64_t>(offsets.size())})}};
  nlohmann::json case_json = {{"q", "q.npy"}, {"k", "k.npy"}, {"v", "v.npy"}, {"do", "do.npy"},
                              {"q-offsets", "offsets.npy"}, {"kv-offsets", "offsets.npy"},
                              {"max-lq", max_len}, {"max-lk", max_len}, {"act", act}, {"mask", mask}};
  if (ParseMaskKind(mask) == MaskKind::kWindow) {
    case_json["window-left"] = max_len / 4;
    case_json["window-right"] = 0;
  }
  inputs.emplace_back("case.json", case_json.dump(2) + "\n");
  GEMTB_RETURN_IF_ERROR(WriteDemoFolder(out_dir, case_dir, inputs));
  absl::StatusOr<io::AttentionCaseSpec> spec = io::ReadCaseFolder(case_dir);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<io::AttentionCase> c = io::LoadAttentionCase(*spec);
  if (!c.ok()) return c.status();
  absl::StatusOr<double> flops = reference::AttentionForwardFlops(c->inputs, c->options);
  if (!flops.ok()) return flops.status();

  std::cout << absl::StrFormat(
      "gemtb demo: %d sequences (lengths %d..%d, %d tokens), H=%d Hkv=%d D=%d, bf16, act=%s mask=%s\n",
      batch, *std::min_element(lengths.begin(), lengths.end()), *std::max_element(lengths.begin(), lengths.end()),
      rows, heads, kv_heads, dim, act, mask);
  std::cout << absl::StrFormat("  forward: %.3g effective FLOPs over valid pairs\n", *flops);

  struct Run {
    reference::AttentionForwardResult fwd;
    reference::AttentionBackwardResult bwd;
  };
  auto run = [&](reference::Precision precision, int threads, const char* label) -> absl::StatusOr<Run> {
    const reference::ExecutionOptions exec{precision, threads};
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<reference::AttentionForwardResult> fwd = reference::AttentionForward(c->inputs, c->options, exec);
    if (!fwd.ok()) return fwd.status();
    const double t_fwd = Seconds(t0);
    const auto t1 = std::chrono::steady_clock::now();
    absl::StatusOr<reference::AttentionBackwardResult> bwd = reference::AttentionBackward(
        c->inputs, c->options, reference::TensorView<double>{c->d_o, c->d_o_shape}, *fwd, exec);
    if (!bwd.ok()) return bwd.status();
    if (label != nullptr) {
      std::cout << absl::StrFormat("  %-30s forward %.3f s, backward %.3f s\n", label, t_fwd, Seconds(t1));
    }
    return Run{*std::move(fwd), *std::move(bwd)};
  };
  absl::StatusOr<Run> oracle = run(reference::Precision::kOracle, 0, "oracle (fp64), all threads:");
  if (!oracle.ok()) return oracle.status();
  absl::StatusOr<Run> emulate = run(reference::Precision::kEmulate, 0, "emulate (bf16 kernel casts):");
  if (!emulate.ok()) return emulate.status();
  absl::StatusOr<Run> single = run(reference::Precision::kOracle, 1, "oracle (fp64), 1 thread:");
  if (!single.ok()) return single.status();

  std::cout << "  naive bf16 error (emulate vs oracle): what a kernel's tolerance is built from\n";
  const std::vector<std::tuple<const char*, const std::vector<double>*, const std::vector<double>*>> pairs = {
      {"O", &emulate->fwd.o, &oracle->fwd.o}, {"dQ", &emulate->bwd.dq, &oracle->bwd.dq},
      {"dK", &emulate->bwd.dk, &oracle->bwd.dk}, {"dV", &emulate->bwd.dv, &oracle->bwd.dv}};
  for (const auto& [name, emu, ref] : pairs) {
    std::cout << absl::StrFormat("    %-3s rel-L2 %.2e   max|emu-ref| %.2e   max|ref| %.3g\n", name,
                                 check::RelL2(*emu, *ref), check::MaxAbsDiff(*emu, *ref), check::MaxAbs(*ref));
  }
  const bool same = check::BitwiseEqual(single->fwd.o, oracle->fwd.o) &&
                    check::BitwiseEqual(single->fwd.lse, oracle->fwd.lse) &&
                    check::BitwiseEqual(single->bwd.dq, oracle->bwd.dq) &&
                    check::BitwiseEqual(single->bwd.dk, oracle->bwd.dk) &&
                    check::BitwiseEqual(single->bwd.dv, oracle->bwd.dv);
  std::cout << "  1 thread vs all threads: " << (same ? "identical bytes" : "DIFFERENT BYTES") << "\n";
  if (!same) return absl::InternalError("oracle output depends on the thread count");

  // The emulate-mode outputs, as a kernel would write them, next to the case.
  const std::string emu_dir = (dir / "emulate").string();
  std::vector<std::pair<std::string, DemoFile>> outputs = {
      {"o.npy", io::EncodeFloat(emulate->fwd.o, emulate->fwd.o_shape, io::NpyDType::kBFloat16)},
      {"dq.npy", io::EncodeFloat(emulate->bwd.dq, emulate->bwd.dq_shape, io::NpyDType::kBFloat16)},
      {"dk.npy", io::EncodeFloat(emulate->bwd.dk, emulate->bwd.dk_shape, io::NpyDType::kBFloat16)},
      {"dv.npy", io::EncodeFloat(emulate->bwd.dv, emulate->bwd.dv_shape, io::NpyDType::kBFloat16)}};
  if (!emulate->fwd.lse.empty()) {
    outputs.push_back({"lse.npy", io::EncodeFloat(emulate->fwd.lse, emulate->fwd.lse_shape, io::NpyDType::kFloat32)});
  }
  GEMTB_RETURN_IF_ERROR(WriteDemoFolder(out_dir, emu_dir, outputs));
  std::cout << "  wrote " << case_dir << " (inputs + case.json) and " << emu_dir << " (bf16 outputs)\n"
            << "  next: gemtb ref compare --case " << case_dir << " --test " << emu_dir << "\n";
  return absl::OkStatus();
}

}  // namespace

int RunDemo(const std::vector<std::string>& args) {
  bool help = false;
  if (absl::Status s = Run(args, &help); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
