// Internal to sf::sim (CUDA builds): kernel launchers callable from host C++.
#pragma once

#include <cuda_runtime.h>

namespace sf::sim::cuda {

/// Queues a spin of `ns` nanoseconds of device time (%globaltimer) on `stream`.
cudaError_t launch_spin(cudaStream_t stream, unsigned long long ns);

}  // namespace sf::sim::cuda

namespace sf::sim {
class Device;
/// The CUDA backend's stream and device gradient buffer (d must be the CUDA device).
cudaStream_t cuda_stream_of(Device& d);
float* cuda_grads_of(Device& d);
}  // namespace sf::sim
