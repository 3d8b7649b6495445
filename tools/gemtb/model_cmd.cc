// gemtb model: the GEM-like model configs as data. Loads a config,
// expands it into the op graph, prints per-region parameters, FLOPs and saved bytes per sample at a
// sparsity, and optionally writes the graph as model.json.
#include <iostream>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/common/status_macros.h"
#include "model/description/graph_costs.h"
#include "model/description/model_config.h"
#include "model/description/model_graph.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "model";

struct RegionRow {
  std::string region;
  int ops = 0;
  int64_t params = 0;
  model::OpCost cost;
};

std::string Table(const model::ModelGraph& graph, int64_t batch, const std::vector<int64_t>& lengths) {
  std::vector<RegionRow> rows;
  std::map<std::string, size_t> index;  // region -> row, rows kept in first-appearance order
  for (const model::Op& op : graph.ops) {
    auto [it, inserted] = index.emplace(op.region, rows.size());
    if (inserted) {
      rows.emplace_back();
      rows.back().region = op.region;
    }
    RegionRow& row = rows[it->second];
    const model::OpCost c = model::EvaluateOp(graph, op, batch, lengths);
    row.ops += 1;
    row.params += op.params;
    row.cost.flops_fwd += c.flops_fwd;
    row.cost.flops_bwd += c.flops_bwd;
    row.cost.saved_bytes += c.saved_bytes;
  }
  const double b = static_cast<double>(batch);
  std::string out = absl::StrFormat("%-14s %5s %14s %12s %12s %12s\n", "region", "ops", "params",
                                    "fwd FLOP/smp", "bwd FLOP/smp", "saved B/smp");
  for (const RegionRow& r : rows) {
    absl::StrAppendFormat(&out, "%-14s %5d %14d %12.4g %12.4g %12.4g\n", r.region, r.ops, r.params,
                          r.cost.flops_fwd / b, r.cost.flops_bwd / b, r.cost.saved_bytes / b);
  }
  return out;
}

absl::Status Run(const std::vector<std::string>& args, bool* help) {
  std::string config_name, emit;
  int64_t batch = 64;
  std::optional<double> sparsity;
  FlagSet flags(
      "gemtb model --config tiny|small|gem-scale|FILE [--emit model.json] [--batch B] [--sparsity s]",
      "Loads a model config (model/configs/<name>.json or a file), validates it, expands it into the\n"
      "op graph and prints, per region (checkpoint region / FSDP unit), the dense parameters and the\n"
      "forward and backward FLOPs and saved activation bytes per sample for a batch of B samples whose\n"
      "sequences are filled to sparsity s (l_j = round(s * Lmax_j) events, plus n_s CLS tokens), then\n"
      "totals: dense and sparse parameters, model FLOPs (GEMMs and attention, as Local MFU counts\n"
      "them) and all FLOPs. --emit writes the op graph as model.json (docs/model-config.md), atomically.");
  flags.String("config", &config_name, "tiny | small | gem-scale | path to a config JSON");
  flags.String("emit", &emit, "write the op graph to this model.json");
  flags.Int64("batch", &batch, "samples per batch for the per-sample figures (default 64)");
  flags.OptionalDouble("sparsity", &sparsity, "mean sequence fill l/Lmax in [0, 1] (default 0.5)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  if (config_name.empty()) return absl::InvalidArgumentError("--config: required");
  if (batch < 1 || batch > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("--batch=", batch, ": must be in [1, 2^40]"));
  }
  const double s = sparsity.value_or(0.5);
  if (!(s >= 0.0 && s <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--sparsity=", s, ": must be in [0, 1]"));
  }
  absl::StatusOr<model::ModelConfig> config = model::LoadModelConfig(config_name);
  if (!config.ok()) return config.status();
  absl::StatusOr<model::ModelGraph> graph = model::ExpandModel(*config);
  if (!graph.ok()) return graph.status();

  const std::vector<int64_t> lengths = model::LengthsAtSparsity(*graph, s);
  const model::GraphTotals totals = model::EvaluateGraph(*graph, batch, lengths);
  const double b = static_cast<double>(batch);
  int64_t tokens = 0;
  for (size_t j = 0; j < lengths.size(); ++j) tokens += lengths[j] + graph->sequences[j].n_s;

  std::string report = absl::StrCat("model ", graph->config, ": ", graph->ops.size(), " ops, batch ",
                                    batch, ", sparsity ", s, ", tokens/sample ", tokens, "\n");
  report += Table(*graph, batch, lengths);
  absl::StrAppendFormat(&report, "dense params       %d (%.4g)\n", totals.dense_params,
                        static_cast<double>(totals.dense_params));
  absl::StrAppendFormat(&report, "sparse params      %d (%.4g)\n", totals.sparse_params,
                        static_cast<double>(totals.sparse_params));
  absl::StrAppendFormat(&report, "model FLOP/sample  fwd %.4g  bwd %.4g  (GEMMs, attention)\n",
                        totals.model.flops_fwd / b, totals.model.flops_bwd / b);
  absl::StrAppendFormat(&report, "all FLOP/sample    fwd %.4g  bwd %.4g\n", totals.all.flops_fwd / b,
                        totals.all.flops_bwd / b);
  absl::StrAppendFormat(&report, "HBM bytes/sample   fwd %.4g  bwd %.4g\n", totals.all.bytes_fwd / b,
                        totals.all.bytes_bwd / b);
  absl::StrAppendFormat(&report, "saved bytes/sample %.4g\n", totals.all.saved_bytes / b);
  if (!emit.empty()) {
    GEMTB_RETURN_IF_ERROR(WriteTextAtomically(emit, model::ToJsonText(*graph)));
    absl::StrAppend(&report, "wrote ", emit, "\n");
  }
  std::cout << report;
  return absl::OkStatus();
}

}  // namespace

int RunModel(const std::vector<std::string>& args) {
  bool help = false;
  if (absl::Status s = Run(args, &help); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
