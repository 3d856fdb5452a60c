// GPU tests (CUDA builds). Compiled everywhere the cuda preset builds; registered in CTest only
// where a GPU is present (tests/gpu/CMakeLists.txt).
#include "sf/sim/sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

using namespace sf;

namespace {
std::unique_ptr<sim::Device> device() {
  std::string why;
  if (!sim::cuda_available(&why)) return nullptr;
  return sim::make_cuda_device(0, 1 << 16);
}
}  // namespace

TEST(CudaSpin, calibrated_within_two_percent_at_12_60_120_360_ms) {
  auto dev = device();
  if (!dev) GTEST_SKIP() << "no CUDA device";
  const auto cal = sim::cuda_spin_calibration(*dev, {12, 60, 120, 360});
  std::printf("# spin calibration (requested ms, measured ms, error %%)\n");
  for (const auto& c : cal) {
    std::printf("  %8.1f %10.3f %+8.3f\n", c.requested_ms, c.measured_ms, c.error_pct);
    EXPECT_LE(std::abs(c.error_pct), 2.0) << c.requested_ms << " ms";
  }
}

TEST(CudaDevice, work_is_asynchronous_and_events_time_it) {
  auto dev = device();
  if (!dev) GTEST_SKIP() << "no CUDA device";
  auto& ev = dev->events();
  const int p = ev.acquire();
  ASSERT_GE(p, 0);
  ev.record_begin(p);
  dev->compute(0.050);
  dev->spin(0.050);
  ev.record_end(p);
  EXPECT_FALSE(ev.query(p).has_value());  // launched, not waited for
  dev->synchronize();
  const auto secs = ev.query(p);
  ASSERT_TRUE(secs.has_value());
  EXPECT_GT(*secs, 0.090);  // ~100 ms of device work between the events
  ev.release(p);
}

TEST(CudaGemm, validate_compute_pass_time_scales_with_the_injected_repeat) {
  std::string why;
  if (!sim::cuda_available(&why)) GTEST_SKIP() << why;
  const double one = sim::cuda_gemm_seconds(0, 2048, 5, 1), four = sim::cuda_gemm_seconds(0, 2048, 5, 4);
  std::printf("# cuBLAS 2048^3 SGEMM: %.3f ms, 4 back-to-back: %.3f ms\n", one * 1e3, four * 1e3);
  EXPECT_GT(one, 0.0);
  EXPECT_GT(four / one, 3.0);
  EXPECT_LT(four / one, 5.0);
}

TEST(CudaDevice, gradients_round_trip_through_the_host_mirror) {
  auto dev = device();
  if (!dev) GTEST_SKIP() << "no CUDA device";
  float* h = dev->host_grads();
  for (std::size_t i = 0; i < dev->grad_floats(); ++i) h[i] = static_cast<float>(i % 7);
  dev->grads_from_host();
  // The copy is asynchronous (from pinned memory, in stream order): the mirror may change only
  // after synchronize(). The first H200 run (results/gpu) wrote -1 before the copy had read it.
  dev->synchronize();
  for (std::size_t i = 0; i < dev->grad_floats(); ++i) h[i] = -1;
  dev->grads_to_host();
  for (std::size_t i = 0; i < dev->grad_floats(); i += 997) EXPECT_EQ(h[i], static_cast<float>(i % 7));
}
