// RapidCheck generators for stage windows. All generators live here (STYLE.md); they shrink
// towards small windows (few steps, ranks, stages) and small integer-valued durations, and
// cover the edge cases: R = 1, zeros, exact ties, nanosecond and kilosecond magnitudes.
#pragma once

#include "sf/frontier/frontier.h"
#include "sf/verify/verify.h"

#include <rapidcheck.h>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace sf::verify {

/// A generated window; durations in seconds, index (t·R + r)·S + s.
struct GenWindow {
  int steps = 1, ranks = 1, stages = 1;
  bool with_wall = false;
  std::vector<double> d;          ///< steps·ranks·stages explicit durations
  std::vector<double> wall_delta; ///< steps·ranks: wall = max(0, Σ d + delta) when with_wall
  std::vector<std::uint8_t> present;  ///< steps·ranks; all 1 for complete windows

  double at(int t, int r, int s) const { return d[(static_cast<std::size_t>(t) * ranks + r) * stages + s]; }
  double& at(int t, int r, int s) { return d[(static_cast<std::size_t>(t) * ranks + r) * stages + s]; }
  frontier::StageSchema schema() const;
  frontier::StageMatrix matrix() const;
  /// The one-step matrix of step t (for the streaming path), with step id t.
  frontier::StageMatrix step_matrix(int t) const;
};
std::ostream& operator<<(std::ostream& os, const GenWindow& w);

/// Window with integer-nanosecond durations and per-rank unsynchronised step starts, as a
/// recorder reading a monotonic clock would see it.
struct GenClockWindow {
  int steps = 1, ranks = 1, stages = 1;
  std::vector<std::int64_t> d_ns;     ///< steps·ranks·stages
  std::vector<std::int64_t> start_ns; ///< steps·ranks, rank-local step start
  std::vector<std::int64_t> offset_ns;///< ranks, constant clock offset per rank
};
std::ostream& operator<<(std::ostream& os, const GenClockWindow& w);

/// Inputs of the Proposition 1/2 tightness constructions.
struct GenTightness {
  int ranks = 1, stages = 1;
  double magnitude = 1.0;
};
std::ostream& operator<<(std::ostream& os, const GenTightness& w);

/// A window plus a bounded measurement error (Proposition 3).
struct GenPerturbed {
  GenWindow window;
  double epsilon = 0;
  std::vector<double> unit_error;  ///< in [−1, 1], one per explicit duration
};
std::ostream& operator<<(std::ostream& os, const GenPerturbed& w);

/// A window for the label properties: a synthetic data-parallel window (WindowSpec) plus the
/// labeler's other inputs, drawn so that each label's trigger both holds and fails.
struct GenLabelCase {
  WindowSpec spec;
  bool alternate = false;    ///< the slow rank moves every step (leader switches)
  bool drop_record = false;  ///< rank R−1 misses step 0 (telemetry gate)
  int drop_step = -1;        ///< a whole step with no record (−1: none)
  bool no_wall = false;      ///< records without wall times (schema without a residual)
  int role_mode = 0;         ///< 0 none, 1 all "dp", 2 last rank undeclared, 3 last rank "pp"
  int event_mode = 0;        ///< 0 no event channel, 1 ready samples, 2 with missing samples
  int event_stride = 1;      ///< sample (t + r) % stride == 0
  int event_rank = -1;       ///< rank with event_high_s (others event_low_s)
  double event_low_s = 0.02, event_high_s = 0.2;
  unsigned wait_mask = 0;    ///< groups with W_s = 1 (bit g)
  bool reference = false;    ///< gain baseline: the no-stall reference = the spec's base costs
  bool scope_limited = false;
  bool two_stages = false;    ///< LabelConfig::co_critical_needs_two_stages
  bool require_wall = true;   ///< LabelConfig::require_wall
  frontier::StageMatrix matrix() const;
  frontier::LabelConfig config() const;
};
std::ostream& operator<<(std::ostream& os, const GenLabelCase& c);

/// Which labels the documented triggers (docs/labeler.md) fire on a case, and its ambiguity set,
/// recomputed from the matrix (never from the packet under test).
struct LabelOracle {
  bool fires[frontier::kLabelCount] = {};
  std::vector<int> ambiguity_set;  ///< C_A ∪ C_G, largest share first
};
LabelOracle label_oracle(const GenLabelCase& c);

/// A stage list with accumulation factor m: `before`, then for each microstep i the loop groups
/// whose present_mask has bit i (named g#i), an un-indexed "hook" after group `inside`'s
/// microstep 0 (−1: none), then `after`.
struct GenAccumulation {
  int m = 1;
  std::vector<std::string> before, loop, after;
  std::vector<unsigned> present_mask;
  int inside = -1;
};
std::ostream& operator<<(std::ostream& os, const GenAccumulation& a);

/// Generators used directly by properties.
rc::Gen<double> gen_duration();
rc::Gen<GenWindow> gen_window(int max_steps = 6, int max_ranks = 8, int max_stages = 7);
rc::Gen<GenWindow> gen_sparse_window();   ///< missing (step, rank) records and whole missing steps
rc::Gen<GenWindow> gen_single_rank_window();
rc::Gen<GenLabelCase> gen_label_case();
rc::Gen<GenAccumulation> gen_accumulation();

}  // namespace sf::verify

namespace rc {
template <>
struct Arbitrary<sf::verify::GenWindow> {
  static Gen<sf::verify::GenWindow> arbitrary() { return sf::verify::gen_window(); }
};
template <>
struct Arbitrary<sf::verify::GenClockWindow> {
  static Gen<sf::verify::GenClockWindow> arbitrary();
};
template <>
struct Arbitrary<sf::verify::GenLabelCase> {
  static Gen<sf::verify::GenLabelCase> arbitrary() { return sf::verify::gen_label_case(); }
};
template <>
struct Arbitrary<sf::verify::GenAccumulation> {
  static Gen<sf::verify::GenAccumulation> arbitrary() { return sf::verify::gen_accumulation(); }
};
template <>
struct Arbitrary<sf::verify::GenTightness> {
  static Gen<sf::verify::GenTightness> arbitrary();
};
template <>
struct Arbitrary<sf::verify::GenPerturbed> {
  static Gen<sf::verify::GenPerturbed> arbitrary();
};
}  // namespace rc
