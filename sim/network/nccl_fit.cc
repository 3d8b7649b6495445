// The names of mode nccl's fitted segments (see nccl_fit.h).
#include "sim/network/nccl_fit.h"

namespace gemtb::sim {

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

bool ParsePinnedAlgo(std::string_view name, std::optional<CollAlgo>* pinned) {
  if (name == "auto") {
    *pinned = std::nullopt;
    return true;
  }
  const std::optional<CollAlgo> algo = ParseNcclAlgo(name);
  if (!algo || *algo == CollAlgo::kPat) return false;  // calibration files pin ring, tree or nvls only
  *pinned = algo;
  return true;
}

std::string_view PinnedAlgoName(const std::optional<CollAlgo>& pinned) {
  return pinned ? CollAlgoName(*pinned) : std::string_view("auto");
}

}  // namespace gemtb::sim
