// The generator's and the planted teacher's parameters, one JSON
// per model config in model/configs/data/<name>.json (parsed by data_params_json.h). They are fixed
// in the committed files: the teacher is part of the data set, not something tuned to a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemtb::data {

// Length law of multi-hot bags and sequences: min(Lmax, ceil(LogNormal(mu, sigma))) with
// mu = ln(Lmax) + mu_offset, and 0 with probability empty_prob.
struct LengthParams {
  double mu_offset = -0.8;
  double sigma = 0.7;
  double empty_prob = 0.02;
};

// Popularity law of ids: Zipf(zipf_s) ranks plus heavy hitters.
struct IdParams {
  double zipf_s = 1.1;
  double heavy_prob = 0.0;
  int64_t heavy_count = 0;
};

// Per sparse feature (by name); features not listed use `default_feature`.
struct FeatureParams {
  std::string name;
  IdParams ids;
  double beta_scale = 0.0;  // weight of mean_{ids in bag} beta(id) in every task's logit
};

struct SequenceParams {
  IdParams item_ids;
  double item_beta_scale = 0.0;   // weight of the mean beta of the latest `history_events` items
  IdParams action_ids;
  double dt_mean_gap = 30.0;      // mean gap between events (minutes), exponential
  double dt_buckets_per_octave = 4.0;  // bucket = min(rows - 1, floor(b * log2(1 + dt)))
};

struct TeacherParams {
  uint64_t seed = 0;               // keys S(TEACHER, table, id): the teacher's per-id draws
  double user_ad_scale = 0.0;      // weight of <u_user, u_ad>
  double history_scale = 0.0;      // gamma: weight of mean over the latest events of <u_item, u_ad>
  int64_t history_events = 8;      // K
  double action_scale = 0.0;       // delta: weight of the count of positive actions
  int64_t action_events = 16;      // over the latest this many events
  int64_t positive_actions = 4;    // action ids below this count as positive
};

struct TaskParams {
  std::string name;
  double bias = -3.5;                    // b0_t
  std::vector<double> surface_offsets;   // per surface; empty = 0
};

struct DataParams {
  int version = 1;
  std::string config;  // the model config these parameters belong to (informative)
  LengthParams lengths;
  FeatureParams default_feature;
  std::vector<FeatureParams> features;  // overrides by feature name
  std::string user_feature;     // feature whose (single) id is the user: u_user
  std::string ad_feature;       // feature whose (single) id is the ad: u_ad
  std::string surface_feature;  // optional: feature whose (single) id encodes the surface
  SequenceParams sequences;
  TeacherParams teacher;
  double dense_noise = 0.5;     // dense_c = (P u_user)_c + noise * N(0, 1)
  std::vector<TaskParams> tasks;  // by task name; every task of the shape must be listed
};

}  // namespace gemtb::data
