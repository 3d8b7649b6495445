// The planted teacher's per-id parameters: for table t and raw id,
// a scalar beta and a latent u in R^8, each component a standardised Irwin-Hall(4) draw from
// Philox(teacher seed, S(TEACHER, t, id), k). Block 0 gives beta, block 1 + c gives u_c. Being a pure
// function of (t, id), the teacher needs no storage, even for the gem-scale tables.
#pragma once

#include <cstdint>

#include "model/data/draws.h"
#include "model/numerics/host_device.h"
#include "model/numerics/philox.h"
#include "model/random/splitmix64.h"

namespace gemtb::data {

inline constexpr int kLatentDim = 8;

// Table index of the dense projection's rows in the teacher stream: far above any real table.
inline constexpr uint64_t kDenseProjectionTable = 0xD3A5E000ull << 16;

GEMTB_HD inline uint64_t TeacherStream(uint64_t table, int64_t id) {
  return StreamId(StreamTag::kTeacher, table, static_cast<uint64_t>(id));
}

// beta(t, id): mean 0, variance 1.
GEMTB_HD inline double TeacherBeta(uint64_t teacher_seed, uint64_t table, int64_t id) {
  return IrwinHall4(numerics::PhiloxBlock(teacher_seed, TeacherStream(table, id), 0));
}

// u(t, id): kLatentDim components, each mean 0, variance 1.
GEMTB_HD inline void TeacherLatent(uint64_t teacher_seed, uint64_t table, int64_t id, double* u) {
  const uint64_t stream = TeacherStream(table, id);
  for (int c = 0; c < kLatentDim; ++c) u[c] = IrwinHall4(numerics::PhiloxBlock(teacher_seed, stream, 1 + c));
}

// <a, b> over kLatentDim components, summed in index order.
GEMTB_HD inline double LatentDot(const double* a, const double* b) {
  double s = 0.0;
  for (int c = 0; c < kLatentDim; ++c) s = numerics::DAdd(s, numerics::DMul(a[c], b[c]));
  return s;
}

}  // namespace gemtb::data
