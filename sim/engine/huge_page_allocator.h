// An allocator for the engine's large per-rank arrays: 2 MiB-aligned blocks advised as transparent
// huge pages (Linux madvise MADV_HUGEPAGE), so that the scattered per-rank reads of a 16,384-rank
// run cost fewer TLB misses (with 4 KiB pages each event touched several pages, each a page walk).
// Only a hint: where huge pages are off or unsupported the memory behaves as usual; contents and
// results never depend on it. Smaller arrays start on a cache line (or the type's own alignment if
// larger), so that a record of 32 or 64 bytes never straddles two lines.
#ifndef GEMTB_SIM_ENGINE_HUGE_PAGE_ALLOCATOR_H_
#define GEMTB_SIM_ENGINE_HUGE_PAGE_ALLOCATOR_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace gemtb::sim {

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return static_cast<T*>(::operator new(bytes, kSmallAlign));
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
    if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);  // before the first touch: faults then take huge pages
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHuge) {
      ::operator delete(p, kSmallAlign);
    } else {
      std::free(p);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }

 private:
  static constexpr size_t kHuge = size_t{2} << 20;
  static constexpr std::align_val_t kSmallAlign{alignof(T) > 64 ? alignof(T) : 64};
};

template <typename T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_HUGE_PAGE_ALLOCATOR_H_
