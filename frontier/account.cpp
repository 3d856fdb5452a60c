#include "frontier/frontier.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sf::frontier {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}

double Accounting::exposed_makespan() const {
  double sum = 0;
  for (int t = 0; t < steps; ++t)
    if (scored[t]) sum += exposed(t);
  return sum;
}

std::vector<int> Accounting::tie_ranks(int t, int s) const {
  for (const auto& tie : ties)
    if (tie.t == t && tie.s == s) return tie.ranks;
  return {};
}

Accounting account(const StageMatrix& m, const AccountOptions& opt) {
  const int n = m.steps(), r_count = m.ranks(), s_count = m.stages();
  Accounting acc;
  acc.steps = n;
  acc.ranks = r_count;
  acc.stages = s_count;
  acc.frontier = Eigen::MatrixXd::Zero(n, s_count);
  acc.advance = Eigen::MatrixXd::Zero(n, s_count);
  acc.gap = Eigen::MatrixXd::Zero(n, s_count);
  acc.leader = Eigen::MatrixXi::Constant(n, s_count, Accounting::kNone);
  acc.scored.assign(n, 0);

  // Per stage of the current step: the largest prefix, the runner-up, and the first rank
  // attaining the largest.
  std::vector<double> top(s_count), runner_up(s_count);
  std::vector<int> who(s_count);
  for (int t = 0; t < n; ++t) {
    if (m.step_present_count(t) == 0) continue;
    acc.scored[t] = 1;
    std::fill(top.begin(), top.end(), kNegInf);
    std::fill(runner_up.begin(), runner_up.end(), kNegInf);
    std::fill(who.begin(), who.end(), 0);
    const bool complete = m.step_complete(t);
    const double* d = m.step_block(t).data();  // R × S, column-major: d[t,r,s] = d[s·R + r]
    // Rank by rank, so each stage's maximum is its own dependency chain and the CPU overlaps
    // them; the updates are branchless because a stage-by-stage pass with a branch per new
    // maximum mispredicted often at small R.
    for (int r = 0; r < r_count; ++r) {
      if (!complete && !m.present(t, r)) continue;
      double p = 0;
      for (int s = 0; s < s_count; ++s) {
        p += d[static_cast<std::ptrdiff_t>(s) * r_count + r];  // prefix identity, paper eq. (1)
        runner_up[s] = std::max(runner_up[s], std::min(top[s], p));
        who[s] = p > top[s] ? r : who[s];
        top[s] = std::max(top[s], p);
      }
    }
    double f_prev = 0;
    for (int s = 0; s < s_count; ++s) {
      const double f = top[s];
      acc.frontier(t, s) = f;
      const double a = f - f_prev;  // ≥ 0: prefixes are nondecreasing, so is their max
      acc.advance(t, s) = a;
      f_prev = f;

      const double tol = std::max(opt.tie_abs_s, opt.tie_rel * f);
      const double attain = f - tol;  // prefixes at or above this attain the frontier
      if (f >= attain && runner_up[s] < attain) [[likely]] {
        // Exactly one rank attains F[t,s]; the runner-up is the largest of the others.
        if (r_count > 1) acc.gap(t, s) = std::isfinite(runner_up[s]) ? f - runner_up[s] : 0.0;
        if (a > 0) acc.leader(t, s) = who[s];
        continue;
      }
      // Several ranks within the tie tolerance (or none, for a negative tolerance): recompute
      // this stage's prefixes, summed in the same order as above.
      std::vector<double> p(r_count, kNegInf);
      for (int r = 0; r < r_count; ++r)
        if (complete || m.present(t, r)) {
          p[r] = 0;
          for (int j = 0; j <= s; ++j) p[r] += d[static_cast<std::ptrdiff_t>(j) * r_count + r];
        }
      int count = 0, first = 0;
      double below = kNegInf;
      for (int r = 0; r < r_count; ++r) {
        if (p[r] >= attain) {
          if (count++ == 0) first = r;
        } else {
          below = std::max(below, p[r]);
        }
      }
      if (r_count > 1 && count == 1) acc.gap(t, s) = std::isfinite(below) ? f - below : 0.0;
      if (a <= 0) continue;
      if (count == 1) {
        acc.leader(t, s) = first;
      } else {
        acc.leader(t, s) = Accounting::kTie;
        Accounting::Tie tie{t, s, {}};
        for (int r = 0; r < r_count; ++r)
          if (p[r] >= attain) tie.ranks.push_back(r);
        acc.ties.push_back(std::move(tie));
      }
    }
  }
  return acc;
}

Eigen::MatrixXd prefixes(const StageMatrix& m, int t) {
  Eigen::MatrixXd p(m.ranks(), m.stages());
  for (int r = 0; r < m.ranks(); ++r) {
    double run = 0;
    for (int s = 0; s < m.stages(); ++s) {
      run += m.d(t, r, s);
      p(r, s) = m.present(t, r) ? run : std::numeric_limits<double>::quiet_NaN();
    }
  }
  return p;
}

Eigen::MatrixXd slack(const StageMatrix& m, const Accounting& acc, int t) {
  const Eigen::MatrixXd p = prefixes(m, t);
  Eigen::MatrixXd lambda(m.ranks(), m.stages());
  for (int r = 0; r < m.ranks(); ++r)
    for (int s = 0; s < m.stages(); ++s)
      lambda(r, s) = s == 0 ? (m.present(t, r) ? 0.0 : std::numeric_limits<double>::quiet_NaN())
                            : acc.frontier(t, s - 1) - p(r, s - 1);  // λ = F[t,s−1] − P[t,r,s−1] ≥ 0
  return lambda;
}

}  // namespace sf::frontier
