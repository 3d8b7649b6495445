// NcclFit <-> FittedLink (see nccl_fit.h).
#include "sim/network/nccl_fit.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gemtb::sim {

namespace {
constexpr char kPrefixText[] = "nccl:";
constexpr std::string_view kPrefix = kPrefixText;
}  // namespace

bool IsNcclFitLink(const FittedLink& link) { return std::string_view(link.algo).substr(0, kPrefix.size()) == kPrefix; }

std::optional<CollAlgo> ParseNcclAlgo(std::string_view name) {
  if (name == "ring") return CollAlgo::kRing;
  if (name == "tree") return CollAlgo::kTree;
  if (name == "nvls") return CollAlgo::kNvls;
  if (name == "pat") return CollAlgo::kPat;
  return std::nullopt;
}

std::optional<CollProto> ParseNcclProto(std::string_view name) {
  if (name == "LL") return CollProto::kLL;
  if (name == "LL128") return CollProto::kLL128;
  if (name == "Simple") return CollProto::kSimple;
  return std::nullopt;
}

FittedLink ToFittedLink(const NcclFit& fit) {
  FittedLink link;
  link.op = fit.op;
  link.tier = fit.tier;
  link.algo = absl::StrCat(kPrefixText, fit.pinned, ":", std::string(CollAlgoName(fit.algo)), "/",
                           std::string(CollProtoName(fit.proto)));
  link.gpus = fit.gpus;
  link.min_bytes = fit.min_bytes;
  link.max_bytes = fit.max_bytes;
  link.alpha_s = fit.launch_s;
  link.busbw_Bps = fit.eta;
  return link;
}

absl::StatusOr<NcclFit> FromFittedLink(const FittedLink& link, std::string_view path) {
  const std::string where(path);
  const std::string_view algo(link.algo);
  if (algo.substr(0, kPrefix.size()) != kPrefix) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".algo: \"", link.algo, "\" is not nccl:<pinned>:<algo>/<proto>"));
  }
  const std::string_view rest = algo.substr(kPrefix.size());
  const size_t colon = rest.find(':');
  const size_t slash = rest.find('/');
  if (colon == std::string_view::npos || slash == std::string_view::npos || slash < colon) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".algo: \"", link.algo, "\" is not nccl:<pinned>:<algo>/<proto>"));
  }
  NcclFit fit;
  fit.op = link.op;
  fit.tier = link.tier;
  fit.pinned = std::string(rest.substr(0, colon));
  if (fit.pinned != "auto" && fit.pinned != "ring" && fit.pinned != "tree" && fit.pinned != "nvls") {
    return absl::InvalidArgumentError(absl::StrCat(where, ".algo: pinned \"", fit.pinned, "\" is not one of auto, ring, tree, nvls"));
  }
  const std::optional<CollAlgo> a = ParseNcclAlgo(rest.substr(colon + 1, slash - colon - 1));
  if (!a) return absl::InvalidArgumentError(absl::StrCat(where, ".nccl_algo: \"", link.algo, "\" names no ring, tree, nvls, pat"));
  const std::optional<CollProto> p = ParseNcclProto(rest.substr(slash + 1));
  if (!p) return absl::InvalidArgumentError(absl::StrCat(where, ".proto: \"", link.algo, "\" names no LL, LL128, Simple"));
  fit.algo = *a;
  fit.proto = *p;
  fit.gpus = link.gpus;
  fit.min_bytes = link.min_bytes;
  fit.max_bytes = link.max_bytes;
  fit.launch_s = link.alpha_s;
  fit.eta = link.busbw_Bps;
  if (!std::isfinite(fit.launch_s)) return absl::InvalidArgumentError(absl::StrCat(where, ".launch_us: must be finite"));
  if (!(fit.eta > 0)) return absl::InvalidArgumentError(absl::StrCat(where, ".eta: ", fit.eta, " must be > 0"));
  return fit;
}

}  // namespace gemtb::sim
