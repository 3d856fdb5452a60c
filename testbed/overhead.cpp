// The overhead experiment (run --overhead-pairs K): recorder off, CPU-wall and event recorder on
// neighbouring steps of one workload, compared block by block (MPI builds).
#include "detail.h"

#include "sf/check/check.h"
#include "sf/recorder/mpi_transport.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <random>
#include <sys/resource.h>

namespace sf::testbed::detail {

using nlohmann::ordered_json;

namespace {

/// Hot-path cost of one recorder boundary on this rank (ns), measured on a scratch recorder.
double boundary_cost_ns() {
  auto hub = recorder::make_loopback_hub(1);
  auto tr = recorder::make_loopback_transport(hub, 0);
  constexpr int kSteps = 20000;
  recorder::RecorderConfig rc;
  // One window longer than the measurement, so no boundary gathers inside it. The ring is
  // preallocated (steps × stages), so this size is the scratch recorder's memory: sized to the
  // measurement it is a few MB, where a 2^20-step window was 330 MB per rank and put a 128-rank
  // overhead run out of memory on a 24 GiB machine.
  rc.window_steps = kSteps + 1;
  recorder::Recorder rec(rc, *tr);
  timespec a{}, b{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (int t = 0; t < kSteps; ++t) {
    rec.begin_step(t);
    for (int s = 0; s < 5; ++s) {
      rec.begin_stage(s);
      rec.end_stage(s);
    }
    rec.end_step();
    if ((t & 1023) == 1023) rec.safe_point();
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  const double ns = static_cast<double>(b.tv_sec - a.tv_sec) * 1e9 + static_cast<double>(b.tv_nsec - a.tv_nsec);
  return ns / (kSteps * 12.0);
}

struct Interval {
  double mean, lo, hi;
};

/// Mean of per-block relative overheads with a percentile bootstrap over whole blocks.
Interval bootstrap(const std::vector<double>& x, std::uint64_t seed, int resamples = 4000) {
  Interval out{0, 0, 0};
  if (x.empty()) return out;
  out.mean = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, x.size() - 1);
  std::vector<double> means(static_cast<std::size_t>(resamples));
  for (auto& m : means) {
    double s = 0;
    for (std::size_t i = 0; i < x.size(); ++i) s += x[pick(rng)];
    m = s / static_cast<double>(x.size());
  }
  std::sort(means.begin(), means.end());
  out.lo = means[static_cast<std::size_t>(0.025 * (resamples - 1))];
  out.hi = means[static_cast<std::size_t>(0.975 * (resamples - 1))];
  return out;
}

}  // namespace

int run_overhead(const RunConfig& cfg, MPI_Comm world, const inject::FaultPlan& plan, Backends& b, int rank, int size) {
  const int W = cfg.overhead_window;
  RunConfig cpu_cfg = cfg, ev_cfg = cfg;
  cpu_cfg.recorder = RecorderMode::cpu;
  ev_cfg.recorder = RecorderMode::event;
  auto tr_cpu = recorder::make_mpi_transport(world);
  auto tr_ev = recorder::make_mpi_transport(world);
  std::int64_t payload_bytes = 0, packet_bytes = 0;
  auto sink = [&](formats::Window&& w, int) {
    const auto e = frontier::evaluate(w.matrix, cfg.label, w.telemetry);
    packet_bytes = std::max<std::int64_t>(packet_bytes, static_cast<std::int64_t>(formats::evidence_to_json(e, w.ranks).dump().size()));
  };
  recorder::Recorder rec_cpu(recorder_config(cpu_cfg, 0, W), *tr_cpu, nullptr, sink);
  recorder::Recorder rec_ev(recorder_config(ev_cfg, 0, W), *tr_ev, &b.device->events(), sink);
  sim::Workload work(cfg.workload, plan, *b.device, *b.comm, rank);

  std::int64_t step = 0;
  for (int t = 0; t < cfg.warmup; ++t) work.step(step++, nullptr);
  // Modes alternate step by step (off, cpu, event in a rotating order per triplet), so every
  // comparison is between neighbouring steps that saw the same machine: the VM's steal bursts
  // last seconds and would swamp a window-by-window comparison. A block is W triplets; rank 0
  // times every step, safe point included.
  const RecorderMode orders[3][3] = {{RecorderMode::off, RecorderMode::cpu, RecorderMode::event},
                                     {RecorderMode::cpu, RecorderMode::event, RecorderMode::off},
                                     {RecorderMode::event, RecorderMode::off, RecorderMode::cpu}};
  std::int64_t local[2] = {0, 0};  // per recorder: its own contiguous step ids
  std::vector<std::array<std::vector<double>, 3>> block_steps(static_cast<std::size_t>(cfg.overhead_pairs));
  SF_MPI_CHECK(MPI_Barrier(world));
  const StealMeter steal_meter;
  for (int k = 0; k < cfg.overhead_pairs; ++k)
    for (int i = 0; i < W; ++i)
      for (RecorderMode mode : orders[(k * W + i) % 3]) {
        recorder::Recorder* rec = mode == RecorderMode::cpu ? &rec_cpu : mode == RecorderMode::event ? &rec_ev : nullptr;
        const std::int64_t t0 = inject::monotonic_ns();
        if (rec) {
          work.step(local[rec == &rec_cpu ? 0 : 1]++, rec);
          rec->safe_point();
        } else {
          work.step(step, nullptr);
        }
        ++step;
        block_steps[static_cast<std::size_t>(k)][static_cast<int>(mode)].push_back(
            static_cast<double>(inject::monotonic_ns() - t0) * 1e-9);
      }
  const double steal = steal_meter.fraction();
  rec_cpu.finish();
  rec_ev.finish();

  double cpu_s = rec_cpu.safe_point_cpu_s() + rec_ev.safe_point_cpu_s(), cpu_sum = 0;
  SF_MPI_CHECK(MPI_Reduce(&cpu_s, &cpu_sum, 1, MPI_DOUBLE, MPI_SUM, 0, world));
  const double boundary_ns = boundary_cost_ns();
  double boundary_sum = 0;
  SF_MPI_CHECK(MPI_Reduce(&boundary_ns, &boundary_sum, 1, MPI_DOUBLE, MPI_SUM, 0, world));
  payload_bytes = static_cast<std::int64_t>(recorder::payload_bytes(recorder_config(ev_cfg, 0, W), W));
  // Peak resident memory of the largest rank (workload + two recorders + the boundary probe):
  // what always-on recording costs in memory, and a guard against a ring sized far too large.
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: ru_maxrss in KiB
  double rss_max_mib = 0;
  SF_MPI_CHECK(MPI_Reduce(&rss_mib, &rss_max_mib, 1, MPI_DOUBLE, MPI_MAX, 0, world));
  if (rank != 0) return 0;

  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  auto mean = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  // Per block: throughput overhead (ratio of mean step times) and the median-step ratio.
  std::vector<double> ov_cpu, ov_ev, med_cpu, med_ev, all[3];
  for (const auto& blk : block_steps) {
    ov_cpu.push_back(mean(blk[1]) / mean(blk[0]) - 1.0);
    ov_ev.push_back(mean(blk[2]) / mean(blk[0]) - 1.0);
    med_cpu.push_back(median(blk[1]) / median(blk[0]) - 1.0);
    med_ev.push_back(median(blk[2]) / median(blk[0]) - 1.0);
    for (int m = 0; m < 3; ++m) all[m].insert(all[m].end(), blk[m].begin(), blk[m].end());
  }
  const Interval ci_cpu = bootstrap(ov_cpu, cfg.seed), ci_ev = bootstrap(ov_ev, cfg.seed + 1);
  const Interval mci_cpu = bootstrap(med_cpu, cfg.seed + 2), mci_ev = bootstrap(med_ev, cfg.seed + 3);
  const auto &t_off = all[0], &t_cpu = all[1], &t_ev = all[2];
  // Recorder CPU per recorded step: safe points (packing, gather, rank-0 scoring) measured as
  // thread CPU time, plus the hot-path boundaries at their calibrated cost.
  const int boundaries_per_step = 2 + 2 * static_cast<int>(sim::workload_stages(cfg.workload).size()) + 2;
  const double safe_point_us_per_step = (cpu_sum / size) / (2.0 * cfg.overhead_pairs * W) * 1e6;  // 2W recorded steps/block
  const double rec_cpu_us_per_step = safe_point_us_per_step + boundaries_per_step * (boundary_sum / size) * 1e-3;

  if (!cfg.quiet) {
    std::printf("# sf-testbed run --overhead-pairs %d  commit %s  %s  host %s\n", cfg.overhead_pairs, cfg.commit.c_str(), utc_now().c_str(),
                host_name().c_str());
    std::printf("# ranks %d, %d blocks of %d step triplets (off/cpu/event alternating step by step, rotating order),"
                " scenario %s, event q %.3g\n", size, cfg.overhead_pairs, W, cfg.scenario.c_str(), cfg.event_q);
    std::printf("#\n# %-6s %6s %11s %14s %22s %14s %22s\n", "mode", "steps", "median step", "throughput", "95% CI (bootstrap)",
                "median-step", "95% CI (bootstrap)");
    std::printf("# %-6s %6s %11s %14s %22s %14s %22s\n", "", "", "ms", "overhead %", "%", "overhead %", "%");
    std::printf("  %-6s %6zu %11.2f %14s %22s %14s %22s\n", "off", t_off.size(), median(t_off) * 1e3, "-", "-", "-", "-");
    std::printf("  %-6s %6zu %11.2f %14.3f %10.3f .. %-9.3f %14.3f %10.3f .. %-9.3f\n", "cpu", t_cpu.size(),
                median(t_cpu) * 1e3, ci_cpu.mean * 100, ci_cpu.lo * 100, ci_cpu.hi * 100, mci_cpu.mean * 100,
                mci_cpu.lo * 100, mci_cpu.hi * 100);
    std::printf("  %-6s %6zu %11.2f %14.3f %10.3f .. %-9.3f %14.3f %10.3f .. %-9.3f\n", "event", t_ev.size(),
                median(t_ev) * 1e3, ci_ev.mean * 100, ci_ev.lo * 100, ci_ev.hi * 100, mci_ev.mean * 100, mci_ev.lo * 100,
                mci_ev.hi * 100);
    std::printf("# recorder CPU per step %.2f us (boundary %.1f ns x %d, safe points %.2f us); payload %lld B/rank/window; packet %lld B\n",
                rec_cpu_us_per_step, boundary_sum / size, boundaries_per_step, safe_point_us_per_step,
                static_cast<long long>(payload_bytes),
                static_cast<long long>(packet_bytes));
    std::printf("# goal: CI upper bound <= 0.05%%; paper <= 0.181%% (CPU), <= 0.043%% (event). cpu %.3f%%, event %.3f%%\n",
                ci_cpu.hi * 100, ci_ev.hi * 100);
    std::printf("# the hypervisor took %.1f%% of this VM's CPU during the measurement (/proc/stat steal)\n", steal * 100);
    std::printf("# peak resident memory of the largest rank: %.1f MiB\n", rss_max_mib);
  }
  if (!cfg.out_dir.empty()) {
    ordered_json j = provenance_json("sf.overhead/1", cfg.argv, cfg.commit);
    j["ranks"] = size;
    j["window_steps"] = W;
    j["blocks"] = cfg.overhead_pairs;
    j["seed"] = cfg.seed;
    j["event_q"] = cfg.event_q;
    j["median_step_ms"] = {{"off", median(t_off) * 1e3}, {"cpu", median(t_cpu) * 1e3}, {"event", median(t_ev) * 1e3}};
    auto interval = [](const Interval& iv) {
      return ordered_json{{"mean", iv.mean * 100}, {"ci_low", iv.lo * 100}, {"ci_high", iv.hi * 100}};
    };
    j["overhead_pct"] = {{"cpu", interval(ci_cpu)}, {"event", interval(ci_ev)}};
    j["median_step_overhead_pct"] = {{"cpu", interval(mci_cpu)}, {"event", interval(mci_ev)}};
    auto& blocks = j["block_mean_step_s"] = ordered_json::array();
    for (const auto& blk : block_steps) blocks.push_back({{"off", mean(blk[0])}, {"cpu", mean(blk[1])}, {"event", mean(blk[2])}});
    j["recorder_cpu_us_per_step"] = rec_cpu_us_per_step;
    j["boundary_ns"] = boundary_sum / size;
    j["payload_bytes_per_rank_window"] = payload_bytes;
    j["packet_bytes"] = packet_bytes;
    j["vm_steal_fraction"] = steal;
    j["peak_rss_mib_per_rank"] = rss_max_mib;
    formats::write_file_atomic(cfg.out_dir + "/overhead.json", j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace sf::testbed::detail
