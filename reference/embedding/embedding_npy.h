// The .npy forms of an embedding module's arrays as `gemtb ref embed` reads and writes them (and
// gemtb.ref.embed and the golden vectors with it): fp32 values, and table weights in their storage
// dtype.
#ifndef GEMTB_REFERENCE_EMBEDDING_EMBEDDING_NPY_H_
#define GEMTB_REFERENCE_EMBEDDING_EMBEDDING_NPY_H_

#include <cstdint>
#include <vector>

#include "model/common/element_type.h"
#include "reference/io/npy.h"

namespace gemtb::reference {

// The .npy dtype of a table stored as `dtype`: float16, bfloat16 (raw bits, "<u2"), else float32.
io::NpyDType TableNpyDType(ElementType dtype);

// `values` as an array of `shape` in `dtype` (float32 by default; a narrower dtype rounds each value
// once).
io::NpyArray FloatNpyArray(const std::vector<float>& values, std::vector<int64_t> shape,
                           io::NpyDType dtype = io::NpyDType::kFloat32);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_EMBEDDING_EMBEDDING_NPY_H_
