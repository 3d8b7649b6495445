#include "sim/workload/alltoallv_traffic.h"

#include "absl/strings/str_cat.h"
#include "model/sharding/placement.h"

namespace gemtb::sim {

std::vector<std::pair<std::string, double>> AllToAllvMaxRowFactors(const StepTemplate& tpl,
                                                                   absl::Span<const double> mean_stats) {
  std::vector<std::pair<std::string, double>> factors;
  for (const SiteTraffic& site : tpl.a2a_traffic) {
    std::vector<std::pair<double, const PositionShares*>> tables;
    for (size_t t = 0; t < site.bytes.size(); ++t) {
      tables.emplace_back(std::max(0.0, site.bytes[t].Eval(mean_stats)), &site.shares[t]);
    }
    factors.emplace_back(absl::StrCat("sparse.", CommSiteName(site.site)), MaxOverMeanLoad(tables, site.positions));
  }
  return factors;
}

void ApplyAllToAllvMaxRowEquivalent(StepTemplate& tpl, const std::vector<std::pair<std::string, double>>& factors) {
  for (size_t i = 0; i < tpl.a2a_traffic.size() && i < factors.size(); ++i) {
    const int site = static_cast<int>(tpl.a2a_traffic[i].site);
    for (TaskTemplate& task : tpl.tasks) {
      if (task.collective && task.a2av && task.comm_site == site && task.layout == static_cast<int>(GroupClass::kSparseMp)) {
        task.bytes.Scale(factors[i].second);
      }
    }
  }
}

}  // namespace gemtb::sim
