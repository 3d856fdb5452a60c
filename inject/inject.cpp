#include "sf/inject/inject.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <random>
#include <stdexcept>

namespace sf::inject {

std::string_view to_string(Site s) {
  switch (s) {
    case Site::none: return "none";
    case Site::data: return "data";
    case Site::forward_host: return "forward_host";
    case Site::forward_device: return "forward_device";
    case Site::backward_device: return "backward_device";
    case Site::backward_collective: return "backward_collective";
    case Site::callbacks: return "callbacks";
    case Site::optimizer: return "optimizer";
    case Site::link: return "link";
  }
  return "?";
}

std::string_view to_string(FaultKind k) {
  switch (k) {
    case FaultKind::none: return "none";
    case FaultKind::host_delay: return "host_delay";
    case FaultKind::device_compute: return "device_compute";
    case FaultKind::collective_entry_delay: return "collective_entry_delay";
    case FaultKind::link_rate: return "link_rate";
  }
  return "?";
}

std::string_view to_string(TelemetryFault f) {
  switch (f) {
    case TelemetryFault::none: return "none";
    case TelemetryFault::late: return "late";
    case TelemetryFault::corrupt: return "corrupt";
    case TelemetryFault::schema_mismatch: return "schema_mismatch";
    case TelemetryFault::drop_steps: return "drop_steps";
  }
  return "?";
}

std::string_view to_string(StragglerKind k) {
  switch (k) {
    case StragglerKind::none: return "none";
    case StragglerKind::cpu_share: return "cpu_share";
    case StragglerKind::pause: return "pause";
    case StragglerKind::cgroup: return "cgroup";
  }
  return "?";
}

const std::vector<StragglerKind>& straggler_kinds() {
  static const std::vector<StragglerKind> kinds = {StragglerKind::cpu_share, StragglerKind::pause, StragglerKind::cgroup};
  return kinds;
}

double default_strength(StragglerKind k) {
  switch (k) {
    case StragglerKind::cpu_share: return 2;
    case StragglerKind::pause: return 0.3;
    case StragglerKind::cgroup: return 0.25;
    case StragglerKind::none: break;
  }
  return 0;
}

std::string delay_bound_problem(double delay_ms) {
  if (delay_ms >= 0 && delay_ms <= kMaxDelayMs) return "";  // NaN fails both
  char bound[32];
  std::snprintf(bound, sizeof bound, "%g", kMaxDelayMs);
  return std::string("--delay-ms must be in [0, ") + bound + "]";
}

std::string_view straggler_strength_meaning(StragglerKind k) {
  switch (k) {
    case StragglerKind::cpu_share: return "busy processes sharing the rank's core, 1..16";
    case StragglerKind::pause: return "fraction of each 100 ms the rank is stopped, 0.05..0.9";
    case StragglerKind::cgroup: return "the rank's CPU quota in cores, 0.01..4";
    case StragglerKind::none: break;
  }
  return "";
}

std::string check_strength(StragglerKind k, double x) {
  bool ok = std::isfinite(x);
  switch (k) {
    case StragglerKind::cpu_share: ok = ok && x >= 1 && x <= 16 && x == std::floor(x); break;
    case StragglerKind::pause: ok = ok && x >= 0.05 && x <= 0.9; break;
    case StragglerKind::cgroup: ok = ok && x >= 0.01 && x <= 4; break;
    case StragglerKind::none: return "";
  }
  if (ok) return "";
  char v[32];
  std::snprintf(v, sizeof v, "%g", x);
  return "--straggler-strength " + std::string(v) + " for " + std::string(to_string(k)) + ": expected " +
         std::string(straggler_strength_meaning(k));
}

std::string validate(const FaultSpec& f, int world) {
  const auto* sc = find_scenario(f.scenario);
  if (!sc) {
    std::string names;
    for (const auto& s : catalogue()) names += (names.empty() ? "" : ", ") + s.name;
    return "--scenario " + f.scenario + ": unknown; expected one of " + names;
  }
  if (f.delay_ms) {
    if (auto why = delay_bound_problem(*f.delay_ms); !why.empty()) return why;
    if (sc->site == Site::link) return "--delay-ms: link_slow is a rate limit; set --link-rate instead";
  }
  if (f.onset < 0 || f.offset <= f.onset)
    return "--offset " + std::to_string(f.offset) + " is not after --onset " + std::to_string(f.onset) + "; expected 0 <= onset < offset (the fault is on from onset up to, not including, offset)";
  if (f.every < 1) return "--every must be >= 1";
  if (f.target_count < 1) return "--targets must be >= 1";
  if (world > 0) {
    for (int r : f.target_ranks)
      if (r < 0 || r >= world) return "--target-rank " + std::to_string(r) + " outside 0.." + std::to_string(world - 1);
    if (f.target_ranks.empty() && f.target_count > world)
      return "--targets " + std::to_string(f.target_count) + " outside 1.." + std::to_string(world);
  }
  if (f.straggler != StragglerKind::none) {
    if (sc->site != Site::none)
      return "--straggler " + std::string(to_string(f.straggler)) + " with --scenario " + f.scenario +
             ": a straggler is the run's fault; expected --scenario none (or no --scenario)";
    return check_strength(f.straggler, f.straggler_strength.value_or(default_strength(f.straggler)));
  }
  if (f.straggler_strength) return "--straggler-strength without --straggler";
  return "";
}

FaultPlan make_plan(const FaultSpec& f, int world, std::uint64_t seed) {
  if (auto why = validate(f, world); !why.empty()) throw std::invalid_argument(why);
  FaultPlan plan;
  plan.scenario = find_scenario(f.scenario);
  plan.delay_ms = f.delay_ms.value_or(plan.scenario->default_delay_ms);
  plan.ranks = f.target_ranks.empty() ? draw_targets(seed, world, f.target_count) : f.target_ranks;
  plan.onset = f.onset;
  plan.offset = f.offset;
  plan.every = f.every;
  plan.straggler = f.straggler;
  if (f.straggler != StragglerKind::none) plan.strength = f.straggler_strength.value_or(default_strength(f.straggler));
  return plan;
}

const std::vector<Scenario>& catalogue() {
  static const std::vector<Scenario> list = {
      {"none", Site::none, FaultKind::none, "", false, false, 0, false, "no fault: the healthy baseline"},
      {"data_tail", Site::data, FaultKind::host_delay, "data.next_wait", false, false, 120, true,
       "main-process stall in next() on the target rank; the others wait at the gradient all-reduce"},
      {"bwd_compute", Site::backward_device, FaultKind::device_compute, "model.backward_cpu_wall", true, false, 120, true,
       "extra device compute in backward on the target rank, before the gradient all-reduce"},
      {"comm_delay", Site::backward_collective, FaultKind::collective_entry_delay, "model.backward_cpu_wall", true, false,
       120, true, "the target rank enters the gradient all-reduce late (link fail-slow stand-in)"},
      {"link_slow", Site::link, FaultKind::link_rate, "model.backward_cpu_wall", true, false, 0, true,
       "the target host's link is rate-limited (tc tbf) while the gradient all-reduce moves a real buffer; "
       "needs test hosts or SF_LINK_DEV (docs/cluster.md)"},
      {"fwd_device", Site::forward_device, FaultKind::device_compute, "model.fwd_loss_cpu_wall", false, false, 120, true,
       "extra device compute queued in forward; it becomes host-visible later, in backward", "model.backward_cpu_wall"},
      {"fwd_host", Site::forward_host, FaultKind::host_delay, "model.fwd_loss_cpu_wall", false, false, 120, true,
       "host-side forward overhead on the target rank"},
      {"callback_sync_tail", Site::callbacks, FaultKind::host_delay, "callbacks.cpu_wall", true, true, 120, true,
       "slow callback on the target rank followed by a barrier in callbacks (sync-bearing)"},
      {"callback_host_tail", Site::callbacks, FaultKind::host_delay, "callbacks.cpu_wall", false, false, 120, false,
       "slow host-only callback, no barrier: visible to the rank, not exposed at its stage"},
      {"optim_host_local", Site::optimizer, FaultKind::host_delay, "optim.step_cpu_wall", false, false, 120, false,
       "host-local optimizer delay with no adjacent barrier: must not be routed to the optimizer"},
  };
  return list;
}

const Scenario* find_scenario(std::string_view name) {
  for (const auto& s : catalogue())
    if (s.name == name) return &s;
  return nullptr;
}

namespace {
/// The plan acts in this step (on its target ranks).
bool acts_in(const FaultPlan& p, std::int64_t step) {
  if (p.straggler != StragglerKind::none) return step >= p.onset && step < p.offset;  // a process-level fault, no site
  if (p.scenario == nullptr || p.scenario->site == Site::none) return false;
  if ((p.scenario->site == Site::link ? p.rate_mbit : p.delay_ms) <= 0) return false;  // a link fault is a rate
  if (step < p.onset || step >= p.offset) return false;
  return !(p.every > 1 && (step - p.onset) % p.every != 0);
}
}  // namespace

bool FaultPlan::targets(int rank) const { return std::find(ranks.begin(), ranks.end(), rank) != ranks.end(); }

bool FaultPlan::active(int rank, std::int64_t step) const { return acts_in(*this, step) && targets(rank); }

double FaultPlan::step_delay_s(Site site, std::int64_t step) const {
  return scenario != nullptr && scenario->site == site && acts_in(*this, step) ? delay_ms * 1e-3 : 0.0;
}

double FaultPlan::delay_s(Site site, int rank, std::int64_t step) const {
  return targets(rank) ? step_delay_s(site, step) : 0.0;
}

std::vector<TruthRecord> truth(const FaultPlan& plan) {
  std::vector<TruthRecord> out;
  if (plan.straggler != StragglerKind::none) {
    // The rank is the truth; its stage is wherever the loss surfaced.
    for (int r : plan.ranks) {
      TruthRecord t;
      t.scenario = "straggler:" + std::string(to_string(plan.straggler));
      t.site = "process";
      t.kind = std::string(to_string(plan.straggler));
      t.rank = r;
      t.onset = plan.onset;
      t.offset = plan.offset;
      t.strength = plan.strength;
      out.push_back(std::move(t));
    }
    return out;
  }
  if (plan.scenario == nullptr || plan.scenario->site == Site::none) return out;
  for (int r : plan.ranks) {
    TruthRecord t;
    t.scenario = plan.scenario->name;
    t.stage = plan.scenario->stage;
    t.site = std::string(to_string(plan.scenario->site));
    t.kind = std::string(to_string(plan.scenario->kind));
    t.rank = r;
    t.delay_ms = plan.delay_ms;
    t.onset = plan.onset;
    t.offset = plan.offset;
    t.every = plan.every;
    t.sync_bearing = plan.scenario->sync_bearing;
    t.should_route = plan.scenario->should_route;
    if (plan.scenario->site == Site::link) {
      t.delay_ms = 0;  // the fault is a rate, not a delay
      t.host = plan.host;
      t.rate_mbit = plan.rate_mbit;
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<int> draw_targets(std::uint64_t seed, int world, int count) {
  std::vector<int> ranks(world);
  std::iota(ranks.begin(), ranks.end(), 0);
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 0x5f);
  std::shuffle(ranks.begin(), ranks.end(), rng);
  ranks.resize(static_cast<std::size_t>(std::clamp(count, 0, world)));
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void precise_sleep_until(std::int64_t deadline_ns, std::int64_t spin_ns) {
  const std::int64_t wake = deadline_ns - spin_ns;
  if (monotonic_ns() < wake) {
    timespec ts{static_cast<time_t>(wake / 1000000000), static_cast<long>(wake % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
  while (monotonic_ns() < deadline_ns) {
  }
}

void host_delay(double seconds, std::int64_t spin_ns) {
  if (seconds <= 0) return;
  precise_sleep_until(monotonic_ns() + static_cast<std::int64_t>(seconds * 1e9), spin_ns);
}

}  // namespace sf::inject
