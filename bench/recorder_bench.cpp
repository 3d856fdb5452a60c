// recorder_bench: the recorder's hot path against a bare steady_clock::now() in the same binary
// (issue target: one boundary <= 1.5x one clock read).
//
//   build/bench/recorder_bench --benchmark_repetitions=5 --benchmark_out=FILE.json
//
// A recorded step is 12 boundaries (begin/end of the step and of five stages); the yardstick
// reads the clock 12 times. Safe points (packing, the gather) are not hot path: they run every
// 4096 steps with the timer paused. Debian's libbenchmark is a DEBUG build of the library.
#include "sf/formats/formats.h"
#include "sf/recorder/recorder.h"

#include <benchmark/benchmark.h>

#include <chrono>

namespace {

constexpr int kBoundariesPerStep = 12;

void BM_steady_clock(benchmark::State& state) {
  for (auto _ : state)
    for (int i = 0; i < kBoundariesPerStep; ++i) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
  state.SetItemsProcessed(state.iterations() * kBoundariesPerStep);
}
BENCHMARK(BM_steady_clock);

void recorded_steps(benchmark::State& state, bool enabled) {
  auto hub = sf::recorder::make_loopback_hub(1);
  auto transport = sf::recorder::make_loopback_transport(hub, 0);
  sf::recorder::RecorderConfig cfg;
  cfg.window_steps = 4096;
  cfg.enabled = enabled;
  sf::recorder::Recorder rec(cfg, *transport, nullptr, [](sf::formats::Window&&, int) {});
  std::int64_t step = 0;
  for (auto _ : state) {
    rec.begin_step(step++);
    for (int s = 0; s < 5; ++s) {
      rec.begin_stage(s);
      rec.end_stage(s);
    }
    rec.end_step();
    if ((step & 4095) == 0) {
      state.PauseTiming();
      rec.safe_point();
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations() * kBoundariesPerStep);
  if (rec.fault_bits() != 0) state.SkipWithError("recorder flagged misuse");
}

void BM_recorder_boundary(benchmark::State& state) { recorded_steps(state, true); }
BENCHMARK(BM_recorder_boundary);

void BM_recorder_off(benchmark::State& state) { recorded_steps(state, false); }
BENCHMARK(BM_recorder_off);

}  // namespace

BENCHMARK_MAIN();
