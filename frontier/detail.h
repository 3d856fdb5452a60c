// Internal to sf::frontier (not part of the public interface): the per-step pieces shared by
// the whole-window and streaming paths, so both accumulate exactly the same sums in the same
// order and finish through one labeler.
#pragma once

#include "sf/frontier/frontier.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

namespace sf::frontier::detail {

inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// A fixed-size array of zeros that touches none of its memory until it is written. It is
/// calloc'd: glibc serves a large block from fresh mmap pages, which the kernel zeroes on first
/// touch, with no memset. The per-(group, rank) sums of 10^6 ranks, of which most stay zero
/// (few ranks ever lead a stage), so cost neither a memset nor a page fault per page up front;
/// std::vector's value-initialisation wrote every byte. Arrays written for every rank every step
/// stay vectors: all their pages are touched at once anyway, and sf-testbed's operator new
/// (cli/huge_pages.cpp) puts them on huge pages. Arithmetic element types only (all-zero bytes
/// are their 0).
template <class T>
class ZeroArray {
  static_assert(std::is_arithmetic_v<T>);

public:
  ZeroArray() = default;
  explicit ZeroArray(std::size_t n) : p_(n > 0 ? static_cast<T*>(std::calloc(n, sizeof(T))) : nullptr), n_(n) {
    if (n > 0 && p_ == nullptr) throw std::bad_alloc();
  }
  T& operator[](std::size_t i) { return p_.get()[i]; }
  const T& operator[](std::size_t i) const { return p_.get()[i]; }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  std::size_t size() const { return n_; }
  const T* begin() const { return p_.get(); }
  const T* end() const { return p_.get() + n_; }

private:
  struct Free {
    void operator()(T* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<T, Free> p_;
  std::size_t n_ = 0;
};

/// One step's frontier row: F, a, gap and leaders per stage, tie sets where leader == kTie.
struct StepFrontier {
  std::vector<double> frontier, advance, gap;
  std::vector<int> leader;
  std::vector<std::vector<int>> tie;
};

/// Step t's accounting (account() for one row): one branch-free pass per stage. p is scratch
/// (the running prefixes, resized to the ranks); out's vectors are reused. The verifier checks it
/// against the paper's scalar loop (`account_equals_scalar_loop`).
void account_step(const StageMatrix& m, int t, const AccountOptions& opt, std::vector<double>& p, StepFrontier& out);
/// account_step of a complete step (every rank present) whose prefixes are already formed:
/// prefix[s] points at P[t,·,s] (ranks values, each the same 0 + d + … account_step forms), top[s]
/// is their largest value and second[s] the largest of the rest (the top two of the multiset,
/// which any order of max and min finds). Bit for bit account_step's row.
void account_from_prefixes(const AccountOptions& opt, int ranks, std::span<const double* const> prefix,
                           std::span<const double> top, std::span<const double> second, StepFrontier& out);
/// account_from_prefixes without the prefixes at hand: first_top[s] is the first rank whose
/// prefix is top[s], and prefixes(s) forms P[t,·,s] (as account_step forms it) only where
/// several ranks attain the frontier within the tie tolerance. Bit for bit the same row.
void account_from_tops(const AccountOptions& opt, int ranks, std::span<const double> top, std::span<const double> second,
                       std::span<const int> first_top, const std::function<const double*(int)>& prefixes,
                       StepFrontier& out);
/// account()'s result before any step: every step unscored.
Accounting empty_accounting(const StageMatrix& m);
/// Step t's accounting f (account_step's) into acc's row t, as account() stores it.
void store_step(Accounting& acc, int t, const StepFrontier& f);
/// Step t's row of acc into f (f's vectors reused).
void step_frontier_from(const Accounting& acc, int t, StepFrontier& f);


/// A growable array of doubles whose growth writes nothing (std::vector's resize wrote every
/// value): the selections write every place before they read it, so the pages of a buffer sized
/// for 10^6 values that one selection never reaches are never touched.
class UnwrittenBuffer {
public:
  double* data() { return p_.get(); }
  /// At least n places; what they hold is undefined until written.
  void grow(std::size_t n) {
    if (n <= n_) return;
    p_ = std::make_unique_for_overwrite<double[]>(n);
    n_ = n;
  }

private:
  std::unique_ptr<double[]> p_;
  std::size_t n_ = 0;
};

/// Buffers median_of() reuses between calls (a streaming step over 10^6 ranks takes eleven
/// medians: allocating them each time would cost more than selecting).
struct SelectScratch {
  std::vector<double> a, tail;  // the portable selections' copy; select_kth_avx512's last round
  UnwrittenBuffer split[3];     // select_kth_avx512: the three rotating buffers of its splits
  UnwrittenBuffer keep;         // middle_of: the values inside a hint's bracket
  UnwrittenBuffer inner;        // middle_of: those of keep inside a narrower, interpolated bracket
  std::vector<double> sample;   // middle_of: a sample of the array when the guess missed
};
/// Which selection median_of runs: `fastest` takes AVX-512 compress splits where the processor
/// has them (checked once at run time), `portable` the scalar quickselect; the value is the same.
enum class SelectPath { fastest, portable };
/// True when median_of's `fastest` path uses AVX-512 on this processor.
bool vector_select_available();
/// Median of x (non-empty), x left unchanged: the same value median_inplace gives.
double median_of(std::span<const double> x, SelectScratch& scratch, SelectPath path = SelectPath::fastest);
/// The middle order statistics of n values a[0] ≤ … ≤ a[n−1], k = n/2: everything a median, a
/// leave-one-out median (the standings) and the arrivals' lower median read, from one selection.
struct Middle {
  std::size_t n = 0;
  double lo = 0;   ///< a[k−1] (0 when n < 2)
  double mid = 0;  ///< a[k]
  double hi = 0;   ///< a[k+1] when n is odd and > 1, else 0 (the leave-one-out rule reads it only then)
  /// The median as median_inplace takes it: a[k], or for even n the two middle values averaged.
  double median() const { return n % 2 == 1 ? mid : lo + (mid - lo) / 2; }
};
/// Where the middle of a series of arrays (one stage's column, step after step) lay last time: a
/// bracket [centre − width, centre + width] that one pass filters the next array through. A guess
/// only: when the middle values fall outside it, middle_of selects over every value as without it,
/// so the answer never depends on the hint, only the time.
struct MiddleHint {
  double centre = 0, width = -1;  // width < 0: no guess yet
  std::size_t misses = 0;         // arrays the bracket did not hold (for the benchmark's notes)
  /// The last guess missed (a middle that moves further than the spread around it between two
  /// arrays): the next bracket is read off a sample of the array itself, until a middle again
  /// lies where last time's guess would have held it.
  bool sample = false;
};
/// x's middle order statistics (x non-empty, unchanged). With a hint, one pass keeps the values
/// inside its bracket and selects among those; the hint is then moved to this array's middle.
/// Values bit for bit those of median_inplace / select over a copy. `next`, when given, is an
/// array read later (x.size() values or more): the bracket's pass fetches it towards L2.
Middle middle_of(std::span<const double> x, SelectScratch& scratch, MiddleHint* hint = nullptr,
                 SelectPath path = SelectPath::fastest, const double* next = nullptr);
/// The middle of n values that a pass of the caller's hands over block by block and never
/// stores whole (the lag's prefixes, formed in WindowStats' rank pass): begin() sets the bracket
/// middle_of would filter them through — the hint's, or, in its sample mode, one read off the
/// values at places i·n/m, i < m = sample_count(n), which the caller forms first — add() filters
/// each block through it, in order, and finish() selects among those kept: middle_of's values
/// and hint, bit for bit. begin() is false where middle_of would not bracket (no guess yet, no
/// AVX-512, fewer than 64 values) and finish() where the bracket missed (the hint not moved):
/// the caller then forms the values and calls middle_of with the same hint, which brackets,
/// misses and moves it as it would have.
class StreamedMiddle {
public:
  static std::size_t sample_count(std::size_t n);
  /// `sample`: the m values at places i·n/m when hint.sample (reordered here), else unread.
  bool begin(MiddleHint& hint, std::size_t n, std::span<double> sample);
  void add(const double* v, std::size_t len);  // nothing when begin() was false
  bool finish(SelectScratch& scratch, Middle& out);

private:
  MiddleHint* hint_ = nullptr;  // null: begin() was false
  std::size_t n_ = 0, inside_ = 0, below_ = 0;
  double lo_ = 0, hi_ = 0;
  bool sampled_ = false;
  std::unique_ptr<double[]> keep_;  // the values inside [lo_, hi_], 8 spare slots past them
  std::size_t cap_ = 0;
};
/// The bytes of a step's stage columns and prefix rows, (2S − 1) · n · 8 at S stages and n present
/// ranks, from which a rank pass runs lean (WindowStats::rank_pass: no prefix rows kept). Below it
/// the rows stay in L2 beside the columns and cost less than the lean pass's work per block
/// (evaluate at 1024 × 600 × 6 took a median 4 % more time lean over four paired runs of
/// frontier_bench on an AMD EPYC host); past it the rows and the columns, read again by the rank
/// pass after the cohort pass, no longer fit in a 1 MiB L2 together (at 16384 × 600 × 6, 1.4 MiB a
/// step: no difference on the EPYC host, lean 0.93 of kept on an Intel Xeon Skylake-SP host in
/// thirteen paired runs). At six stages the line falls at 11916 ranks. Tests set 0 (always lean)
/// and the largest value (never) to check the one against the other. Only the time depends on it.
inline std::atomic<std::int64_t> lean_rank_pass_bytes{std::int64_t{1} << 20};
/// The median of n − 1 values: the n values' order statistics a[k−1] = lo, a[k] = mid and (n odd)
/// a[k+1] = hi, k = n/2, without the value v (the standings' leave-one-out rule: with n − 1 even,
/// the upper middle). n ≥ 2.
double loo_median(double v, std::size_t n, double lo, double mid, double hi);

/// The median of a stream of finite values >= 0, in memory that does not grow with the count:
/// exact (median_inplace over every value) while it holds at most exact_cap values (0: no cap,
/// always exact), then read from a histogram of log2 bins 1/1024 wide (a bin's value is its
/// geometric midpoint, within 0.034 % of every value in it; 0 has a bin of its own). The bins in
/// use grow with log(max/min) of the values, not with their count: an always-on run caps its
/// run-level medians this way (StreamingAccumulator::bound_medians), a window never does.
class MedianKeeper {
public:
  explicit MedianKeeper(std::size_t exact_cap = 0) : cap_(exact_cap) {}
  void add(double v);
  std::size_t count() const { return n_; }
  bool empty() const { return n_ == 0; }
  /// True while every value is kept (the median is then median_inplace's to the bit).
  bool exact() const { return !binned_; }
  /// The median (0 when empty); even counts average the two middle values, as median_inplace.
  double median() const;
  /// Bins in use (0 while exact).
  std::size_t bins() const { return bins_.size() + (zeros_ > 0 ? 1 : 0); }
  /// (Q3 − Q1) / 1.349, quartiles interpolated between order statistics (bin midpoints once
  /// binned): a Gaussian's SD read without the tails; −1 below four values.
  double robust_sd() const;

private:
  double kth(std::size_t k) const;  // binned: the k-th smallest value's bin midpoint
  std::size_t cap_;
  std::size_t n_ = 0;
  bool binned_ = false;
  std::vector<double> values_;
  std::map<std::int32_t, std::int64_t> bins_;  // log2 bin index -> count (values > 0)
  std::int64_t zeros_ = 0;
};

/// One step's durations for its present ranks only, as columns of n values (n × S,
/// column-major): the matrix's own storage when every rank is present, a compacted copy
/// otherwise. Row i is rank rank(i), ranks ascending.
class PresentStep {
public:
  PresentStep(const StageMatrix& m, int t);
  int size() const { return n_; }
  int stages() const { return stages_; }
  int rank(int i) const { return ranks_.empty() ? i : ranks_[i]; }
  /// Every rank present: rank(i) is i.
  bool complete() const { return ranks_.empty(); }
  Eigen::Map<const Eigen::ArrayXd> stage(int s) const { return {data_ + static_cast<std::ptrdiff_t>(s) * n_, n_}; }
  /// P[t,r,S] per present rank, summed in stage order.
  Eigen::ArrayXd totals() const;

private:
  int n_, stages_;
  const double* data_ = nullptr;
  std::vector<int> ranks_;  // empty when complete
  std::vector<double> copy_;
};

/// Per-stage median over the present ranks of step t (0 for a step with no present rank);
/// out has m.stages() entries. The cohort baseline b̃ and the raw-spread reference.
void cohort_medians(const StageMatrix& m, int t, std::span<double> out, SelectScratch& scratch);
/// The same as middles (out[s].median() is cohort_medians' out[s]), each stage's column through
/// its hint (hints: one per stage, or empty for none).
void cohort_middles(const StageMatrix& m, int t, std::span<Middle> out, std::span<MiddleHint> hints,
                    SelectScratch& scratch);

/// Per-rank window median b̃[r,s] over present steps (GainBaseline::rank_median), R × S.
Eigen::MatrixXd rank_window_median(const StageMatrix& m);

/// Per-step baseline b̃ for stage s on rank r, before clipping.
struct StepBaseline {
  GainBaseline kind;
  std::span<const double> cohort_median;     ///< per stage, this step
  const Eigen::MatrixXd* rank_median;        ///< R × S
  std::span<const double> reference;         ///< per group
  double value(const StageSchema& schema, int r, int s) const;
};

/// gain_out[g] = F[t,S] − F'[t,S] when group g's stages are replaced by min(d, b̃) on every
/// present rank, for every group g (gain_out has schema().group_count() entries).
void step_gains(const StageMatrix& m, int t, const StepBaseline& b, double exposed, std::span<double> gain_out);
/// Same, for a step already viewed, with its totals P[t,r,S] (scratch: reused, any size).
void step_gains(const PresentStep& d, std::span<const double> totals, const StageSchema& schema, const StepBaseline& b,
                double exposed, std::span<double> gain_out, std::vector<double>& scratch);

/// For each group g = groups[k]: the per-group advances of the counterfactual step where g is
/// replaced by min(d, b̃), in adv_out[k·G, (k+1)·G), and its F'[t,S] in exposed_out[k]. One pass
/// over the ranks for all the groups asked.
void step_counterfactuals(const PresentStep& d, const StageSchema& schema, const StepBaseline& b,
                          std::span<const int> groups, std::span<double> adv_out, std::span<double> exposed_out);

/// Sums of the five baseline rules over steps (per group).
struct BaselineAccumulator {
  explicit BaselineAccumulator(const StageSchema& schema);
  /// cohort_median: per-stage median over present ranks of this step; totals: P[t,r,S].
  void add_step(const StageMatrix& m, int t, std::span<const double> cohort_median);
  /// Same, for a step already viewed, with its totals (d.totals()).
  void add_step(const StageMatrix& m, int t, const PresentStep& d, std::span<const double> totals,
                std::span<const double> cohort_median);
  /// The same from a step's per-stage max and rank-order sum and its slowest rank (a rank id
  /// column of m), as add_step computes them.
  void add_stats(const StageMatrix& m, int t, std::span<const double> stage_max, std::span<const double> stage_sum,
                 int slowest, std::span<const double> cohort_median);
  BaselineSet finish(double tau_c) const;

  const StageSchema* schema;
  std::vector<double> score[std::size(kBaselineRules)];
  double per_stage_max_s = 0, per_stage_avg_s = 0;
};

/// A window's statistics and the per-rank side evidence, before labelling.
struct WindowSummary {
  Evidence evidence;
  SideEvidence side;
};

/// Accumulates every per-step quantity of a window the labeler reads.
class WindowStats {
public:
  /// columns: the matrices' R; world_size and rank_ids: their rank layout (rank_ids empty when
  /// dense, as StageMatrix::rank_ids()).
  WindowStats(const StageSchema& schema, int columns, int world_size, std::vector<int> rank_ids, const LabelConfig& cfg);

  /// cohort_median: cohort_medians(m, t). rank_median may be null unless
  /// cfg.gain_baseline == rank_median.
  /// counterfactual_groups: groups whose residual-leader counterfactual to take in the same pass
  /// (every group when streaming; none on a whole window, which adds the top group's after).
  /// stage_middles: cohort_middles(m, t) when at hand (the standings reuse them), else empty.
  void add_step(const StageMatrix& m, int t, const StepFrontier& f, std::span<const double> cohort_median,
                const Eigen::MatrixXd* rank_median, std::span<const int> counterfactual_groups = {},
                std::span<const Middle> stage_middles = {});
  /// add_step for a complete step (every rank present) not yet accounted, with a cohort or
  /// reference baseline: the rank pass also finds each stage's top two prefixes, from which f
  /// becomes account_step's row for the step (bit for bit), with no pass of its own.
  void add_step_accounting(const StageMatrix& m, int t, const AccountOptions& opt, StepFrontier& f,
                           std::span<const double> cohort_median, std::span<const int> counterfactual_groups,
                           std::span<const Middle> stage_middles);
  /// Residual-leader counterfactuals for the listed groups (every group when streaming, the top
  /// group on a whole window).
  void add_counterfactuals(const StageMatrix& m, int t, std::span<const int> groups, std::span<const double> cohort_median,
                           const Eigen::MatrixXd* rank_median);
  /// StreamingAccumulator::Scope::segment: what add_step takes from the step but its static
  /// gain, counterfactuals and baselines. lag: L[t,s] per stage as add_step formed it for the same
  /// step (last_lag()), or empty to form it here (then from the step's own prefix medians).
  void add_segment_step(const StageMatrix& m, int t, const StepFrontier& f, std::span<const double> lag);
  /// The lag per stage of the last step add_step or add_segment_step formed it for.
  std::span<const double> last_lag() const { return step_lag_; }
  /// Top group by advance (the s1 whose counterfactual the ambiguity set needs), −1 if none.
  int top_group() const;
  /// Caps the values kept for the step-time and forward-event medians (MedianKeeper); before
  /// the first step only.
  void bound_medians(std::size_t exact_cap);
  /// The window's statistics (no labels, reasons, ambiguity set or suspects: label() adds them).
  WindowSummary finish(std::int64_t first_step, std::int64_t last_step, int missing_steps) const;
  /// Holds every other step's standings back to add them with the next step's in one pass over
  /// the per-rank sums (each rank's adds the same and in the same order, the sums read and
  /// written half as often). Only for a caller whose matrix outlives the walk (a held step's
  /// columns are read at the next step), which calls settle_standings() before finish().
  void pair_standings() { pair_standings_ = true; }
  /// Adds a held step's standings alone.
  void settle_standings();

private:
  // add_step's parts, in the order it takes them (each sum in the order the one loop formed it).
  /// Everything add_step takes after the frontier's totals and the rank pass.
  void add_step_rest(const StageMatrix& m, int t, const StepFrontier& f, const PresentStep& d, const StepBaseline& b,
                     double exposed, int slowest, std::span<const int> counterfactual_groups,
                     std::span<const Middle> stage_middles);
  /// Steps, exposed time (sum, median, spread) and advances per group; returns F[t,S].
  double add_frontier_totals(const StepFrontier& f);
  /// The one blocked pass over the present ranks: own work per group, prefixes (for the lag's
  /// medians), totals, per-stage max and rank-order sums, the slowest rank (returned, an index
  /// of d), each group's gain front and the asked counterfactual fronts.
  /// On a complete step it also adds add_telemetry's residual, overlap and wall sums (telemetry_summed_).
  /// With `accounts` (a complete step), it keeps stage 0's prefixes in prefix0_ and each stage's top
  /// two prefixes in prefix_top_ and prefix_second_ (add_step_accounting's frontier).
  int rank_pass(const StageMatrix& m, int t, const PresentStep& d, bool complete, const StepBaseline& b,
                std::span<const int> counterfactual_groups, bool accounts);
  /// rank_pass compiled for AVX-512 (taken where the processor has it) and the body both share.
  int rank_pass_wide(const StageMatrix& m, int t, const PresentStep& d, bool complete, const StepBaseline& b,
                     std::span<const int> counterfactual_groups, bool accounts);
  int rank_pass_body(const StageMatrix& m, int t, const PresentStep& d, bool complete, const StepBaseline& b,
                     std::span<const int> counterfactual_groups, bool accounts);
  /// rank_pass's static gain over one block of ranks (p: their totals): each group's gain front.
  void block_static_gain(const PresentStep& d, const StepBaseline& b, int i0, int len, const double* p);
  /// rank_pass's residual-leader counterfactuals over one block of ranks (after its prefixes).
  void block_counterfactuals(const PresentStep& d, const StepBaseline& b, int i0, int len,
                             std::span<const int> counterfactual_groups);
  /// add_segment_step's pass over the ranks: own work per group and, with `prefixes`, the
  /// prefixes rank_pass keeps for the lag's medians (the same values, the same order per rank).
  void segment_pass(const PresentStep& d, bool complete, bool prefixes);
  /// L[t,s] = F[t,s] − median_r P[t,r,s] per stage into step_lag_ (the prefixes of rank_pass).
  void step_lag(const StepFrontier& f, std::span<const double> cohort_median, const PresentStep& d);
  /// P[t,·,s] of a complete step, formed again from its stages (0 + d0 + … + ds, the rank pass's
  /// sums) into formed_ where the lean rank pass kept no row of it.
  const double* formed_prefix(const PresentStep& d, int s);
  /// A lean rank pass's set-up (the lag's brackets, samples formed where a hint asks) and its
  /// work on stage s of a block once the block's prefixes p are formed.
  void begin_lean(const PresentStep& d);
  void lean_block(int s, int i0, int len, const double* p, double top_before);
  /// The lag's sums: increments per group, the value at each group's last stage, their spread.
  void add_lag(std::span<const double> lag);
  /// Static-gain numerators and the residual-leader counterfactual advances (from rank_pass).
  void add_gains(const StepFrontier& f, double exposed, std::span<const int> counterfactual_groups);
  /// Leader credit, confident leaders and switches, the max-minus-second-max gaps.
  void add_leaders(const StepFrontier& f, double exposed);
  /// Time inside each group's collectives per rank (off the rank's own work).
  void add_sync_waits(const StageMatrix& m, int t, const PresentStep& d);
  /// The forward group's CPU-wall time per rank and the sampled forward events.
  void add_forward(const StageMatrix& m, int t, const PresentStep& d);
  /// Presence per rank, missing records, residual, overlap and wall sums.
  void add_telemetry(const StageMatrix& m, int t, const PresentStep& d);
  /// Each present rank's standing per group and for the whole step: its own work minus the median
  /// of the other ranks' own work in this step (leave-one-out), summed and squared per rank.
  /// stage_middles: add_step's (empty: none).
  void add_standing(const StageMatrix& m, int t, const PresentStep& d, const StepFrontier& f,
                    std::span<const Middle> stage_middles);
  /// add_standing's parts: a step's standings held back (pair_standings()); the held step's and
  /// this one's added in one pass; each group's and the whole step's own work formed into
  /// step_own_ (sync waits taken off); the CPU wait's standing.
  void hold_standings(const PresentStep& d, std::span<const Middle> stage_middles);
  void add_standings_with_held(const PresentStep& d, std::span<const Middle> stage_middles);
  void form_step_own(const StageMatrix& m, int t, const PresentStep& d, bool any_synced);
  void add_cpu_wait_standing(const StageMatrix& m, int t, const PresentStep& d);
  /// The step's arrivals per segment (step_own_'s groups, cut at the groups with a sync wait in
  /// step t) for the what-if.
  void add_arrivals(const StageMatrix& m, int t, const PresentStep& d, const StepFrontier& f);
  /// e's standing and cpu_wait from those sums.
  void standings(Evidence& e) const;
  /// One Standing from per-rank sums, squares and step counts (R each).
  void fill_standing(Standing& out, const double* sum, const double* sq, const int* n_of) const;
  /// e's rank_excess, cohort_own_median_s and cohort_own_spread_s from the own-work sums.
  void cohort_excess(Evidence& e) const;
  // finish()'s steps, in its order.
  /// Shares (eq. 2) with the small-denominator floor, static gain, routing set, share order, baselines.
  void finish_shares(Evidence& e) const;
  /// Step-to-step spreads of the advances, the exposed step and the lag increments.
  void finish_spreads(Evidence& e) const;
  /// Lag and gap means, the leaders with their credit, leader switches and confident leaders.
  void finish_leaders(Evidence& e, SideEvidence& side) const;
  /// The forward-event side channel: per-rank medians, the largest rank and its cohort.
  void finish_events(Evidence& e, SideEvidence& side) const;
  /// Telemetry facts: closure residual and overlap shares, missing ranks and records.
  void finish_telemetry(Evidence& e) const;
  /// Per-rank side facts the labeler reads: wait groups, sync waits, forward CPU, the residual
  /// counterfactual of the top group.
  void finish_side(Evidence& e, SideEvidence& side) const;
  /// Adds x to rank r's credit in group g, listing r the first time its credit turns > 0.
  void credit(int g, int r, double x) {
    double& c = credit_[static_cast<std::size_t>(g) * world_ + r];
    const bool first = !(c > 0);
    c += x;
    if (first && c > 0) credited_[g].push_back(r);
  }

  const StageSchema& schema_;
  int world_;                 // columns (R of the per-rank tables)
  int declared_world_;        // the job's world size
  std::vector<int> rank_ids_; // empty when dense
  LabelConfig cfg_;
  int S_, G_;
  std::vector<int> group_first_, group_count_, group_last_;  // per group: its first stage, stage count, last stage
  int steps_ = 0;
  double denom_ = 0;
  MedianKeeper exposed_;                // F[t,S] per scored step (median step time)
  std::vector<double> adv_;             // per group
  std::vector<double> gain_num_;        // per group
  BaselineAccumulator base_;
  std::vector<double> lag_sum_, lag_inc_sum_, gap_sum_;
  std::vector<RunningSpread> adv_spread_, lag_inc_spread_;  // per group: the diagnosis' noise floors
  RunningSpread exposed_spread_;
  std::vector<double> step_adv_, step_lag_inc_;         // per group, this step (scratch)
  // Written for every rank every step: vectors (every page of them is touched at once anyway, and
  // sf-testbed's operator new puts them on huge pages), where the sparse sums below are ZeroArrays.
  std::vector<double> own_sum_;                          // G × R: Σ_t (d − sync wait) over the group's stages
  // Steps each rank was present in (steps_in): every complete step once, and each rank's presences
  // in the others (few: a step misses ranks where a record is lost).
  int complete_steps_ = 0;
  ZeroArray<int> rank_n_;                                // R: partial steps the rank was present in
  int steps_in(int r) const { return complete_steps_ + rank_n_[static_cast<std::size_t>(r)]; }
  std::vector<MedianKeeper> adv_keep_;                   // per group: the per-step advances (robust spread)
  // Standings (Evidence::standing), kept up to Evidence::kStandingMaxRanks columns: (G + 1) × R
  // sums of the per-step standing and of its square (the last row: the whole step), and per rank
  // the steps that had a peer to compare with.
  bool standing_on_ = false;
  ZeroArray<double> st_sum_, st_sq_;
  ZeroArray<int> st_n_;
  ZeroArray<double> cw_sum_, cw_sq_;                     // R: CPU-wait standing sums (Evidence::cpu_wait)
  ZeroArray<int> cw_n_;
  std::vector<double> step_own_, loo_buf_, step_cw_;     // per-step scratch: (G + 1) × n own work; one column; CPU waits
  std::vector<int> step_cw_rank_;
  std::vector<int> top_buf_;                             // per-step scratch: the latest arrivals
  std::vector<double> seg_own_;                          // per-step scratch: one segment's arrivals
  ArrivalLog arrivals_;                                  // the first Evidence::kArrivalSteps steps (the what-if)
  std::vector<int> gap_n_;
  std::vector<int> last_conf_, switches_, conf_n_;       // per stage
  ZeroArray<double> credit_, conf_credit_;               // G × R
  ZeroArray<int> led_;                                   // G × R
  // Per group, the ranks with credit > 0, in the order they first got it (finish reads these,
  // not G × R entries of which most are zero).
  std::vector<std::vector<int>> credited_;
  // Per group, R sums and counts of the sync waits, sized when the group's first wait comes (a
  // step's sync waits come for every rank: vectors, as own_sum_; most groups never have any).
  std::vector<std::vector<double>> sync_sum_;
  // Their counts: sync_full_[g] columns in which every rank of a complete step had a wait, and
  // per rank the rest (a calloc'd array: most steps leave it untouched).
  std::vector<int> sync_full_;
  std::vector<ZeroArray<int>> sync_n_;
  std::vector<std::uint8_t> sync_seen_;                  // G: any rank had a sync wait in the group
  // The forward group's CPU-wall time per rank, summed over the steps it is present in (counted
  // by steps_in). A one-stage group's is its own_sum_ row until the group's first sync wait (the
  // rank pass adds the same values in the same order; the wait comes off own_sum_ only): that
  // row is then copied here and the sum goes on apart (fwd_apart_). A group of several stages
  // sums apart from the first step (its stages' total first, then onto the sum).
  std::optional<int> fwd_group_;
  bool fwd_apart_ = false;
  bool fwd_step_taken_ = false;                          // this step's value is in the copy
  std::vector<double> cpu_fwd_sum_;                      // R while fwd_apart_, else empty
  // Forward-event samples of the ranks that have any: ev_slot_[r] is 1 + the index of r's
  // keeper in ev_keepers_, 0 while r has none (most runs sample few ranks, or none).
  ZeroArray<std::int32_t> ev_slot_;                      // R
  std::vector<MedianKeeper> ev_keepers_;
  std::size_t ev_cap_ = 0;                               // bound_medians' cap for new keepers
  int ev_sampled_ = 0, ev_ready_ = 0, ev_missing_ = 0;
  ZeroArray<std::uint8_t> rank_missing_;
  std::int64_t missing_records_ = 0;
  double residual_sum_ = 0, overlap_sum_ = 0, wall_sum_ = 0;
  bool has_wall_ = false;
  std::vector<std::string> roles_;
  std::vector<double> cf_adv_;    // G × G: counterfactual advances with group g replaced
  std::vector<double> cf_denom_;  // G
  std::vector<std::uint8_t> cf_seen_;
  // Per-step scratch, reused so that a step of 10^6 ranks allocates nothing.
  std::vector<double> red_, cf_step_adv_, cf_step_exposed_;
  std::vector<double> prefix_, totals_, stage_max_, stage_sum_, gain_front_, cf_front_, step_lag_;
  SelectScratch sel_;
  // The step's middles one selection serves twice, and where each series' middle lay last step.
  bool one_stage_groups_ = false;        // group g is stage g alone, for every g
  bool pair_standings_ = false;          // see pair_standings()
  int held_n_ = 0;                       // > 0: a step's standings held back, over this many ranks
  std::vector<const double*> held_own_;  // its own work per group, then the whole step's
  std::vector<Middle> held_mid_;         // their middles
  std::vector<double> held_totals_;      // its totals (the whole step's own work), out of totals_' way
  std::vector<std::uint8_t> step_synced_;  // per group, this step: a sync wait came off its own work
  Middle total_mid_, whole_mid_;         // this step: the totals' (n = 0 when not formed), the whole step's own work
  const double* whole_ = nullptr;        // this step: the whole step's own work per present rank
  bool telemetry_summed_ = false;        // this step: rank_pass added the residual, overlap and wall sums
  std::vector<double> chain_sum_;        // rank_pass: its running sums (scratch)
  std::vector<double> prefix0_, prefix_top_, prefix_second_;  // rank_pass with `accounts`: see there
  /// This step's rank pass was lean (a complete step accounted, no counterfactual asked): it kept
  /// no prefix row (prefix_, prefix0_), but each stage's first top (first_top_) and the lag's
  /// middles bracketed as its blocks went by (lag_mid_, the stages from 1 on).
  bool lean_ = false;
  std::vector<int> first_top_;
  std::vector<StreamedMiddle> lag_mid_;
  std::vector<double> formed_, lag_sample_;
  std::vector<const double*> prefix_rows_;  // add_step_accounting: P[t,·,s] per stage
  std::vector<MiddleHint> prefix_hint_;  // S − 1: the lag's prefix medians
  std::vector<MiddleHint> own_hint_;     // G + 1: the standings' own work
  MiddleHint cw_hint_;
};

}  // namespace sf::frontier::detail
