// RapidCheck generators for stage windows. All generators live here (STYLE.md); they shrink
// towards small windows (few steps, ranks, stages) and small integer-valued durations, and
// cover the edge cases: R = 1, zeros, exact ties, nanosecond and kilosecond magnitudes.
#pragma once

#include "sf/frontier/frontier.h"

#include <rapidcheck.h>

#include <cstdint>
#include <iosfwd>
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

/// Generators used directly by properties.
rc::Gen<double> gen_duration();
rc::Gen<GenWindow> gen_window(int max_steps = 6, int max_ranks = 8, int max_stages = 7);
rc::Gen<GenWindow> gen_sparse_window();   ///< missing (step, rank) records and whole missing steps
rc::Gen<GenWindow> gen_single_rank_window();

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
struct Arbitrary<sf::verify::GenTightness> {
  static Gen<sf::verify::GenTightness> arbitrary();
};
template <>
struct Arbitrary<sf::verify::GenPerturbed> {
  static Gen<sf::verify::GenPerturbed> arbitrary();
};
}  // namespace rc
