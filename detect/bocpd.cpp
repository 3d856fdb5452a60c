// Bayesian online change-point detection (Adams & MacKay 2007) with a Student-t predictive from a
// Normal-Gamma prior, truncated run lengths, held-back isolated outliers and FALCON's
// verification step (docs/detect.md states the decision rule).
#include "sf/detect/detect.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace sf::detect {

std::string validate(const DetectConfig& c) {
  auto finite_pos = [](double v) { return std::isfinite(v) && v > 0; };
  if (!(c.hazard > 0 && c.hazard < 1)) return "detect hazard must be in (0, 1), got " + std::to_string(c.hazard);
  if (c.max_run_length < 2) return "detect max_run_length must be >= 2";
  if (c.short_run < 1 || c.short_run >= c.max_run_length) return "detect short_run must be in [1, max_run_length)";
  if (!(c.threshold > 0 && c.threshold < 1)) return "detect threshold must be in (0, 1)";
  if (c.min_gap < 1) return "detect min_gap must be >= 1 step";
  if (!(c.min_rel_change >= 0 && c.min_rel_change < 1)) return "detect min_rel_change must be in [0, 1)";
  if (c.min_after < 1) return "detect min_after must be >= 1";
  if (c.max_changes_kept < 1) return "detect max_changes_kept must be >= 1";
  if (c.max_transients_kept < 0) return "detect max_transients_kept must be >= 0";
  if (c.min_gap >= c.max_run_length)
    return "detect min_gap (" + std::to_string(c.min_gap) + ") must be below max_run_length (" +
           std::to_string(c.max_run_length) + "): a new level must hold min_gap steps among the values kept";
  if (!(c.stage_floor >= 0 && c.stage_floor <= 1)) return "detect stage_floor must be in [0, 1]";
  if (c.level_window < 1) return "detect level_window must be >= 1";
  if (!finite_pos(c.outlier_z)) return "detect outlier_z must be > 0";
  if (c.max_outlier_run < 0 || c.max_outlier_run >= c.min_gap)
    return "detect max_outlier_run must be in [0, min_gap)";
  if (!finite_pos(c.kappa0) || !finite_pos(c.alpha0) || !finite_pos(c.prior_rel_sd))
    return "detect prior (kappa0, alpha0, prior_rel_sd) must be finite and > 0";
  if (!(c.contamination >= 0 && c.contamination < 1)) return "detect contamination must be in [0, 1)";
  if (!finite_pos(c.contamination_span)) return "detect contamination_span must be > 0";
  if (c.max_period < 2) return "detect max_period must be >= 2";
  if (!(c.acf_min > 0 && c.acf_min <= 1)) return "detect acf_min must be in (0, 1]";
  if (!(c.spike_z > 0) || !std::isfinite(c.spike_z)) return "detect spike_z must be finite and > 0";
  if (c.min_repeats < 2) return "detect min_repeats must be >= 2";
  if (c.median_halfwidth < 1) return "detect median_halfwidth must be >= 1";
  return "";
}

double student_t_log_const(double alpha) {
  // log Γ(α + ½) − log Γ(α) − ½ log(2απ), the Student-t density's constant at ν = 2α. Below
  // α = 10 from lgamma; from there Stirling's series for both log Γ, where the logs of α cancel:
  // α·log1p(1/(2α)) − ½ − ½ log 2π + S(α + ½) − S(α), S(x) = Σ B2k / (2k(2k−1) x^(2k−1)) to
  // x⁻⁹ (the next term is below 2e-14 at x = 10). The detector computes it for every run length
  // at every step when contamination is on; two lgamma calls were a third of its cost.
  if (alpha < 10) return std::lgamma(alpha + 0.5) - std::lgamma(alpha) - 0.5 * std::log(2 * alpha * std::numbers::pi);
  const auto series = [](double x) {
    const double i = 1 / x, i2 = i * i;
    return i * (1.0 / 12 - i2 * (1.0 / 360 - i2 * (1.0 / 1260 - i2 * (1.0 / 1680 - i2 / 1188))));
  };
  return alpha * std::log1p(0.5 / alpha) - 0.5 - 0.5 * std::log(2 * std::numbers::pi) + series(alpha + 0.5) - series(alpha);
}

Detector::Detector(DetectConfig cfg) : cfg_(cfg) {
  if (const auto err = validate(cfg_); !err.empty()) throw std::invalid_argument(err);
  lconst_.resize(static_cast<std::size_t>(cfg_.max_run_length) + 1);
  for (std::size_t r = 0; r < lconst_.size(); ++r) {
    lconst_[r] = student_t_log_const(cfg_.alpha0 + 0.5 * static_cast<double>(r));
  }
}

Detector::Stats Detector::prior() const {
  // Unit-free: the prior's mean and spread follow the reference level (the median of the last
  // few values fed) and their robust spread, with an absolute floor (1 µs) for an all-zero
  // series. Anchoring them on the first value alone let a slow warm-up step set the scale of
  // every later regime.
  const double sd = std::max({cfg_.prior_rel_sd * std::abs(level_), spread_, 1e-6});
  return {level_, cfg_.kappa0, cfg_.alpha0, cfg_.alpha0 * sd * sd};
}

void Detector::update_level() {
  const std::size_t k = std::min(history_.size(), static_cast<std::size_t>(cfg_.level_window));
  level_buf_.clear();
  for (std::size_t i = history_.size() - k; i < history_.size(); ++i) level_buf_.push_back(history_[i].second);
  auto mid = level_buf_.begin() + static_cast<std::ptrdiff_t>(k / 2);
  std::nth_element(level_buf_.begin(), mid, level_buf_.end());
  level_ = *mid;
  // 1.4826 · MAD: the normal-consistent robust standard deviation of those values.
  for (double& v : level_buf_) v = std::abs(v - level_);
  std::nth_element(level_buf_.begin(), mid, level_buf_.end());
  spread_ = k >= 4 ? 1.4826 * *mid : 0.0;
}

namespace {

double median(std::vector<double>& v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

struct Predictive {
  double mu, scale, nu;
};

template <typename S>
Predictive predictive(const S& s) {
  return {s.mu, std::sqrt(s.beta * (s.kappa + 1) / (s.alpha * s.kappa)), 2 * s.alpha};
}

}  // namespace

int Detector::map_run_length() const {
  return static_cast<int>(std::max_element(post_.begin(), post_.end()) - post_.begin());
}

std::size_t Detector::state_size() const {
  return post_.size() + 4 * stats_.size() + 2 * history_.size() + 2 * pending_.size() + scratch_.size() +
         inlier_.size() + lconst_.size() + level_buf_.size() + left_.size() + right_.size() + half_.size() +
         kChangeFields * (changes_.size() + (held_ ? 1 : 0)) + kTransientFields * transients_.size();
}

double Detector::rel(double a, double b) const {
  const double denom = std::max({a, b, floor_});
  return denom > 0 ? std::abs(a - b) / denom : 0.0;
}

std::vector<ChangePoint> Detector::changes() const { return {changes_.begin(), changes_.end()}; }

void Detector::feed(std::int64_t step, double x) {
  const double h = cfg_.hazard;
  const std::size_t n = post_.size();
  const std::size_t cap = static_cast<std::size_t>(cfg_.max_run_length) + 1;
  // Log predictive density of x under every run length. Without contamination the Student-t
  // constant depends on α alone, and α at run length r is α0 + r/2, so it comes from a table;
  // with it, α grows by the inlier weights and the constant is computed.
  const double eps = cfg_.contamination;
  const double log_in = std::log1p(-eps);
  // The outlier density: flat over [0, span·L] and a 1/x² tail beyond it (half the mass each), a
  // proper density at every x: a flat density applied beyond its range made a value far above it
  // as likely an outlier as one inside, so a very large sustained shift was never learned.
  const double span = cfg_.contamination_span * std::max(std::abs(level_), 1e-6);
  const double log_out =
      eps > 0 ? std::log(eps) - std::log(2 * span) - (x > span ? 2 * std::log(x / span) : 0.0) : 0.0;
  scratch_.resize(n);
  inlier_.assign(n, 1.0);
  // First the log densities (with contamination: of the inlier part, log((1 − ε) t(x))) and
  // their largest over the runs that hold mass, then one exp per run: the mixture
  // (1 − ε) t + ε u scaled by exp(−mx), and the inlier weight as its share. Forming the mixture
  // in logs took an exp and a log1p more per run length per step.
  double mx = -INFINITY;
  for (std::size_t r = 0; r < n; ++r) {
    const Stats& s = stats_[r];
    const double nu = 2 * s.alpha;
    const double scale2 = s.beta * (s.kappa + 1) / (s.alpha * s.kappa);
    const double z2 = (x - s.mu) * (x - s.mu) / scale2;
    const double lc = eps > 0 ? student_t_log_const(s.alpha) : lconst_[r];
    scratch_[r] = (eps > 0 ? log_in : 0.0) + lc - 0.5 * std::log(scale2) - (nu + 1) / 2 * std::log1p(z2 / nu);
    if (post_[r] > 0) mx = std::max({mx, scratch_[r], eps > 0 ? log_out : -INFINITY});
  }
  const double u = eps > 0 ? std::exp(log_out - mx) : 0.0;  // ε u(x), scaled; mx >= log_out
  double cp = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (post_[r] > 0) {
      const double t = std::exp(scratch_[r] - mx);  // <= 1
      const double p = t + u;
      // A regime that has seen nothing cannot call its first value an outlier: that value is
      // where it begins (else a new run far from the prior's mean never learns its level).
      if (eps > 0 && r > 0) inlier_[r] = p > 0 ? t / p : (scratch_[r] >= log_out ? 1.0 : 0.0);
      scratch_[r] = post_[r] * p;
    } else {
      // A run without mass stays without it; its weight still feeds its statistics, from the
      // two log densities (its own may lie above mx).
      if (eps > 0 && r > 0) {
        const double e = std::exp(-std::abs(scratch_[r] - log_out));
        inlier_[r] = scratch_[r] >= log_out ? 1 / (1 + e) : e / (1 + e);
      }
      scratch_[r] = 0.0;
    }
    cp += scratch_[r] * h;
  }
  if (n < cap) {
    post_.push_back(0);
    stats_.push_back({});
  }
  // Growth r → r+1, from the longest run down so nothing is overwritten before it is read;
  // the longest run at the cap falls off (truncation). The Normal-Gamma update takes x with its
  // inlier weight w (w = 1: the conjugate update).
  for (std::size_t r = n; r-- > 0;) {
    if (r + 1 >= post_.size()) continue;
    post_[r + 1] = scratch_[r] * (1 - h);
    const Stats s = stats_[r];
    const double w = inlier_[r];
    stats_[r + 1] = {(s.kappa * s.mu + w * x) / (s.kappa + w), s.kappa + w, s.alpha + 0.5 * w,
                     s.beta + s.kappa * w * (x - s.mu) * (x - s.mu) / (2 * (s.kappa + w))};
  }
  post_[0] = cp;
  double total = 0;
  for (double v : post_) total += v;
  if (!(total > 0) || !std::isfinite(total)) {
    // Every run length gave the observation zero density (underflow far in a tail): start over
    // from the prior rather than divide by zero.
    std::fill(post_.begin(), post_.end(), 0.0);
    post_[0] = 1;
    total = 1;
  }
  for (double& v : post_) v /= total;
  history_.emplace_back(step, x);
  while (history_.size() > static_cast<std::size_t>(cfg_.max_run_length)) history_.pop_front();
  update_level();
  stats_[0] = prior();
}

std::optional<ChangePoint> Detector::decide(std::int64_t step) {
  // Short-run mass and the most probable short run (r >= 1: r = 0 has seen no data).
  double mass = post_[0];
  int best = -1;
  for (int r = 1; r <= cfg_.short_run && r < static_cast<int>(post_.size()); ++r) {
    mass += post_[r];
    if (best < 0 || post_[r] > post_[best]) best = r;
  }
  if (mass < cfg_.threshold || best < 1 || static_cast<std::size_t>(best) >= history_.size()) {
    open_candidate_ = -1;
    return reversion(step);
  }
  const std::int64_t c = history_[history_.size() - static_cast<std::size_t>(best)].first;
  if (c <= segment_start_) return std::nullopt;  // the regime already reported (or the start)
  return verify(c, step, mass, cfg_.min_after);
}

std::optional<ChangePoint> Detector::reversion(std::int64_t step) {
  // The values went back to the level before the last change and the posterior no longer holds
  // a regime that began in the stretch in between: that stretch was a burst (the old run explains
  // it as outliers, or a run begun after it took over). That is the last change's recovery,
  // placed after the last value on the changed side of the midpoint between the two levels.
  if (changes_.empty() || changes_.back().step != segment_start_) return std::nullopt;
  const ChangePoint& prev = changes_.back();
  const double mid = 0.5 * (prev.median_before + prev.median_after);
  std::int64_t c = -1, after = -1;
  std::size_t in_segment = 0, from_c = 0;
  for (auto it = history_.rbegin(); it != history_.rend() && it->first >= segment_start_; ++it) {
    ++in_segment;
    if (c < 0 && (prev.direction() > 0 ? it->second > mid : it->second < mid)) {
      c = after;
      from_c = in_segment - 1;
    }
    after = it->first;
  }
  if (c < 0) return std::nullopt;  // the latest value is still on the changed side, or none is
  // Runs of length r in (from_c, in_segment] began inside the burst.
  double in_burst = 0;
  for (std::size_t r = from_c + 1; r <= in_segment && r < post_.size(); ++r) in_burst += post_[r];
  if (in_burst > 1 - cfg_.threshold) return std::nullopt;
  return verify(c, step, 1 - in_burst, 1);
}

std::optional<ChangePoint> Detector::verify(std::int64_t c, std::int64_t step, double mass, int min_left) {
  double sum_l = 0, sum_r = 0;
  left_.clear();
  right_.clear();
  for (const auto& [s, v] : history_) {
    if (s < segment_start_) continue;
    if (s < c) sum_l += v, left_.push_back(v);
    else sum_r += v, right_.push_back(v);
  }
  const int n_l = static_cast<int>(left_.size()), n_r = static_cast<int>(right_.size());
  if (n_l < min_left || n_r < cfg_.min_after) return std::nullopt;
  const bool new_candidate = c != open_candidate_;
  open_candidate_ = c;
  // FALCON's rule on the segments' medians, not their means: one slow warm-up step or an
  // isolated spike inside a short segment moves a mean by more than 10 % but not a median.
  const double ml = median(left_), mr = median(right_);
  const double change = rel(ml, mr);
  bool gap_ok = changes_.empty() || c - changes_.back().step >= cfg_.min_gap;
  if (!gap_ok) {
    // A return to the level before the previous change is that change's recovery (a burst that
    // ended), reported however close: the gap rule keeps one change from being reported twice,
    // it must not leave a burst standing as a lasting "slower" regime.
    const auto& prev = changes_.back();
    const int dir = mr > ml ? +1 : -1;
    gap_ok = dir == -prev.direction() && rel(mr, prev.median_before) <= cfg_.min_rel_change;
  }
  if (!gap_ok || change <= cfg_.min_rel_change) {
    if (new_candidate) ++rejected_;
    return std::nullopt;
  }
  // Verified, but not yet a change: the new level must hold for min_gap steps (hold()).
  held_ = ChangePoint{c, step, sum_l / n_l, sum_r / n_r, ml, mr, change, mass};
  open_candidate_ = -1;
  return hold(step);
}

std::optional<ChangePoint> Detector::hold(std::int64_t step) {
  // FALCON's gap, applied forward: a regime lasts at least K = min_gap steps. The held candidate
  // at c is confirmed once K values from c are in, if the medians of all of them and of each half
  // are beyond the threshold in its direction; else it was a transient (a hiccup of a loaded
  // machine: 2-3 steps 10-13 % slower were confirmed as onsets, ~22 per 10^4 healthy live steps).
  const ChangePoint p = *held_;
  left_.clear();
  right_.clear();
  double sum_l = 0, sum_r = 0;
  for (const auto& [s, v] : history_) {
    if (s < segment_start_) continue;
    if (s < p.step) sum_l += v, left_.push_back(v);
    else sum_r += v, right_.push_back(v);
  }
  const std::size_t n = right_.size();
  if (n < static_cast<std::size_t>(cfg_.min_gap)) return std::nullopt;
  held_.reset();
  const double ml = left_.empty() ? p.median_before : median(left_);
  auto beyond = [&](double m) { return (p.direction() > 0 ? m > ml : m < ml) && rel(ml, m) > cfg_.min_rel_change; };
  // How long the excursion lasted: consecutive values from c on its side of the midpoint.
  const double mid = 0.5 * (ml + p.median_after);
  int steps = 0;
  while (static_cast<std::size_t>(steps) < n && (p.direction() > 0 ? right_[steps] > mid : right_[steps] < mid)) ++steps;
  half_.assign(right_.begin(), right_.begin() + static_cast<std::ptrdiff_t>(n / 2));
  const bool first_half = beyond(median(half_));
  half_.assign(right_.begin() + static_cast<std::ptrdiff_t>(n / 2), right_.end());
  const bool second_half = beyond(median(half_));
  const double mr = median(right_);
  if (first_half && second_half && beyond(mr)) {
    const ChangePoint cpnt{p.step, step, left_.empty() ? p.mean_before : sum_l / static_cast<double>(left_.size()),
                           sum_r / static_cast<double>(n), ml, mr, rel(ml, mr), p.short_run_mass};
    changes_.push_back(cpnt);
    ++changes_total_;
    while (static_cast<int>(changes_.size()) > cfg_.max_changes_kept) changes_.pop_front();
    segment_start_ = p.step;
    return cpnt;
  }
  // One excursion is one transient, however often its candidate comes back while it lasts.
  if (transients_.empty() || p.step > transients_.back().judged_at) {
    ++transients_total_;
    transients_.push_back({p.step, step, steps, p.median_before, p.median_after, p.rel_change});
    while (static_cast<int>(transients_.size()) > cfg_.max_transients_kept) transients_.pop_front();
  } else {
    transients_.back().judged_at = step;
  }
  return std::nullopt;
}

std::optional<ChangePoint> Detector::after_feed(std::int64_t step) {
  return held_ ? hold(step) : decide(step);
}

std::optional<ChangePoint> Detector::observe(std::int64_t step, double x) {
  if (!std::isfinite(x) || x < 0)
    throw std::invalid_argument("detect: step " + std::to_string(step) + ": value " + std::to_string(x) +
                                ", expected a finite value >= 0");
  if (started_ && step <= last_step_)
    throw std::invalid_argument("detect: step " + std::to_string(step) + " after step " + std::to_string(last_step_) +
                                ", expected increasing steps");
  last_step_ = step;
  ++observed_;
  if (!started_) {
    started_ = true;
    level_ = x;
    segment_start_ = step;
    post_ = {1.0};
    stats_ = {prior()};
    feed(step, x);
    return std::nullopt;
  }
  // Held-back outliers: judged against the MAP run once it has seen a few observations.
  const int map = map_run_length();
  const Stats& s = stats_[static_cast<std::size_t>(map)];
  bool outlier = false;
  if (cfg_.max_outlier_run > 0 && map >= cfg_.min_after) {
    const auto p = predictive(s);
    outlier = std::abs(x - p.mu) > cfg_.outlier_z * p.scale &&
              std::abs(x - p.mu) > cfg_.min_rel_change * std::max(std::abs(p.mu), floor_);
  }
  if (outlier) {
    pending_.emplace_back(step, x);
    if (static_cast<int>(pending_.size()) <= cfg_.max_outlier_run) return std::nullopt;
    std::optional<ChangePoint> found;
    for (const auto& [ps, pv] : pending_) {
      feed(ps, pv);
      if (auto c = after_feed(ps)) found = c;
    }
    pending_.clear();
    return found;
  }
  outliers_dropped_ += static_cast<std::int64_t>(pending_.size());
  pending_.clear();
  feed(step, x);
  return after_feed(step);
}

std::vector<ChangePoint> detect_series(const std::vector<double>& x, std::int64_t first_step, const DetectConfig& cfg) {
  Detector d(cfg);
  for (std::size_t i = 0; i < x.size(); ++i) d.observe(first_step + static_cast<std::int64_t>(i), x[i]);
  return d.changes();
}

}  // namespace sf::detect
