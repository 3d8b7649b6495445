#include "reference/model/npy_dataset.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "reference/io/npy.h"

namespace gemtb::reference::model {
namespace {

namespace fs = std::filesystem;

// One file of the set with its dtype and shape checked.
absl::StatusOr<io::NpyArray> ReadPart(const std::string& dir, const std::string& file, io::NpyDType dtype,
                                      const std::vector<int64_t>& shape) {
  const std::string path = (fs::path(dir) / file).string();
  absl::StatusOr<io::NpyArray> a = io::ReadNpy(path);
  if (!a.ok()) return absl::InvalidArgumentError(absl::StrCat("--data ", dir, ": ", a.status().message()));
  if (a->dtype != dtype || (!shape.empty() && a->shape != shape) || (shape.empty() && a->shape.size() != 1))
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected ", io::NpyDTypeName(dtype), " ",
                                                   shape.empty() ? std::string("[n]") : io::ShapeString(shape),
                                                   ", got ", io::NpyDTypeName(a->dtype), " ", io::ShapeString(a->shape)));
  return a;
}

template <typename T>
std::vector<T> Elements(const io::NpyArray& a) {
  std::vector<T> v(static_cast<size_t>(a.NumElements()));
  std::memcpy(v.data(), a.data.data(), v.size() * sizeof(T));  // little-endian host (x86-64)
  return v;
}

absl::Status Bad(const std::string& dir, const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat((fs::path(dir) / file).string(), ": ", what));
}

}  // namespace

absl::StatusOr<NpyDataset> LoadNpyDataset(const std::string& dir, const data::DataShape& shape) {
  const int64_t F = static_cast<int64_t>(shape.features.size()), J = static_cast<int64_t>(shape.sequences.size());
  const int64_t K = F + 3 * J, T = static_cast<int64_t>(shape.tasks.size()), m = shape.dense;
  // labels.npy fixes N; its dtype and shape are checked against [N, T] below.
  absl::StatusOr<io::NpyArray> labels_any = io::ReadNpy((fs::path(dir) / "labels.npy").string());
  if (!labels_any.ok()) return absl::InvalidArgumentError(absl::StrCat("--data ", dir, ": ", labels_any.status().message()));
  if (labels_any->shape.size() != 2 || labels_any->shape[0] < 1)
    return Bad(dir, "labels.npy", absl::StrCat("expected uint8 [N, ", T, "] with N >= 1, got ",
                                               io::ShapeString(labels_any->shape)));
  const int64_t N = labels_any->shape[0];
  NpyDataset set;
  set.shape = shape;
  set.size = N;
  absl::StatusOr<io::NpyArray> a = ReadPart(dir, "labels.npy", io::NpyDType::kUInt8, {N, T});
  if (!a.ok()) return a.status();
  set.labels = Elements<uint8_t>(*a);
  if (!(a = ReadPart(dir, "masks.npy", io::NpyDType::kUInt8, {N, T})).ok()) return a.status();
  set.masks = Elements<uint8_t>(*a);
  for (int64_t i = 0; i < N * T; ++i) {
    if (set.labels[i] > 1) return Bad(dir, "labels.npy", absl::StrCat("element ", i, " is ", set.labels[i], ", not 0 or 1"));
    if (set.masks[i] > 1) return Bad(dir, "masks.npy", absl::StrCat("element ", i, " is ", set.masks[i], ", not 0 or 1"));
  }
  if (!(a = ReadPart(dir, "dense.npy", io::NpyDType::kFloat32, {N, m})).ok()) return a.status();
  set.dense = Elements<float>(*a);
  for (size_t i = 0; i < set.dense.size(); ++i)
    if (!std::isfinite(set.dense[i])) return Bad(dir, "dense.npy", absl::StrCat("element ", i, " is ", set.dense[i]));
  if (!(a = ReadPart(dir, "seq_lengths.npy", io::NpyDType::kInt32, {J, N})).ok()) return a.status();
  set.seq_lengths = Elements<int32_t>(*a);
  if (!(a = ReadPart(dir, "lengths.npy", io::NpyDType::kInt32, {K * N})).ok()) return a.status();
  set.lengths = Elements<int32_t>(*a);
  if (!(a = ReadPart(dir, "ids.npy", io::NpyDType::kInt64, {})).ok()) return a.status();
  set.ids = Elements<int64_t>(*a);

  // Lengths within the config's bounds, ids within their tables, sequences' three keys aligned.
  set.starts.resize(static_cast<size_t>(K * N));
  int64_t at = 0;
  for (int64_t k = 0; k < K; ++k) {
    const bool feature = k < F;
    const int64_t j = feature ? -1 : (k - F) / 3, part = feature ? -1 : (k - F) % 3;
    const int64_t max_len = feature ? shape.features[k].max_len : shape.sequences[j].lmax;
    const int64_t rows = feature        ? shape.features[k].rows
                         : part == 0    ? shape.sequences[j].item_rows
                         : part == 1    ? shape.sequences[j].action_rows
                                        : shape.sequences[j].dt_rows;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t len = set.lengths[k * N + i];
      if (len < 0 || len > max_len)
        return Bad(dir, "lengths.npy", absl::StrCat("element ", k * N + i, " (key ", k, ", sample ", i, ") is ", len,
                                                    ", expected 0 .. ", max_len));
      if (!feature && len != set.seq_lengths[j * N + i])
        return Bad(dir, "lengths.npy", absl::StrCat("element ", k * N + i, " is ", len, " but seq_lengths.npy[", j,
                                                    ", ", i, "] is ", set.seq_lengths[j * N + i]));
      set.starts[k * N + i] = at;
      if (at + len > static_cast<int64_t>(set.ids.size()))
        return Bad(dir, "ids.npy", absl::StrCat(set.ids.size(), " ids, fewer than lengths.npy adds up to"));
      for (int64_t e = at; e < at + len; ++e)
        if (set.ids[e] < 0 || set.ids[e] >= rows)
          return Bad(dir, "ids.npy", absl::StrCat("element ", e, " (key ", k, ", sample ", i, ") is ", set.ids[e],
                                                  ", expected 0 .. ", rows - 1));
      at += len;
    }
  }
  if (at != static_cast<int64_t>(set.ids.size()))
    return Bad(dir, "ids.npy", absl::StrCat(set.ids.size(), " ids, but lengths.npy adds up to ", at));

  std::error_code ec;
  set.has_probs = fs::exists(fs::path(dir) / "probs.npy", ec);
  if (set.has_probs) {
    if (!(a = ReadPart(dir, "probs.npy", io::NpyDType::kFloat64, {N, T})).ok()) return a.status();
    set.probs = Elements<double>(*a);
    for (size_t i = 0; i < set.probs.size(); ++i)
      if (!(set.probs[i] >= 0 && set.probs[i] <= 1))
        return Bad(dir, "probs.npy", absl::StrCat("element ", i, " is ", set.probs[i], ", expected 0 .. 1"));
  } else {
    set.probs.assign(static_cast<size_t>(N * T), std::nan(""));
  }
  return set;
}

data::Batch DatasetBatch(const NpyDataset& set, int64_t first, int64_t count) {
  const int64_t N = set.size, T = static_cast<int64_t>(set.shape.tasks.size()), m = set.shape.dense;
  const int64_t J = static_cast<int64_t>(set.shape.sequences.size());
  const int64_t K = static_cast<int64_t>(set.lengths.size()) / N;
  std::vector<int64_t> rows(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) rows[b] = (first + b) % N;
  data::Batch batch;
  batch.size = count;
  batch.keys = data::KjtKeys(set.shape);
  batch.indices = rows;
  batch.lengths.resize(static_cast<size_t>(K * count));
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t b = 0; b < count; ++b) {
      const int64_t src = k * N + rows[b];
      batch.lengths[k * count + b] = set.lengths[src];
      batch.values.insert(batch.values.end(), set.ids.begin() + set.starts[src],
                          set.ids.begin() + set.starts[src] + set.lengths[src]);
    }
  }
  batch.seq_lengths.resize(static_cast<size_t>(J * count));
  for (int64_t j = 0; j < J; ++j)
    for (int64_t b = 0; b < count; ++b) batch.seq_lengths[j * count + b] = set.seq_lengths[j * N + rows[b]];
  batch.dense.resize(static_cast<size_t>(count * m));
  batch.surface.assign(static_cast<size_t>(count), 0);
  batch.prob.resize(static_cast<size_t>(count * T));
  batch.label.resize(static_cast<size_t>(count * T));
  batch.mask.resize(static_cast<size_t>(count * T));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t c = 0; c < m; ++c) batch.dense[b * m + c] = set.dense[rows[b] * m + c];
    for (int64_t t = 0; t < T; ++t) {
      batch.prob[b * T + t] = set.probs[rows[b] * T + t];
      batch.label[b * T + t] = set.labels[rows[b] * T + t];
      batch.mask[b * T + t] = set.masks[rows[b] * T + t];
    }
  }
  return batch;
}

}  // namespace gemtb::reference::model
