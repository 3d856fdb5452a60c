// Device kernels of the CUDA backend. Kept apart from the host code so nvcc never sees the
// project's host-only headers (Eigen, nlohmann-json).
#include "cuda_kernels.h"

namespace sf::sim::cuda {

namespace {

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Injected compute fail-slow: one warp occupies the stream for `ns` of device time, measured on
// the GPU's own nanosecond timer, so it is accurate whatever the SM clock does (clocks are never
// changed by this project).
__global__ void spin_kernel(unsigned long long ns) {
  const unsigned long long start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}

}  // namespace

cudaError_t launch_spin(cudaStream_t stream, unsigned long long ns) {
  spin_kernel<<<1, 32, 0, stream>>>(ns);
  return cudaGetLastError();
}

}  // namespace sf::sim::cuda
