#include "sim/allocator.h"

#include <cstdlib>  // defines __GLIBC__ on glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace domino::sim {

void KeepFreedMemory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit)
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);  // the heap grows in steps this large, and keeps them
#endif
}

}  // namespace domino::sim
