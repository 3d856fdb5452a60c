// sf::inject — the scenario catalogue, fault plans with ground truth, and host injection
// primitives. Knows nothing of the frontier math or the recorder.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sf::inject {

/// Where in the synthetic step a fault is applied.
enum class Site {
  none,
  data,                 ///< main-process wait in next() (a worker-to-main stall)
  forward_host,         ///< host work in forward
  forward_device,       ///< device work queued in forward
  backward_device,      ///< device work queued in backward, before the gradient sync
  backward_collective,  ///< host delay entering the gradient collective
  callbacks,            ///< host work in callbacks
  optimizer,            ///< host work in the optimizer step
  link,                 ///< the target host's network link (a real rate limit, not a delay)
};

enum class FaultKind { none, host_delay, device_compute, collective_entry_delay, link_rate };

std::string_view to_string(Site s);
std::string_view to_string(FaultKind k);

/// One catalogue entry: what is injected, into which stage, and what a correct diagnosis is.
struct Scenario {
  std::string name;
  Site site;
  FaultKind kind;
  std::string stage;         ///< reporting stage the fault lives in ("" for none)
  bool sync_bearing;         ///< the injected span itself ends in a synchronisation
  bool sync_callbacks;       ///< the workload places a barrier in callbacks
  double default_delay_ms;
  bool should_route;         ///< false: a correct frontier leaves the stage unrouted
  std::string injects;       ///< one sentence for `sf-testbed scenarios`
  /// Where a correct diagnosis names the fault when the evidence cannot see its own stage: device
  /// work queued in forward is host-visible only where the host waits for the device (backward),
  /// unless CUDA-event pairs time forward ("" for every other scenario).
  std::string surfaces_without_events = "";
};

const std::vector<Scenario>& catalogue();
/// nullptr when unknown.
const Scenario* find_scenario(std::string_view name);

inline constexpr std::int64_t kForever = std::numeric_limits<std::int64_t>::max();

/// The longest delay a fault injects (ms; ten minutes): the one bound `run`, `sim`, their options
/// and train.py (through sf_torch._core.max_delay_ms) check --delay-ms against.
inline constexpr double kMaxDelayMs = 600000;
/// "--delay-ms must be in [0, 600000]": what each front-end says when a delay is out of bounds.
std::string delay_bound_problem(double delay_ms);

/// A straggler nobody injected into a stage (issue 38): the testbed slows a rank's whole process
/// from outside, and the rank's stages are left as they are. cpu_share: busy processes share the
/// rank's core with it; pause: a supervisor stops it (SIGSTOP) and lets it go on (SIGCONT) in
/// bursts; cgroup: a CPU quota on a cgroup of its own (where the machine allows one).
enum class StragglerKind { none, cpu_share, pause, cgroup };
std::string_view to_string(StragglerKind k);
/// Every kind but none, for option lists.
const std::vector<StragglerKind>& straggler_kinds();
/// The strength a kind runs at unless told (see straggler_strength_meaning).
double default_strength(StragglerKind k);
/// What a kind's strength means, and its range, for --help and error lines.
std::string_view straggler_strength_meaning(StragglerKind k);
/// "" when `strength` is in the kind's range, else the one line that says which range.
std::string check_strength(StragglerKind k, double strength);

/// A fault applied to some ranks over a step interval, optionally only every K-th step.
struct FaultPlan {
  const Scenario* scenario = nullptr;
  double delay_ms = 0;
  std::vector<int> ranks;
  std::int64_t onset = 0;          ///< first affected step
  std::int64_t offset = kForever;  ///< first unaffected step after onset
  int every = 1;                   ///< periodic spikes: steps onset, onset+K, ...
  /// Link faults (Site::link): the throttled host, its rate, and the ranks on it (`ranks`).
  std::string host;
  double rate_mbit = 0;
  /// A straggler from outside the step (the scenario is then "none"): the kind and its strength,
  /// on `ranks` from onset up to offset.
  StragglerKind straggler = StragglerKind::none;
  double strength = 0;

  bool active(int rank, std::int64_t step) const;
  /// Seconds to inject at `site` on `rank` in `step` (0 when the plan does not apply).
  double delay_s(Site site, int rank, std::int64_t step) const;
  /// The two halves of delay_s, for a caller that visits many ranks in one step (the model at
  /// 10^6 ranks): what a targeted rank gets at `site` in `step`, and whether `rank` is targeted.
  /// delay_s(site, r, t) == (targets(r) ? step_delay_s(site, t) : 0).
  double step_delay_s(Site site, std::int64_t step) const;
  bool targets(int rank) const;
};

/// What a caller asks to inject, as `run`, `sim` and sf_torch's trainer take it from their options:
/// one spec, one check (validate) and one plan (make_plan) for every front-end (issue 41).
struct FaultSpec {
  std::string scenario = "data_tail";
  std::optional<double> delay_ms;  ///< default: the scenario's
  std::vector<int> target_ranks;   ///< default: target_count ranks drawn from the seed (hidden until the verdict)
  int target_count = 1;
  std::int64_t onset = 0, offset = kForever;
  int every = 1;
  /// A straggler from outside the step on the target ranks (the scenario is then "none"), and its
  /// strength (default: the kind's; straggler_strength_meaning).
  StragglerKind straggler = StragglerKind::none;
  std::optional<double> straggler_strength;
};
/// "" when `spec` can be planned, else one line naming the option (--scenario, --delay-ms,
/// --target-rank, --targets, --onset/--offset, --every, --straggler...) and what was expected.
/// `world` > 0: the target ranks and count are checked against it too (0: not known yet).
std::string validate(const FaultSpec& spec, int world = 0);
/// The plan of a valid spec on `world` ranks; the targets are drawn from `seed` unless named.
/// Throws std::invalid_argument with validate's line for an invalid spec.
FaultPlan make_plan(const FaultSpec& spec, int world, std::uint64_t seed);

/// Ground truth of one injected fault (one per affected rank).
struct TruthRecord {
  std::string scenario, stage, site, kind;
  int rank = -1;
  double delay_ms = 0;
  std::int64_t onset = 0, offset = kForever;
  int every = 1;
  bool sync_bearing = false, should_route = true;
  std::string host;      ///< link faults: the throttled host
  double rate_mbit = 0;  ///< link faults: its egress rate
  double strength = 0;   ///< stragglers: the kind's strength (stage "": any stage it surfaces in)
};
std::vector<TruthRecord> truth(const FaultPlan& plan);

/// `count` distinct ranks drawn from `seed` (the hidden target of a run).
std::vector<int> draw_targets(std::uint64_t seed, int world, int count);

/// Telemetry faults the testbed can inject on purpose (the workload must not notice them).
enum class TelemetryFault { none, late, corrupt, schema_mismatch, drop_steps };
std::string_view to_string(TelemetryFault f);

/// Sleeps until `spin_ns` before the deadline, then spins: sleep overshoot is the dominant error
/// on a loaded machine, spinning the last stretch removes most of it.
void precise_sleep_until(std::int64_t deadline_ns, std::int64_t spin_ns);
/// Host delay of `seconds` from now (precise_sleep_until).
void host_delay(double seconds, std::int64_t spin_ns);
/// Monotonic nanoseconds (the same clock as the recorder's).
std::int64_t monotonic_ns();

}  // namespace sf::inject
