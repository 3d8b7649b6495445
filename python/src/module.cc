// gemtb._core: the nanobind module under the gemtb package (python/gemtb).
#include "python/src/arrays.h"

NB_MODULE(_core, m) {
  m.doc() = "gemtb's libraries (reference/, model/, sim/) for the gemtb package";
  gemtb::python::BindAttention(m);
  gemtb::python::BindQuantize(m);
  gemtb::python::BindEmbed(m);
  gemtb::python::BindSimModelData(m);
  gemtb::python::BindTesting(m);
#if GEMTB_PYTHON_WITH_CUDA
  gemtb::python::BindGpuAttention(m);
#endif
}
