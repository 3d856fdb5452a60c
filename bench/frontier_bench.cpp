// frontier_bench: account() and the full labeler (evaluate()) on synthetic windows, beside a
// single-core memcpy of the same bytes as the yardstick (the issue's "Speed" targets).
//
//   build-bench/bench/frontier_bench --benchmark_repetitions=5 --benchmark_out=FILE.json
//
// Names read BM_<what>/R:<ranks>/N:<steps>/real_time; S is always 6 (the default schema).
// bench/report.py turns the JSON into account/memcpy bandwidth ratios. Debian's libbenchmark
// is a DEBUG build of the library: quote that beside any figure.
#include "synthetic.h"

#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using sf::frontier::StageMatrix;

/// The input of the (R, N) case being measured and a destination buffer for the memcpy.
/// Only one case is held at a time: 16384 × 600 × 6 doubles are 472 MB, and main() registers
/// the benchmarks case by case so each matrix is built once.
struct Case {
  int ranks = 0, steps = 0;
  StageMatrix matrix;
  std::vector<double> copy;  // same size as the matrix data, written once so no page faults are timed
};

Case& case_for(int ranks, int steps) {
  static std::unique_ptr<Case> held;
  if (!held || held->ranks != ranks || held->steps != steps) {
    held.reset();  // free the previous case before building the next
    auto c = std::make_unique<Case>();
    c->ranks = ranks;
    c->steps = steps;
    c->matrix = sf::bench::synthetic_matrix(ranks, steps);
    c->copy.assign(static_cast<std::size_t>(c->matrix.data().size()), 0.0);
    held = std::move(c);
  }
  return *held;
}

std::int64_t matrix_bytes(const StageMatrix& m) {
  return static_cast<std::int64_t>(m.data().size()) * static_cast<std::int64_t>(sizeof(double));
}

void set_counters(benchmark::State& state, const StageMatrix& m) {
  state.SetBytesProcessed(state.iterations() * matrix_bytes(m));
  state.counters["R"] = m.ranks();
  state.counters["N"] = m.steps();
  state.counters["S"] = m.stages();
}

void BM_memcpy(benchmark::State& state) {
  Case& c = case_for(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  double* dst = c.copy.data();
  const double* src = c.matrix.data().data();
  const auto bytes = static_cast<std::size_t>(matrix_bytes(c.matrix));
  for (auto _ : state) {
    std::memcpy(dst, src, bytes);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  set_counters(state, c.matrix);
}

void BM_account(benchmark::State& state) {
  Case& c = case_for(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    auto acc = sf::frontier::account(c.matrix);
    benchmark::DoNotOptimize(acc);
  }
  set_counters(state, c.matrix);
}

void BM_evaluate(benchmark::State& state) {
  Case& c = case_for(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    auto e = sf::frontier::evaluate(c.matrix);  // account() + the full labeler, default config
    benchmark::DoNotOptimize(e);
  }
  set_counters(state, c.matrix);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Case by case (memcpy, account, evaluate for one (R, N), then the next) so each matrix is
  // built once. Large cases get a shorter minimum time: one iteration is already long.
  for (const int ranks : {8, 128, 1024, 16384})
    for (const int steps : {100, 600}) {
      const double cells = static_cast<double>(ranks) * steps;
      const double min_time = cells >= 1e6 ? 0.05 : 0.2;
      for (auto [name, fn] : {std::pair{"BM_memcpy", &BM_memcpy}, std::pair{"BM_account", &BM_account},
                              std::pair{"BM_evaluate", &BM_evaluate}})
        benchmark::RegisterBenchmark(name, fn)
            ->Args({ranks, steps})
            ->ArgNames({"R", "N"})
            ->Unit(benchmark::kMillisecond)
            ->MinTime(min_time)
            ->UseRealTime();
    }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
