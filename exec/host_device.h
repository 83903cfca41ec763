#ifndef DOMINO_EXEC_HOST_DEVICE_H_
#define DOMINO_EXEC_HOST_DEVICE_H_

// What the host code and the CUDA kernels share: the qualifier that compiles a function for both,
// and the hash behind every value the executor draws (the reference fills, the token ids, the
// dropout masks), so that the host and the device draw the same ones. C++17, so that nvcc can
// include it.
#include <cstdint>

#ifdef __CUDACC__
#define DOMINO_HOST_DEVICE __host__ __device__
#else
#define DOMINO_HOST_DEVICE
#endif

namespace domino::exec {

// splitmix64's finalizer: every bit of the result depends on every bit of x.
DOMINO_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace domino::exec

#endif  // DOMINO_EXEC_HOST_DEVICE_H_
