// What the data generator needs to know about a model: the sparse features and their tables, the
// dense width, the event sequences and their tables, the tasks and surfaces. A plain struct so the
// generator does not depend on the model description; shape_from_config.h fills it from a
// gemtb::model::ModelConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemtb::data {

// A non-sequence sparse feature: a bag of at most max_len ids of table `table` (rows `rows`).
struct FeatureShape {
  std::string name;
  int table = 0;         // table index: keys the teacher's per-id parameters
  int64_t rows = 1;      // ids are drawn in [0, rows)
  int64_t max_len = 1;   // 1 = single-hot (always exactly one id)
};

// An event sequence: per event an item, an action and a time-since-event bucket id.
struct SequenceShape {
  std::string name;
  int64_t lmax = 1;
  int item_table = 0, action_table = 0, dt_table = 0;
  int64_t item_rows = 1, action_rows = 1, dt_rows = 1;
};

enum class Objective { kCtr, kConversion };

struct TaskShape {
  std::string name;
  Objective objective = Objective::kCtr;
  std::vector<int> surfaces;  // the surfaces on which the task is observed
};

struct DataShape {
  std::vector<std::string> table_names;  // for messages; index = table index
  std::vector<FeatureShape> features;    // in KJT key order
  int64_t dense = 0;                     // dense floats per sample
  std::vector<SequenceShape> sequences;
  std::vector<TaskShape> tasks;
  int surfaces = 1;
};

}  // namespace gemtb::data
