// sf::frontier — StageFrontier accounting, baselines, direct-exposure gain and the labeler.
//
// Pure: no MPI, no CUDA, no files, no clock. Everything here is a function of a stage matrix,
// optional side evidence and a configuration (paper §3–4, Appendices A–D; PAPER_NOTES.md).
#pragma once

#include <Eigen/Core>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sf::frontier {

/// Name of the residual stage appended to every schema whose records carry a step wall time.
inline constexpr std::string_view kResidualStage = "step.other_cpu_wall";
/// Separator between a stage name and its accumulation microstep index ("data.next_wait#2").
inline constexpr char kMicrostepSeparator = '#';

/// The paper's five explicit default stages, in order (the residual is appended separately).
std::vector<std::string> default_explicit_stages();

/// The most recorded step time one window may hold, in seconds: Σ over its records of
/// max(Σ_s d, wall). Every sum the engine forms (makespan, per-stage max, credits, lags, shares'
/// numerators) is bounded by a small multiple of it, so none overflows to inf. StageMatrix and
/// StreamingAccumulator reject a record that would carry a window past it.
inline constexpr double kMaxWindowSeconds = 1e300;

/// True when s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF)
/// with no control characters: a name that a JSON packet and a one-line table can both carry.
bool printable_utf8(std::string_view s);

/// printf into a string of whatever length the text needs. Text that carries names from files
/// (stages, hosts) is made with it, never in a fixed buffer: snprintf cuts at a byte, and a name cut
/// inside a UTF-8 sequence is invalid text in a packet (the score fuzzer found one).
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// Median of v as the engine takes it (v is reordered; must be non-empty): even sizes average the
/// two middle values. For callers that must agree with Evidence::median_step_s to the bit.
double median_inplace(std::span<double> v);

/// Running mean and standard deviation of a sequence (Welford), the spread a reference carries
/// for the diagnosis' noise floors. Mean and M2 are kept in units of the largest |x| seen, so any
/// finite values up to kMaxWindowSeconds give a finite SD: the plain update squares a difference
/// of 6e299 and overflows (the stage_jsonl fuzzer found it).
class RunningSpread {
 public:
  void add(double x);
  int count() const { return n_; }
  double mean() const { return mean_ * scale_; }
  /// Sample standard deviation; 0 for fewer than two values.
  double sd() const;

 private:
  double scale_ = 0, mean_ = 0, m2_ = 0;  // mean_ and m2_ in units of scale_ (m2_ of scale_²)
  int n_ = 0;
};

/// An inclusive range of rank ids, first ≤ last.
struct RankRange {
  int first = 0, last = 0;
  std::int64_t count() const { return static_cast<std::int64_t>(last) - first + 1; }
  bool operator==(const RankRange&) const = default;
};

/// Ascending ranks as inclusive ranges (adjacent ranks merged).
std::vector<RankRange> to_rank_ranges(std::span<const int> ranks);
/// Ranges as compact text, "0-3,7,9-12", at most max_ranges of them and then
/// ",... (N more ranges)"; "" for none.
std::string format_rank_ranges(std::span<const RankRange> ranges, std::size_t max_ranges = 8);
std::string format_rank_ranges(std::span<const int> ranks, std::size_t max_ranges = 8);

/// Ordered stage list plus its order hash. Stages sharing a name before '#' form one semantic
/// reporting group (accumulation microsteps); shares and routing are reported per group.
class StageSchema {
public:
  StageSchema() = default;
  /// Throws std::invalid_argument on empty, duplicate, residual-named or unprintable
  /// (printable_utf8) explicit stages, or an accumulation factor < 1.
  StageSchema(std::vector<std::string> explicit_stages, bool with_residual, int accumulation = 1);

  /// The default six-stage schema (five explicit + residual).
  static StageSchema default_schema();

  int size() const { return static_cast<int>(names_.size()); }          ///< S, residual included
  int explicit_count() const { return explicit_count_; }                ///< stages read from input
  bool has_residual() const { return has_residual_; }
  int residual_index() const { return has_residual_ ? size() - 1 : -1; }
  const std::string& name(int s) const { return names_[s]; }
  const std::vector<std::string>& names() const { return names_; }
  std::vector<std::string> explicit_names() const;
  std::optional<int> index_of(std::string_view name) const;

  int group_count() const { return static_cast<int>(groups_.size()); }
  const std::vector<std::string>& groups() const { return groups_; }   ///< reporting groups, in order
  int group_of(int s) const { return group_of_[s]; }
  std::optional<int> group_index(std::string_view group) const;
  /// Where a name someone gave (an option, a config key) meets this schema: "" when `group` is one
  /// of its groups, else `prefix` + "not a stage group of " + `where` + "; expected one of " and
  /// the groups in order — the one wording every front-end refuses an unknown group with.
  /// (group_problem_in over groups()).
  std::string group_problem(std::string_view group, std::string_view prefix, std::string_view where) const;

  int accumulation() const { return accumulation_; }
  /// True when stage names carry microstep indices, i.e. accumulation was unfolded.
  bool microstep_expanded() const { return expanded_; }

  std::uint64_t order_hash() const { return hash_; }   ///< FNV-1a over the ordered names
  std::string order_hash_hex() const;

  bool operator==(const StageSchema& o) const { return names_ == o.names_ && accumulation_ == o.accumulation_; }

private:
  std::vector<std::string> names_;
  std::vector<std::string> groups_;
  std::vector<int> group_of_;
  int explicit_count_ = 0;
  bool has_residual_ = false;
  bool expanded_ = false;
  int accumulation_ = 1;
  std::uint64_t hash_ = 0;
};

/// StageSchema::group_problem over a list of group names (where only the names are at hand).
std::string group_problem_in(const std::vector<std::string>& groups, std::string_view group, std::string_view prefix,
                             std::string_view where);

/// State of one sampled forward CUDA-event pair (side channel; never in the prefix vector).
enum class EventState : std::uint8_t { unsampled = 0, ready = 1, missing = 2 };

/// Durations d[t,r,s] ≥ 0 (seconds) for N aligned steps × R ranks × S stages, with the
/// rank-local step wall time, presence mask and optional side evidence.
/// Storage: R × (N·S) doubles, column-major, so one step is a contiguous R × S block; data() and
/// step_block() view them as Eigen matrices. They live in a std::vector, so they come from the
/// program's operator new (sf-testbed's puts large blocks on huge pages: docs/design.md, Change 22;
/// Eigen's own matrices would come from malloc, on small pages).
///
/// Rank layout: dense (column r is rank r, R = world size) or sparse, where the R columns hold only
/// the listed rank ids of a larger world and every other rank is absent from every step. A file
/// whose world is far larger than the ranks it records is read sparse, so memory follows the
/// records present. The engine works on columns; evaluate() reports rank ids.
class StageMatrix {
public:
  /// The whole matrix (R × N·S) or one step of it (R × S), read-only, over the matrix's cells.
  using View = Eigen::Map<const Eigen::MatrixXd>;
  using Block = View;

  StageMatrix() = default;
  /// All cells start missing. first_step is the step id of row 0. Throws std::invalid_argument
  /// when world_size < 1, steps < 0 or the last step id would pass INT64_MAX.
  StageMatrix(StageSchema schema, int world_size, std::int64_t first_step, int steps);
  /// Sparse layout: one column per id of rank_ids (strictly increasing, each in [0, world_size));
  /// the world's other ranks are absent. Throws std::invalid_argument on a bad id list.
  StageMatrix(StageSchema schema, int world_size, std::vector<int> rank_ids, std::int64_t first_step, int steps);
  /// An empty matrix with m's schema and rank layout (dense or sparse) over other steps.
  static StageMatrix same_layout(const StageMatrix& m, std::int64_t first_step, int steps);

  const StageSchema& schema() const { return schema_; }
  int steps() const { return steps_; }
  /// Columns: the world size when dense, the listed ranks when sparse.
  int ranks() const { return ranks_; }
  /// The job's world size (≥ ranks()).
  int world_size() const { return world_; }
  bool sparse() const { return !rank_ids_.empty(); }
  /// The rank id of column c.
  int rank_id(int c) const { return rank_ids_.empty() ? c : rank_ids_[c]; }
  /// Column ids when sparse; empty when dense.
  const std::vector<int>& rank_ids() const { return rank_ids_; }
  /// The column holding rank id r, or −1 when r is not a column.
  int column_of(int rank) const;
  int stages() const { return schema_.size(); }
  std::int64_t first_step() const { return first_step_; }
  std::int64_t step_id(int t) const { return first_step_ + t; }

  /// Stores one (step, rank) record. explicit_d has schema().explicit_count() entries; the
  /// residual and overlap error are computed from wall (required iff the schema has a residual).
  /// Throws std::invalid_argument on wrong length, negative or non-finite values, and when the
  /// record would carry total_seconds() past kMaxWindowSeconds.
  void set_record(int t, int r, std::span<const double> explicit_d, std::optional<double> wall);
  void clear_record(int t, int r);
  /// Writes a complete step into row t in place (the model fills a 10^6-rank step without a
  /// copy): begin_step drops the row's records and side evidence and returns, per explicit stage
  /// s, the row's column of ranks() durations to write; commit_step then makes every rank
  /// present with those durations and wall[r] (null iff the schema has no residual): the values
  /// and checks of set_record rank by rank, in one pass per stage. A bad value throws with the
  /// rank and leaves the row without records.
  std::vector<double*> begin_step(int t);
  void commit_step(int t, const double* wall);
  /// commit_step in pieces, for a producer that writes the row rank block by rank block: ranks
  /// [committed, r_end) of row t are checked and taken in now, while the producer has them in
  /// cache (r_end nondecreasing up to ranks(); the same wall array each time). commit_step then
  /// takes the rest and closes the row; the values and sums are commit_step's, bit for bit. A bad
  /// value throws, worded as commit_step would for the ranks committed so far, and leaves the
  /// row as begin_step left it.
  void commit_ranks(int t, int r_end, const double* wall);
  /// Every cell missing again and side evidence dropped, rows renumbered from first_step; the
  /// storage is kept (a streaming producer refills one step buffer without reallocating it).
  void reset(std::int64_t first_step);
  /// Row 0 becomes step first_step; the records are kept (a one-step buffer that begin_step/commit_step refill).
  void renumber(std::int64_t first_step) { first_step_ = first_step; }

  /// Recorded step time Σ over present records of max(Σ_s d, wall) (≤ kMaxWindowSeconds).
  double total_seconds() const { return total_s_; }
  bool present(int t, int r) const { return present_[idx(t, r)] != 0; }
  bool step_complete(int t) const { return step_present_count_[t] == world_; }
  int step_present_count(int t) const { return step_present_count_[t]; }
  double d(int t, int r, int s) const { return cells_[at_cell(t, r, s)]; }
  Block step_block(int t) const { return {cells_.data() + at_cell(t, 0, 0), ranks_, stages()}; }
  View data() const { return {cells_.data(), ranks_, static_cast<Eigen::Index>(steps_) * stages()}; }
  /// Rank-local step wall time (NaN when the schema has no residual or the cell is missing).
  double wall(int t, int r) const { return wall_[idx(t, r)]; }
  /// Signed closure error e = w − Σ explicit; residual = max(0, e), overlap = max(0, −e).
  double overlap(int t, int r) const { return overlap_[idx(t, r)]; }
  /// Row t's wall times and overlap errors, one per column (as wall() and overlap()).
  const double* wall_row(int t) const { return wall_.data() + idx(t, 0); }
  const double* overlap_row(int t) const { return overlap_.data() + idx(t, 0); }

  // --- side evidence (seconds stored as float: values past FLT_MAX are rejected) ---
  void set_fwd_event(int t, int r, EventState state, double seconds);
  bool has_fwd_events() const { return !fwd_state_.empty(); }
  /// Row t's event states and times (one per column), or null when the matrix has no events.
  const EventState* fwd_state_row(int t) const { return fwd_state_.empty() ? nullptr : fwd_state_.data() + idx(t, 0); }
  const float* fwd_s_row(int t) const { return fwd_s_.empty() ? nullptr : fwd_s_.data() + idx(t, 0); }
  EventState fwd_event_state(int t, int r) const;
  double fwd_event_s(int t, int r) const;
  /// Seconds the host spent blocked inside collectives of stage s (communication side evidence).
  void set_sync_wait(int t, int r, int s, double seconds);
  /// The same for every rank of row t at once (ranks() values).
  void set_sync_wait_column(int t, int s, std::span<const double> seconds);
  /// Row t's stage-s column a block of ranks at a time, as a pass over the ranks makes them
  /// (ModelStepper): the block of seconds.size() columns from r0, checked and stored at once,
  /// with no row-long buffer between. The blocks come in column order: r0 is 0 (the column
  /// starts over) or the end of the block before. The column reads as set once its last block
  /// is in, and as not set until then.
  void set_sync_wait_block(int t, int s, int r0, std::span<const double> seconds);
  bool has_sync_wait() const { return !sync_next_.empty(); }
  double sync_wait(int t, int r, int s) const;  ///< NaN when not recorded
  /// Stage s's sync waits of row t, one float per column (NaN where not recorded), or null when
  /// no rank of the row has one for s.
  const float* sync_wait_column(int t, int s) const;
  /// Marks every rank of row t ready with its forward event time (ranks() values).
  void set_fwd_event_column(int t, std::span<const double> seconds);
  /// Seconds the rank's threads were runnable but not running during step t (the kernel's
  /// scheduler run delay: a core shared with busy processes, a cgroup throttle), read by the
  /// recorder once per window and spread over the rank's steps in it (docs/diagnosis.md).
  void set_cpu_wait(int t, int r, double seconds);
  bool has_cpu_wait() const { return !cpu_wait_.empty(); }
  double cpu_wait(int t, int r) const;  ///< NaN when not recorded
  /// Row t's CPU waits (one per column, NaN where not recorded), or null when the matrix has none.
  const float* cpu_wait_row(int t) const { return cpu_wait_.empty() ? nullptr : cpu_wait_.data() + idx(t, 0); }

  /// Optional parallelism role per rank id (size world_size()); empty when unknown.
  void set_roles(std::vector<std::string> roles);
  const std::vector<std::string>& roles() const { return roles_; }

private:
  std::size_t idx(int t, int r) const { return static_cast<std::size_t>(t) * ranks_ + r; }
  void check_cell(int t, int r) const;
  double cell_total(int t, int r) const;  ///< max(Σ_s d, wall) of a present cell

  StageSchema schema_;
  int ranks_ = 0;
  int world_ = 0;
  std::vector<int> rank_ids_;  // empty when dense
  int steps_ = 0;
  std::int64_t first_step_ = 0;
  double total_s_ = 0;
  std::vector<double> cells_;  // R × (N·S), column-major (at_cell())
  /// Where d[t, r, s] is in cells_ (step t's stage s is column t·S + s of R cells).
  std::size_t at_cell(int t, int r, int s) const {
    return (static_cast<std::size_t>(t) * stages() + s) * static_cast<std::size_t>(ranks_) + static_cast<std::size_t>(r);
  }
  std::vector<double> wall_;
  std::vector<double> overlap_;
  std::vector<std::uint8_t> present_;
  std::vector<int> step_present_count_;
  std::vector<double> row_total_s_;       // per row: Σ over its present cells of max(Σ d, wall)
  std::vector<EventState> fwd_state_;
  std::vector<float> fwd_s_;
  /// Column (t, s) of the sync waits, made on first use (values undefined until written).
  float* sync_column_for(int t, int s);
  // Sync waits, N × S columns (t·S + s) of R floats each, made on a column's first value and kept
  // (a reused row writes its column in place): a model step has one or two of its S columns.
  std::vector<std::vector<float>> sync_wait_;
  /// N × S: where the column's next block starts (set_sync_wait_block); ranks() once the column
  /// is set (its last block in, or any single value: the cells not given are NaN), else not set.
  std::vector<int> sync_next_;
  std::vector<float> cpu_wait_;           // N × R, NaN where not recorded
  void drop_side(int t);                  // row t's side evidence gone
  int pending_row_ = -1;                  // begin_step's row until commit_step
  int committed_ = 0;                     // the pending row's ranks taken in so far (commit_ranks)
  /// Their Σ max(Σ d, wall): rank r's term in lane r % 8, each lane in rank order (eight sums
  /// apart rather than one chain of R dependent additions), the lanes added pairwise at commit.
  double pending_lanes_[8] = {};
  /// Row t's cells zero, its walls NaN and overlaps 0, as begin_step leaves them (a failed commit).
  void clear_row(int t);
  /// Takes ranks [committed_, r_end) of the pending row t in; throws (the row reset) on a bad value.
  void commit_through(int t, int r_end, const double* wall);
  /// commit_step's message for ranks [0, n) of a row with a bad value: the first, in set_record's order.
  std::string commit_error(const double* row0, const double* wall, int n);
  std::vector<std::string> roles_;
};

/// Per-step frontier quantities (paper eq. 1): F[t,s], a[t,s], leaders and the
/// max-minus-second-max gap. Rows for steps with no records are zero and not counted.
struct Accounting {
  int steps = 0, ranks = 0, stages = 0;
  Eigen::MatrixXd frontier;   ///< N × S, F[t,s] = max_r P[t,r,s]
  Eigen::MatrixXd advance;    ///< N × S, a[t,s] = F[t,s] − F[t,s−1]
  Eigen::MatrixXd gap;        ///< N × S, max_r P − second-max_r P (0 for a tie or R = 1)
  Eigen::MatrixXi leader;     ///< N × S, the unique rank attaining F[t,s]; kTie or kNone otherwise
  std::vector<std::uint8_t> scored;  ///< per step: 1 when at least one rank is present
  /// Tie sets for cells whose leader is kTie: (t, s, ranks attaining the frontier).
  struct Tie { int t; int s; std::vector<int> ranks; };
  std::vector<Tie> ties;

  static constexpr int kNone = -1;  ///< a[t,s] == 0: no advance, no leader
  static constexpr int kTie = -2;   ///< several ranks attain F[t,s] within the tie tolerance

  double exposed(int t) const { return stages ? frontier(t, stages - 1) : 0.0; }  ///< F[t,S]
  double exposed_makespan() const;                                               ///< Σ_t F[t,S]
  std::vector<int> tie_ranks(int t, int s) const;
};

struct AccountOptions {
  /// Prefixes within max(abs, rel·F) of F[t,s] attain the frontier (tie set).
  double tie_abs_s = 1e-9;
  double tie_rel = 1e-12;
};

/// The accounting core (paper §3): one pass over steps, ranks and stages, O(R·N·S).
Accounting account(const StageMatrix& m, const AccountOptions& opt = {});

/// Slack λ[t,r,s] = F[t,s−1] − P[t,r,s−1] for one step (R × S); eq. (3) says
/// a[t,s] = max_r (d[t,r,s] − λ[t,r,s]).
Eigen::MatrixXd slack(const StageMatrix& m, const Accounting& acc, int t);

/// Prefix matrix P[t,r,s] for one step (R × S).
Eigen::MatrixXd prefixes(const StageMatrix& m, int t);

// ---------------------------------------------------------------------------------------------
// Baselines on the same matrix (§3, §6.2)

enum class BaselineRule { per_stage_max, per_stage_avg, raw_spread, slowest_rank, rank0_total };
inline constexpr BaselineRule kBaselineRules[] = {BaselineRule::per_stage_max, BaselineRule::per_stage_avg,
                                                  BaselineRule::raw_spread, BaselineRule::slowest_rank,
                                                  BaselineRule::rank0_total};
std::string_view to_string(BaselineRule rule);

/// One scoring rule's view of the window: a score per reporting group and the groups ranked.
struct RankedStages {
  std::vector<double> score;      ///< per group, seconds summed over the window
  std::vector<double> share;      ///< score normalised to sum 1 (all 0 when the total is 0)
  std::vector<int> order;         ///< groups, largest score first (ties: stage order)
  std::vector<int> candidates;    ///< smallest leading prefix with cumulative share ≥ τ_C
};

/// Ranks groups by score and takes the τ_C candidate prefix (shared by frontier and baselines).
RankedStages rank_stages(std::vector<double> score, double tau_c);

struct BaselineSet {
  RankedStages rules[std::size(kBaselineRules)];
  double per_stage_max_s = 0;   ///< Σ_t M_t, M_t = Σ_s max_r d
  double per_stage_avg_s = 0;   ///< Σ_t M̄_t, M̄_t = Σ_s mean_r d
  const RankedStages& operator[](BaselineRule r) const { return rules[static_cast<int>(r)]; }
};

BaselineSet baselines(const StageMatrix& m, const Accounting& acc, double tau_c);

/// Per-step M_t and M̄_t (Propositions 1 and 2).
double per_stage_max_step(const StageMatrix& m, int t);
double per_stage_avg_step(const StageMatrix& m, int t);

// ---------------------------------------------------------------------------------------------
// Direct-exposure gain (§4, eq. 4)

enum class GainBaseline { rank_median, cohort_median, reference };
std::string_view to_string(GainBaseline b);
std::optional<GainBaseline> gain_baseline_from_string(std::string_view s);

/// G_g for every reporting group g: replace the group's stages by b = min(d, b̃), recompute
/// F[t,S], and return Σ_t (F − F') / Σ_t F (0 when Σ_t F is 0). reference (seconds per step, per
/// stage or per group as LabelConfig::reference_s) is required for GainBaseline::reference.
std::vector<double> static_gain(const StageMatrix& m, const Accounting& acc, GainBaseline kind,
                                std::span<const double> reference = {});

// ---------------------------------------------------------------------------------------------
// Labels and gates (§4, Appendices B–C)

enum class Label {
  frontier_accounting,
  likely_sync_wait,
  sync_wait_dependent,
  direct_exposure,
  forward_device_supported,
  forward_spillover_suspected,
  forward_host_overhead_suspected,
  forward_event_scope_limited,
  co_critical,
  gradient_accumulation_ambiguous,
  role_aware_needed,
  telemetry_limited,
};
inline constexpr int kLabelCount = 12;
std::string_view to_string(Label l);
std::optional<Label> label_from_string(std::string_view s);
/// Labels that make a stage-level diagnosis claim (suppressed by telemetry or role gates).
bool is_strong(Label l);

/// The diagnosis' thresholds (docs/diagnosis.md): a change or an excess is named only when it
/// passes its noise floor, max(z standard errors, min_effect of the step); a change against a
/// reference also past drift of the stage's own reference time.
struct DiagnosisConfig {
  double z = 3.0;             ///< standard errors a change must exceed (differential, lag) or robust
                              ///< deviations (1.4826 MAD) a rank's excess must exceed (cohort)
  double min_effect = 0.02;   ///< and at least this fraction of the (reference) step
  double drift = 0.05;        ///< and (against a reference) this fraction of the stage's own reference
                              ///< advance: what a stage moves between two healthy periods of one run
                              ///< on a shared machine, which no step-to-step spread shows
  double cohort_min_effect = 0.1;  ///< without a reference, the fraction of the median step a rank's
                                   ///< excess over its peers must reach: the cohort's usual asymmetry
                                   ///< (a rank that hosts the store, the loader's worker) is unknown
  double cohort_min_s = 0.002;      ///< and (without a reference) at least this many seconds per step: a
                                   ///< scheduler time slice, below which a shared machine moves one rank
                                   ///< against another now and then (a 1 ms data wait on an 8 ms step)
};

/// Gates of Table 13 with the paper's defaults, plus the few thresholds the paper names
/// without values (documented in docs/labeler.md).
struct LabelConfig {
  double max_closure_residual_share = 0.05;
  double max_overlap_error_share = 0.01;
  int max_missing_ranks = 0;
  double min_event_ready_ratio = 0.8;
  int min_event_samples = 5;
  double gamma_a = 0.4;        ///< frontier-share dominance
  double gamma_g = 0.1;        ///< static-gain threshold
  double eta_a = 0.05;         ///< share tie tolerance
  double eta_g = 0.05;         ///< gain tie tolerance
  double eta_q = 0.01;         ///< leader gap (fraction of F[t,S]) for a confident leader
  double gamma_elig = 0.05;    ///< advance (fraction of F[t,S]) eligible for leader switches
  double gamma_switch = 0.5;   ///< leader-switch rate above which ranks are co-critical
  double tau_c = 0.80;         ///< routing-set cumulative share
  double share_floor_s = 1e-6; ///< below this Σ_t F[t,S], report raw advances only
  double gamma_event = 0.25;   ///< event forward time / median F[t,S] that counts as high
  double event_low_ratio = 0.5;///< event / CPU-wall forward at or below which event time is low
  GainBaseline gain_baseline = GainBaseline::cohort_median;
  /// No-stall reference b̃ (seconds per step) for GainBaseline::reference: one value per stage
  /// (schema().size(), residual included) or one per reporting group, applied to each of its stages.
  std::vector<double> reference_s;
  std::vector<std::string> wait_model;      ///< groups with the model-fit indicator W_s = 1
  bool event_scope_limited = false;         ///< trainer declares streams the markers miss
  /// E_amb also takes C_R, the groups that lead once s1 is at its clipped baseline (an extension:
  /// Appendix C's set is C_A ∪ C_G; docs/labeler.md).
  bool ambiguity_residual_leaders = false;
  /// Appendix C's low-gain rule (A_s1 > γ_A, G_s1 < γ_G, W_s1 = 0) gives co_critical only when
  /// E_amb names a second group (an extension: the paper's rule has no such condition).
  bool co_critical_needs_two_stages = false;
  /// A window without step wall times cannot pass the closure and overlap gates, so it is
  /// telemetry_limited (Table 12: missing probes); false scores it with a reason that the gates
  /// were not checked.
  bool require_wall = true;
  std::string forward_group = "model.fwd_loss_cpu_wall";
  AccountOptions account;
  DiagnosisConfig diagnosis;
};

/// Telemetry facts that are not in the matrix (gather, parser, recorder).
struct TelemetryInput {
  bool gather_ok = true;
  std::vector<std::string> reasons;   ///< why the gather or window is degraded
  std::int64_t dropped_records = 0;   ///< recorder ring-buffer overflow
  int duplicate_records = 0;          ///< duplicate (step, rank) records seen by a reader
};

struct LeaderCredit {
  int rank = -1;
  double advance_s = 0;   ///< advance attributed to this rank (ties split equally)
  int steps_led = 0;      ///< steps where it was the unique leader
};

struct Suspect {
  int group = -1;                 ///< top group by share, −1 when none
  int rank = -1;                  ///< −1 when no rank evidence
  std::string basis = "none";     ///< frontier_leader | sync_wait_side_evidence | frontier_leader_weak | none
  double confidence = 0;          ///< share of the stage's advance (or of steps) backing the rank
};

struct EventSummary {
  int sampled = 0, ready = 0, missing = 0;
  double ready_ratio = 0;
  double max_rank_median_s = 0;   ///< largest per-rank median forward event time
  int max_rank = -1;
  double cohort_median_s = 0;     ///< median over ranks of per-rank medians
};

/// A rank whose own work in a stage group stands out from its cohort (the diagnosis' rank
/// evidence): own work is the group's time minus the time blocked in its collectives (sync wait),
/// where the recorder measured it.
struct RankExcess {
  int rank = -1;
  double own_mean_s = 0;   ///< mean per present step of the rank's own work in the group
  double excess_s = 0;     ///< own_mean_s − the cohort median of the ranks' own means
};

/// A rank's standing in a stage group (docs/diagnosis.md, "Standing"): in each step, its own
/// work there (the group's time minus the time inside its collectives) minus the median of the
/// other ranks' own work in the same step (leave-one-out, so two ranks compare with each other),
/// with its mean and sample SD over the window's steps. Summed over every group it is how late the
/// rank arrives at the step's end: its whole step minus the time it waited for the others.
struct RankStanding {
  int rank = -1;
  double mean_s = 0;   ///< per step
  double sd_s = -1;    ///< sample SD over steps; −1 when unknown (fewer than two steps)
  int steps = 0;       ///< steps with at least one peer present
};
/// One group's standings (or the whole step's: Evidence::standing's last entry).
struct Standing {
  double median_s = 0;    ///< median over ranks of their mean standing
  double spread_s = 0;    ///< 1.4826 × MAD over ranks of their mean standing
  bool complete = false;  ///< every observed rank is listed (else the kStandingTop largest)
  /// The recorder measured the ranks' waits inside the group's collectives and took them off (for
  /// the whole step: in some group). Without that, own work in a stage where ranks wait for each
  /// other is mostly waiting, and a rank that waited longest stands out there.
  bool waits_off = false;
  std::vector<RankStanding> ranks;  ///< largest mean first (ties: lower rank first)
};

/// The change of a window against a reference, per step (docs/diagnosis.md): Σ_g Δa_g = ΔF.
struct Differential {
  std::string reference;                   ///< what the window was compared with
  int reference_steps = 0;
  double reference_step_s = 0;             ///< F_ref / N_ref: the reference's exposed step
  std::vector<double> delta_advance_s;     ///< per group: a_g/N − a_g^ref/N_ref
  double delta_exposed_s = 0;              ///< F/N − F_ref/N_ref
  std::vector<double> noise_floor_s;       ///< per group: max(z·SE of the difference, min_effect·step, drift·a_g^ref/N_ref)
  double exposed_noise_floor_s = 0;
  /// Per group: the ranks that stand out in the window, with the change of their own work per step
  /// against the reference, largest first. With standings on both sides (the usual case) the
  /// change is a difference in differences: the rank's standing (own work minus its peers' median
  /// in the same steps) in the window minus its standing in the reference, so that a drift of the
  /// whole machine cancels; floor_s is what it must pass (z standard errors of the two means of
  /// its per-step standing, z robust deviations of the ranks' changes, min_effect of the step).
  /// Without standings: the rank's own mean minus its own mean there (or the reference cohort's
  /// median), floor_s 0.
  struct RankDelta {
    int rank;
    double delta_s;
    double floor_s = 0;
  };
  std::vector<std::vector<RankDelta>> rank_deltas;
  /// The same for the whole step (the standings summed over groups): how much later than before,
  /// against its peers, the rank reaches the end of its step (its arrival at the collectives).
  std::vector<RankDelta> arrival_deltas;
  /// The same for the CPU wait: how much longer than before, against its peers, the rank's threads
  /// waited for a CPU (a rank slowed inside its collectives shows here, not in its arrival).
  std::vector<RankDelta> cpu_wait_deltas;
  /// Ranks whose whole steps grew erratic against their peers': per rank, ln of its step-to-step
  /// variance over its peers' median (delta_s holds that log ratio) and the floor it must pass
  /// (z family-wise over the ranks × the log ratio's SE). A rank paused or starved now and then
  /// loses time wherever it is when it stops, so its loss surfaces as everyone's wait in the
  /// collectives; its own steps scatter. Consulted only where the step changed and no rank's
  /// mean change explains it.
  std::vector<RankDelta> erratic;
  /// Per group: the change of the cohort's median own work per step, the part every rank shares
  /// (a common slowdown; 0 without per-rank facts in the reference).
  std::vector<double> cohort_delta_s;
  /// Reference steps that would bring the exposed step's floor within 3 % of the step with this
  /// window (0: it is already; −1: no number of reference steps would, the window is too short).
  int needed_reference_steps = 0;
};

/// What went wrong: the stage and rank that got slower against a reference (or their cohort),
/// beside the paper's "where the time goes" (docs/diagnosis.md). group and rank are −1 when
/// nothing passes the noise floor (or no rank is evidenced).
struct Diagnosis {
  enum class Basis { none, differential, lag_origin, cohort, frontier };
  Basis basis = Basis::none;
  int group = -1;
  int rank = -1;
  std::string rank_basis = "none";  ///< own_work_excess | frontier_leader | sync_wait_side_evidence | frontier_leader_weak | none
  double excess_s = 0;              ///< per step: the change (differential), the lag opened (lag_origin), the rank's excess (cohort)
  double share_of_step = 0;         ///< excess_s / the step it is measured against
  double noise_floor_s = 0;         ///< the floor excess_s had to pass
  int surfaces_group = -1;          ///< the wait stage where the delay surfaces (the lag closes), −1: none
  std::string reference;            ///< what the window was compared with ("" for cohort / frontier)
  double coverage = 1;              ///< ranks observed / world size
  double confidence = 0;            ///< falls with coverage, noise and ties (docs/diagnosis.md)
  /// The stage changed alike on every rank (no rank's change stands out from its peers'): a common
  /// slowdown of the machine or of a collective all ranks share; rank is −1.
  bool common = false;
  /// Every rank whose change (or excess over its peers, without a reference) passes its floor,
  /// the named rank first, then by excess. A rank slower in several stages is one culprit; its
  /// `by_group_s` says how much in each (its arrival at the step's end, `arrival_s`, sums them).
  struct Culprit {
    int rank = -1;
    int group = -1;                   ///< the group of its largest change past its floor (or the named stage)
    double excess_s = 0;              ///< per step
    double floor_s = 0;
    double arrival_s = 0;             ///< the whole step's change (standing summed over groups)
    double cpu_wait_s = 0;            ///< the change of its threads' CPU wait per step
    std::vector<double> by_group_s;   ///< per group: the rank's change there (0 where not listed)
  };
  std::vector<Culprit> culprits;
  bool significant() const { return group >= 0 && basis != Basis::frontier; }
};
std::string_view to_string(Diagnosis::Basis b);

/// One step as the what-if replays it (docs/diagnosis.md, "What fixing it would buy"), cut at its
/// collectives into segments: a segment runs from the end of the previous one to the end of a
/// group in which the ranks waited inside a collective this step (the last segment, to the step's
/// end). Per segment, each present rank's arrival is its own work there (its stages' time with the
/// time inside its collectives taken off), kept as the latest few arrivals and the order
/// statistics of the rest. In memory only (not in the packet).
struct ArrivalSegment {
  static constexpr int kTop = 8;
  std::int16_t first_group = 0, last_group = 0;  ///< the groups it spans
  std::int32_t top_count = 0;  ///< min(kTop, ranks)
  float end_s = 0;       ///< F[t, its last stage]
  float after_s = 0;     ///< end_s − the previous end − the latest arrival: the time the segment ran past its
                         ///< latest arrival (the collective's own cost; signed, so the segments add up to F)
  float median_s = 0;    ///< median over the present ranks of their arrival (the lower one of an even count)
  float lo_s = 0, mid_s = 0, hi_s = 0;  ///< order statistics a[k−1], a[k], a[k+1] (k = n/2) of the arrivals
  std::array<std::int32_t, kTop> top_rank{};  ///< the latest arrivals' rank ids, latest first
  std::array<float, kTop> top_s{};
};
/// One step of the log: its exposed time and its segments, segments[first, first + count).
struct StepArrivals {
  double exposed_s = 0;     ///< F[t,S]
  std::int32_t ranks = 0;   ///< present ranks (≥ 2)
  std::uint32_t first = 0;  ///< its first segment in ArrivalLog::segments
  std::uint32_t count = 0;
};
/// The what-if's steps, kept compactly (~100 bytes a segment, seconds as floats: 0.1 µs on a
/// 1 s step), so that a run-level accumulator's memory stays flat-ish to its cap.
struct ArrivalLog {
  std::vector<StepArrivals> steps;
  std::vector<ArrivalSegment> segments;
  bool empty() const { return steps.empty(); }
  std::size_t size() const { return steps.size(); }
  /// The median of the other ranks' arrivals in segment s of a step of `ranks` ranks for a rank
  /// that arrived at v (leave-one-out; the standings' rule: with n = 2k + 1 the upper middle).
  static double peers_median(const ArrivalSegment& s, int ranks, double v);
};

/// What fixing a culprit would buy (docs/diagnosis.md, "What fixing it would buy"). The window's
/// steps are replayed segment by segment (StepArrivals) with the culprit's arrival in each set
/// back to its healthy value (the median of its peers' arrivals in the same segment plus its
/// standing there in the reference, or plus nothing against the cohort), never later than it
/// was; every other rank's arrival and each segment's time past its latest arrival unchanged:
/// end'_k = end'_{k−1} + max_r arrival'[k,r] + after_k, T_healed = mean_t end'_last. T_ideal and
/// the slowdown S = T_actual / T_ideal are the what-if analysis of ByteDance's straggler study
/// (arXiv 2505.05713): every rank at the cohort's median arrival in every segment.
struct WhatIf {
  bool available = false;
  std::string why_not;       ///< when not available
  int steps = 0;             ///< steps replayed (the window's first kArrivalSteps at most)
  double actual_s = 0;       ///< T_actual: mean exposed step over those steps
  double ideal_s = 0;        ///< T_ideal: every rank at the cohort's median arrival
  double slowdown = 1;       ///< S = T_actual / T_ideal
  double wasted = 0;         ///< 1 − T_ideal / T_actual: the step's share spent waiting for ranks behind the median
  double floor_s = 0;        ///< a gain must pass this to be one: the exposed step's noise floor
  struct Fix {
    int rank = -1;
    int group = -1;          ///< the culprit's stage
    double healed_s = 0;     ///< T_healed: the step with this rank fixed
    double gain_s = 0;       ///< T_actual − T_healed
    /// Mitigations (FALCON's S4 and S2), for the live checks of `run --mitigate`:
    double excluded_s = 0;   ///< the step without this rank: the others' arrivals, each collective's own
                             ///< time (its healthy cost for a starved rank) scaled by a ring
                             ///< all-reduce's 2(n−1)/n from R to R − 1 ranks
    double rebalance_share = 1;  ///< the batch share (1: an even one) that minimises rebalanced_s
    double rebalanced_s = 0; ///< the step with this rank's batch work (segments up to the gradient
                             ///< collective) scaled by rebalance_share and every other rank's by
                             ///< (R − share)/(R − 1): work in proportion to the batch, as a slow rate
  };
  std::vector<Fix> fixes;    ///< one per culprit, in the diagnosis' order
  double all_healed_s = 0;   ///< every culprit fixed at once (= the one fix with one culprit)
  /// Per group (when available): the collectives' own cost per step there — the mean over the
  /// replayed steps of the time the segments ending at a wait group (Evidence::wait_groups) ran
  /// past their latest arrival (ArrivalSegment::after_s); nullopt elsewhere. A healthy window's
  /// is what the what-if heals a starved rank's collectives back to (Reference::collective_s).
  std::vector<std::optional<double>> collective_s;
  /// The gain of fixing every culprit passes the floor.
  bool gains() const { return available && !fixes.empty() && actual_s - all_healed_s > floor_s; }
};

struct Evidence {
  static constexpr std::string_view kSchema = "sf.evidence/6";
  StageSchema schema;
  std::int64_t first_step = 0, last_step = -1;
  int steps = 0;              ///< steps scored (at least one record)
  int world_size = 0;
  int observed_ranks = 0;     ///< ranks with at least one record in the window
  int missing_steps = 0;      ///< steps in [first, last] with no record
  double exposed_makespan_s = 0;
  double per_stage_max_s = 0;
  double per_stage_avg_s = 0;
  double median_step_s = 0;   ///< median_t F[t,S]
  /// False when a run-level accumulator capped its medians (StreamingAccumulator::bound_medians)
  /// and the step-time or forward-event medians came from its log2 bins (within 0.034 %).
  bool medians_exact = true;
  bool shares_valid = true;   ///< false below the denominator floor (raw advances only)
  std::vector<double> advances_s;   ///< per group
  std::vector<double> shares;       ///< per group
  std::vector<double> static_gain;  ///< per group, with config.gain_baseline
  std::vector<double> advance_sd_s; ///< per group: sample SD over scored steps of the per-step advance
  double exposed_sd_s = 0;          ///< sample SD over scored steps of F[t,S]
  /// The same spreads read robustly: (Q3 − Q1) / 1.349 of the per-step values (a Gaussian's SD,
  /// unmoved by one stalled step); −1 below four steps, where quartiles say nothing.
  std::vector<double> advance_robust_sd_s;
  double exposed_robust_sd_s = -1;
  GainBaseline gain_baseline = GainBaseline::cohort_median;
  std::vector<double> lag_mean_s;           ///< per group, mean_t L at the group's last stage
  std::vector<double> lag_increment_mean_s; ///< per group, mean_t Σ ΔL over the group's stages
  std::vector<double> lag_increment_sd_s;   ///< per group, sample SD over steps of Σ ΔL
  std::vector<double> gap_mean_s;           ///< per group, mean_t max-minus-second-max at advances
  std::vector<int> leader_switches;         ///< per group, between confident unique leaders
  std::vector<int> confident_leaders;       ///< per group, steps with a confident unique leader
  std::vector<std::vector<LeaderCredit>> leaders;  ///< per group, largest advance first
  std::vector<int> routing_set;             ///< groups by share, cumulative ≥ τ_C
  std::vector<int> share_order;             ///< all groups, largest share first
  std::vector<int> co_critical_stages;      ///< ambiguity set E_amb = C_A ∪ C_G (∪ C_R, an option)
  std::vector<Label> labels;
  Suspect suspect;                          ///< for the top stage
  /// Per group: the ranks whose own work most exceeds the cohort median (at most kExcessRanks,
  /// largest first), the median itself and its robust spread (1.4826 × MAD over ranks).
  std::vector<std::vector<RankExcess>> rank_excess;
  std::vector<double> cohort_own_median_s;
  std::vector<double> cohort_own_spread_s;
  /// Per group, then one more entry for the whole step: each rank's standing against its peers
  /// (leave-one-out medians per step). Empty past kStandingMaxRanks columns, where the cohort
  /// excess of own-work levels (rank_excess) is the rank evidence.
  std::vector<Standing> standing;
  /// Each rank's CPU wait per step (StageMatrix::cpu_wait: runnable, not running) against its
  /// peers' the same way; no ranks listed when the recorder read none.
  Standing cpu_wait;
  static constexpr int kStandingMaxRanks = 65536;
  static constexpr int kStandingAll = 64;          ///< up to this many ranks, every one is listed
  static constexpr std::size_t kStandingTop = 16;  ///< past it, the largest standings
  /// Groups that hold a collective: the declared wait model (config.wait_model) and every group
  /// in which the recorder measured a sync wait.
  std::vector<int> wait_groups;
  /// Of those, the groups config.wait_model names (W_s = 1), resolved to indices once, where the
  /// configuration met the window's schema (the labeler and the table read these, not the names).
  std::vector<int> wait_declared;
  Diagnosis diagnosis;                      ///< what went wrong (against the cohort unless diagnose() got a reference)
  std::optional<Differential> differential; ///< set by diagnose() with a reference
  /// What fixing each culprit would buy (what_if(): set with the diagnosis).
  WhatIf whatif;
  /// Per scored step (the first kArrivalSteps), the arrivals the what-if replays; in memory only,
  /// empty past kStandingMaxRanks ranks or with one rank per step.
  ArrivalLog arrivals;
  static constexpr std::size_t kArrivalSteps = 16384;
  static constexpr std::size_t kExcessRanks = 4;
  std::vector<Suspect> stage_suspects;      ///< for every stage with an advance, in stage order
  BaselineSet baselines;
  EventSummary events;
  // telemetry
  double closure_residual_share = 0;
  double overlap_error_share = 0;
  bool has_wall = false;
  std::vector<RankRange> missing_ranks;  ///< ranks absent from at least one scored step, ascending
  std::int64_t missing_rank_count = 0;   ///< ranks in missing_ranks
  std::int64_t missing_records = 0; ///< absent (step, rank) cells in scored steps
  bool gather_ok = true;
  std::int64_t dropped_records = 0;
  int duplicate_records = 0;
  std::vector<std::string> downgrade_reasons;
  /// downgrade_reasons[0, telemetry_reasons) are the telemetry gates': what the evidence lacks
  /// (a failed gather, ranks or steps without records, a reader's notes). The short answer says
  /// these; the labeler's other reasons are the details'.
  int telemetry_reasons = 0;
  LabelConfig config;

  bool has(Label l) const;
  const std::string& group_name(int g) const { return schema.groups()[g]; }
};

/// Per-rank facts of one window beside its shares that the labeler reads — the "side evidence"
/// of `label(config, side evidence)` in DESIGN.md.
struct SideEvidence {
  int ranks = 0;                           ///< R: the matrix's columns
  std::vector<int> rank_ids;               ///< R rank ids of a sparse matrix; empty when dense
  int rank_id(int c) const { return c < 0 || rank_ids.empty() ? c : rank_ids[c]; }
  /// A rank (column) and the advance it led as a confident unique leader.
  struct Credit {
    int rank;
    double s;
  };
  /// G: the ranks that led the group confidently, columns ascending, with that advance. Lists,
  /// not G × R tables: few ranks ever lead, and a window of 10^6 ranks should not write a table
  /// of zeros per group to say so.
  std::vector<std::vector<Credit>> confident_credit;
  /// G: R mean times blocked inside the group's collectives (NaN: none for that rank); empty for
  /// a group in which no rank had a sync wait.
  std::vector<std::vector<double>> sync_wait_mean_s;
  std::vector<double> fwd_cpu_mean_s;      ///< R: mean CPU-wall time of the forward group; NaN: no record
  std::vector<double> fwd_event_median_s;  ///< R: median ready forward event time; NaN: no ready sample; empty: none anywhere
  std::vector<int> fwd_event_ready;        ///< R: ready forward event samples (the gate is per rank); empty: none anywhere
  /// G: chances for a leader switch, Σ over the group's stages of (confident leaders − 1):
  /// switches are counted along each stage's own sequence of steps.
  std::vector<int> switch_chances;
  /// G: shares once the top group is replaced by its clipped baseline (the residual leaders);
  /// empty when not computed.
  std::vector<double> residual_shares;
  std::vector<std::string> roles;          ///< R, or empty when unknown
};

/// Why a schema's accumulation microsteps cannot be read (Table 12, gradient_accumulation_ambiguous):
/// "" when the accumulation factor m is 1 or every suffixed group has each microstep 0..m−1 once
/// and no un-suffixed stage sits between the first and last microstep stage; otherwise the reason
/// (collapsed, partly unfolded, or mixed).
std::string accumulation_problem(const StageSchema& schema);

/// The labeler (Appendix C, Tables 12–13): applies the telemetry, role and accumulation gates,
/// then the stage-diagnosis and forward-event rules to a window's statistics (e, as evaluate()
/// computes them), and fills e's labels, downgrade reasons, ambiguity set (co_critical_stages),
/// suspects and telemetry fields. Deterministic; documented in docs/labeler.md. e's ranks
/// (leaders, events.max_rank) arrive as columns of side; label() ends by turning them, and the
/// suspects it names, into rank ids (side.rank_ids).
void label(Evidence& e, const SideEvidence& side, const LabelConfig& cfg, const TelemetryInput& tel = {});

/// Where a configuration meets a window's stages: every stage group the configuration names (the
/// wait model) is one of the schema's groups. "" when so, else one line naming the first that is
/// not and listing the groups (a typo would silently turn the wait model off). evaluate() and the
/// streaming accumulator throw it (std::invalid_argument); front-ends that know their schema
/// before any window (run) check it up front.
std::string config_names_problem(const StageSchema& schema, const LabelConfig& cfg);

/// The deterministic labeler (Appendix C): validates, accounts, computes baselines, gain, lag,
/// leaders, routing and ambiguity sets, applies the gates and emits labels with reasons.
Evidence evaluate(const StageMatrix& m, const LabelConfig& cfg = {}, const TelemetryInput& tel = {});
/// Same, reusing an Accounting already computed for m with cfg.account.
Evidence evaluate(const StageMatrix& m, const Accounting& acc, const LabelConfig& cfg,
                  const TelemetryInput& tel);

// ---------------------------------------------------------------------------------------------
// Diagnosis: what went wrong, against a reference or the cohort (docs/diagnosis.md; not in the paper)

/// What a window is compared with: a healthy run, the first window of a trainer, the regime
/// before a change. Per-step means and spreads, so that a packet can serve as one.
struct Reference {
  std::string name;                       ///< for the diagnosis line ("the healthy reference", a file)
  std::vector<std::string> groups;        ///< reporting groups, in order (must match the window's)
  int steps = 0;
  int world_size = 0;
  std::vector<double> advance_mean_s;     ///< per group, per step
  std::vector<double> advance_sd_s;       ///< per group, sample SD over steps (0 when unknown)
  double exposed_mean_s = 0, exposed_sd_s = 0;
  /// Robust spreads (Evidence::advance_robust_sd_s); empty / −1 when unknown: the SD is used.
  std::vector<double> advance_robust_sd_s;
  double exposed_robust_sd_s = -1;
  /// Per group: own-work means of the ranks that stood out there, and the cohort median (the
  /// reference of every other rank's own work); empty when unknown (an accounting-only reference).
  std::vector<std::vector<RankExcess>> rank_excess;
  std::vector<double> cohort_own_median_s;
  /// Each rank's standing against its peers (Evidence::standing); empty when unknown.
  std::vector<Standing> standing;
  Standing cpu_wait;  ///< Evidence::cpu_wait (no ranks: unknown)
  /// Per group: the healthy collective's own cost there (its window's WhatIf::collective_s, the
  /// packet's `whatif.collective_s`); empty or nullopt where unknown. The what-if heals a starved
  /// rank's collectives back to it.
  std::vector<std::optional<double>> collective_s;
};
/// A reference made from a scored window's evidence.
Reference make_reference(const Evidence& e, std::string name);
/// "" when `ref` can be compared with `e` (same groups, at least one step on each side), else why not.
std::string reference_problem(const Evidence& e, const Reference& ref);

/// The differential (paper §3 applied to two windows): Δa_g = a_g/N − a_g^ref/N_ref and
/// ΔF = F/N − F_ref/N_ref, which telescope (Σ_g Δa_g = ΔF), with each change's noise floor and the
/// per-rank change of the window's standing-out ranks. Throws std::invalid_argument when
/// reference_problem() is not "".
Differential compare(const Evidence& e, const Reference& ref, const DiagnosisConfig& cfg = {});

/// The diagnosis of a window: against `ref` when given (basis differential), else against the
/// cohort (lag origin, rank excess), else (one rank observed) the frontier's top stage. Reads only
/// the evidence: a packet's facts are enough.
Diagnosis diagnose(const Evidence& e, const Reference* ref, const DiagnosisConfig& cfg = {});
/// Sets e.differential, e.diagnosis and e.whatif against ref (the way every caller with a reference does).
void diagnose_against(Evidence& e, const Reference& ref);
/// What fixing each of e.diagnosis' culprits would buy, replayed on e.arrivals (WhatIf); ref: the
/// reference the diagnosis was made against (its standings give each rank's healthy offset), or
/// null (the cohort). Not available without arrivals (a packet read back, one rank, no waits
/// measured inside the collectives) or without a step; why_not says which.
WhatIf what_if(const Evidence& e, const Reference* ref);

/// One step as a StreamingAccumulator accounted it, for a reader that takes the same step into
/// another accumulator (the segment between two change points) or a watch, so that neither
/// accounts it again: its accounting row and its lag per stage.
struct StepFacts {
  /// account() of the one-step matrix, bit for bit (steps == 1; scored[0] == 0 when no rank is present).
  Accounting accounting;
  /// Per stage: L[t,s] = F[t,s] − median_r P[t,r,s] over the present ranks (empty when none is).
  std::vector<double> lag_s;
};

/// Streaming path: ingests one step at a time in O(R·S) memory (plus one scalar per step for
/// the median step time, and the sampled forward-event values) and gives the same Evidence as
/// evaluate() for gain baselines that need no whole window (cohort_median, reference). Its
/// per-step frontier is the paper's scalar loop, independent of account()'s vectorised pass.
class StreamingAccumulator {
public:
  /// What finish() gives (docs/detect.md, "The diagnosis window at a change").
  enum class Scope {
    /// evaluate()'s evidence on the steps added, bit for bit.
    full,
    /// The evidence a change's diagnosis reads, each field bit for bit evaluate()'s on the same
    /// steps: steps, exposed time, median step and spreads, advances, shares, share order and
    /// routing set, lag, leaders and their gaps and switches, suspects, own work (rank_excess, the
    /// cohort), wait groups, forward events, telemetry, the cohort diagnosis. Not formed, at a
    /// fraction of the cost per step: static_gain (0), baselines and per_stage_max_s/avg_s (0),
    /// the residual-leader counterfactual, and so no labels (labels, downgrade_reasons and
    /// co_critical_stages are empty: they read those).
    segment,
  };
  /// Throws std::invalid_argument for GainBaseline::rank_median (needs the whole window).
  /// rank_ids: the steps' sparse layout (StageMatrix::rank_ids()), empty when dense.
  StreamingAccumulator(StageSchema schema, int world_size, LabelConfig cfg, std::vector<int> rank_ids = {},
                       Scope scope = Scope::full);
  ~StreamingAccumulator();
  StreamingAccumulator(StreamingAccumulator&&) noexcept;
  StreamingAccumulator& operator=(StreamingAccumulator&&) noexcept;

  /// Adds one step from a one-step matrix (steps() == 1, same schema, world size and rank layout).
  /// Step ids must increase; a gap counts as missing steps. Throws std::invalid_argument. With
  /// `facts`, also hands back the step's accounting and lag (what add_accounted_step takes).
  void add_step(const StageMatrix& one_step, StepFacts* facts = nullptr);
  /// Segment scope: adds a step that another accumulator accounted (its `facts` from add_step),
  /// without accounting it again or taking its medians; the result is add_step's. Throws
  /// std::invalid_argument as add_step does, and in full scope (it needs the medians of the step).
  void add_accounted_step(const StageMatrix& one_step, const StepFacts& facts);
  Evidence finish(const TelemetryInput& tel = {}) const;
  int steps_seen() const;
  /// Bounded memory for a run of any length: past exact_cap steps (or forward-event samples of
  /// one rank) the medians come from log2 bins 1/1024 wide (within 0.034 %, Evidence::medians_exact
  /// false) instead of every value. Every other quantity is a running sum and stays exact. Call
  /// before the first step; 0 (the default) keeps every value.
  void bound_medians(std::size_t exact_cap);

private:
  struct State;
  std::unique_ptr<State> state_;
  /// The checks and counts every added step goes through; true when it has a record to add.
  bool admit(const StageMatrix& one_step);
};

}  // namespace sf::frontier
