#include "sim/workload/step_template.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/sharding/comm_pattern.h"
#include "model/sharding/sharding_plan_json.h"
#include "sim/scenario/op_efficiency.h"

namespace gemtb::sim {
namespace {

using model::Affine;
using model::Op;

// Bytes per element of dense communication: FP8 travels with an E8M0 scale per 32 elements.
double CommBytes(Dtype dtype) {
  const bool fp8 = dtype == Dtype::kFp8E4M3 || dtype == Dtype::kFp8E5M2;
  return fp8 ? DtypeBytes(dtype) + 1.0 / 32.0 : DtypeBytes(dtype);
}

CollectiveOp SimOp(Collective op) {
  switch (op) {
    case Collective::kAllToAll: return CollectiveOp::kAllToAll;
    case Collective::kAllGather: return CollectiveOp::kAllGather;
    case Collective::kReduceScatter: return CollectiveOp::kReduceScatter;
    case Collective::kAllReduce: return CollectiveOp::kAllReduce;
  }
  return CollectiveOp::kAllToAll;
}

// Saved activations' bytes relative to bf16.
double ActQuantFactor(Dtype q) {
  if (q == Dtype::kFp8E4M3 || q == Dtype::kFp8E5M2) return 0.5;
  if (q == Dtype::kMx4) return 0.27;
  return 1.0;
}

double TableBytes(ElementType dtype) { return DtypeBytes(DtypeOf(dtype)); }

// An Affine of model.json for op sequence `seq` as a StatAffine (P counts pairs of that sequence).
StatAffine FromAffine(const Affine& a, std::optional<int> seq, const StatLayout& layout, double scale = 1.0) {
  StatAffine s;
  s.coef.assign(layout.size(), 0.0);
  s.coef[StatLayout::kOne] = scale * a.c;
  s.coef[StatLayout::kB] = scale * a.B;
  if (seq.has_value() && *seq >= 0 && *seq < layout.sequences) {
    s.coef[layout.N(*seq)] = scale * a.N;
    s.coef[layout.P(*seq)] = scale * a.P;
  }
  return s;
}

StatAffine Zero(const StatLayout& layout) {
  StatAffine s;
  s.coef.assign(layout.size(), 0.0);
  return s;
}

// Adds op's forward or backward time (scaled by `scale`, e.g. E for experts on E*B samples).
struct TimeAdder {
  const Cluster& cluster;
  const StatLayout& layout;
  double peak;
  void Add(const Op& op, bool backward, double scale, StatAffine& time, std::vector<CurveTerm>& terms) const {
    // The rate says which work it prices: bytes for memory-bound ops, except under a measured
    // layer efficiency, which is of the layer's FLOPs (op_efficiency.h).
    const OpRate r = ResolveOpRate(cluster, peak, op, backward);
    const Affine& work =
        r.flops_work ? (backward ? op.flops.bwd : op.flops.fwd) : (backward ? op.bytes.bwd : op.bytes.fwd);
    if (r.curve == nullptr) {
      time.AddScaled(FromAffine(work, op.seq, layout), scale / (r.rate * r.e));
      return;
    }
    CurveTerm t;
    t.flops = FromAffine(work, op.seq, layout, scale);
    // Tokens: the sequence's N_j for sequence ops, the batch for per-sample ops.
    t.tokens = Zero(layout);
    if (op.seq.has_value() && *op.seq < layout.sequences) {
      t.tokens.coef[layout.N(*op.seq)] = 1.0;
    } else {
      t.tokens.coef[StatLayout::kB] = 1.0;
    }
    t.curve = r.curve;
    t.rate = r.rate;
    terms.push_back(std::move(t));
  }
};

// Per-sample elements of a shape (its affine dims at B = 1, N = P = 0; one non-constant dim).
double ElementsPerSample(const model::Shape& shape) {
  double e = 1.0;
  for (const Affine& d : shape) e *= d.IsConstant() ? d.c : d.B;
  return e;
}

// Sequence index of a table feature: "seq<j>.<field>" or "<name>.<field>" (sequences in order of
// first appearance); -1 for a pooled (non-sequence) feature.
class FeatureSequences {
 public:
  int Of(const std::string& feature) {
    const size_t dot = feature.find('.');
    if (dot == std::string::npos) return -1;
    const std::string prefix = feature.substr(0, dot);
    if (prefix.size() > 3 && prefix.compare(0, 3, "seq") == 0 &&
        std::all_of(prefix.begin() + 3, prefix.end(), [](unsigned char c) { return std::isdigit(c); })) {
      return std::stoi(prefix.substr(3));
    }
    auto [it, inserted] = names_.emplace(prefix, static_cast<int>(names_.size()));
    return it->second;
  }

 private:
  std::map<std::string, int> names_;
};

class Builder {
 public:
  Builder(const Scenario& s, const RankGroups& g) : s_(s), g_(g) {}

  absl::StatusOr<StepTemplate> Build();

 private:
  int AddCompute(std::string name, StatAffine time, std::vector<CurveTerm> terms, std::vector<int> deps,
                 bool nonlayer = false) {
    TaskTemplate t;
    t.name = std::move(name);
    t.stream = kComputeStream;
    t.time = std::move(time);
    t.curve_terms = std::move(terms);
    t.deps = std::move(deps);
    t.nonlayer = nonlayer;
    return Push(std::move(t));
  }
  int AddColl(std::string name, GroupClass cls, int layout, CollectiveOp op, StatAffine bytes, std::vector<int> deps,
              bool a2av = false) {
    if (bytes.IsZero() || t_.layouts[layout].size <= 1) return -1;
    TaskTemplate t;
    t.name = std::move(name);
    t.collective = true;
    t.group_class = cls;
    t.layout = layout;
    t.stream = CommStream(cls);
    t.op = op;
    t.bytes = std::move(bytes);
    t.deps = std::move(deps);
    t.a2av = a2av;
    return Push(std::move(t));
  }
  int Push(TaskTemplate t) {
    t.deps.erase(std::remove(t.deps.begin(), t.deps.end(), -1), t.deps.end());
    t_.tasks.push_back(std::move(t));
    return static_cast<int>(t_.tasks.size()) - 1;
  }
  static std::vector<int> Deps(std::initializer_list<int> d) { return std::vector<int>(d); }

  // `lookup_after`: a task the lookup also waits for (-1: none).
  void BuildSparse(std::vector<int>& fwd_out_deps, StatAffine& lookup_time, StatAffine& update_time,
                   int lookup_after);

  // The layout of sparse-mp groups of `size` MP positions `stride` apart (a TWRW host, its cross-host
  // groups, CW holders), added to the template's layouts on first use.
  int MpSubgroupLayout(int size, int stride) {
    const GroupLayout& mp = g_.of(GroupClass::kSparseMp);
    if (size == mp.size) return static_cast<int>(GroupClass::kSparseMp);
    for (const auto& [shape, index] : subgroup_layouts_) {
      if (shape == std::make_pair(size, stride)) return index;
    }
    GroupLayout l;
    l.size = size;
    l.stride = mp.stride * stride;
    l.count = g_.world / l.size;
    t_.layouts.push_back(l);
    const int index = static_cast<int>(t_.layouts.size()) - 1;
    subgroup_layouts_.push_back({{size, stride}, index});
    return index;
  }
  std::vector<std::pair<std::pair<int, int>, int>> subgroup_layouts_;

  // One call site of the sparse pattern, summed over the tables (model/sharding/comm_pattern.h).
  struct SiteBytes {
    CommSite site = CommSite::kIdsA2a;
    CollectiveOp op = CollectiveOp::kAllToAll;
    GroupClass group_class = GroupClass::kSparseMp;
    int size = 1, stride = 1;
    StatAffine bytes;
  };
  // The summed bytes of `site` over its group shapes (zero when no table uses it).
  StatAffine SiteSum(CommSite site) const {
    StatAffine sum = Zero(layout_);
    for (const SiteBytes& b : sites_) {
      if (b.site == site) sum.AddScaled(b.bytes, 1.0);
    }
    return sum;
  }
  // One task per group shape of `site` (only CW/GRID's norm gather has several); returns the first
  // (-1: none) and appends every one to `all` when given.
  int AddSite(CommSite site, const std::vector<int>& deps, bool a2av = false, std::vector<int>* all = nullptr) {
    int first = -1;
    for (size_t i = 0; i < sites_.size(); ++i) {
      const SiteBytes b = sites_[i];
      if (b.site != site) continue;
      const int layout = b.group_class == GroupClass::kSparseMp ? MpSubgroupLayout(b.size, b.stride)
                                                                : static_cast<int>(b.group_class);
      const int task = AddColl(absl::StrCat("sparse.", CommSiteName(site)), b.group_class, layout, b.op, b.bytes, deps,
                               a2av);
      if (task >= 0) t_.tasks[task].comm_site = static_cast<int>(site);
      if (first < 0) first = task;
      if (all != nullptr) all->push_back(task);
    }
    return first;
  }

  const Scenario& s_;
  const RankGroups& g_;
  StepTemplate t_;
  StatLayout layout_;
  std::vector<SiteBytes> sites_;  // the plan's sparse call sites, first use first
  StatAffine embeddings_bytes_;  // one batch's looked-up embeddings on this rank (pooled and sequence)
};

absl::StatusOr<StepTemplate> Builder::Build() {
  if (s_.model == nullptr) return absl::InvalidArgumentError("model: missing (no model graph)");
  const model::ModelGraph& m = *s_.model;
  if (m.ops.empty()) return absl::InvalidArgumentError("model.ops: empty");
  const Plan& plan = s_.plan;
  const Cluster& cl = s_.cluster;
  if (cl.calibration.layers.has_value()) GEMTB_RETURN_IF_ERROR(CheckLayerCalibration(m, *cl.calibration.layers));
  {
    std::vector<PlanTable> tables;
    for (const model::GraphTable& t : m.tables) tables.push_back({t.name, t.dim});
    ShardingPlanOptions options;
    options.path = "plan.sparse";
    GEMTB_RETURN_IF_ERROR(ValidateShardingPlan(plan.sparse, tables, g_.world, cl.gpus_per_host, options));
  }
  layout_.sequences = static_cast<int>(m.sequences.size());
  t_.layout = layout_;
  t_.layouts.assign(g_.layouts.begin(), g_.layouts.end());
  {
    // Expert replicas: same expert e and expert-shard position; the dimension outside both.
    GroupLayout er;
    const int inner = g_.of(GroupClass::kEp).size * g_.of(GroupClass::kExpertShard).size;
    er.size = g_.world / inner;
    er.stride = inner;
    er.count = g_.world / er.size;
    t_.layouts.push_back(er);
  }
  const Dtype peak_dtype = plan.dense.comm_dtype == Dtype::kFp8E4M3 ? Dtype::kFp8E4M3 : Dtype::kBf16;
  auto it_peak = cl.gpu.peak_flops.find(std::string(DtypeName(peak_dtype)));
  t_.peak_flops = it_peak != cl.gpu.peak_flops.end() ? it_peak->second
                  : (cl.gpu.peak_flops.empty() ? 989e12 : cl.gpu.peak_flops.begin()->second);
  if (t_.peak_flops <= 0) return absl::InvalidArgumentError("cluster.gpu.peak_flops: must be > 0");
  if (cl.gpu.hbm_Bps <= 0) return absl::InvalidArgumentError("cluster.gpu.hbm_GBps: must be > 0");
  const TimeAdder adder{cl, layout_, t_.peak_flops};
  const int E = g_.of(GroupClass::kEp).size;
  const int S = g_.of(GroupClass::kDenseShard).size;
  const int SE = g_.of(GroupClass::kExpertShard).size;
  const double e_p = CommBytes(plan.dense.comm_dtype);
  const double e_a = kWireBytesPerActivation;
  const double q_act = ActQuantFactor(plan.memory.act_quant);
  const int depth = std::max(0, plan.dense.prefetch_depth);

  // Regions in first-appearance order; per region its ops.
  std::vector<std::vector<int>> region_ops;
  std::map<std::string, int> region_index;
  for (int i = 0; i < static_cast<int>(m.ops.size()); ++i) {
    const Op& op = m.ops[i];
    if (op.seq.has_value() && (*op.seq < 0 || *op.seq >= layout_.sequences)) {
      return absl::InvalidArgumentError(absl::StrCat("model.ops[", i, "].seq: ", *op.seq, " is not a sequence of the model"));
    }
    auto [it, inserted] = region_index.emplace(op.region, static_cast<int>(region_ops.size()));
    if (inserted) region_ops.emplace_back();
    region_ops[it->second].push_back(i);
  }
  const int U = static_cast<int>(region_ops.size());

  // Model FLOPs and the Local MFU terms (as the GEM article defines it): every op of every
  // layer run alone on one GPU, forward and backward, at its own efficiency (ResolveOpRate: a
  // measured one, else GEMMs and attention at e_l, norms, pointwise ops and the loss at HBM
  // bandwidth x e_mem), no recompute and no communication; the embedding lookup joins below. Local MFU = sum F / (peak x sum t).
  t_.model_flops = Zero(layout_);
  t_.local_time = Zero(layout_);
  for (const Op& op : m.ops) {
    // An expert op runs once per expert: every sample visits every expert.
    t_.model_flops.AddScaled(FromAffine(op.flops.fwd + op.flops.bwd, op.seq, layout_), 1.0);
    adder.Add(op, false, 1.0, t_.local_time, t_.local_curve_terms);
    adder.Add(op, true, 1.0, t_.local_time, t_.local_curve_terms);
  }
  t_.local_flops = t_.model_flops;

  // Sparse forward, then the dense forward; with plan.pipeline.sparse_ahead = 1 the sparse forward
  // is the next batch's and comes after the dense forward (below).
  const bool ahead = plan.pipeline.sparse_ahead > 0;
  std::vector<int> sparse_out;
  StatAffine lookup = Zero(layout_), update = Zero(layout_);
  if (!ahead) BuildSparse(sparse_out, lookup, update, -1);

  // Per region: non-expert params (FSDP unit), per-expert params, split of its ops.
  struct RegionPlan {
    double params = 0, expert_params = 0;
    std::vector<int> pre, expert, post;
  };
  std::vector<RegionPlan> rp(U);
  double dense_params_total = 0, expert_params_total = 0, max_unit_bytes = 0;
  for (int u = 0; u < U; ++u) {
    for (int i : region_ops[u]) {
      const Op& op = m.ops[i];
      const bool is_expert = op.expert.has_value() && E > 1;
      if (is_expert) {
        if (*op.expert == 0) {
          rp[u].expert.push_back(i);
          rp[u].expert_params += static_cast<double>(op.params);
        }
      } else {
        (rp[u].expert.empty() ? rp[u].pre : rp[u].post).push_back(i);
        rp[u].params += static_cast<double>(op.params);
      }
    }
    dense_params_total += rp[u].params;
    expert_params_total += rp[u].expert_params;
    max_unit_bytes = std::max(max_unit_bytes, (rp[u].params + rp[u].expert_params) * e_p);
  }
  auto padded = [](double p, int group) { return std::ceil(p / (32.0 * group)) * 32.0 * group; };
  auto const_bytes = [&](double b) {
    StatAffine a = Zero(layout_);
    a.coef[StatLayout::kOne] = b;
    return a;
  };
  auto seg_time = [&](const std::vector<int>& ops, bool bwd, double scale, StatAffine& time, std::vector<CurveTerm>& terms) {
    time = Zero(layout_);
    for (int i : ops) adder.Add(m.ops[i], bwd, scale, time, terms);
  };

  // Regions and saved bytes.
  t_.regions.resize(U);
  for (int u = 0; u < U; ++u) {
    RegionTemplate& r = t_.regions[u];
    r.name = m.ops[region_ops[u][0]].region;
    r.saved_bytes = Zero(layout_);
    r.piece_begin = static_cast<int>(t_.pieces.size());
    std::map<model::RecomputeClass, int> piece_of;  // recompute class -> its piece in t_.pieces
    for (int i : region_ops[u]) {
      const Op& op = m.ops[i];
      if (op.expert.has_value() && E > 1 && *op.expert != 0) continue;
      const double scale = (op.expert.has_value() && E > 1) ? E : 1.0;
      const StatAffine saved = FromAffine(op.saved.bytes, op.seq, layout_);
      r.saved_bytes.AddScaled(saved, scale * q_act);
      auto [it, inserted] = piece_of.emplace(op.saved.recompute, static_cast<int>(t_.pieces.size()));
      if (inserted) {
        CheckpointPiece& piece = t_.pieces.emplace_back();
        piece.region = u;
        piece.recompute = op.saved.recompute;
        piece.fwd_time = Zero(layout_);
        piece.saved_bytes = Zero(layout_);
      }
      CheckpointPiece& piece = t_.pieces[it->second];
      adder.Add(op, false, scale, piece.fwd_time, piece.fwd_curve_terms);
      piece.saved_bytes.AddScaled(saved, scale * q_act);
    }
    r.piece_end = static_cast<int>(t_.pieces.size());
  }

  // Dense forward.
  std::vector<int> fwd_last(U, -1), ag_fwd(U, -1);
  std::vector<int> first_step_tasks;  // tasks that wait for the previous step's optimizer
  int first_fwd = -1;                  // the first dense forward compute task (it takes the embeddings)
  int prev = -1;
  for (int u = 0; u < U; ++u) {
    const RegionPlan& p = rp[u];
    const int limit = u - depth - 1 >= 0 ? fwd_last[u - depth - 1] : -1;
    ag_fwd[u] = AddColl(absl::StrCat(t_.regions[u].name, ".ag"), GroupClass::kDenseShard,
                        static_cast<int>(GroupClass::kDenseShard), CollectiveOp::kAllGather,
                        const_bytes(padded(p.params, S) * e_p), Deps({limit}));
    if (ag_fwd[u] >= 0) first_step_tasks.push_back(ag_fwd[u]);
    std::vector<int> deps = {prev, ag_fwd[u]};
    if (u == 0) deps.insert(deps.end(), sparse_out.begin(), sparse_out.end());
    StatAffine time;
    std::vector<CurveTerm> terms;
    if (p.expert.empty()) {
      seg_time(region_ops[u], false, 1.0, time, terms);
      prev = AddCompute(absl::StrCat(t_.regions[u].name, ".fwd"), time, terms, deps);
      if (u == 0) first_fwd = prev;
    } else {
      seg_time(p.pre, false, 1.0, time, terms);
      const int pre = AddCompute(absl::StrCat(t_.regions[u].name, ".fwd"), time, terms, deps);
      if (u == 0) first_fwd = pre;
      const int eag = AddColl(absl::StrCat(t_.regions[u].name, ".expert_ag"), GroupClass::kExpertShard,
                              static_cast<int>(GroupClass::kExpertShard), CollectiveOp::kAllGather,
                              const_bytes(padded(p.expert_params, SE) * e_p), Deps({limit}));
      if (eag >= 0) first_step_tasks.push_back(eag);
      const Op& first = m.ops[p.expert.front()];
      const Op& last = m.ops[p.expert.back()];
      StatAffine in_bytes = Zero(layout_), out_bytes = Zero(layout_);
      in_bytes.coef[StatLayout::kB] = E * e_a * (first.shapes.in.empty() ? 0.0 : ElementsPerSample(first.shapes.in[0]));
      out_bytes.coef[StatLayout::kB] = E * e_a * ElementsPerSample(last.shapes.out);
      const int epag = AddColl(absl::StrCat(t_.regions[u].name, ".ep_ag"), GroupClass::kEp,
                               static_cast<int>(GroupClass::kEp), CollectiveOp::kAllGather, in_bytes, Deps({pre}));
      StatAffine et;
      std::vector<CurveTerm> eterms;
      seg_time(p.expert, false, E, et, eterms);
      const int ex = AddCompute(absl::StrCat(t_.regions[u].name, ".experts.fwd"), et, eterms, Deps({pre, epag, eag}));
      const int eprs = AddColl(absl::StrCat(t_.regions[u].name, ".ep_rs"), GroupClass::kEp,
                               static_cast<int>(GroupClass::kEp), CollectiveOp::kReduceScatter, out_bytes, Deps({ex}));
      StatAffine pt;
      std::vector<CurveTerm> pterms;
      seg_time(p.post, false, 1.0, pt, pterms);
      prev = AddCompute(absl::StrCat(t_.regions[u].name, ".post.fwd"), pt, pterms, Deps({ex, eprs}));
    }
    fwd_last[u] = prev;
  }
  if (ahead) {
    // TorchRec's TrainPipelineSemiSync: the next batch's lookup starts once this batch's dense
    // forward is done (the compute stream holds it between forward and backward), so its embedding
    // exchange runs beside the dense backward; this step's dense forward takes the embeddings the
    // previous step gathered. Step 0 stands for a filled pipeline: its forward waits for none.
    BuildSparse(sparse_out, lookup, update, prev);
    for (int x : sparse_out) t_.tasks[first_fwd].prev_deps.push_back(x);
  }

  // Dense backward, regions in reverse; grads bucketed by bucket_bytes.
  const bool reshard = plan.dense.reshard_after_forward;
  std::vector<int> bwd_last(U, -1), ag_bwd(U, -1);
  std::vector<int> reductions;  // what the optimizer waits for
  double bucket = 0;
  int bucket_first = U - 1;
  auto issue_ag_bwd = [&](int u) {
    if (u < 0 || !reshard || ag_bwd[u] != -1) return;
    const int limit = u + depth + 1 < U ? bwd_last[u + depth + 1] : -1;
    ag_bwd[u] = AddColl(absl::StrCat(t_.regions[u].name, ".ag_bwd"), GroupClass::kDenseShard,
                        static_cast<int>(GroupClass::kDenseShard), CollectiveOp::kAllGather,
                        const_bytes(padded(rp[u].params, S) * e_p), Deps({limit}));
    if (ag_bwd[u] == -1) ag_bwd[u] = -2;  // nothing to gather
  };
  for (int u = U - 1; u >= 0; --u) {
    for (int k = 0; k <= depth; ++k) issue_ag_bwd(u - k);
    const RegionPlan& p = rp[u];
    std::vector<int> deps = {prev, ag_bwd[u] >= 0 ? ag_bwd[u] : -1};
    StatAffine time;
    std::vector<CurveTerm> terms;
    if (p.expert.empty()) {
      seg_time(region_ops[u], true, 1.0, time, terms);
      const int b = AddCompute(absl::StrCat(t_.regions[u].name, ".bwd"), time, terms, deps);
      t_.tasks[b].recompute_region = u;
      prev = b;
    } else {
      seg_time(p.post, true, 1.0, time, terms);
      const int post = AddCompute(absl::StrCat(t_.regions[u].name, ".post.bwd"), time, terms, deps);
      t_.tasks[post].recompute_region = u;
      const int eag = AddColl(absl::StrCat(t_.regions[u].name, ".expert_ag_bwd"), GroupClass::kExpertShard,
                              static_cast<int>(GroupClass::kExpertShard), CollectiveOp::kAllGather,
                              const_bytes(padded(p.expert_params, SE) * e_p), Deps({}));
      const Op& first = m.ops[p.expert.front()];
      const Op& last = m.ops[p.expert.back()];
      StatAffine gout = Zero(layout_), gin = Zero(layout_);
      gout.coef[StatLayout::kB] = E * e_a * ElementsPerSample(last.shapes.out);
      gin.coef[StatLayout::kB] = E * e_a * (first.shapes.in.empty() ? 0.0 : ElementsPerSample(first.shapes.in[0]));
      const int epag = AddColl(absl::StrCat(t_.regions[u].name, ".ep_ag_bwd"), GroupClass::kEp,
                               static_cast<int>(GroupClass::kEp), CollectiveOp::kAllGather, gout, Deps({post}));
      StatAffine et;
      std::vector<CurveTerm> eterms;
      seg_time(p.expert, true, E, et, eterms);
      const int ex = AddCompute(absl::StrCat(t_.regions[u].name, ".experts.bwd"), et, eterms, Deps({post, epag, eag}));
      const int eprs = AddColl(absl::StrCat(t_.regions[u].name, ".ep_rs_bwd"), GroupClass::kEp,
                               static_cast<int>(GroupClass::kEp), CollectiveOp::kReduceScatter, gin, Deps({ex}));
      const int ers = AddColl(absl::StrCat(t_.regions[u].name, ".expert_rs"), GroupClass::kExpertShard,
                              static_cast<int>(GroupClass::kExpertShard), CollectiveOp::kReduceScatter,
                              const_bytes(padded(p.expert_params, SE) * e_p), Deps({ex}));
      const int ear = AddColl(absl::StrCat(t_.regions[u].name, ".expert_ar"), GroupClass::kDenseReplica,
                              kExpertReplicaLayout, CollectiveOp::kAllReduce,
                              const_bytes(padded(p.expert_params, SE) * e_p / SE), Deps({ers >= 0 ? ers : ex}));
      for (int x : {ers, ear}) if (x >= 0) reductions.push_back(x);
      StatAffine pt;
      std::vector<CurveTerm> pterms;
      seg_time(p.pre, true, 1.0, pt, pterms);
      prev = AddCompute(absl::StrCat(t_.regions[u].name, ".bwd"), pt, pterms, Deps({ex, eprs}));
    }
    bwd_last[u] = prev;
    bucket += p.params * e_p;
    if (bucket >= plan.dense.bucket_bytes || u == 0) {
      double params = 0;
      for (int x = u; x <= bucket_first; ++x) params += rp[x].params;
      const std::string name = absl::StrCat(t_.regions[bucket_first].name, ".grad");
      const int rs = AddColl(name + "_rs", GroupClass::kDenseShard, static_cast<int>(GroupClass::kDenseShard),
                             CollectiveOp::kReduceScatter, const_bytes(padded(params, S) * e_p), Deps({prev}));
      const int ar = AddColl(name + "_ar", GroupClass::kDenseReplica, static_cast<int>(GroupClass::kDenseReplica),
                             CollectiveOp::kAllReduce, const_bytes(padded(params, S) * e_p / S),
                             Deps({rs >= 0 ? rs : prev}));
      for (int x : {rs, ar}) if (x >= 0) reductions.push_back(x);
      bucket = 0;
      bucket_first = u - 1;
    }
  }

  // Sparse backward: grads A2A -> fused update -> [V3 RS] ; [V2 replica AR every sync_period].
  std::vector<int> sparse_done;
  {
    std::vector<int> grads;
    // V3: gather the shard again for the update unless the forward copy was kept. The sparse
    // backward starts with it (AG(N) -> A2A grads -> update), beside
    // the gradient exchange: issued earlier, it would hold the copy through the activation peak and
    // share the network with the forward's exchanges.
    const int v3_ag = AddSite(CommSite::kV3GatherBwd, Deps({prev}));
    // The DP tables' small all-reduce goes first on the stream: behind the gradient all-to-all it
    // would end last and be charged the update's whole wait (idle time is charged to the blocker).
    grads.push_back(AddSite(CommSite::kDpGradAr, Deps({prev})));
    // The gradients retrace the forward's embedding exchanges: RW's pooled RS -> AG, TWRW's A2A
    // across hosts then AG(g) inside the host, the embeddings' A2A.
    grads.push_back(AddSite(CommSite::kPooledGradAg, Deps({prev})));
    const int twrw_a2a_grad = AddSite(CommSite::kCrossHostGradA2a, Deps({prev}), true);
    grads.push_back(twrw_a2a_grad);
    const int emb_grad = AddSite(CommSite::kEmbGradA2a, Deps({prev}), true);
    grads.push_back(emb_grad);
    grads.push_back(AddSite(CommSite::kHostGradAg, Deps({twrw_a2a_grad >= 0 ? twrw_a2a_grad : prev})));
    // Rowwise Adagrad on shared column shards: the row norms need every shard's partial sums.
    AddSite(CommSite::kColumnNormAg, Deps({emb_grad >= 0 ? emb_grad : prev}), false, &grads);
    std::vector<int> deps = grads;
    deps.push_back(prev);
    deps.push_back(v3_ag);
    const int upd = AddCompute("sparse.update", update, {}, deps, true);
    sparse_done.assign({upd});
    const int rs = AddSite(CommSite::kV3Scatter, Deps({upd}));
    if (rs >= 0) sparse_done.push_back(rs);
  }
  {
    // V2: every sync_period steps, AR over the replicas of the shard weights and state; V3 with
    // data-parallel copies: AR over the copies of the sub-block its scatter left on this rank.
    const int ar = AddSite(CommSite::kReplicaSync, Deps({sparse_done.back()}));
    if (ar >= 0) {
      t_.tasks[ar].period = std::max(1, plan.sparse.sync_period);
      sparse_done.push_back(ar);
    }
  }

  // Optimizer: Adam on this rank's dense shards (fp32 param, grad, m, v read; param, m, v written).
  {
    const double shard_params = dense_params_total / S + expert_params_total / std::max(1, SE);
    StatAffine opt = const_bytes(shard_params * 28.0 / (cl.gpu.hbm_Bps * cl.calibration.efficiency.e_mem));
    std::vector<int> deps = reductions;
    deps.push_back(prev);
    deps.insert(deps.end(), sparse_done.begin(), sparse_done.end());
    const int o = AddCompute("optimizer", opt, {}, deps, true);
    for (int f : first_step_tasks) t_.tasks[f].prev_deps.push_back(o);
    // The next step's compute stream is in order behind the optimizer already.
  }
  // The lookup is the sparse layer's own work; the embedding update and the dense optimizer are not
  // layers (their time is the attribution's non-layer line).
  t_.local_time.AddScaled(lookup, 1.0);

  // Static memory: dense shards in fp32 with Adam state (x4), gathered params of the
  // prefetch_depth + 1 regions in flight, embedding shards with rowwise state.
  double table_bytes = 0;
  for (const model::GraphTable& tb : m.tables) {
    table_bytes += static_cast<double>(tb.rows) * (static_cast<double>(tb.dim) * TableBytes(tb.dtype) + 4.0);
  }
  // V3 stores 1/F of its position's shard (F = N unless the layout keeps N/F data-parallel copies).
  const double mp_group = g_.of(GroupClass::kSparseMp).size;
  const double per_rank_tables = plan.sparse.fully_sharded
                                     ? table_bytes / (mp_group * g_.of(GroupClass::kSparseIntra).size)
                                     : table_bytes / mp_group;
  t_.static_bytes = 16.0 * (dense_params_total / S + expert_params_total / std::max(1, SE)) +
                    (depth + 1) * max_unit_bytes + per_rank_tables;
  // V3's transient gathered copy counts as static: the whole MP shard (gather "all") or
  // this rank-step's touched rows (gather "touched"); so do the pipelined next batch's embeddings.
  t_.batch_static_bytes = SiteSum(CommSite::kV3Gather);
  if (ahead) t_.batch_static_bytes.AddScaled(embeddings_bytes_, 1.0);

  // Evaluation is per rank and task: keep only the non-zero terms.
  for (TaskTemplate& task : t_.tasks) {
    task.time.Compact();
    task.bytes.Compact();
    for (CurveTerm& c : task.curve_terms) { c.flops.Compact(); c.tokens.Compact(); }
  }
  for (RegionTemplate& r : t_.regions) r.saved_bytes.Compact();
  for (CheckpointPiece& p : t_.pieces) {
    p.fwd_time.Compact();
    p.saved_bytes.Compact();
    for (CurveTerm& c : p.fwd_curve_terms) { c.flops.Compact(); c.tokens.Compact(); }
  }
  t_.model_flops.Compact();
  t_.batch_static_bytes.Compact();
  t_.local_flops.Compact();
  t_.local_time.Compact();
  for (CurveTerm& c : t_.local_curve_terms) { c.flops.Compact(); c.tokens.Compact(); }

  // Streams and dependents.
  t_.stream_tasks.assign(kNumStreams, {});
  t_.dependents.assign(t_.tasks.size(), {});
  t_.next_step_dependents.assign(t_.tasks.size(), {});
  for (int i = 0; i < static_cast<int>(t_.tasks.size()); ++i) {
    TaskTemplate& task = t_.tasks[i];
    std::sort(task.deps.begin(), task.deps.end());
    task.deps.erase(std::unique(task.deps.begin(), task.deps.end()), task.deps.end());
    t_.stream_tasks[task.stream].push_back(i);
    for (int d : task.deps) t_.dependents[d].push_back(i);
    for (int d : task.prev_deps) t_.next_step_dependents[d].push_back(i);
  }
  return std::move(t_);
}

void Builder::BuildSparse(std::vector<int>& fwd_out_deps, StatAffine& lookup_time, StatAffine& update_time,
                          int lookup_after) {
  const model::ModelGraph& m = *s_.model;
  const Plan& plan = s_.plan;
  const Cluster& cl = s_.cluster;
  const int M = g_.of(GroupClass::kSparseMp).size;
  const int N = g_.world / M;
  const int F = g_.of(GroupClass::kSparseIntra).size;
  const double e_a = kWireBytesPerActivation;
  const int mp_layout = static_cast<int>(GroupClass::kSparseMp);
  // TWRW and GRID tables sit on the g MP positions of a host (validated with the plan's layout).
  const absl::StatusOr<int> host_positions =
      HostGroupPositions(M, g_.of(GroupClass::kSparseMp).stride, cl.gpus_per_host);
  const CommWorld world{M, N, host_positions.ok() ? *host_positions : 1, F};
  StatAffine lookup_bytes = Zero(layout_), update_bytes = Zero(layout_);
  embeddings_bytes_ = Zero(layout_);
  sites_.clear();
  FeatureSequences seqs;
  for (size_t t = 0; t < m.tables.size(); ++t) {
    const model::GraphTable& tb = m.tables[t];
    // Per sample: pooled features read one bag each of `pooling` ids, sequence features one id per token.
    StatAffine nu = Zero(layout_), bags = Zero(layout_), seq_ids = Zero(layout_);
    double pooled = 0;
    for (const std::string& f : tb.features) {
      const int j = seqs.Of(f);
      bags.coef[StatLayout::kB] += 1.0;
      if (j < 0 || j >= layout_.sequences) {
        pooled += 1.0;
        nu.coef[StatLayout::kB] += s_.batches.PoolingOf(tb.name);
      } else {
        // Ids of sequence j: its tokens minus the CLS tokens.
        nu.coef[layout_.N(j)] += 1.0;
        nu.coef[StatLayout::kB] -= static_cast<double>(m.sequences[j].n_s);
        seq_ids.coef[layout_.N(j)] += 1.0;
        seq_ids.coef[StatLayout::kB] -= static_cast<double>(m.sequences[j].n_s);
      }
    }
    const double D = static_cast<double>(tb.dim);
    const double e_w = TableBytes(tb.dtype);
    // The table's traffic terms (comm_pattern.h's TrafficTerm) on this rank. Distinct rows are
    // estimated from this rank's ids: the MP group's U as M times them (no id repeats), the rows
    // V3 gathers for its position as them (the other replica groups touch the same rows).
    std::array<StatAffine, kNumTrafficTerms> traffic;
    traffic.fill(Zero(layout_));
    traffic[static_cast<int>(TrafficTerm::kOne)].coef[StatLayout::kOne] = 1.0;
    traffic[static_cast<int>(TrafficTerm::kBags)] = bags;
    traffic[static_cast<int>(TrafficTerm::kIds)] = nu;
    StatAffine& kappa = traffic[static_cast<int>(TrafficTerm::kKjt)];
    kappa.AddScaled(bags, 4.0);
    kappa.AddScaled(nu, 8.0);
    StatAffine& pi = traffic[static_cast<int>(TrafficTerm::kPooled)];
    pi.coef[StatLayout::kB] = pooled * D * e_a;
    StatAffine& sigma = traffic[static_cast<int>(TrafficTerm::kSequence)];
    sigma.AddScaled(seq_ids, D * e_a);
    traffic[static_cast<int>(TrafficTerm::kMpUniqueRows)].AddScaled(nu, M);
    traffic[static_cast<int>(TrafficTerm::kShardTouchedRows)].AddScaled(nu, 1.0);

    const CommTable table{tb.rows, tb.dim, e_w, tb.optimizer};
    const auto zipf = s_.batches.id_zipf.find(tb.name);
    const double zipf_s = zipf != s_.batches.id_zipf.end() ? zipf->second : s_.batches.id_zipf_default;
    const PositionShares shares = TablePositionShares(plan.sparse.tables[t], static_cast<int>(t), M, world.host_positions,
                                                      HottestIdShare(tb.rows, zipf_s));
    for (const CommCall& call : TableCommPattern(plan.sparse.tables[t], table, plan.sparse, world)) {
      const GroupClass cls = call.group_class == CommGroupClass::kSparseMp        ? GroupClass::kSparseMp
                             : call.group_class == CommGroupClass::kSparseReplica ? GroupClass::kSparseReplica
                                                                                  : GroupClass::kSparseIntra;
      // The template's groups tile the MP group: a gather over p positions that do not divide the
      // positions along its stride (CW's holders of c shards on M positions) is priced over all of
      // them, sending the same bytes per member ((p-1)/p of S).
      int size = call.size;
      double scale = 1.0;
      const int positions = M / call.stride;
      if (cls == GroupClass::kSparseMp && positions % size != 0) {
        scale = ((size - 1.0) / size) / ((positions - 1.0) / positions);
        size = positions;
      }
      SiteBytes* site = nullptr;
      for (SiteBytes& b : sites_) {
        if (b.site == call.site && b.size == size && b.stride == call.stride) site = &b;
      }
      if (site == nullptr) {
        sites_.push_back(SiteBytes{call.site, SimOp(call.op), cls, size, call.stride, Zero(layout_)});
        site = &sites_.back();
      }
      StatAffine table_bytes = Zero(layout_);
      for (int k = 0; k < kNumTrafficTerms; ++k) {
        if (call.bytes.coef[k] != 0.0) table_bytes.AddScaled(traffic[k], call.bytes.coef[k] * scale);
      }
      site->bytes.AddScaled(table_bytes, 1.0);
      // The MP group's own all-to-alls (not TWRW's cross-host one): per table, for the slowest member.
      if (call.op == Collective::kAllToAll && cls == GroupClass::kSparseMp && size == M && call.stride == 1) {
        SiteTraffic* st = nullptr;
        for (SiteTraffic& x : t_.a2a_traffic) {
          if (x.site == call.site) st = &x;
        }
        if (st == nullptr) {
          t_.a2a_traffic.push_back(SiteTraffic{call.site, M, {}, {}});
          st = &t_.a2a_traffic.back();
        }
        table_bytes.Compact();
        st->bytes.push_back(std::move(table_bytes));
        st->shares.push_back(shares);
      }
    }
    // The rank's own samples' embeddings, whichever rank looked them up.
    embeddings_bytes_.AddScaled(pi, 1.0);
    embeddings_bytes_.AddScaled(sigma, 1.0);
    lookup_bytes.AddScaled(nu, 8.0 + D * e_w);
    lookup_bytes.AddScaled(pi, 1.0);
    lookup_bytes.AddScaled(sigma, 1.0);
    update_bytes.AddScaled(nu, D * (2.0 * e_w + 4.0) + 8.0);
  }
  const double mem_rate = cl.gpu.hbm_Bps * cl.calibration.efficiency.e_mem;
  lookup_time = Zero(layout_);
  lookup_time.AddScaled(lookup_bytes, 1.0 / mem_rate);
  update_time = Zero(layout_);
  update_time.AddScaled(update_bytes, 1.0 / mem_rate);

  int global = -1;
  if (s_.batches.assignment.policy == "global") {
    StatAffine x = Zero(layout_);
    x.coef[StatLayout::kX] = 1.0;
    global = AddColl("sparse.global_a2a", GroupClass::kSparseMp, mp_layout, CollectiveOp::kAllToAll, x, {}, true);
  }
  const int v3 = AddSite(CommSite::kV3Gather, {});
  // The ids exchange needs only the batch (after global balancing's exchange, if any), not the V3
  // gather: they run side by side and the lookup waits for both.
  const int a_ids = AddSite(CommSite::kIdsA2a, global >= 0 ? std::vector<int>{global} : std::vector<int>{}, true);
  const int lk = AddCompute("sparse.lookup", lookup_time, {}, {a_ids, v3, lookup_after}, true);
  const int rs = AddSite(CommSite::kPooledRs, {lk});
  // TWRW and GRID: RS inside the table's host, then A2A across hosts.
  const int trs = AddSite(CommSite::kHostRs, {lk});
  const int twrw_a2a = AddSite(CommSite::kCrossHostA2a, {trs >= 0 ? trs : lk}, true);
  const int o = AddSite(CommSite::kEmbA2a, {lk}, true);
  fwd_out_deps = {lk};
  for (int x : {rs, o, twrw_a2a}) if (x >= 0) fwd_out_deps.push_back(x);
}

}  // namespace

std::vector<std::string> StreamNames() {
  std::vector<std::string> names(kNumStreams);
  names[kComputeStream] = "compute";
  for (int c = 0; c < kNumGroupClasses; ++c) {
    names[1 + c] = std::string(GroupClassName(static_cast<GroupClass>(c)));
  }
  names[kCopyStream] = "copy";
  return names;
}

double CurveAt(const Curve& curve, double x) {
  const auto& p = curve.points;
  if (p.empty()) return 1.0;
  if (x <= p.front().first) return p.front().second;
  if (x >= p.back().first) return p.back().second;
  const auto it = std::upper_bound(p.begin(), p.end(), x, [](double v, const auto& pt) { return v < pt.first; });
  const auto& hi = *it;
  const auto& lo = *(it - 1);
  const double t = (x - lo.first) / (hi.first - lo.first);
  return lo.second + t * (hi.second - lo.second);
}

double EvalTime(const StatAffine& time, const std::vector<CurveTerm>& curve_terms, absl::Span<const double> stats) {
  double t = time.Eval(stats);
  for (const CurveTerm& c : curve_terms) {
    const double e = CurveAt(*c.curve, c.tokens.Eval(stats));
    t += c.flops.Eval(stats) / (c.rate * (e > 0 ? e : 1.0));
  }
  return t;
}

absl::StatusOr<StepTemplate> BuildStepTemplate(const Scenario& scenario, const RankGroups& groups) {
  Builder b(scenario, groups);
  return b.Build();
}

}  // namespace gemtb::sim
