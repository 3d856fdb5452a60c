#include "frontier/detail.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace sf::frontier::detail {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr std::size_t kMaxLeadersPerStage = 8;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

/// Moves the elements of [v, v + n) for which less(x) holds to the front, keeping the rest
/// behind them; returns their count. Branchless Lomuto: a swap every element, the front
/// advancing only on less(x). Unrolled by four by hand (GCC does not at -O3): the loop
/// overhead was a fair share of this, the labeler's hottest loop.
template <class Less>
std::size_t partition_branchless(double* v, std::size_t n, Less less) {
  std::size_t front = 0, j = 0;
  auto visit = [&](std::size_t at) {
    const double x = v[at];
    v[at] = v[front];
    v[front] = x;
    front += less(x) ? 1 : 0;
  };
  for (; j + 4 <= n; j += 4) {
    visit(j);
    visit(j + 1);
    visit(j + 2);
    visit(j + 3);
  }
  for (; j < n; ++j) visit(j);
  return front;
}

std::size_t median_of_three_index(const double* v, std::size_t a, std::size_t b, std::size_t c) {
  if (v[a] < v[b]) return v[b] < v[c] ? b : (v[a] < v[c] ? c : a);
  return v[a] < v[c] ? a : (v[b] < v[c] ? c : b);
}

/// The k-th smallest of v[0, n) (0-based; v is reordered), and the (k−1)-th in *lower when
/// lower is not null (0 < k). The per-step medians over ranks are the labeler's largest cost,
/// and std::nth_element mispredicts about every other comparison on unordered data; this
/// quickselect partitions without branches. Runs of keys equal to the smallest are split off
/// so ties cannot make it quadratic, and a bad pivot sequence ends in std::nth_element.
double select_kth(double* v, std::size_t n, std::size_t k, double* lower) {
  constexpr std::size_t kSmall = 32;
  std::size_t lo = 0, hi = n;  // v[0, lo) ≤ v[lo, hi) ≤ v[hi, n), and lo ≤ k < hi
  double left_max = kNegInf;   // max of v[0, lo)
  const int rounds = 2 * static_cast<int>(std::bit_width(n));
  for (int round = 0; hi - lo > kSmall && round < rounds; ++round) {
    // Pivot: median of three, or of three medians of three (Tukey's ninther) on long ranges,
    // which cuts about an eighth of the elements visited.
    const std::size_t m = hi - lo, step = m / 9;
    const std::size_t pivot_at =
        m > 128 ? median_of_three_index(v, median_of_three_index(v, lo, lo + step, lo + 2 * step),
                                        median_of_three_index(v, lo + 3 * step, lo + 4 * step, lo + 5 * step),
                                        median_of_three_index(v, lo + 6 * step, lo + 7 * step, lo + 8 * step))
                : median_of_three_index(v, lo, lo + m / 2, hi - 1);
    std::swap(v[pivot_at], v[hi - 1]);
    const double pivot = v[hi - 1];
    const std::size_t lt = lo + partition_branchless(v + lo, hi - 1 - lo, [pivot](double x) { return x < pivot; });
    std::swap(v[lt], v[hi - 1]);  // v[lo, lt) < pivot = v[lt] ≤ v[lt + 1, hi)
    if (k < lt) {
      hi = lt;
      continue;
    }
    if (k == lt) {
      if (lower) *lower = lt > lo ? *std::max_element(v + lo, v + lt) : left_max;
      return pivot;
    }
    std::size_t next = lt + 1;
    if (lt == lo) {
      // The pivot is the range's smallest key: step over all its copies at once.
      next += partition_branchless(v + next, hi - next, [pivot](double x) { return x <= pivot; });
      if (k < next) {
        if (lower) *lower = pivot;
        return pivot;
      }
    }
    lo = next;
    left_max = pivot;
  }
  std::nth_element(v + lo, v + k, v + hi);
  if (lower) *lower = k > lo ? *std::max_element(v + lo, v + k) : left_max;
  return v[k];
}

/// p[i] += x[i] for i < n, returning the largest p (−inf for n = 0). One pass; eight lanes
/// keep independent maxima, so it vectorises.
double add_and_max(double* p, const double* x, int n) {
  using Lanes = Eigen::Array<double, 8, 1>;
  Lanes top = Lanes::Constant(kNegInf);
  int i = 0;
  for (; i + Lanes::SizeAtCompileTime <= n; i += Lanes::SizeAtCompileTime) {
    const Lanes v = Eigen::Map<const Lanes>(p + i) + Eigen::Map<const Lanes>(x + i);
    Eigen::Map<Lanes>(p + i) = v;
    top = top.max(v);
  }
  double out = top.maxCoeff();
  for (; i < n; ++i) out = std::max(out, p[i] += x[i]);
  return out;
}

/// The clipped baseline min(d, b̃) of stage s for each present rank of the step (eq. 4).
Eigen::ArrayXd clipped_baseline(const StepBaseline& b, const StageSchema& schema, const PresentStep& d, int s) {
  const auto x = d.stage(s);
  if (b.kind != GainBaseline::rank_median) return x.min(b.value(schema, 0, s));
  Eigen::ArrayXd out(d.size());
  for (int i = 0; i < d.size(); ++i) out[i] = std::min(x[i], (*b.rank_median)(d.rank(i), s));
  return out;
}
}  // namespace

PresentStep::PresentStep(const StageMatrix& m, int t) : n_(m.step_present_count(t)), stages_(m.stages()) {
  const auto block = m.step_block(t);
  if (m.step_complete(t)) {
    data_ = block.data();
    return;
  }
  for (int r = 0; r < m.ranks(); ++r)
    if (m.present(t, r)) ranks_.push_back(r);
  copy_.resize(static_cast<std::size_t>(n_) * stages_);
  for (int s = 0; s < stages_; ++s)
    for (int i = 0; i < n_; ++i) copy_[static_cast<std::size_t>(s) * n_ + i] = block(ranks_[i], s);
  data_ = copy_.data();
}

Eigen::ArrayXd PresentStep::totals() const {
  Eigen::ArrayXd total = Eigen::ArrayXd::Zero(n_);
  for (int s = 0; s < stages_; ++s) total += stage(s);
  return total;
}

StepFrontier step_frontier_reference(const StageMatrix& m, int t, const AccountOptions& opt) {
  const int R = m.ranks(), S = m.stages();
  StepFrontier f;
  f.frontier.assign(S, 0.0);
  f.advance.assign(S, 0.0);
  f.gap.assign(S, 0.0);
  f.leader.assign(S, Accounting::kNone);
  f.tie.assign(S, {});
  std::vector<double> p(R, 0.0);
  double f_prev = 0;
  for (int s = 0; s < S; ++s) {
    double front = kNegInf;
    for (int r = 0; r < R; ++r) {
      if (!m.present(t, r)) continue;
      p[r] += m.d(t, r, s);
      front = std::max(front, p[r]);
    }
    f.frontier[s] = front;
    f.advance[s] = front - f_prev;
    f_prev = front;
    const double tol = std::max(opt.tie_abs_s, opt.tie_rel * front);
    int count = 0, who = -1;
    double second = kNegInf;
    for (int r = 0; r < R; ++r) {
      if (!m.present(t, r)) continue;
      if (p[r] >= front - tol) {
        if (count++ == 0) who = r;
      } else {
        second = std::max(second, p[r]);
      }
    }
    if (R > 1 && count == 1 && std::isfinite(second)) f.gap[s] = front - second;
    if (f.advance[s] <= 0) continue;
    if (count == 1) {
      f.leader[s] = who;
    } else {
      f.leader[s] = Accounting::kTie;
      for (int r = 0; r < R; ++r)
        if (m.present(t, r) && p[r] >= front - tol) f.tie[s].push_back(r);
    }
  }
  return f;
}

StepFrontier step_frontier_from(const Accounting& acc, int t) {
  StepFrontier f;
  const int S = acc.stages;
  f.frontier.resize(S);
  f.advance.resize(S);
  f.gap.resize(S);
  f.leader.resize(S);
  f.tie.assign(S, {});
  for (int s = 0; s < S; ++s) {
    f.frontier[s] = acc.frontier(t, s);
    f.advance[s] = acc.advance(t, s);
    f.gap[s] = acc.gap(t, s);
    f.leader[s] = acc.leader(t, s);
  }
  // Ties are stored in (t, s) order: find this step's range by binary search.
  auto lo = std::lower_bound(acc.ties.begin(), acc.ties.end(), t,
                             [](const Accounting::Tie& tie, int step) { return tie.t < step; });
  for (; lo != acc.ties.end() && lo->t == t; ++lo) f.tie[lo->s] = lo->ranks;
  return f;
}

double median_inplace(std::vector<double>& v) {
  const std::size_t n = v.size();
  if (n % 2 == 1) return select_kth(v.data(), n, n / 2, nullptr);
  double lo = 0;
  const double hi = select_kth(v.data(), n, n / 2, &lo);
  return lo + (hi - lo) / 2;
}

void cohort_medians(const StageMatrix& m, int t, std::span<double> out) {
  const PresentStep d(m, t);
  std::vector<double> v(d.size());
  for (int s = 0; s < m.stages(); ++s) {
    Eigen::Map<Eigen::ArrayXd>(v.data(), d.size()) = d.stage(s);
    out[s] = v.empty() ? 0.0 : median_inplace(v);
  }
}

Eigen::MatrixXd rank_window_median(const StageMatrix& m) {
  Eigen::MatrixXd b = Eigen::MatrixXd::Zero(m.ranks(), m.stages());
  std::vector<double> v;
  for (int r = 0; r < m.ranks(); ++r)
    for (int s = 0; s < m.stages(); ++s) {
      v.clear();
      for (int t = 0; t < m.steps(); ++t)
        if (m.present(t, r)) v.push_back(m.d(t, r, s));
      if (!v.empty()) b(r, s) = median_inplace(v);
    }
  return b;
}

double StepBaseline::value(const StageSchema& schema, int r, int s) const {
  switch (kind) {
    case GainBaseline::cohort_median: return cohort_median[s];
    case GainBaseline::rank_median: return (*rank_median)(r, s);
    case GainBaseline::reference: return reference[schema.group_of(s)];
  }
  return 0;
}

void step_gains(const StageMatrix& m, int t, const StepBaseline& b, double exposed, std::span<double> gain_out) {
  const PresentStep d(m, t);
  step_gains(d, d.totals(), m.schema(), b, exposed, gain_out);
}

void step_gains(const PresentStep& d, const Eigen::ArrayXd& totals, const StageSchema& schema, const StepBaseline& b,
                double exposed, std::span<double> gain_out) {
  // F'[t,S] = max_r (P[t,r,S] − Σ_{s∈g} (d − min(d, b̃))), the reduction summed in stage order.
  for (int g = 0; g < schema.group_count(); ++g) {
    double f_cf = kNegInf;
    if (d.size() > 0) {
      Eigen::ArrayXd reduction;
      for (int s = 0; s < d.stages(); ++s) {
        if (schema.group_of(s) != g) continue;
        if (reduction.size() == 0)
          reduction = d.stage(s) - clipped_baseline(b, schema, d, s);  // = 0 + that, exactly: it is ≥ +0
        else
          reduction += d.stage(s) - clipped_baseline(b, schema, d, s);
      }
      f_cf = reduction.size() == 0 ? totals.maxCoeff() : (totals - reduction).maxCoeff();
    }
    gain_out[g] = std::isfinite(f_cf) ? std::max(0.0, exposed - f_cf) : 0.0;
  }
}

void step_counterfactual(const StageMatrix& m, int t, int g, const StepBaseline& b, std::vector<double>& adv_out,
                         double& exposed_out) {
  const auto& schema = m.schema();
  adv_out.assign(schema.group_count(), 0.0);
  const PresentStep d(m, t);
  Eigen::ArrayXd p = Eigen::ArrayXd::Zero(d.size());
  double f_prev = 0;
  for (int s = 0; s < m.stages(); ++s) {
    double front;
    if (schema.group_of(s) == g) {
      const Eigen::ArrayXd clipped = clipped_baseline(b, schema, d, s);
      front = add_and_max(p.data(), clipped.data(), d.size());
    } else {
      front = add_and_max(p.data(), d.stage(s).data(), d.size());
    }
    adv_out[schema.group_of(s)] += front - f_prev;
    f_prev = front;
  }
  exposed_out = f_prev;
}

// --- baselines ---------------------------------------------------------------------------------

BaselineAccumulator::BaselineAccumulator(const StageSchema& s) : schema(&s) {
  for (auto& v : score) v.assign(s.group_count(), 0.0);
}

void BaselineAccumulator::add_step(const StageMatrix& m, int t, std::span<const double> cohort_median) {
  const PresentStep d(m, t);
  add_step(m, t, d, d.totals(), cohort_median);
}

void BaselineAccumulator::add_step(const StageMatrix& m, int t, const PresentStep& d, const Eigen::ArrayXd& total,
                                   std::span<const double> cohort_median) {
  const int S = m.stages();
  if (d.size() == 0) return;
  std::vector<double> stage_max(S), stage_sum(S);
  for (int s = 0; s < S; ++s) stage_max[s] = d.stage(s).maxCoeff();
  // The per-stage sums stay in rank order. Four stages at a time, so the four running sums
  // are independent chains in registers rather than one latency-bound chain after another.
  constexpr int kLanes = 4;
  for (int s0 = 0; s0 < S; s0 += kLanes) {
    const double* col[kLanes];
    for (int j = 0; j < kLanes; ++j) col[j] = d.stage(std::min(s0 + j, S - 1)).data();  // spare lanes repeat the last stage
    double sum[kLanes] = {};
    for (int i = 0; i < d.size(); ++i)
      for (int j = 0; j < kLanes; ++j) sum[j] += col[j][i];
    for (int j = 0; j < kLanes && s0 + j < S; ++j) stage_sum[s0 + j] = sum[j];
  }
  int slowest = 0;
  for (int i = 1; i < d.size(); ++i)
    if (total[i] > total[slowest]) slowest = i;
  slowest = d.rank(slowest);
  const int n = m.step_present_count(t);
  for (int s = 0; s < S; ++s) {
    const int g = schema->group_of(s);
    const double mx = stage_max[s];
    const double mean = stage_sum[s] / n;
    score[static_cast<int>(BaselineRule::per_stage_max)][g] += mx;
    score[static_cast<int>(BaselineRule::per_stage_avg)][g] += mean;
    score[static_cast<int>(BaselineRule::raw_spread)][g] += mx - cohort_median[s];
    score[static_cast<int>(BaselineRule::slowest_rank)][g] += m.d(t, slowest, s);
    if (m.present(t, 0)) score[static_cast<int>(BaselineRule::rank0_total)][g] += m.d(t, 0, s);
    per_stage_max_s += mx;
    per_stage_avg_s += mean;
  }
}

BaselineSet BaselineAccumulator::finish(double tau_c) const {
  BaselineSet b;
  for (std::size_t i = 0; i < std::size(kBaselineRules); ++i) b.rules[i] = rank_stages(score[i], tau_c);
  b.per_stage_max_s = per_stage_max_s;
  b.per_stage_avg_s = per_stage_avg_s;
  return b;
}

// --- window statistics -------------------------------------------------------------------------

WindowStats::WindowStats(const StageSchema& schema, int world_size, const LabelConfig& cfg)
    : schema_(schema), world_(world_size), cfg_(cfg), S_(schema.size()), G_(schema.group_count()), base_(schema) {
  adv_.assign(G_, 0.0);
  gain_num_.assign(G_, 0.0);
  lag_sum_.assign(G_, 0.0);
  lag_inc_sum_.assign(G_, 0.0);
  gap_sum_.assign(G_, 0.0);
  gap_n_.assign(G_, 0);
  last_conf_.assign(S_, -1);
  switches_.assign(S_, 0);
  conf_n_.assign(S_, 0);
  const auto gr = static_cast<std::size_t>(G_) * world_;
  credit_.assign(gr, 0.0);
  conf_credit_.assign(gr, 0.0);
  led_.assign(gr, 0);
  sync_sum_.assign(gr, 0.0);
  sync_n_.assign(gr, 0);
  cpu_fwd_sum_.assign(world_, 0.0);
  cpu_fwd_n_.assign(world_, 0);
  event_samples_.assign(world_, {});
  rank_missing_.assign(world_, 0);
  cf_adv_.assign(static_cast<std::size_t>(G_) * G_, 0.0);
  cf_denom_.assign(G_, 0.0);
  cf_seen_.assign(G_, 0);
}

void WindowStats::add_step(const StageMatrix& m, int t, const StepFrontier& f, std::span<const double> cohort_median,
                           const Eigen::MatrixXd* rank_median) {
  const int R = m.ranks();
  if (m.step_present_count(t) == 0) return;
  ++steps_;
  const double exposed = f.frontier[S_ - 1];
  denom_ += exposed;
  exposed_.push_back(exposed);
  for (int s = 0; s < S_; ++s) adv_[schema_.group_of(s)] += f.advance[s];

  const PresentStep d(m, t);
  const Eigen::ArrayXd totals = d.totals();
  base_.add_step(m, t, d, totals, cohort_median);

  const StepBaseline b{cfg_.gain_baseline, cohort_median, rank_median, cfg_.reference_s};
  std::vector<double> gain(G_);
  step_gains(d, totals, schema_, b, exposed, gain);
  for (int g = 0; g < G_; ++g) gain_num_[g] += gain[g];

  // Lag L[t,s] = max_r P − median_r P and its increment (paper §4).
  std::vector<double> p(d.size(), 0.0), tmp(d.size());
  double lag_prev = 0;
  for (int s = 0; s < S_; ++s) {
    const double* x = d.stage(s).data();
    for (int i = 0; i < d.size(); ++i) tmp[i] = p[i] += x[i];
    // At the first stage P = d: its median is the cohort median, already at hand.
    const double median = s == 0 ? cohort_median[0] : median_inplace(tmp);
    const double lag = f.frontier[s] - median;  // F[t,s] = max_r P[t,r,s], summed the same way
    const int g = schema_.group_of(s);
    lag_inc_sum_[g] += lag - lag_prev;
    lag_prev = lag;
    bool last_of_group = true;
    for (int s2 = s + 1; s2 < S_; ++s2)
      if (schema_.group_of(s2) == g) last_of_group = false;
    if (last_of_group) lag_sum_[g] += lag;
  }

  for (int s = 0; s < S_; ++s) {
    const double a = f.advance[s];
    if (a <= 0) continue;
    const int g = schema_.group_of(s);
    gap_sum_[g] += f.gap[s];
    ++gap_n_[g];
    const auto row = static_cast<std::size_t>(g) * world_;
    if (f.leader[s] >= 0) {
      const int r = f.leader[s];
      credit_[row + r] += a;
      ++led_[row + r];
      // A confident unique leader: a material advance and a clear max-minus-second-max gap.
      const bool confident = exposed > 0 && a >= cfg_.gamma_elig * exposed && f.gap[s] >= cfg_.eta_q * exposed;
      if (confident) {
        conf_credit_[row + r] += a;
        ++conf_n_[s];
        if (last_conf_[s] >= 0 && last_conf_[s] != r) ++switches_[s];
        last_conf_[s] = r;
      }
    } else if (f.leader[s] == Accounting::kTie && !f.tie[s].empty()) {
      const double part = a / static_cast<double>(f.tie[s].size());
      for (int r : f.tie[s]) credit_[row + r] += part;
    }
  }

  if (m.has_sync_wait())
    for (int s = 0; s < S_; ++s) {
      const auto row = static_cast<std::size_t>(schema_.group_of(s)) * world_;
      for (int r = 0; r < R; ++r) {
        if (!m.present(t, r)) continue;
        const double w = m.sync_wait(t, r, s);
        if (!std::isfinite(w)) continue;
        sync_sum_[row + r] += w;
        ++sync_n_[row + r];
      }
    }

  if (const auto gf = schema_.group_index(cfg_.forward_group)) {
    Eigen::ArrayXd fwd = Eigen::ArrayXd::Zero(d.size());
    for (int s = 0; s < S_; ++s)
      if (schema_.group_of(s) == *gf) fwd += d.stage(s);
    for (int i = 0; i < d.size(); ++i) {
      cpu_fwd_sum_[d.rank(i)] += fwd[i];
      ++cpu_fwd_n_[d.rank(i)];
    }
  }

  if (m.has_fwd_events())
    for (int r = 0; r < R; ++r) {
      if (!m.present(t, r)) continue;
      switch (m.fwd_event_state(t, r)) {
        case EventState::unsampled: break;
        case EventState::ready:
          ++ev_sampled_;
          ++ev_ready_;
          event_samples_[r].push_back(m.fwd_event_s(t, r));
          break;
        case EventState::missing:
          ++ev_sampled_;
          ++ev_missing_;
          break;
      }
    }

  has_wall_ = schema_.has_residual();
  double residual_sum = residual_sum_, overlap_sum = overlap_sum_, wall_sum = wall_sum_;  // in registers
  for (int r = 0; r < R; ++r) {
    if (!m.present(t, r)) {
      rank_missing_[r] = 1;
      ++missing_records_;
      continue;
    }
    if (has_wall_) {
      residual_sum += m.d(t, r, schema_.residual_index());
      overlap_sum += m.overlap(t, r);
      wall_sum += m.wall(t, r);
    }
  }
  residual_sum_ = residual_sum;
  overlap_sum_ = overlap_sum;
  wall_sum_ = wall_sum;
  if (roles_.empty() && !m.roles().empty()) roles_ = m.roles();
}

void WindowStats::add_counterfactual(const StageMatrix& m, int t, int g, std::span<const double> cohort_median,
                                     const Eigen::MatrixXd* rank_median) {
  if (m.step_present_count(t) == 0) return;
  const StepBaseline b{cfg_.gain_baseline, cohort_median, rank_median, cfg_.reference_s};
  std::vector<double> adv;
  double exposed = 0;
  step_counterfactual(m, t, g, b, adv, exposed);
  for (int h = 0; h < G_; ++h) cf_adv_[static_cast<std::size_t>(g) * G_ + h] += adv[h];
  cf_denom_[g] += exposed;
  cf_seen_[g] = 1;
}

int WindowStats::top_group() const {
  const RankedStages ranked = rank_stages(adv_, cfg_.tau_c);
  return ranked.order.empty() || adv_[ranked.order[0]] <= 0 ? -1 : ranked.order[0];
}

Suspect WindowStats::suspect_for(int g, double median_step_s) const {
  Suspect sus;
  sus.group = g;
  const auto row = static_cast<std::size_t>(g) * world_;
  int best_conf = -1, best = -1;
  for (int r = 0; r < world_; ++r) {
    if (conf_credit_[row + r] > 0 && (best_conf < 0 || conf_credit_[row + r] > conf_credit_[row + best_conf])) best_conf = r;
    if (credit_[row + r] > 0 && (best < 0 || credit_[row + r] > credit_[row + best])) best = r;
  }
  std::vector<double> waits;
  int quiet = -1;
  double quiet_wait = 0;
  for (int r = 0; r < world_; ++r) {
    if (sync_n_[row + r] == 0) continue;
    const double w = sync_sum_[row + r] / sync_n_[row + r];
    waits.push_back(w);
    if (quiet < 0 || w < quiet_wait) {
      quiet = r;
      quiet_wait = w;
    }
  }
  const double wait_median = waits.empty() ? 0.0 : median_inplace(waits);
  if (best_conf >= 0 && conf_credit_[row + best_conf] >= 0.5 * adv_[g]) {
    sus.rank = best_conf;
    sus.basis = "frontier_leader";
    sus.confidence = conf_credit_[row + best_conf] / adv_[g];
  } else if (world_ > 1 && quiet >= 0 && waits.size() > 1 && wait_median - quiet_wait >= cfg_.eta_q * median_step_s &&
             wait_median > 0) {
    // The rank the others waited for blocks least inside the stage's collectives.
    sus.rank = quiet;
    sus.basis = "sync_wait_side_evidence";
    sus.confidence = 1.0 - quiet_wait / wait_median;
  } else if (best >= 0) {
    sus.rank = best;
    sus.basis = "frontier_leader_weak";
    sus.confidence = credit_[row + best] / adv_[g];
  }
  return sus;
}

Evidence WindowStats::finish(const TelemetryInput& tel, std::int64_t first_step, std::int64_t last_step,
                             int missing_steps) const {
  Evidence e;
  e.schema = schema_;
  e.config = cfg_;
  e.first_step = first_step;
  e.last_step = last_step;
  e.steps = steps_;
  e.world_size = world_;
  e.missing_steps = missing_steps;
  e.exposed_makespan_s = denom_;
  e.per_stage_max_s = base_.per_stage_max_s;
  e.per_stage_avg_s = base_.per_stage_avg_s;
  e.gain_baseline = cfg_.gain_baseline;
  if (!exposed_.empty()) {
    std::vector<double> tmp = exposed_;
    e.median_step_s = median_inplace(tmp);
  }

  // Shares (eq. 2) with the small-denominator floor, routing set and share order.
  e.shares_valid = steps_ > 0 && denom_ >= cfg_.share_floor_s;
  e.advances_s = adv_;
  e.shares.assign(G_, 0.0);
  e.static_gain.assign(G_, 0.0);
  if (denom_ > 0)
    for (int g = 0; g < G_; ++g) {
      if (e.shares_valid) e.shares[g] = adv_[g] / denom_;
      e.static_gain[g] = gain_num_[g] / denom_;
    }
  const RankedStages ranked = rank_stages(adv_, cfg_.tau_c);
  e.share_order = ranked.order;
  e.routing_set = ranked.candidates;
  e.baselines = base_.finish(cfg_.tau_c);

  e.lag_mean_s.assign(G_, 0.0);
  e.lag_increment_mean_s.assign(G_, 0.0);
  e.gap_mean_s.assign(G_, 0.0);
  e.leader_switches.assign(G_, 0);
  e.confident_leaders.assign(G_, 0);
  e.leaders.assign(G_, {});
  for (int g = 0; g < G_; ++g) {
    if (steps_ > 0) {
      e.lag_mean_s[g] = lag_sum_[g] / steps_;
      e.lag_increment_mean_s[g] = lag_inc_sum_[g] / steps_;
    }
    if (gap_n_[g] > 0) e.gap_mean_s[g] = gap_sum_[g] / gap_n_[g];
    std::vector<LeaderCredit> list;
    for (int r = 0; r < world_; ++r) {
      const auto i = static_cast<std::size_t>(g) * world_ + r;
      if (credit_[i] > 0) list.push_back({r, credit_[i], led_[i]});
    }
    std::stable_sort(list.begin(), list.end(),
                     [](const LeaderCredit& a, const LeaderCredit& b) { return a.advance_s > b.advance_s; });
    if (list.size() > kMaxLeadersPerStage) list.resize(kMaxLeadersPerStage);
    e.leaders[g] = std::move(list);
  }
  for (int s = 0; s < S_; ++s) {
    e.leader_switches[schema_.group_of(s)] += switches_[s];
    e.confident_leaders[schema_.group_of(s)] += conf_n_[s];
  }

  // Forward-event side channel summary.
  e.events.sampled = ev_sampled_;
  e.events.ready = ev_ready_;
  e.events.missing = ev_missing_;
  e.events.ready_ratio = ev_sampled_ > 0 ? static_cast<double>(ev_ready_) / ev_sampled_ : 0.0;
  std::vector<double> rank_medians(world_, std::numeric_limits<double>::quiet_NaN()), present_medians;
  for (int r = 0; r < world_; ++r) {
    if (event_samples_[r].empty()) continue;
    std::vector<double> tmp = event_samples_[r];
    rank_medians[r] = median_inplace(tmp);
    present_medians.push_back(rank_medians[r]);
    if (e.events.max_rank < 0 || rank_medians[r] > e.events.max_rank_median_s) {
      e.events.max_rank_median_s = rank_medians[r];
      e.events.max_rank = r;
    }
  }
  if (!present_medians.empty()) e.events.cohort_median_s = median_inplace(present_medians);

  // Telemetry facts.
  e.has_wall = has_wall_;
  if (wall_sum_ > 0) {
    e.closure_residual_share = residual_sum_ / wall_sum_;
    e.overlap_error_share = overlap_sum_ / wall_sum_;
  }
  for (int r = 0; r < world_; ++r)
    if (rank_missing_[r]) e.missing_ranks.push_back(r);
  e.missing_records = missing_records_;
  e.gather_ok = tel.gather_ok;
  e.dropped_records = tel.dropped_records;
  e.duplicate_records = tel.duplicate_records;

  // ---- gates (Appendix C, Table 13) ----
  auto& why = e.downgrade_reasons;
  bool telemetry_limited = false;
  auto limit = [&](std::string reason) {
    telemetry_limited = true;
    why.push_back(std::move(reason));
  };
  if (!tel.gather_ok) limit("gather_ok=false: window scored with what arrived");
  for (const auto& r : tel.reasons) limit(r);
  if (tel.dropped_records > 0) limit("recorder dropped " + std::to_string(tel.dropped_records) + " records (buffer overflow)");
  if (tel.duplicate_records > 0) limit(std::to_string(tel.duplicate_records) + " duplicate (step, rank) records");
  if (static_cast<int>(e.missing_ranks.size()) > cfg_.max_missing_ranks) {
    std::string list;
    for (std::size_t i = 0; i < e.missing_ranks.size() && i < 8; ++i)
      list += (i ? "," : "") + std::to_string(e.missing_ranks[i]);
    if (e.missing_ranks.size() > 8) list += ",...";
    limit("missing ranks: " + std::to_string(e.missing_ranks.size()) + " rank(s) [" + list + "] absent from " +
          std::to_string(missing_records_) + " (step, rank) records; gate allows " + std::to_string(cfg_.max_missing_ranks));
  }
  if (missing_steps > 0) limit(std::to_string(missing_steps) + " step(s) of the window have no records");
  if (has_wall_ && e.closure_residual_share > cfg_.max_closure_residual_share)
    limit("closure residual share " + fmt(e.closure_residual_share) + " > " + fmt(cfg_.max_closure_residual_share));
  if (has_wall_ && e.overlap_error_share > cfg_.max_overlap_error_share)
    limit("overlap error share " + fmt(e.overlap_error_share) + " > " + fmt(cfg_.max_overlap_error_share));
  if (steps_ == 0) limit("no step has any record");

  bool lab[kLabelCount] = {};
  auto set = [&](Label l) { lab[static_cast<int>(l)] = true; };
  if (steps_ > 0) set(Label::frontier_accounting);
  if (telemetry_limited) set(Label::telemetry_limited);

  bool roles_differ = false;
  for (const auto& r : roles_)
    if (r != roles_.front()) roles_differ = true;
  if (roles_differ) {
    set(Label::role_aware_needed);
    why.push_back("ranks have different roles: global frontier across roles is unsafe; group ranks by role");
  }
  if (schema_.accumulation() > 1 && !schema_.microstep_expanded()) {
    set(Label::gradient_accumulation_ambiguous);
    why.push_back("accumulation factor " + std::to_string(schema_.accumulation()) +
                  " with collapsed microsteps: data/backward displacement cannot be separated");
  }
  if (!e.shares_valid && steps_ > 0)
    why.push_back("exposed makespan " + fmt(denom_) + " s below the share floor " + fmt(cfg_.share_floor_s) +
                  " s: raw advances only");
  if (world_ == 1) why.push_back("world size 1: the frontier is the rank's own vector, no cross-rank evidence");

  const bool diagnose = !telemetry_limited && !roles_differ && e.shares_valid && steps_ > 0;
  const int s1 = e.share_order.empty() ? -1 : e.share_order[0];
  const int s2 = e.share_order.size() > 1 ? e.share_order[1] : -1;
  const double a1 = s1 >= 0 ? e.shares[s1] : 0.0;
  const double a2 = s2 >= 0 ? e.shares[s2] : 0.0;
  const double g1 = s1 >= 0 ? e.static_gain[s1] : 0.0;
  const bool dominant = a1 > cfg_.gamma_a;
  const bool near_tie = s2 >= 0 && a2 >= cfg_.gamma_a / 2 && a1 - a2 < cfg_.eta_a;
  bool w1 = false;
  for (const auto& w : cfg_.wait_model)
    if (s1 >= 0 && w == schema_.groups()[s1]) w1 = true;

  // Ambiguity set E_amb = C_A ∪ C_G ∪ residual leaders (docs/labeler.md).
  if (e.shares_valid && s1 >= 0 && a1 > 0) {
    std::vector<std::uint8_t> in(G_, 0);
    double gmax = 0;
    for (int g = 0; g < G_; ++g) gmax = std::max(gmax, e.static_gain[g]);
    for (int g = 0; g < G_; ++g) {
      if (e.shares[g] > 0 && e.shares[g] >= a1 - cfg_.eta_a) in[g] = 1;                  // C_A
      if (e.static_gain[g] >= cfg_.gamma_g && e.static_gain[g] >= gmax - cfg_.eta_g) in[g] = 1;  // C_G
    }
    if (cf_seen_[s1] && cf_denom_[s1] > 0) {
      // Stages that lead once s1 is replaced by its clipped baseline "can remain bottlenecks
      // after optimizing one stage" (Table 12, co_critical).
      double top = 0;
      for (int h = 0; h < G_; ++h) top = std::max(top, cf_adv_[static_cast<std::size_t>(s1) * G_ + h] / cf_denom_[s1]);
      for (int h = 0; h < G_; ++h) {
        const double rs = cf_adv_[static_cast<std::size_t>(s1) * G_ + h] / cf_denom_[s1];
        if (rs > 0 && rs >= top - cfg_.eta_a) in[h] = 1;
      }
    }
    for (int g : e.share_order)
      if (in[g]) e.co_critical_stages.push_back(g);
  }

  if (diagnose && s1 >= 0) {
    const std::string n1 = schema_.groups()[s1];
    if (!dominant)
      why.push_back("no dominant stage: top share " + fmt(a1) + " (" + n1 + ") <= gamma_A " + fmt(cfg_.gamma_a));
    if (near_tie) {
      set(Label::co_critical);
      why.push_back("near tie: " + n1 + " " + fmt(a1) + " and " + schema_.groups()[s2] + " " + fmt(a2) +
                    " are within eta_A " + fmt(cfg_.eta_a));
    }
    int gain_leaders = 0;
    double gmax = 0;
    for (int g = 0; g < G_; ++g) gmax = std::max(gmax, e.static_gain[g]);
    for (int g = 0; g < G_; ++g)
      if (e.static_gain[g] >= cfg_.gamma_g && e.static_gain[g] >= gmax - cfg_.eta_g) ++gain_leaders;
    if (gain_leaders > 1) {
      set(Label::co_critical);
      why.push_back(std::to_string(gain_leaders) + " stages have static gain >= gamma_G within eta_G of each other");
    }
    if (dominant && !near_tie) {
      const auto& spread = e.baselines[BaselineRule::raw_spread].order;
      const auto& pmax = e.baselines[BaselineRule::per_stage_max].order;
      auto top2 = [&](const std::vector<int>& o) {
        return (!o.empty() && o[0] == s1) || (o.size() > 1 && o[1] == s1);
      };
      if (g1 >= cfg_.gamma_g) {
        if (top2(spread) || top2(pmax))
          set(Label::direct_exposure);
        else
          why.push_back("gain of " + n1 + " " + fmt(g1) + " >= gamma_G but raw duration and spread rank it below top-2");
      } else if (w1 && world_ > 1) {
        set(Label::sync_wait_dependent);
      } else if (world_ > 1) {
        set(Label::co_critical);
        why.push_back(n1 + " share " + fmt(a1) + " > gamma_A with static gain " + fmt(g1) +
                      " < gamma_G and no wait model (W=0): cause and co-critical stages not separable");
      }
      if (w1 && world_ > 1) {
        // Sync-wait signature: the lag opens at s1 and collapses downstream as ranks wait.
        double collapse = 0;
        for (int g = s1 + 1; g < G_; ++g) collapse += std::min(0.0, e.lag_increment_mean_s[g]);
        const double open = e.lag_increment_mean_s[s1];
        if (open > 0 && -collapse >= 0.5 * open)
          set(Label::likely_sync_wait);
        else
          why.push_back("wait model asserted for " + n1 + " but the lag does not open there and close downstream");
      }
    }
    if (world_ > 1 && conf_n_.size() > 0) {
      int conf = e.confident_leaders[s1], sw = e.leader_switches[s1];
      if (conf >= 3 && static_cast<double>(sw) / (conf - 1) > cfg_.gamma_switch) {
        set(Label::co_critical);
        why.push_back("leader of " + n1 + " switched " + std::to_string(sw) + " times among " + std::to_string(conf) +
                      " confident unique leaders: several ranks co-critical");
      }
    }
  }

  // Forward CUDA-event side evidence (Table 12 device axis).
  if (e.events.sampled > 0 || cfg_.event_scope_limited) {
    const bool low_ready = e.events.sampled > 0 && e.events.ready_ratio < cfg_.min_event_ready_ratio;
    if (low_ready || cfg_.event_scope_limited) {
      set(Label::forward_event_scope_limited);
      why.push_back(low_ready ? "event ready ratio " + fmt(e.events.ready_ratio) + " < " + fmt(cfg_.min_event_ready_ratio)
                              : "trainer declares streams not covered by the event markers");
    } else if (e.events.ready < cfg_.min_event_samples) {
      why.push_back("only " + std::to_string(e.events.ready) + " ready event samples (< " +
                    std::to_string(cfg_.min_event_samples) + "): no device labels");
    } else if (diagnose) {
      if (const auto gf = schema_.group_index(cfg_.forward_group)) {
        const int f = *gf;
        const bool ev_high = e.median_step_s > 0 && e.events.max_rank_median_s >= cfg_.gamma_event * e.median_step_s;
        const bool fwd_top2 = (s1 == f) || (s2 == f);
        if (ev_high && fwd_top2) set(Label::forward_device_supported);
        if (ev_high && s1 > f) set(Label::forward_spillover_suspected);
        // Host overhead: CPU-wall forward high on its leading rank while its event time is low.
        if (s1 == f || e.shares[f] > cfg_.gamma_a) {
          int rf = e.leaders[f].empty() ? -1 : e.leaders[f].front().rank;
          if (rf >= 0 && cpu_fwd_n_[rf] > 0 && std::isfinite(rank_medians[rf])) {
            const double cpu = cpu_fwd_sum_[rf] / cpu_fwd_n_[rf];
            if (cpu > 0 && rank_medians[rf] <= cfg_.event_low_ratio * cpu) set(Label::forward_host_overhead_suspected);
          }
        }
      }
    }
  }

  for (int i = 0; i < kLabelCount; ++i)
    if (lab[i]) e.labels.push_back(static_cast<Label>(i));

  // Suspects: for every stage with an advance, the rank the evidence names; the top stage's
  // is the packet's headline suspect.
  for (int g = 0; g < G_; ++g)
    if (adv_[g] > 0) e.stage_suspects.push_back(suspect_for(g, e.median_step_s));
  for (const auto& sus : e.stage_suspects)
    if (sus.group == s1) e.suspect = sus;
  return e;
}

}  // namespace sf::frontier::detail
