#include "sf/sim/sim.h"

#include <gtest/gtest.h>

using namespace sf;

TEST(HostStream, work_is_asynchronous_and_visible_at_synchronize) {
  auto dev = sim::make_host_stream_device(64, 0, 4);
  const auto t0 = inject::monotonic_ns();
  dev->compute(0.030);
  dev->spin(0.020);
  EXPECT_LT(inject::monotonic_ns() - t0, 15'000'000);  // queuing returns at once
  dev->synchronize();
  EXPECT_GE(inject::monotonic_ns() - t0, 50'000'000);  // in-order: 30 + 20 ms
}

TEST(HostStream, event_pairs_time_the_device_work_between_them) {
  auto dev = sim::make_host_stream_device(64, 0, 2);
  auto& ev = dev->events();
  dev->compute(0.020);  // work queued before the pair delays it but is not inside it
  const int p = ev.acquire();
  ASSERT_GE(p, 0);
  ev.record_begin(p);
  dev->compute(0.015);
  ev.record_end(p);
  EXPECT_FALSE(ev.query(p).has_value());  // not complete yet: no synchronization here
  dev->synchronize();
  const auto secs = ev.query(p);
  ASSERT_TRUE(secs.has_value());
  EXPECT_GE(*secs, 0.015);
  EXPECT_LT(*secs, 0.020 + 0.015);  // the earlier 20 ms item is outside the pair
  EXPECT_GE(ev.acquire(), 0);
  EXPECT_EQ(ev.acquire(), -1);  // pool exhausted
  ev.release(p);
  EXPECT_EQ(ev.acquire(), p);
}

TEST(Workload, accumulation_unfolds_microstep_stages) {
  sim::WorkloadConfig cfg;
  cfg.accumulation = 2;
  const auto names = sim::workload_stages(cfg);
  ASSERT_EQ(names.size(), 8u);
  EXPECT_EQ(names[0], "data.next_wait#0");
  EXPECT_EQ(names[5], "model.backward_cpu_wall#1");
  EXPECT_EQ(names[6], "callbacks.cpu_wall");
  EXPECT_EQ(sim::workload_stages({}).size(), 5u);
}

TEST(Cuda, cpu_build_says_why_it_has_no_device) {
#ifndef SF_WITH_CUDA
  std::string why;
  EXPECT_FALSE(sim::cuda_available(&why));  // CPU build: says why
  EXPECT_NE(why, "");
#endif
}
