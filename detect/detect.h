// sf::detect — watching a run over time: online Bayesian change-point detection (Adams & MacKay
// 2007) on the per-step exposed time F[t,S] with FALCON's verification step, FALCON's ACF period
// rule for periodic spikes, the diagnosis window opened at a change, and culprit stability.
//
// Pure like sf::frontier: no MPI, no clock, no files, no threads. Every function here is a
// function of the series (or stage matrix) it is given and a configuration. The decision rule
// and every default are stated in docs/detect.md.
#pragma once

#include "sf/frontier/frontier.h"

#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sf::detect {

// ---- the detector -------------------------------------------------------------------------------

struct DetectConfig {
  /// Constant hazard H = 1/expected run length (steps). P(r_t = 0 | x) equals H whatever the
  /// data, so the decision is taken on short run lengths instead (see short_run, threshold).
  double hazard = 1.0 / 250.0;
  /// Run lengths kept (truncation): memory and work per step are O(max_run_length).
  int max_run_length = 256;
  /// Decision: a change is a candidate when P(r_t <= short_run | x_{1:t}) >= threshold, i.e. the
  /// posterior has moved its mass onto a run that began at most short_run steps ago.
  int short_run = 8;
  double threshold = 0.9;          ///< FALCON's 0.9, applied to the short-run mass
  /// FALCON's verification: a kept change is at least min_gap steps after the previous one, and
  /// |m_l − m_r| / max(m_l, m_r) > min_rel_change (m_l, m_r: medians before and after it). The
  /// same K applies forward: the new level must hold for min_gap steps (both halves of the values
  /// from the change on are beyond the threshold) before the change is confirmed; a shorter
  /// excursion is a transient, counted, not a change.
  int min_gap = 10;
  double min_rel_change = 0.10;
  /// Post-change observations needed before a candidate is verified (and held, see min_gap).
  int min_after = 3;
  /// Changes kept (the last ones; older ones are counted in changes_total()): memory stays
  /// bounded however often a run flaps.
  int max_changes_kept = 256;
  /// Transients kept (the last ones; transients_total() counts them all).
  int max_transients_kept = 64;
  /// Outlier robustness: an observation whose Student-t z-score under the MAP run exceeds
  /// outlier_z (and that differs from the MAP run's mean by more than min_rel_change) is held
  /// back; up to max_outlier_run consecutive ones are dropped as isolated outliers when a
  /// normal observation follows, and fed (a real shift) when one more outlier arrives.
  double outlier_z = 6.0;
  int max_outlier_run = 2;
  /// Contaminated likelihood: each observation is, with probability `contamination`, an outlier
  /// drawn from a proper density (flat over [0, contamination_span · L] with half the mass, a 1/x²
  /// tail beyond; L the reference level) instead of the run's Student-t.
  /// Every run length pays the same capped price for a spike, so load spikes (even periodic ones)
  /// cannot make an old, spike-widened regime explain a level shift better than a new run; and
  /// a run's statistics take each observation with its posterior inlier weight (a new run's first
  /// observation: weight 1). 0 turns it off (plain Adams & MacKay).
  double contamination = 0.05;
  double contamination_span = 10.0;
  /// Normal-Gamma prior of a new run: mean L, κ0, α0, and β0 = α0 · s0² with
  /// s0 = max(prior_rel_sd · |L|, the robust spread of the level window, 1 µs).
  /// The prior's reference level L is the median of the last level_window values fed
  /// (re-anchored every step), not the first value: a slow warm-up step does not set the scale.
  int level_window = 16;
  double kappa0 = 0.01;
  double alpha0 = 1.0;
  double prior_rel_sd = 0.05;
  /// Periodicity (FALCON's ACF rule): the first lag k in [2, max_period] with ACF_k >= acf_min
  /// on the series less its running median, needing at least 3 periods of data, and spikes of the
  /// period: residuals over spike_z robust standard deviations, at least min_repeats of them.
  int max_period = 64;
  double acf_min = 0.5;
  double spike_z = 3.0;
  int min_repeats = 4;
  /// Half-width of the running median removed before the ACF: levels held longer than this are
  /// no period; bursts up to this long are seen as bursts.
  int median_halfwidth = 16;
  /// Per-stage detection (the Watch; --detect-stages): one more detector per stage group on its
  /// advance a[t,g], whose relative change is taken against max(m_l, m_r, stage_floor · L_F), L_F
  /// the reference level of F[t,S]: a stage with a tiny advance does not fire on noise.
  bool per_stage = false;
  double stage_floor = 0.25;
};

/// Returns "" or one line naming the first bad field (what and what was expected).
std::string validate(const DetectConfig& c);

/// A verified change.
struct ChangePoint {
  std::int64_t step = 0;        ///< first step of the new regime
  std::int64_t detected_at = 0; ///< step whose observation confirmed it
  double mean_before = 0, mean_after = 0;      ///< segment means before and after c at confirmation (seconds)
  double median_before = 0, median_after = 0;  ///< segment medians m_l, m_r: what the verification compares
  double rel_change = 0;        ///< |m_l − m_r| / max(m_l, m_r), on the medians
  double short_run_mass = 0;    ///< P(r_t <= short_run) at confirmation
  int direction() const { return median_after > median_before ? +1 : -1; }  ///< +1 slower, −1 recovery
};

/// An excursion that passed the verification's threshold but did not hold for min_gap steps: a
/// hiccup, not a fail-slow onset (or a recovery).
struct Transient {
  std::int64_t step = 0;       ///< first step of the excursion
  std::int64_t judged_at = 0;  ///< step whose observation showed it did not hold
  int steps = 0;               ///< consecutive values from `step` on the excursion's side of the midpoint
  double median_before = 0;    ///< m_l
  double median_during = 0;    ///< median of the values from `step` when it was a candidate
  double rel_change = 0;       ///< of those medians
  int direction() const { return median_during > median_before ? +1 : -1; }
};

/// log Γ(α + ½) − log Γ(α) − ½ log(2απ): the log constant of the Student-t predictive density
/// (ν = 2α) that the detector evaluates per run length; lgamma below α = 10, Stirling's series
/// from there (within 2e-14 of a long-double lgamma on both sides of the switch).
double student_t_log_const(double alpha);

/// Bayesian online change-point detection with a Student-t predictive from a Normal-Gamma prior,
/// truncated run lengths, held-back outliers and FALCON's verification. Feed one value per step;
/// step ids must increase (gaps are allowed: a missing step is simply not observed).
class Detector {
public:
  explicit Detector(DetectConfig cfg = {});

  /// Observes x (finite, >= 0) at `step`; returns the change confirmed by this observation, if
  /// any. Throws std::invalid_argument on a non-finite value or a step that does not increase.
  std::optional<ChangePoint> observe(std::int64_t step, double x);

  const DetectConfig& config() const { return cfg_; }
  /// The kept changes (at most max_changes_kept, the most recent), oldest first.
  std::vector<ChangePoint> changes() const;
  /// Changes confirmed since the start, kept or not.
  std::int64_t changes_total() const { return changes_total_; }
  /// The kept transients (at most max_transients_kept, the most recent), oldest first.
  std::vector<Transient> transients() const { return {transients_.begin(), transients_.end()}; }
  std::int64_t transients_total() const { return transients_total_; }
  /// The reference level L (median of the last level_window values fed; 0 before any).
  double level() const { return level_; }
  /// Relative changes are taken against max(m_l, m_r, floor) from now on (per-stage detection:
  /// a fraction of F's level); 0 (the default) is FALCON's max(m_l, m_r).
  void set_floor(double floor) { floor_ = std::isfinite(floor) && floor > 0 ? floor : 0.0; }
  std::int64_t observed() const { return observed_; }
  std::int64_t outliers_dropped() const { return outliers_dropped_; }   ///< isolated outliers
  std::int64_t candidates_rejected() const { return rejected_; }       ///< failed verification
  /// Posterior over run lengths 0..size()-1 (index r: the current regime holds the last r
  /// observations fed; r = 0 is a regime that has seen nothing yet).
  const std::vector<double>& run_length_posterior() const { return post_; }
  int map_run_length() const;
  /// Memory held (values of every internal buffer); bounded by O(max_run_length).
  std::size_t state_size() const;

private:
  struct Stats { double mu, kappa, alpha, beta; };
  void feed(std::int64_t step, double x);
  std::optional<ChangePoint> decide(std::int64_t step);
  std::optional<ChangePoint> reversion(std::int64_t step);
  std::optional<ChangePoint> verify(std::int64_t c, std::int64_t step, double mass, int min_left);
  std::optional<ChangePoint> hold(std::int64_t step);
  std::optional<ChangePoint> after_feed(std::int64_t step);
  double rel(double a, double b) const;
  Stats prior() const;
  void update_level();

  DetectConfig cfg_;
  bool started_ = false;
  double level_ = 0;                  ///< reference level: median of the last level_window values fed
  double spread_ = 0;                 ///< their robust standard deviation (1.4826 · MAD)
  std::vector<double> level_buf_;     ///< work buffer for the median
  std::int64_t last_step_ = 0;
  std::int64_t observed_ = 0, outliers_dropped_ = 0, rejected_ = 0;
  std::vector<double> post_;          ///< P(r_t = r | x_{1:t}), r = 0..size-1
  std::vector<Stats> stats_;          ///< posterior Normal-Gamma parameters per run length
  std::vector<double> lconst_;        ///< Student-t log constant per run length (α = α0 + r/2, no contamination)
  std::vector<double> scratch_;       ///< per-step work buffer
  std::vector<double> inlier_;        ///< per-step inlier weight per run length (contamination)
  std::deque<std::pair<std::int64_t, double>> history_;   ///< last max_run_length fed values
  std::vector<std::pair<std::int64_t, double>> pending_;  ///< held-back outliers
  std::deque<ChangePoint> changes_;   ///< the last max_changes_kept
  static constexpr std::size_t kChangeFields = 8;  ///< values per kept change (state_size)
  std::int64_t changes_total_ = 0;
  std::optional<ChangePoint> held_;   ///< a verified candidate waiting to hold for min_gap steps
  std::deque<Transient> transients_;  ///< the last max_transients_kept
  static constexpr std::size_t kTransientFields = 6;
  std::int64_t transients_total_ = 0;
  double floor_ = 0;                  ///< relative changes are taken against max(m_l, m_r, floor_)
  std::vector<double> left_, right_, half_;  ///< verification work buffers
  std::int64_t segment_start_ = -1;   ///< first step of the current regime (last change or start)
  std::int64_t open_candidate_ = -1;  ///< step of a candidate under verification (or −1)
};

/// Runs a Detector over a whole series (steps first_step, first_step+1, ...).
std::vector<ChangePoint> detect_series(const std::vector<double>& x, std::int64_t first_step, const DetectConfig& cfg = {});

// ---- periodicity --------------------------------------------------------------------------------

struct Periodicity {
  int period = 0;        ///< 0: none found
  double acf = 0;        ///< ACF at that lag
  std::int64_t phase = -1;  ///< first step of the first spike (burst) of the period
  int repeats = 0;       ///< spikes (bursts) of the period found
  int burst = 0;         ///< median length of a burst in steps (1: single-step spikes)
  std::vector<std::int64_t> spike_steps;  ///< every step of every burst, ascending
};

/// FALCON's ACF rule on x, one value per step from first_step (NaN: a step not observed, so a lag
/// is always a lag in steps), after removing a running median of half-width median_halfwidth (a
/// level shift, detected or not, is no period): the first lag k in [2, max_period] with
/// ACF_k >= acf_min that is a local peak, with at least three periods of data, whose residue
/// class of largest mean holds at least min_repeats spikes (bursts shorter than k of residuals
/// over spike_z robust standard deviations), at half or more of its steps between the first spike
/// and the last.
Periodicity periodicity(const std::vector<double>& x, std::int64_t first_step, const DetectConfig& cfg = {});

/// ACF_k = Σ_{t<L−k} (x_t − μ)(x_{t+k} − μ) / Σ_t (x_t − μ)² (FALCON eq., biased form); NaN
/// entries (steps not observed) take part in no sum.
double acf(const std::vector<double>& x, int lag);

// ---- diagnosis at a change ----------------------------------------------------------------------

/// Steps [first, last] of a matrix as a matrix of their own (records, walls and side evidence).
frontier::StageMatrix slice(const frontier::StageMatrix& m, std::int64_t first_step, std::int64_t last_step);

/// What moved at a change: the window before it and the window from it to the next change (or
/// the end), each scored by frontier::evaluate.
struct ChangeDiagnosis {
  ChangePoint change;
  std::int64_t before_first = 0, before_last = -1, after_first = 0, after_last = -1;
  frontier::Evidence before, after;
  std::vector<double> share_delta;   ///< per group: after.shares − before.shares
  int moved_group = -1;              ///< the group whose share grew most (a recovery: shrank most)
};
/// One diagnosis per change; `before` spans from the previous change (or the matrix start),
/// `after` to the next change (or the matrix end). Changes outside the matrix are skipped.
std::vector<ChangeDiagnosis> diagnose(const frontier::StageMatrix& m, const std::vector<ChangePoint>& changes,
                                      const frontier::LabelConfig& cfg);

// ---- culprit stability --------------------------------------------------------------------------

enum class Stability { none, chronic, intermittent, one_off };
std::string_view to_string(Stability s);

struct RankLead {
  int rank = -1;
  int steps_led = 0;          ///< steps where it was the unique leader of the group's advance
  double step_fraction = 0;   ///< steps_led / steps where the group advanced
  double credit_s = 0;        ///< advance of the group credited to it
  double credit_fraction = 0; ///< credit_s / the group's advance
};

struct WindowLead {
  std::int64_t first_step = 0, last_step = -1;
  int advanced_steps = 0;            ///< steps where the group advanced
  std::vector<RankLead> ranks;       ///< ranks with a lead, largest credit first (the top kept_ranks)
  int culprit = -1;                  ///< the rank with >= culprit_credit of the advance, or −1
};

struct CulpritStability {
  int group = -1;                    ///< the followed group
  std::string group_name;
  std::vector<RankLead> overall;     ///< over the run, largest credit first
  std::vector<WindowLead> windows;   ///< the last max_windows_kept windows, oldest first
  int windows_total = 0;             ///< windows over the run (kept or not)
  int culprit = -1;                  ///< the rank that is culprit in most windows, or −1
  int windows_led = 0;               ///< windows where `culprit` is the window's culprit
  int episodes = 0;                  ///< maximal runs of consecutive windows it leads
  double persistence = 0;            ///< windows_led / windows_total
  double step_fraction_in_led = 0;   ///< steps it leads by a clear margin / steps the group advanced, in those windows
  bool ongoing = false;              ///< its last episode reaches the last window
  Stability stability = Stability::none;
  std::string evidence;              ///< one line: the numbers behind the classification
};

struct StabilityConfig {
  int window_steps = 20;             ///< steps per window (matrices with recorder windows: use theirs)
  double culprit_credit = 0.5;       ///< a window's culprit holds at least this share of the advance
  double min_margin = 0.05;          ///< ... with a median lead over the runner-up >= this fraction of F[t,S]
  double steady_step_fraction = 0.5; ///< at or above (steps led by a clear margin): it leads (nearly) every step → not periodic
  int kept_ranks = 4;                ///< ranks listed per window (largest credit first)
  int max_windows_kept = 2048;       ///< per-window records kept (the last ones); the classification counts all
};

/// The group whose culprits are followed when nothing better is known: the group in which a
/// single rank, as the unique leader of the group's advance, is credited with the most exposed
/// time over the matrix (−1: none). A chronic straggler dominates it; healthy jitter spreads
/// credit over all ranks.
int dominant_group(const frontier::StageMatrix& m, const frontier::Accounting& acc);

/// Culprit stability of every group at once, fed window by window and step by step in bounded
/// memory: per group and rank the run's totals, per (group, rank) that was ever a window's culprit
/// its episodes so far, and the last max_windows_kept window records. result(g) classifies group g.
class StabilityTracker {
public:
  StabilityTracker(const frontier::StageSchema& schema, StabilityConfig cfg = {});
  ~StabilityTracker();
  StabilityTracker(StabilityTracker&&) noexcept;
  StabilityTracker& operator=(StabilityTracker&&) noexcept;
  /// Opens a window at step `first_step` (closing the open one, if any).
  void begin_window(std::int64_t first_step);
  /// Tallies step t of m (acc = account(m)); needs an open window.
  void add_step(const frontier::StageMatrix& m, const frontier::Accounting& acc, int t);
  /// Closes the open window (its last step: the last step added); a no-op when none is open.
  void end_window();
  bool window_open() const;
  /// The group with the largest credit to a single rank over the run (dominant_group's rule).
  int dominant_group() const;
  /// Classification of group g over the windows closed so far, with the records of the last
  /// `last_windows` kept windows (a window packet asks for 1).
  CulpritStability result(int group, std::size_t last_windows = static_cast<std::size_t>(-1)) const;
  /// Values held: the kept window records, the per-rank run totals and culprit records (bounded by
  /// max_windows_kept and the number of ranks, not by the length of the run).
  std::size_t state_size() const;

private:
  struct State;
  std::unique_ptr<State> s_;
};

/// Culprit stability of `group` over the matrix. With window_bounds (first steps of windows,
/// ascending) the windows are those; else fixed windows of cfg.window_steps.
CulpritStability culprit_stability(const frontier::StageMatrix& m, const frontier::Accounting& acc, int group,
                                   const StabilityConfig& cfg = {},
                                   const std::vector<std::int64_t>& window_bounds = {});

}  // namespace sf::detect
