// gemtb bench comm: the NCCL collective benchmark (gpu/comm) on every visible GPU of this host:
// time, algbw and busbw per op and size in nccl-tests' convention, the same for the copy-engine
// all-gather (--copy-engine), the GEMM slowdown beside an SM-based and beside a copy-engine copy
// (kappa, --gemm; works on one GPU), and the NCCL version;
// --json writes the record that `gemtb whatif calibrate` reads. NCCL_ALGO / NCCL_PROTO in the
// environment pin the algorithm. --fit RECORD --out CAL writes the record's kappas into a calibration
// (sim/network/kappa_fit.h); it needs no GPU.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "sim/network/byte_size.h"
#include "sim/network/cluster_json.h"
#include "sim/network/kappa_fit.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#if defined(GEMTB_HAVE_NCCL_COMM)
#include "gpu/comm/comm_bench.h"
#endif

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "bench comm";

// --fit: the record's kappas into a calibration (the compiled-in one unless --base).
absl::Status Fit(const std::string& record_path, const std::string& base_path, const std::string& out_path) {
  if (out_path.empty()) return absl::InvalidArgumentError("--out: missing (the calibration file to write)");
  auto read = [](const std::string& flag, const std::string& path) -> absl::StatusOr<nlohmann::json> {
    absl::StatusOr<std::string> text = sim::ReadFileFromDisk(path);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", text.status().message()));
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not valid JSON"));
    return j;
  };
  absl::StatusOr<nlohmann::json> record = read("--fit", record_path);
  if (!record.ok()) return record.status();
  absl::StatusOr<sim::KappaFit> fit = sim::FitKappa(*record);
  if (!fit.ok()) return absl::InvalidArgumentError(absl::StrCat("--fit ", record_path, ": ", fit.status().message()));
  nlohmann::json base = nlohmann::json::parse(sim::DefaultCalibrationJsonText(), nullptr, false);
  if (!base_path.empty()) {
    absl::StatusOr<nlohmann::json> b = read("--base", base_path);
    if (!b.ok()) return b.status();
    base = *b;
  }
  const std::string source = std::filesystem::path(record_path).filename().string();
  const nlohmann::json out = sim::ApplyKappaFit(base, *fit, source);
  absl::StatusOr<sim::Calibration> back = sim::ParseCalibration(out, "calibration", ".");
  if (!back.ok()) return absl::InvalidArgumentError(absl::StrCat("--base: ", back.status().message()));
  std::printf("GEMM %d^3 bf16 on %d x %s: alone %.4f ms\n", fit->dim, fit->gpus, fit->device.c_str(), fit->alone_ms);
  std::printf("  beside %s: %.4f ms, kappa %.4f%s\n", fit->sm_based.how.c_str(), fit->sm_based.ms, fit->sm_based.kappa,
              fit->gpus >= 2 ? " -> kappa" : " (recorded, not applied)");
  std::printf("  beside %s: %.4f ms, kappa %.4f -> kappa_copy_engine\n", fit->copy_engine.how.c_str(),
              fit->copy_engine.ms, fit->copy_engine.kappa);
  return WriteTextAtomically(out_path, out.dump(1) + "\n");
}

absl::Status Run(const std::vector<std::string>& args) {
  std::string ops = "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast";
  std::string min_text = "1K", max_text = "1G", dtype = "bf16", json_path, label, fit_path, base_path, out_path;
  std::string gemm_bytes_text = "256M";
  int64_t factor = 2, warmup = 5, iters = 20, gpus = 0, gemm_dim = 8192;
  bool gemm = false, copy_engine = false;
  FlagSet flags("gemtb bench comm [--ops LIST] [--min-bytes 1K] [--max-bytes 1G] [--dtype bf16|fp32] [--json F]",
                "Times NCCL collectives on every visible GPU of this host (one process, ncclCommInitAll,\n"
                "one stream per GPU, group calls): sizes min..max x factor in nccl-tests' convention (S =\n"
                "buffer for all_reduce/broadcast, full gathered size for all_gather/reduce_scatter, bytes\n"
                "one rank sends for all_to_all). Prints time (median of --iters, slowest GPU), algbw and\n"
                "busbw. NVLink SHARP is switched off (NCCL_NVLS_ENABLE=0); NCCL_ALGO/NCCL_PROTO from the\n"
                "environment pin the algorithm and are recorded. --copy-engine (2 GPUs or more) also sweeps\n"
                "the SM-free all-gather: copy engines moving each GPU's slot to every peer, no kernel.\n"
                "--gemm adds the interference probe: a bf16 GEMM alone, beside an SM-based copy (NCCL\n"
                "all-gather; cuBLAS's copy kernel on one GPU) and beside a copy-engine copy (the copy-engine\n"
                "all-gather; device-to-device on one GPU) of --gemm-bytes.\n"
                "--fit RECORD.json --out CAL.json [--base CAL.json]: writes the record's kappas into a\n"
                "calibration (no GPU needed).");
  flags.String("ops", &ops, "comma-separated ops (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast)");
  flags.String("min-bytes", &min_text, "smallest S (suffixes K, M, G: powers of 2)");
  flags.String("max-bytes", &max_text, "largest S");
  flags.Int64("factor", &factor, "size step factor (default 2)");
  flags.String("dtype", &dtype, "bf16 (default) or fp32");
  flags.Int64("warmup", &warmup, "warm-up calls per size (default 5)");
  flags.Int64("iters", &iters, "timed calls per size (default 20)");
  flags.Int64("gpus", &gpus, "GPUs to use (default 0: all visible)");
  flags.Bool("copy-engine", &copy_engine, "also time the copy-engine all-gather over the same sizes (2+ GPUs)");
  flags.Bool("gemm", &gemm, "also measure a bf16 GEMM alone, beside an SM-based and beside a copy-engine copy (kappa)");
  flags.Int64("gemm-dim", &gemm_dim, "GEMM M = N = K (default 8192)");
  flags.String("gemm-bytes", &gemm_bytes_text, "bytes per background copy call (default 256M)");
  flags.String("fit", &fit_path, "fit kappas from this --gemm record instead of benchmarking");
  flags.String("base", &base_path, "with --fit: the calibration to update (default: the compiled-in one)");
  flags.String("out", &out_path, "with --fit: the calibration file to write");
  flags.String("json", &json_path, "write the results as JSON here");
  flags.String("label", &label, "free text stored in the JSON (e.g. the run's purpose)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  if (!fit_path.empty()) return Fit(fit_path, base_path, out_path);
  absl::StatusOr<int64_t> gemm_bytes = sim::ParseByteSize("--gemm-bytes", gemm_bytes_text);
  if (!gemm_bytes.ok()) return gemm_bytes.status();
  if (*gemm_bytes < 1) return absl::InvalidArgumentError("--gemm-bytes: must be >= 1");
  absl::StatusOr<int64_t> min_bytes = sim::ParseByteSize("--min-bytes", min_text);
  if (!min_bytes.ok()) return min_bytes.status();
  absl::StatusOr<int64_t> max_bytes = sim::ParseByteSize("--max-bytes", max_text);
  if (!max_bytes.ok()) return max_bytes.status();
  std::vector<std::string> op_list = absl::StrSplit(ops, ',', absl::SkipEmpty());
  for (const std::string& op : op_list) {
    if (op != "all_reduce" && op != "all_gather" && op != "reduce_scatter" && op != "all_to_all" && op != "broadcast") {
      return absl::InvalidArgumentError(absl::StrCat("--ops: \"", op, "\" is not a collective op"));
    }
  }
#if !defined(GEMTB_HAVE_NCCL_COMM)
  (void)gemm;
  (void)gemm_dim;
  (void)copy_engine;
  return absl::FailedPreconditionError(
      "this gemtb was built without CUDA/NCCL (nvcc or nccl.h not found at configure time): no benchmark");
#else
  gpu::comm::CommBenchOptions o;
  o.ops = op_list;
  o.min_bytes = *min_bytes;
  o.max_bytes = *max_bytes;
  o.factor = factor;
  const std::optional<Dtype> parsed_dtype = ParseDtype(dtype);
  if (!parsed_dtype) return absl::InvalidArgumentError(absl::StrCat("--dtype: \"", dtype, "\" is not one of bf16, fp32"));
  o.dtype = *parsed_dtype;
  o.warmup = static_cast<int>(warmup);
  o.iters = static_cast<int>(iters);
  o.gpus = static_cast<int>(gpus);
  o.copy_engine = copy_engine;
  o.gemm = gemm;
  o.gemm_dim = static_cast<int>(gemm_dim);
  o.gemm_copy_bytes = *gemm_bytes;
  absl::StatusOr<gpu::comm::CommBenchResult> r = gpu::comm::RunCommBench(o);
  if (!r.ok()) return r.status();
  std::printf("# gemtb bench comm: %d x %s, NCCL %s, dtype %s, NCCL_ALGO=%s NCCL_PROTO=%s NCCL_NVLS_ENABLE=%s\n",
              r->gpus, r->device.c_str(), r->nccl_version.c_str(), r->dtype.c_str(),
              r->nccl_algo_env.empty() ? "(auto)" : r->nccl_algo_env.c_str(),
              r->nccl_proto_env.empty() ? "(auto)" : r->nccl_proto_env.c_str(), r->nvls_enable_env.c_str());
  std::printf("%-15s %12s %12s %10s %10s\n", "op", "size(B)", "time(us)", "algbw", "busbw");
  auto table = [](const std::vector<gpu::comm::CommMeasurement>& ms, const char* suffix) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& m : ms) {
      std::printf("%-15s %12lld %12.2f %10.2f %10.2f\n", (m.op + suffix).c_str(), static_cast<long long>(m.bytes),
                  m.time_us, m.algbw_GBps, m.busbw_GBps);
      rows.push_back({{"op", m.op}, {"bytes", m.bytes}, {"count", m.count}, {"time_us", m.time_us},
                      {"time_us_min", m.time_us_min}, {"time_us_max", m.time_us_max}, {"algbw_GBps", m.algbw_GBps},
                      {"busbw_GBps", m.busbw_GBps}, {"iters", m.iters}});
    }
    return rows;
  };
  const nlohmann::json rows = table(r->results, "");
  const nlohmann::json ce_rows = table(r->copy_engine_results, "(ce)");
  nlohmann::json out = {{"tool", "gemtb bench comm"},
                        {"label", label},
                        {"nccl_version", r->nccl_version},
                        {"nccl_version_code", r->nccl_version_code},
                        {"device", r->device},
                        {"gpus", r->gpus},
                        {"sm_count", r->sm_count},
                        {"dtype", r->dtype},
                        {"nccl_algo", r->nccl_algo_env.empty() ? "auto" : r->nccl_algo_env},
                        {"nccl_proto", r->nccl_proto_env.empty() ? "auto" : r->nccl_proto_env},
                        {"nccl_nvls_enable", r->nvls_enable_env},
                        {"warmup", r->warmup},
                        {"iters", r->iters},
                        {"timing", "CUDA events around each call on every GPU; time = slowest GPU; median over iters"},
                        {"results", rows}};
  // Apart from "results", which `gemtb whatif calibrate` fits as NCCL's.
  if (copy_engine) out["copy_engine_results"] = ce_rows;
  if (r->has_gemm) {
    const auto& g = r->gemm;
    std::printf("gemm %d^3 bf16: alone %.3f ms; copies of %lld B\n", g.dim, g.alone_ms,
                static_cast<long long>(g.copy_bytes));
    auto beside = [](const gpu::comm::GemmBeside& b) {
      std::printf("gemm beside %s: %.3f ms, slowdown %.4f (kappa %.4f)\n", b.how.c_str(), b.ms, b.slowdown, b.kappa);
      return nlohmann::json{{"how", b.how}, {"ms", b.ms}, {"slowdown", b.slowdown}, {"kappa", b.kappa}};
    };
    out["gemm"] = {{"dim", g.dim}, {"gemms", g.gemms}, {"copy_bytes", g.copy_bytes}, {"alone_ms", g.alone_ms},
                   {"sm_based", beside(g.sm_based)}, {"copy_engine", beside(g.copy_engine)}};
    // `gemtb whatif calibrate` takes gemm.kappa as the SM-based collective's: only an all-gather's.
    if (r->gpus >= 2) out["gemm"]["kappa"] = g.sm_based.kappa;
  }
  if (!json_path.empty()) GEMTB_RETURN_IF_ERROR(WriteTextAtomically(json_path, out.dump(1) + "\n"));
  return absl::OkStatus();
#endif
}

}  // namespace

int RunBenchComm(const std::vector<std::string>& args) {
  if (absl::Status s = Run(args); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
