// Internal to sf::frontier (not part of the public interface): the per-step pieces shared by
// the whole-window and streaming paths, so both accumulate exactly the same sums in the same
// order and finish through one labeler.
#pragma once

#include "sf/frontier/frontier.h"

#include <span>
#include <vector>

namespace sf::frontier::detail {

/// One step's frontier row: F, a, gap and leaders per stage, tie sets where leader == kTie.
struct StepFrontier {
  std::vector<double> frontier, advance, gap;
  std::vector<int> leader;
  std::vector<std::vector<int>> tie;
};

/// The paper's scalar loop (§3 pseudo-code), used by the streaming path. Independent of the
/// vectorised account(), which the streaming-vs-window property checks against it.
StepFrontier step_frontier_reference(const StageMatrix& m, int t, const AccountOptions& opt);
StepFrontier step_frontier_from(const Accounting& acc, int t);

/// Median of v (v is reordered; must be non-empty). Even sizes average the two middle values.
double median_inplace(std::vector<double>& v);

/// One step's durations for its present ranks only, as columns of n values (n × S,
/// column-major): the matrix's own storage when every rank is present, a compacted copy
/// otherwise. Row i is rank rank(i), ranks ascending.
class PresentStep {
public:
  PresentStep(const StageMatrix& m, int t);
  int size() const { return n_; }
  int stages() const { return stages_; }
  int rank(int i) const { return ranks_.empty() ? i : ranks_[i]; }
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
void cohort_medians(const StageMatrix& m, int t, std::span<double> out);

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
/// Same, for a step already viewed, with its totals (d.totals()).
void step_gains(const PresentStep& d, const Eigen::ArrayXd& totals, const StageSchema& schema, const StepBaseline& b,
                double exposed, std::span<double> gain_out);

/// Per-group advances of the counterfactual step where group g is replaced by min(d, b̃),
/// and its F'[t,S].
void step_counterfactual(const StageMatrix& m, int t, int g, const StepBaseline& b, std::vector<double>& adv_out,
                         double& exposed_out);

/// Sums of the five baseline rules over steps (per group).
struct BaselineAccumulator {
  explicit BaselineAccumulator(const StageSchema& schema);
  /// cohort_median: per-stage median over present ranks of this step; totals: P[t,r,S].
  void add_step(const StageMatrix& m, int t, std::span<const double> cohort_median);
  /// Same, for a step already viewed, with its totals (d.totals()).
  void add_step(const StageMatrix& m, int t, const PresentStep& d, const Eigen::ArrayXd& totals,
                std::span<const double> cohort_median);
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
  void add_step(const StageMatrix& m, int t, const StepFrontier& f, std::span<const double> cohort_median,
                const Eigen::MatrixXd* rank_median);
  /// Residual-leader counterfactual for group g (call for every group when streaming).
  void add_counterfactual(const StageMatrix& m, int t, int g, std::span<const double> cohort_median,
                          const Eigen::MatrixXd* rank_median);
  /// Top group by advance (the s1 whose counterfactual the ambiguity set needs), −1 if none.
  int top_group() const;
  /// The window's statistics (no labels, reasons, ambiguity set or suspects: label() adds them).
  WindowSummary finish(std::int64_t first_step, std::int64_t last_step, int missing_steps) const;

private:
  const StageSchema& schema_;
  int world_;                 // columns (R of the per-rank tables)
  int declared_world_;        // the job's world size
  std::vector<int> rank_ids_; // empty when dense
  LabelConfig cfg_;
  int S_, G_;
  int steps_ = 0;
  double denom_ = 0;
  std::vector<double> exposed_;         // F[t,S] per scored step (median step time)
  std::vector<double> adv_;             // per group
  std::vector<double> gain_num_;        // per group
  BaselineAccumulator base_;
  std::vector<double> lag_sum_, lag_inc_sum_, gap_sum_;
  std::vector<int> gap_n_;
  std::vector<int> last_conf_, switches_, conf_n_;       // per stage
  std::vector<double> credit_, conf_credit_;             // G × R
  std::vector<int> led_;                                 // G × R
  std::vector<double> sync_sum_;                         // G × R
  std::vector<int> sync_n_;                              // G × R
  std::vector<double> cpu_fwd_sum_;                      // R
  std::vector<int> cpu_fwd_n_;                           // R
  std::vector<std::vector<double>> event_samples_;       // R
  int ev_sampled_ = 0, ev_ready_ = 0, ev_missing_ = 0;
  std::vector<std::uint8_t> rank_missing_;
  std::int64_t missing_records_ = 0;
  double residual_sum_ = 0, overlap_sum_ = 0, wall_sum_ = 0;
  bool has_wall_ = false;
  std::vector<std::string> roles_;
  std::vector<double> cf_adv_;    // G × G: counterfactual advances with group g replaced
  std::vector<double> cf_denom_;  // G
  std::vector<std::uint8_t> cf_seen_;
};

}  // namespace sf::frontier::detail
