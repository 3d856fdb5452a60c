#include "sim/detail.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <utility>
#include <sys/resource.h>
#include <unistd.h>

namespace sf::sim {

using nlohmann::ordered_json;

namespace {

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string hostname() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  return h;
}

/// CPU time the hypervisor took from this VM (the "steal" column of /proc/stat), as jiffies of
/// steal and of all states; the difference of two readings gives the stolen fraction.
std::pair<double, double> steal_jiffies() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return {0, 0};
  unsigned long long v[8] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                            &v[6], &v[7]);
  std::fclose(f);
  if (n < 8) return {0, 0};
  double total = 0;
  for (auto x : v) total += static_cast<double>(x);
  return {static_cast<double>(v[7]), total};
}

double steal_fraction(std::pair<double, double> a, std::pair<double, double> b) {
  return b.second > a.second ? (b.first - a.first) / (b.second - a.second) : 0.0;
}

/// Schema and provenance fields every result file starts with.
ordered_json provenance(const RunConfig& cfg, const char* schema) {
  ordered_json j;
  j["schema"] = schema;
  j["command"] = cfg.argv;
  j["commit"] = cfg.commit;
  j["date"] = utc_now();
  j["host"] = hostname();
  return j;
}

const char* to_cstr(RecorderMode m) { return m == RecorderMode::off ? "off" : m == RecorderMode::cpu ? "cpu" : "event"; }

/// Concatenates consecutive windows into one run-level window (all measured steps).
formats::Window concat(const std::vector<formats::Window>& windows) {
  formats::Window out;
  if (windows.empty()) return out;
  const auto& first = windows.front().matrix;
  std::int64_t last = first.first_step() - 1;
  for (const auto& w : windows) last = std::max(last, w.matrix.first_step() + w.matrix.steps() - 1);
  out.matrix = frontier::StageMatrix(first.schema(), first.ranks(), first.first_step(),
                                     static_cast<int>(last - first.first_step() + 1));
  out.ranks = windows.front().ranks;
  std::vector<std::string> roles = first.roles();
  const int k = first.schema().explicit_count();
  std::vector<double> d(k);
  for (const auto& w : windows) {
    const auto& m = w.matrix;
    if (roles.empty() && !m.roles().empty()) roles = m.roles();
    out.telemetry.gather_ok = out.telemetry.gather_ok && w.telemetry.gather_ok;
    out.telemetry.dropped_records += w.telemetry.dropped_records;
    for (const auto& r : w.telemetry.reasons) out.telemetry.reasons.push_back(r);
    for (int t = 0; t < m.steps(); ++t)
      for (int r = 0; r < m.ranks(); ++r) {
        if (!m.present(t, r)) continue;
        const int tt = static_cast<int>(m.step_id(t) - first.first_step());
        for (int s = 0; s < k; ++s) d[s] = m.d(t, r, s);
        out.matrix.set_record(tt, r, d, m.wall(t, r));
        if (m.fwd_event_state(t, r) != frontier::EventState::unsampled)
          out.matrix.set_fwd_event(tt, r, m.fwd_event_state(t, r), m.fwd_event_s(t, r));
        if (m.has_sync_wait())
          for (int s = 0; s < k; ++s)
            if (const double v = m.sync_wait(t, r, s); !std::isnan(v)) out.matrix.set_sync_wait(tt, r, s, v);
      }
  }
  if (!roles.empty()) out.matrix.set_roles(roles);
  return out;
}

ordered_json truth_json(const std::vector<inject::TruthRecord>& truth) {
  ordered_json a = ordered_json::array();
  for (const auto& t : truth)
    a.push_back({{"scenario", t.scenario},
                 {"rank", t.rank},
                 {"stage", t.stage},
                 {"site", t.site},
                 {"kind", t.kind},
                 {"delay_ms", t.delay_ms},
                 {"onset", t.onset},
                 {"offset", t.offset == inject::kForever ? ordered_json(nullptr) : ordered_json(t.offset)},
                 {"every", t.every},
                 {"sync_bearing", t.sync_bearing},
                 {"should_route", t.should_route}});
  return a;
}

ordered_json rule_json(const verify::RuleVerdict& v) {
  return {{"top1", v.top1}, {"top2", v.top2}, {"candidate_hit", v.candidate_hit}, {"candidate_size", v.candidate_size}};
}

struct Backends {
  std::unique_ptr<Device> device;
  std::unique_ptr<Comm> comm;
  std::string notes;
};

/// Chooses device and comm backends; returns an error line (identical on every rank) or "".
std::string make_backends(const RunConfig& cfg, MPI_Comm world, int local_rank, Backends& b) {
  std::string why;
  const bool cuda_ok = cuda_available(&why);
  if (cfg.device == DeviceKind::cuda && !cuda_ok) return "--device cuda: " + why;
  if (cfg.comm == CommKind::nccl && !cuda_ok)
    b.notes += "--comm nccl needs a CUDA device (" + why + "); using MPI all-reduce. ";
  if (cfg.device != DeviceKind::host && cuda_ok) {
    b.device = make_cuda_device(local_rank, cfg.grad_floats);
  } else {
    b.device = make_host_stream_device(cfg.grad_floats, cfg.workload.spin_ns);
  }
  if (cfg.comm == CommKind::nccl && cuda_ok && b.device->name() != "host-stream") {
    std::string nccl_why;
    b.comm = make_nccl_comm(world, *b.device, &nccl_why);
    if (!b.comm) b.notes += "--comm nccl unavailable (" + nccl_why + "); using MPI all-reduce. ";
  }
  if (!b.comm) b.comm = make_mpi_comm(world);
  return "";
}

recorder::RecorderConfig recorder_config(const RunConfig& cfg, std::int64_t first_step, int window) {
  recorder::RecorderConfig rc;
  rc.stages = workload_stages(cfg.workload);
  rc.accumulation = cfg.workload.accumulation;
  rc.first_step = first_step;
  rc.window_steps = window;
  rc.event_q = cfg.recorder == RecorderMode::event ? cfg.event_q : 0.0;
  rc.gather_deadline_s = cfg.gather_deadline_s;
  rc.enabled = cfg.recorder != RecorderMode::off;
  const auto idx = detail::stage_index(cfg.workload);
  rc.sync_wait_stages.push_back(idx.bwd.back());
  if (cfg.workload.sync_callbacks) rc.sync_wait_stages.push_back(idx.callbacks);
  if (cfg.workload.sharded) rc.sync_wait_stages.push_back(idx.fwd.front());
  std::sort(rc.sync_wait_stages.begin(), rc.sync_wait_stages.end());
  return rc;
}

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

/// The claim a run is checked against (--check), per scenario family.
struct Claim {
  bool pass = false;
  std::string criterion;
};

Claim check_claim(const inject::Scenario& sc, const frontier::Evidence& e, const verify::Verdict& v,
                  double makespan_gap) {
  Claim c;
  bool ok = true;
  if (sc.site == inject::Site::none) {
    c.criterion = "no strong label";
    for (auto l : e.labels) ok &= !frontier::is_strong(l);
  } else if (!sc.should_route) {
    c.criterion = sc.stage + " not in the routing set";
    ok = !v.frontier.candidate_hit;
  } else if (sc.site == inject::Site::forward_device) {
    c.criterion = sc.stage + " in the top-2 (device work becomes host-visible in backward)";
    ok = v.frontier.top2;
  } else {
    c.criterion = sc.stage + " in the top-2 and the target rank named";
    ok = v.frontier.top2 && v.rank_hit;
  }
  c.criterion += "; exposed makespan within 2% of the slowest-rank wall sum";
  ok &= makespan_gap <= 0.02;
  c.pass = ok;
  return c;
}


}  // namespace

VerdictReport verdict_report(const inject::FaultPlan& plan, const frontier::Evidence& e, double makespan_gap) {
  const auto& scenario = *plan.scenario;
  const auto truth = inject::truth(plan);
  VerdictReport out;
  out.verdict = verify::score(e, {scenario.stage, plan.ranks, scenario.should_route});
  const auto& v = out.verdict;
  const Claim claim = check_claim(scenario, e, v, makespan_gap);
  out.claim_pass = claim.pass;
  out.claim = claim.criterion;
  char line[512];
  auto yn = [](bool flag) { return flag ? "yes" : "no"; };
  out.truth_text = "# truth: ";
  if (truth.empty()) out.truth_text += "no fault";
  for (const auto& r : truth) {
    std::snprintf(line, sizeof line, "rank %d %s %s %.0f ms%s%s; ", r.rank, r.stage.c_str(), r.kind.c_str(), r.delay_ms,
                  r.sync_bearing ? " sync-bearing" : "", r.should_route ? "" : " (must stay unrouted)");
    out.truth_text += line;
  }
  out.truth_text += "\n";
  std::string& t = out.verdict_text;
  if (!truth.empty()) {
    std::snprintf(line, sizeof line, "# verdict: top-1 %s  top-2 %s  candidate hit %s (size %d)  rank hit %s (suspect %d, %s)\n",
                  yn(v.frontier.top1), yn(v.frontier.top2), yn(v.frontier.candidate_hit), v.frontier.candidate_size,
                  yn(v.rank_hit), e.suspect.rank, e.suspect.basis.c_str());
    t += line;
    t += "# baselines top-1/top-2:";
    for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i)
      t += " " + std::string(frontier::to_string(frontier::kBaselineRules[i])) + " " + yn(v.baselines[i].top1) + "/" +
           yn(v.baselines[i].top2);
    t += "\n";
  }
  t += "# check: " + claim.criterion + ": " + (claim.pass ? "PASS" : "FAIL") + "\n";

  auto& j = out.json;
  j["expected"] = {{"stage", scenario.stage}, {"ranks", plan.ranks}, {"should_route", scenario.should_route}};
  j["frontier"] = rule_json(v.frontier);
  j["rank_hit"] = v.rank_hit;
  j["suspect"] = {{"rank", e.suspect.rank}, {"basis", e.suspect.basis}};
  auto& bls = j["baselines"] = ordered_json::object();
  for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i)
    bls[std::string(frontier::to_string(frontier::kBaselineRules[i]))] = rule_json(v.baselines[i]);
  j["check"] = {{"criterion", claim.criterion}, {"pass", claim.pass}};
  return out;
}

MakespanCheck makespan_check(const frontier::Evidence& e, const frontier::StageMatrix& m) {
  MakespanCheck c;
  for (int t = 0; t < m.steps(); ++t) {
    double mx = 0;
    for (int r = 0; r < m.ranks(); ++r)
      if (m.present(t, r)) mx = std::max(mx, m.wall(t, r));
    c.wall_sum_s += mx;
  }
  if (e.exposed_makespan_s > 0) c.gap = std::abs(e.exposed_makespan_s - c.wall_sum_s) / e.exposed_makespan_s;
  return c;
}

namespace {

// ---- overhead mode ----------------------------------------------------------------------------

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
  detail::Workload work(cfg.workload, plan, *b.device, *b.comm, rank);

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
  const auto steal0 = steal_jiffies();
  MPI_Barrier(world);
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
  const double steal = steal_fraction(steal0, steal_jiffies());
  rec_cpu.finish();
  rec_ev.finish();

  double cpu_s = rec_cpu.safe_point_cpu_s() + rec_ev.safe_point_cpu_s(), cpu_sum = 0;
  MPI_Reduce(&cpu_s, &cpu_sum, 1, MPI_DOUBLE, MPI_SUM, 0, world);
  const double boundary_ns = boundary_cost_ns();
  double boundary_sum = 0;
  MPI_Reduce(&boundary_ns, &boundary_sum, 1, MPI_DOUBLE, MPI_SUM, 0, world);
  payload_bytes = static_cast<std::int64_t>(recorder::payload_bytes(recorder_config(ev_cfg, 0, W), W));
  // Peak resident memory of the largest rank (workload + two recorders + the boundary probe):
  // what always-on recording costs in memory, and a guard against a ring sized far too large.
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: ru_maxrss in KiB
  double rss_max_mib = 0;
  MPI_Reduce(&rss_mib, &rss_max_mib, 1, MPI_DOUBLE, MPI_MAX, 0, world);
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
  const int boundaries_per_step = 2 + 2 * static_cast<int>(workload_stages(cfg.workload).size()) + 2;
  const double safe_point_us_per_step = (cpu_sum / size) / (2.0 * cfg.overhead_pairs * W) * 1e6;  // 2W recorded steps/block
  const double rec_cpu_us_per_step = safe_point_us_per_step + boundaries_per_step * (boundary_sum / size) * 1e-3;

  if (!cfg.quiet) {
    std::printf("# sf-testbed run --overhead-pairs %d  commit %s  %s  host %s\n", cfg.overhead_pairs, cfg.commit.c_str(), utc_now().c_str(),
                hostname().c_str());
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
    ordered_json j = provenance(cfg, "sf.overhead/1");
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

}  // namespace

// ---- validation -------------------------------------------------------------------------------

std::string validate(const RunConfig& cfg) {
  const auto* sc = inject::find_scenario(cfg.scenario);
  if (!sc) return "--scenario " + cfg.scenario + ": unknown (see sf-testbed scenarios)";
  if (cfg.delay_ms && (*cfg.delay_ms < 0 || *cfg.delay_ms > 600000)) return "--delay-ms must be in [0, 600000]";
  if (cfg.steps < 1) return "--steps must be >= 1";
  if (cfg.warmup < 0) return "--warmup must be >= 0";
  if (cfg.window < 0) return "--window must be >= 0";
  if (cfg.onset < 0 || cfg.offset <= cfg.onset) return "--onset/--offset: need 0 <= onset < offset";
  if (cfg.every < 1) return "--every must be >= 1";
  if (cfg.event_q < 0 || cfg.event_q > 1) return "--event-q must be in [0, 1]";
  if (cfg.workload.accumulation < 1 || cfg.workload.accumulation > 64) return "--accumulation must be in [1, 64]";
  if (cfg.target_count < 1) return "--targets must be >= 1";
  if (cfg.overhead_pairs < 0) return "--overhead-pairs must be >= 0";
  if (cfg.overhead_pairs > 0 && cfg.overhead_window < 2) return "--overhead-window must be >= 2";
  if (cfg.gather_deadline_s <= 0) return "--gather-deadline must be > 0";
  if ((cfg.telemetry_fault == inject::TelemetryFault::late || cfg.telemetry_fault == inject::TelemetryFault::corrupt) &&
      cfg.telemetry_fault_rank == 0)
    return "--telemetry-fault-rank must not be 0 for late/corrupt (rank 0 is the gather root)";
  if (!cfg.dump.empty() && cfg.recorder == RecorderMode::off) return "--dump needs the recorder (--recorder cpu|event)";
  return "";
}

// ---- run --------------------------------------------------------------------------------------

int run(const RunConfig& cfg, MPI_Comm world) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  auto fail = [&](const std::string& msg) {
    if (rank == 0) std::fprintf(stderr, "sf-testbed run: %s\n", msg.c_str());
    return 2;
  };
  if (const auto v = validate(cfg); !v.empty()) return fail(v);
  for (int r : cfg.target_ranks)
    if (r < 0 || r >= size) return fail("--target-rank " + std::to_string(r) + " outside 0.." + std::to_string(size - 1));
  if (cfg.target_count > size) return fail("--targets " + std::to_string(cfg.target_count) + " > world size");
  if (cfg.telemetry_fault != inject::TelemetryFault::none && (cfg.telemetry_fault_rank < 0 || cfg.telemetry_fault_rank >= size))
    return fail("--telemetry-fault-rank outside the world");

  const auto* scenario = inject::find_scenario(cfg.scenario);
  inject::FaultPlan plan;
  plan.scenario = scenario;
  plan.delay_ms = cfg.delay_ms.value_or(scenario->default_delay_ms);
  plan.ranks = cfg.target_ranks.empty() ? inject::draw_targets(cfg.seed, size, cfg.target_count) : cfg.target_ranks;
  plan.onset = cfg.onset;
  plan.offset = cfg.offset;
  plan.every = cfg.every;

  RunConfig run_cfg = cfg;
  run_cfg.workload.sync_callbacks = cfg.workload.sync_callbacks || scenario->sync_callbacks;

  // Local rank for device selection.
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_rank = 0;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);

  Backends b;
  std::string err;
  try {
    err = make_backends(run_cfg, world, local_rank, b);
  } catch (const std::exception& e) {
    err = e.what();
  }
  int bad = err.empty() ? 0 : 1, any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, world);
  if (any_bad) return fail(err.empty() ? "backend set-up failed on another rank" : err);

  if (cfg.overhead_pairs > 0) return run_overhead(run_cfg, world, plan, b, rank, size);

  const int window = cfg.window > 0 ? cfg.window : cfg.steps;
  auto rc = recorder_config(run_cfg, cfg.warmup, window);
  if (cfg.telemetry_fault == inject::TelemetryFault::schema_mismatch && rank == cfg.telemetry_fault_rank)
    rc.stages.push_back("extra.unexpected_stage");  // this rank's schema no longer matches
  const bool faulty = cfg.telemetry_fault != inject::TelemetryFault::none && rank == cfg.telemetry_fault_rank;
  auto transport = recorder::make_mpi_transport(world);
  if (faulty && (cfg.telemetry_fault == inject::TelemetryFault::late || cfg.telemetry_fault == inject::TelemetryFault::corrupt))
    transport = detail::make_faulty_transport(std::move(transport), cfg.telemetry_fault, 2.5 * cfg.gather_deadline_s);

  // Rank 0: each gathered window is scored and its packet written as soon as it arrives.
  std::vector<formats::Window> windows;
  std::vector<std::string> window_packets;
  double scoring_s = 0;
  auto sink = [&](formats::Window&& w, int index) {
    const std::int64_t t0 = inject::monotonic_ns();
    const auto e = frontier::evaluate(w.matrix, cfg.label, w.telemetry);
    std::string packet = formats::evidence_to_json(e, w.ranks).dump();
    if (!cfg.out_dir.empty()) {
      char name[32];
      std::snprintf(name, sizeof name, "/window_%03d.json", index);
      formats::write_file_atomic(cfg.out_dir + name, packet + "\n");
    }
    window_packets.push_back(std::move(packet));
    windows.push_back(std::move(w));
    scoring_s += static_cast<double>(inject::monotonic_ns() - t0) * 1e-9;
  };
  recorder::Recorder rec(rc, *transport, cfg.recorder == RecorderMode::event ? &b.device->events() : nullptr, sink);
  detail::Workload work(run_cfg.workload, plan, *b.device, *b.comm, rank);

  MPI_Barrier(world);
  for (int t = 0; t < cfg.warmup; ++t) work.step(t, nullptr);
  const std::int64_t t_start = inject::monotonic_ns();
  const auto steal0 = steal_jiffies();
  std::int64_t completed = 0;
  for (std::int64_t t = cfg.warmup; t < cfg.warmup + cfg.steps; ++t) {
    const bool drop = faulty && cfg.telemetry_fault == inject::TelemetryFault::drop_steps && t % 4 == 1;
    work.step(t, &rec, drop);
    ++completed;
    if (run_cfg.workload.fetch_ahead && t + 1 < cfg.warmup + cfg.steps) work.fetch_ahead(t + 1, &rec);
    rec.safe_point();
  }
  const double elapsed_s = static_cast<double>(inject::monotonic_ns() - t_start) * 1e-9;
  const double steal = steal_fraction(steal0, steal_jiffies());
  rec.finish();

  std::int64_t min_completed = 0;
  MPI_Reduce(&completed, &min_completed, 1, MPI_INT64_T, MPI_MIN, 0, world);
  std::int64_t dropped = rec.dropped_records(), dropped_sum = 0;
  MPI_Reduce(&dropped, &dropped_sum, 1, MPI_INT64_T, MPI_SUM, 0, world);
  if (rank != 0) return 0;

  // ---- rank 0: verdict against the injected truth ----
  const auto truth = inject::truth(plan);
  ordered_json result = provenance(cfg, "sf.run/1");
  result["config"] = {{"scenario", cfg.scenario},
                      {"delay_ms", plan.delay_ms},
                      {"ranks", size},
                      {"steps", cfg.steps},
                      {"warmup", cfg.warmup},
                      {"window", window},
                      {"seed", cfg.seed},
                      {"comm", b.comm->name()},
                      {"device", b.device->name()},
                      {"recorder", to_cstr(cfg.recorder)},
                      {"event_q", cfg.recorder == RecorderMode::event ? cfg.event_q : 0.0},
                      {"accumulation", cfg.workload.accumulation},
                      {"sharded", cfg.workload.sharded},
                      {"fetch_ahead", cfg.workload.fetch_ahead},
                      {"sync_callbacks", run_cfg.workload.sync_callbacks},
                      {"telemetry_fault", inject::to_string(cfg.telemetry_fault)},
                      {"gather_deadline_s", cfg.gather_deadline_s}};
  result["truth"] = truth_json(truth);
  result["measured"] = {{"steps_completed_min", min_completed}, {"rank0_elapsed_s", elapsed_s}, {"vm_steal_fraction", steal}};
  result["backend_notes"] = b.notes;

  int exit_code = 0;
  std::string table;
  char line[512];
  std::snprintf(line, sizeof line, "# sf-testbed run  commit %s  %s  host %s\n", cfg.commit.c_str(), utc_now().c_str(), hostname().c_str());
  table += line;
  std::snprintf(line, sizeof line, "# scenario %s: %s\n", scenario->name.c_str(), scenario->injects.c_str());
  table += line;
  std::string targets;
  for (int r : plan.ranks) targets += (targets.empty() ? "" : ",") + std::to_string(r);
  std::snprintf(line, sizeof line,
                "# ranks %d  steps %d (+%d warm-up)  window %d  seed %llu  comm %s  device %s  recorder %s%s\n", size,
                cfg.steps, cfg.warmup, window, static_cast<unsigned long long>(cfg.seed), b.comm->name().c_str(),
                b.device->name().c_str(), to_cstr(cfg.recorder),
                cfg.recorder == RecorderMode::event ? (" (q " + std::to_string(cfg.event_q).substr(0, 4) + ")").c_str() : "");
  table += line;
  if (!b.notes.empty()) table += "# note: " + b.notes + "\n";
  if (cfg.telemetry_fault != inject::TelemetryFault::none)
    table += "# telemetry fault injected: " + std::string(inject::to_string(cfg.telemetry_fault)) + " on rank " +
             std::to_string(cfg.telemetry_fault_rank) + "\n";
  table += "#\n";

  if (windows.empty()) {
    table += "# recorder off: no evidence (steps completed by every rank: " + std::to_string(min_completed) + ")\n";
    std::snprintf(line, sizeof line, "# rank-0 elapsed %.3f s, %.2f ms/step\n", elapsed_s, elapsed_s / cfg.steps * 1e3);
    table += line;
  } else {
    const auto all = concat(windows);
    const auto e = frontier::evaluate(all.matrix, cfg.label, all.telemetry);
    // Cross-check: Σ_t F[t,S] against the slowest rank's measured step wall times.
    const auto [wall_sum, gap] = makespan_check(e, all.matrix);
    const VerdictReport vr = verdict_report(plan, e, gap);
    table += vr.truth_text + "#\n";
    table += formats::evidence_table(e, "evidence over all measured steps (" + std::to_string(windows.size()) + " window(s))");
    std::snprintf(line, sizeof line,
                  "# measured: exposed makespan %.4f s vs slowest-rank wall sum %.4f s (%.2f%% apart); rank-0 elapsed %.4f s\n",
                  e.exposed_makespan_s, wall_sum, gap * 100, elapsed_s);
    table += line;
    table += vr.verdict_text;
    if (cfg.check && !vr.claim_pass) exit_code = 1;
    result["verdict"] = vr.json;
    result["evidence"] = formats::evidence_to_json(e, all.ranks);
    result["measured"]["exposed_makespan_s"] = e.exposed_makespan_s;
    result["measured"]["slowest_rank_wall_sum_s"] = wall_sum;
    result["measured"]["makespan_vs_wall_rel"] = gap;
    result["measured"]["median_step_s"] = e.median_step_s;
    auto& wl = result["windows"] = ordered_json::array();
    for (std::size_t i = 0; i < windows.size(); ++i) {
      const auto pj = ordered_json::parse(window_packets[i]);
      wl.push_back({{"index", i},
                    {"first_step", pj["window"]["first_step"]},
                    {"last_step", pj["window"]["last_step"]},
                    {"shares", pj["shares"]},
                    {"labels", pj["labels"]},
                    {"routing_set", pj["routing_set"]},
                    {"median_step_s", pj["median_step_s"]},
                    {"gather_ok", pj["telemetry"]["gather_ok"]}});
    }
    result["telemetry"] = {{"payload_bytes_per_rank_window", recorder::payload_bytes(rc, window)},
                           {"packet_bytes", window_packets.empty() ? 0 : window_packets.front().size()},
                           {"dropped_records", dropped_sum},
                           {"late_contributions_discarded", transport->late_discarded()},
                           {"rank0_recorder_safe_point_cpu_s", rec.safe_point_cpu_s()},
                           {"rank0_scoring_s", scoring_s}};
  }

  if (!cfg.dump.empty()) {
    std::ostringstream out;
    for (const auto& w : windows) formats::write_jsonl(out, w);
    formats::write_file_atomic(cfg.dump, out.str());
  }
  if (!cfg.out_dir.empty()) formats::write_file_atomic(cfg.out_dir + "/run.json", result.dump(2) + "\n");
  if (!cfg.quiet) std::fputs(table.c_str(), stdout);
  std::fflush(stdout);
  return exit_code;
}

}  // namespace sf::sim
