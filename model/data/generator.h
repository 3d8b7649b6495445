// The synthetic data generator with a planted teacher.
//
// Sample i of seed s is a pure function of (params, shape, s, i): every draw reads
// Philox(s, S(DATA, field, i), k) (draws.h), the teacher reads Philox(teacher seed, S(TEACHER, t, id), k)
// (teacher.h), and all arithmetic is fp64 op by op with the project's own exp/log. So a sample has the
// same bits whichever rank, batch, thread or device makes it.
//
// Per sample:
//   surface      uniform over the shape's surfaces (sample field, word 0)
//   sparse f     single-hot features (max_len 1, and the user/ad/surface roles): one id; multi-hot:
//                length min(max_len, ceil(LogNormal)), 2 % empty; ids by the feature's IdLaw
//   sequence j   length as above with Lmax; per event (latest first) an item, an action, a gap; the
//                latest events are kept and stored oldest first; dt bucket of the event =
//                min(rows - 1, floor(b log2(1 + time since the event)))
//   dense c      (P u_user)_c / sqrt(8) + noise * IrwinHall4, P a fixed teacher matrix
//   logit_t      bias_t + surface_offset_t + sum_f scale_f mean_{bag f} beta
//                + user_ad_scale <u_user, u_ad>
//                + sum_j [item_beta_scale mean_{latest K items} beta + gamma mean_{latest K} <u_item, u_ad>]
//                + delta (positive actions among the latest action_events events, minus their
//                  expected number: the term has mean 0, so bias_t stays the base rate's logit)
//   p_t = sigmoid(logit_t), y_t = [u24(w_t) < p_t]; mask_t = [surface in surfaces_t], and for
//   conversion tasks also [y = 1 of the click task: the first CTR task observed on the sample's
//   surface, else the first CTR task] (conversions are observed after clicks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/data/data_params.h"
#include "model/data/data_shape.h"
#include "model/data/draws.h"
#include "model/data/teacher.h"
#include "model/numerics/det_math.h"
#include "model/numerics/philox.h"
#include "model/random/splitmix64.h"

namespace gemtb::data {

// One sequence's events, oldest first (the latest event is last).
struct SequenceEvents {
  std::vector<int64_t> item;
  std::vector<int64_t> action;
  std::vector<int64_t> dt;  // time-since-event bucket
};

struct Sample {
  int64_t index = 0;
  int surface = 0;
  std::vector<std::vector<int64_t>> sparse;  // per feature: ids in bag order
  std::vector<float> dense;                  // [m]
  std::vector<SequenceEvents> sequences;     // [J]
  std::vector<double> logit;                 // [T] teacher logits
  std::vector<double> prob;                  // [T] true probabilities sigmoid(logit)
  std::vector<uint8_t> label;                // [T] y_t
  std::vector<uint8_t> mask;                 // [T] m_t

  // Total events over all sequences: the sample's load for balanced batch sampling (BBS).
  int64_t SequenceLoad() const {
    int64_t n = 0;
    for (const SequenceEvents& s : sequences) n += static_cast<int64_t>(s.item.size());
    return n;
  }
};

class Generator {
 public:
  // Checks the parameters against the shape (every task has parameters, roles name features, ...).
  static absl::StatusOr<Generator> Create(const DataParams& params, const DataShape& shape);

  const DataParams& params() const { return params_; }
  const DataShape& shape() const { return shape_; }

  // Fills `out` (its vectors are reused, so a loop over samples does not allocate).
  void Generate(uint64_t seed, int64_t index, Sample* out) const;
  Sample Generate(uint64_t seed, int64_t index) const {
    Sample s;
    Generate(seed, index, &s);
    return s;
  }

  // Only the sequence lengths of sample `index` (the same draws Generate makes, so equal to its
  // events per sequence), for load statistics without generating events: lengths[j], j < J.
  void SequenceLengths(uint64_t seed, int64_t index, int64_t* lengths) const {
    for (size_t j = 0; j < sequences_.size(); ++j) lengths[j] = SequenceLength(seed, index, j);
  }
  // Total events over all sequences of sample `index` (= Sample::SequenceLoad()).
  int64_t SequenceLoad(uint64_t seed, int64_t index) const {
    int64_t total = 0;
    for (size_t j = 0; j < sequences_.size(); ++j) total += SequenceLength(seed, index, j);
    return total;
  }

 private:
  struct Feature {
    IdLaw ids;
    LengthLaw length;
    bool single = true;
    double beta_scale = 0.0;
    uint64_t table = 0;
  };
  struct Sequence {
    LengthLaw length;
    IdLaw items, actions;
    uint64_t item_table = 0;
    int64_t dt_rows = 1;
    double positive_rate = 0.0;  // P(an event's action is positive): centres the action term
  };
  struct Task {
    double bias = 0.0;
    std::vector<double> surface_offset;  // [surfaces]
    std::vector<uint8_t> on_surface;     // [surfaces]
    bool after_click = false;
  };

  Generator() = default;

  int64_t SequenceLength(uint64_t seed, int64_t index, size_t j) const {
    const uint64_t stream = DataStream(FieldId(FieldKind::kSequence, j), static_cast<uint64_t>(index));
    return DrawLength(sequences_[j].length, seed, stream, 0);
  }

  DataParams params_;
  DataShape shape_;
  std::vector<Feature> features_;
  std::vector<Sequence> sequences_;
  std::vector<Task> tasks_;
  int user_ = -1, ad_ = -1, surface_feature_ = -1;
  int click_task_ = -1;                    // the first CTR task
  std::vector<int> click_task_by_surface_;  // [surfaces]: the click a conversion waits for
  std::vector<double> dense_projection_;  // [m, kLatentDim]
};

inline Sample GenerateSample(const Generator& generator, uint64_t seed, int64_t index) {
  return generator.Generate(seed, index);
}

namespace generator_detail {

inline uint64_t Gcd(uint64_t a, uint64_t b) {
  while (b != 0) {
    const uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

inline IdLaw MakeIdLaw(const IdParams& p, int64_t vocab, uint64_t salt) {
  IdLaw law;
  law.vocab = vocab;
  law.zipf_s = p.zipf_s;
  const double one_minus_s = 1.0 - p.zipf_s;
  const double v1 = static_cast<double>(vocab) + 1.0;
  if (one_minus_s > -1e-9 && one_minus_s < 1e-9) {
    law.zipf_a = numerics::DetLog(v1);
    law.inv_one_minus_s = 0.0;
  } else {
    law.zipf_a = numerics::DetPow(v1, one_minus_s) - 1.0;
    law.inv_one_minus_s = 1.0 / one_minus_s;
  }
  law.heavy_prob = p.heavy_prob;
  law.heavy_count = p.heavy_count;
  law.salt = salt;
  const uint64_t v = static_cast<uint64_t>(vocab);
  const uint64_t h = SplitMix64(salt ^ 0x4D554C54ull);  // "MULT"
  // A keyed multiplier coprime to the vocabulary (1 always is, so the search ends).
  uint64_t mul = v <= 1 ? 0 : (h % v) | 1u;
  while (v > 1 && Gcd(mul, v) != 1) mul = mul + 2 < v ? mul + 2 : 1;
  law.mul = mul;
  law.add = v <= 1 ? 0 : SplitMix64(salt ^ 0x414444ull) % v;  // "ADD"
  return law;
}

// P(id < threshold) under an IdLaw: the probability that one event's action counts as positive.
// Exact over the ranks for vocabularies up to 2^22 (the continuous Zipf inverse gives rank k - 1 for
// x in [k, k + 1)); beyond that, the bijection scatters ids, so threshold / vocab.
inline double MassBelow(const IdLaw& law, int64_t threshold) {
  if (threshold <= 0) return 0.0;
  if (threshold >= law.vocab) return 1.0;
  if (law.vocab > (int64_t{1} << 22)) return static_cast<double>(threshold) / static_cast<double>(law.vocab);
  auto cdf = [&](double x) {  // P(X < x) of the continuous law on [1, vocab + 1)
    if (law.inv_one_minus_s == 0.0) return numerics::DetLog(x) / law.zipf_a;
    return (numerics::DetPow(x, 1.0 - law.zipf_s) - 1.0) / law.zipf_a;
  };
  double zipf = 0.0;
  for (int64_t k = 0; k < law.vocab; ++k) {
    if (RankToId(law, static_cast<uint64_t>(k)) < threshold) {
      zipf += cdf(static_cast<double>(k) + 2.0) - cdf(static_cast<double>(k) + 1.0);
    }
  }
  double heavy = 0.0;
  for (int64_t j = 0; j < law.heavy_count; ++j) {
    const uint64_t rank =
        SplitMix64(static_cast<uint64_t>(j) ^ law.salt ^ 0x4845415659ull) % static_cast<uint64_t>(law.vocab);
    if (RankToId(law, rank) < threshold) heavy += 1.0;
  }
  if (law.heavy_count > 0) heavy /= static_cast<double>(law.heavy_count);
  const double hp = law.heavy_count > 0 ? law.heavy_prob : 0.0;
  return (1.0 - hp) * zipf + hp * heavy;
}

inline LengthLaw MakeLengthLaw(const LengthParams& p, int64_t lmax) {
  LengthLaw law;
  law.lmax = lmax;
  law.mu = numerics::DetLog(static_cast<double>(lmax)) + p.mu_offset;
  law.sigma = p.sigma;
  law.empty_prob = p.empty_prob;
  return law;
}

inline int FindFeature(const DataShape& shape, const std::string& name) {
  for (size_t f = 0; f < shape.features.size(); ++f) {
    if (shape.features[f].name == name) return static_cast<int>(f);
  }
  return -1;
}

// Salts: one per (kind, index), fixed, so ids of different features spread differently.
inline uint64_t FeatureSalt(int f) { return SplitMix64(0x5350415253450000ull + static_cast<uint64_t>(f)); }
inline uint64_t ItemSalt(int j) { return SplitMix64(0x4954454D00000000ull + static_cast<uint64_t>(j)); }
inline uint64_t ActionSalt(int j) { return SplitMix64(0x4143540000000000ull + static_cast<uint64_t>(j)); }

}  // namespace generator_detail

inline absl::StatusOr<Generator> Generator::Create(const DataParams& params, const DataShape& shape) {
  using namespace generator_detail;
  Generator g;
  g.params_ = params;
  g.shape_ = shape;
  if (shape.surfaces < 1) return absl::InvalidArgumentError(absl::StrCat("shape.surfaces: ", shape.surfaces, " < 1"));
  if (shape.dense < 0) return absl::InvalidArgumentError(absl::StrCat("shape.dense: ", shape.dense, " < 0"));
  for (const FeatureParams& fp : params.features) {
    if (FindFeature(shape, fp.name) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data params: features.", fp.name, ": no sparse feature of that name in the model config"));
    }
  }
  auto role = [&](const std::string& name, const char* key, int* out) -> absl::Status {
    if (name.empty()) return absl::OkStatus();
    *out = FindFeature(shape, name);
    if (*out < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data params: roles.", key, ": \"", name, "\" is not a sparse feature of the model config"));
    }
    return absl::OkStatus();
  };
  GEMTB_RETURN_IF_ERROR(role(params.user_feature, "user", &g.user_));
  GEMTB_RETURN_IF_ERROR(role(params.ad_feature, "ad", &g.ad_));
  GEMTB_RETURN_IF_ERROR(role(params.surface_feature, "surface", &g.surface_feature_));
  if (g.surface_feature_ >= 0 && shape.features[g.surface_feature_].rows < shape.surfaces) {
    return absl::InvalidArgumentError(absl::StrCat("data params: roles.surface: feature \"", params.surface_feature,
                                                   "\" has ", shape.features[g.surface_feature_].rows,
                                                   " rows, fewer than the ", shape.surfaces, " surfaces"));
  }
  for (size_t f = 0; f < shape.features.size(); ++f) {
    const FeatureShape& fs = shape.features[f];
    if (fs.rows < 1 || fs.max_len < 1) {
      return absl::InvalidArgumentError(absl::StrCat("shape.features[", f, "] (", fs.name, "): rows ", fs.rows,
                                                     " and max_len ", fs.max_len, " must be >= 1"));
    }
    FeatureParams fp = params.default_feature;
    for (const FeatureParams& o : params.features) {
      if (o.name == fs.name) fp = o;
    }
    Feature feature;
    feature.ids = MakeIdLaw(fp.ids, fs.rows, FeatureSalt(static_cast<int>(f)));
    feature.length = MakeLengthLaw(params.lengths, fs.max_len);
    const int fi = static_cast<int>(f);
    feature.single = fs.max_len == 1 || fi == g.user_ || fi == g.ad_ || fi == g.surface_feature_;
    feature.beta_scale = fp.beta_scale;
    feature.table = static_cast<uint64_t>(fs.table);
    g.features_.push_back(feature);
  }
  for (size_t j = 0; j < shape.sequences.size(); ++j) {
    const SequenceShape& ss = shape.sequences[j];
    if (ss.lmax < 1 || ss.item_rows < 1 || ss.action_rows < 1 || ss.dt_rows < 1) {
      return absl::InvalidArgumentError(absl::StrCat("shape.sequences[", j, "] (", ss.name,
                                                     "): lmax and table rows must be >= 1"));
    }
    Sequence s;
    s.length = MakeLengthLaw(params.lengths, ss.lmax);
    s.items = MakeIdLaw(params.sequences.item_ids, ss.item_rows, ItemSalt(static_cast<int>(j)));
    s.actions = MakeIdLaw(params.sequences.action_ids, ss.action_rows, ActionSalt(static_cast<int>(j)));
    s.item_table = static_cast<uint64_t>(ss.item_table);
    s.dt_rows = ss.dt_rows;
    s.positive_rate = MassBelow(s.actions, params.teacher.positive_actions);
    g.sequences_.push_back(s);
  }
  for (size_t t = 0; t < shape.tasks.size(); ++t) {
    const TaskShape& ts = shape.tasks[t];
    const TaskParams* tp = nullptr;
    for (const TaskParams& p : params.tasks) {
      if (p.name == ts.name) tp = &p;
    }
    if (tp == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("data params: tasks: no parameters for task \"", ts.name, "\" of the model config"));
    }
    if (!tp->surface_offsets.empty() && static_cast<int>(tp->surface_offsets.size()) != shape.surfaces) {
      return absl::InvalidArgumentError(absl::StrCat("data params: tasks.", ts.name, ".surface_offsets: ",
                                                     tp->surface_offsets.size(), " values for ", shape.surfaces,
                                                     " surfaces"));
    }
    Task task;
    task.bias = tp->bias;
    task.surface_offset.assign(static_cast<size_t>(shape.surfaces), 0.0);
    if (!tp->surface_offsets.empty()) task.surface_offset = tp->surface_offsets;
    task.on_surface.assign(static_cast<size_t>(shape.surfaces), 0);
    for (int s : ts.surfaces) {
      if (s < 0 || s >= shape.surfaces) {
        return absl::InvalidArgumentError(
            absl::StrCat("shape.tasks[", t, "] (", ts.name, "): surface ", s, " not in [0, ", shape.surfaces, ")"));
      }
      task.on_surface[static_cast<size_t>(s)] = 1;
    }
    task.after_click = ts.objective == Objective::kConversion;
    if (ts.objective == Objective::kCtr && g.click_task_ < 0) g.click_task_ = static_cast<int>(t);
    g.tasks_.push_back(task);
  }
  // The click task of each surface: the first CTR task observed there, else the first CTR task.
  g.click_task_by_surface_.assign(static_cast<size_t>(shape.surfaces), g.click_task_);
  for (int s = shape.surfaces - 1; s >= 0; --s) {
    for (int t = static_cast<int>(shape.tasks.size()) - 1; t >= 0; --t) {
      if (shape.tasks[t].objective == Objective::kCtr && g.tasks_[t].on_surface[static_cast<size_t>(s)]) {
        g.click_task_by_surface_[static_cast<size_t>(s)] = t;
      }
    }
  }
  for (Task& task : g.tasks_) task.after_click = task.after_click && g.click_task_ >= 0;
  g.dense_projection_.resize(static_cast<size_t>(shape.dense) * kLatentDim);
  for (int64_t c = 0; c < shape.dense; ++c) {
    const uint64_t stream = TeacherStream(kDenseProjectionTable, c);
    for (int k = 0; k < kLatentDim; ++k) {
      g.dense_projection_[static_cast<size_t>(c) * kLatentDim + k] =
          IrwinHall4(numerics::PhiloxBlock(params.teacher.seed, stream, static_cast<uint64_t>(k)));
    }
  }
  return g;
}

inline void Generator::Generate(uint64_t seed, int64_t index, Sample* out) const {
  using numerics::DAdd;
  using numerics::DDiv;
  using numerics::DMul;
  const uint64_t i = static_cast<uint64_t>(index);
  const TeacherParams& tp = params_.teacher;
  out->index = index;

  // Sample-level words: 0 surface, 4 + t the label of task t.
  const uint64_t sample_stream = DataStream(FieldId(FieldKind::kSample, 0), i);
  const numerics::Philox4x32 head = numerics::PhiloxBlock(seed, sample_stream, 0);
  int surface = static_cast<int>(Uniform32(head.v[0]) * static_cast<double>(shape_.surfaces));
  if (surface >= shape_.surfaces) surface = shape_.surfaces - 1;
  out->surface = surface;

  // Sparse features and their beta terms.
  double shared = 0.0;
  out->sparse.resize(features_.size());
  for (size_t f = 0; f < features_.size(); ++f) {
    const Feature& feature = features_[f];
    const uint64_t stream = DataStream(FieldId(FieldKind::kSparse, f), i);
    std::vector<int64_t>& bag = out->sparse[f];
    bag.clear();
    if (static_cast<int>(f) == surface_feature_) {
      bag.push_back(RankToId(feature.ids, static_cast<uint64_t>(surface)));
    } else {
      const int64_t len = feature.single ? 1 : DrawLength(feature.length, seed, stream, 0);
      for (int64_t p = 0; p < len; ++p) {
        bag.push_back(DrawId(feature.ids, numerics::PhiloxBlock(seed, stream, 4 + static_cast<uint64_t>(p))));
      }
    }
    if (feature.beta_scale != 0.0 && !bag.empty()) {
      double sum = 0.0;
      for (int64_t id : bag) sum = DAdd(sum, TeacherBeta(tp.seed, feature.table, id));
      shared = DAdd(shared, DMul(feature.beta_scale, DDiv(sum, static_cast<double>(bag.size()))));
    }
  }
  double u_user[kLatentDim] = {};
  double u_ad[kLatentDim] = {};
  if (user_ >= 0) TeacherLatent(tp.seed, features_[user_].table, out->sparse[user_][0], u_user);
  if (ad_ >= 0) TeacherLatent(tp.seed, features_[ad_].table, out->sparse[ad_][0], u_ad);
  if (user_ >= 0 && ad_ >= 0) shared = DAdd(shared, DMul(tp.user_ad_scale, LatentDot(u_user, u_ad)));

  // Sequences: events drawn latest first (age a), stored oldest first.
  const SequenceParams& sp = params_.sequences;
  out->sequences.resize(sequences_.size());
  for (size_t j = 0; j < sequences_.size(); ++j) {
    const Sequence& seq = sequences_[j];
    const uint64_t stream = DataStream(FieldId(FieldKind::kSequence, j), i);
    const int64_t len = DrawLength(seq.length, seed, stream, 0);
    SequenceEvents& ev = out->sequences[j];
    ev.item.resize(static_cast<size_t>(len));
    ev.action.resize(static_cast<size_t>(len));
    ev.dt.resize(static_cast<size_t>(len));
    double elapsed = 0.0;
    for (int64_t a = 0; a < len; ++a) {
      const uint64_t b = 4 + 3 * static_cast<uint64_t>(a);
      const size_t pos = static_cast<size_t>(len - 1 - a);
      ev.item[pos] = DrawId(seq.items, numerics::PhiloxBlock(seed, stream, b));
      ev.action[pos] = DrawId(seq.actions, numerics::PhiloxBlock(seed, stream, b + 1));
      const numerics::Philox4x32 gap_words = numerics::PhiloxBlock(seed, stream, b + 2);
      const double gap = DMul(sp.dt_mean_gap, -numerics::DetLog(UniformOpen53(gap_words.v[0], gap_words.v[1])));
      elapsed = DAdd(elapsed, gap);
      const double bucket = DMul(sp.dt_buckets_per_octave, numerics::DetLog2(DAdd(1.0, elapsed)));
      const double last = static_cast<double>(seq.dt_rows - 1);
      ev.dt[pos] = bucket >= last ? seq.dt_rows - 1 : static_cast<int64_t>(bucket);
    }
    // Teacher terms over the latest events.
    const int64_t k = std::min<int64_t>(tp.history_events, len);
    if (k > 0 && (sp.item_beta_scale != 0.0 || (ad_ >= 0 && tp.history_scale != 0.0))) {
      double beta_sum = 0.0, dot_sum = 0.0;
      double u_item[kLatentDim];
      for (int64_t a = 0; a < k; ++a) {
        const int64_t id = ev.item[static_cast<size_t>(len - 1 - a)];
        if (sp.item_beta_scale != 0.0) beta_sum = DAdd(beta_sum, TeacherBeta(tp.seed, seq.item_table, id));
        if (ad_ >= 0 && tp.history_scale != 0.0) {
          TeacherLatent(tp.seed, seq.item_table, id, u_item);
          dot_sum = DAdd(dot_sum, LatentDot(u_item, u_ad));
        }
      }
      const double kd = static_cast<double>(k);
      shared = DAdd(shared, DMul(sp.item_beta_scale, DDiv(beta_sum, kd)));
      shared = DAdd(shared, DMul(tp.history_scale, DDiv(dot_sum, kd)));
    }
    const int64_t ka = std::min<int64_t>(tp.action_events, len);
    if (ka > 0 && tp.action_scale != 0.0) {
      int64_t positives = 0;
      for (int64_t a = 0; a < ka; ++a) positives += ev.action[static_cast<size_t>(len - 1 - a)] < tp.positive_actions;
      const double expected = DMul(seq.positive_rate, static_cast<double>(ka));
      const double excess = numerics::DSub(static_cast<double>(positives), expected);
      shared = DAdd(shared, DMul(tp.action_scale, excess));
    }
  }

  // Dense features: a noisy projection of u_user.
  out->dense.resize(static_cast<size_t>(shape_.dense));
  const uint64_t dense_stream = DataStream(FieldId(FieldKind::kDense, 0), i);
  for (int64_t c = 0; c < shape_.dense; ++c) {
    double proj = 0.0;
    for (int k = 0; k < kLatentDim; ++k) {
      proj = DAdd(proj, DMul(dense_projection_[static_cast<size_t>(c) * kLatentDim + k], u_user[k]));
    }
    const double noise = IrwinHall4(numerics::PhiloxBlock(seed, dense_stream, static_cast<uint64_t>(c)));
    const double value = DAdd(DMul(proj, 0.35355339059327376220), DMul(params_.dense_noise, noise));  // 1/sqrt 8
    out->dense[static_cast<size_t>(c)] = static_cast<float>(value);
  }

  // Tasks: probabilities, labels, masks.
  const size_t T = tasks_.size();
  out->logit.resize(T);
  out->prob.resize(T);
  out->label.resize(T);
  out->mask.resize(T);
  for (size_t t = 0; t < T; ++t) {
    const Task& task = tasks_[t];
    const double logit = DAdd(DAdd(task.bias, task.surface_offset[static_cast<size_t>(surface)]), shared);
    const double p = numerics::DetSigmoid(logit);
    const uint32_t w = numerics::PhiloxWord(seed, sample_stream, 4 + t);
    out->logit[t] = logit;
    out->prob[t] = p;
    out->label[t] = static_cast<double>(U24(w)) < p ? 1 : 0;
  }
  for (size_t t = 0; t < T; ++t) {
    uint8_t m = tasks_[t].on_surface[static_cast<size_t>(surface)];
    const int click = click_task_by_surface_[static_cast<size_t>(surface)];
    if (tasks_[t].after_click && out->label[static_cast<size_t>(click)] == 0) m = 0;
    out->mask[t] = m;
  }
}

}  // namespace gemtb::data
