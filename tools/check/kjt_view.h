// The oracle's KJT (reference/embedding/kjt.h) as the GPU embedding's host view
// (gpu/embedding/kjt_check.h): spans over its arrays, no copy. Header only, so the CPU emulation's
// tests use it without linking the GPU library.
#ifndef GEMTB_TOOLS_CHECK_KJT_VIEW_H_
#define GEMTB_TOOLS_CHECK_KJT_VIEW_H_

#include "gpu/embedding/kjt_check.h"
#include "reference/embedding/kjt.h"

namespace gemtb::check {

inline gpu::embedding::KjtView KjtViewOf(const reference::KeyedJaggedTensor& k) {
  gpu::embedding::KjtView v;
  v.keys = k.keys;
  v.batch = k.stride;
  v.lengths = k.lengths;
  v.values = k.values;
  v.weights = k.weights;
  v.has_weights = k.has_weights;
  v.offsets = k.offsets;
  return v;
}

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_KJT_VIEW_H_
