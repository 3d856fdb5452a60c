// The CPU build's answers for the CUDA backend: it is compiled only with SF_WITH_CUDA (the
// `cuda` CMake preset); here every entry point says why it cannot be used.
#include "sf/sim/sim.h"

#include <stdexcept>

namespace sf::sim {

bool cuda_available(std::string* why) {
  if (why) *why = "this binary was built without CUDA (configure with the cuda preset)";
  return false;
}

std::unique_ptr<Device> make_cuda_device(int, std::size_t) {
  throw std::runtime_error("this binary was built without CUDA (configure with the cuda preset)");
}

std::vector<SpinCalibration> cuda_spin_calibration(Device&, const std::vector<double>&) {
  throw std::runtime_error("this binary was built without CUDA (configure with the cuda preset)");
}

double cuda_gemm_seconds(int, int, int, int) {
  throw std::runtime_error("this binary was built without CUDA (configure with the cuda preset)");
}

}  // namespace sf::sim
