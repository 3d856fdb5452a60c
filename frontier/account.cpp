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

  Eigen::VectorXd p(r_count);     // running prefix P[t,·,s]; missing ranks sit at −inf
  Eigen::VectorXd start(r_count);
  for (int t = 0; t < n; ++t) {
    if (m.step_present_count(t) == 0) continue;
    acc.scored[t] = 1;
    if (m.step_complete(t)) {
      p.setZero();
    } else {
      for (int r = 0; r < r_count; ++r) start[r] = m.present(t, r) ? 0.0 : kNegInf;
      p = start;
    }
    const auto block = m.step_block(t);
    double f_prev = 0;
    for (int s = 0; s < s_count; ++s) {
      p += block.col(s);  // prefix identity, paper eq. (1): P[t,r,s] = Σ_{j≤s} d[t,r,j]
      const double f = p.maxCoeff();
      acc.frontier(t, s) = f;
      acc.advance(t, s) = f - f_prev;  // ≥ 0: prefixes are nondecreasing, so is their max
      f_prev = f;

      const double tol = std::max(opt.tie_abs_s, opt.tie_rel * f);
      const auto attains = (p.array() >= f - tol);
      const auto count = attains.count();
      if (r_count > 1 && count == 1) {
        const double second = attains.select(Eigen::VectorXd::Constant(r_count, kNegInf), p).maxCoeff();
        acc.gap(t, s) = std::isfinite(second) ? f - second : 0.0;
      }
      if (acc.advance(t, s) <= 0) continue;
      if (count == 1) {
        Eigen::Index who = 0;
        for (Eigen::Index r = 0; r < r_count; ++r)
          if (attains[r]) {
            who = r;
            break;
          }
        acc.leader(t, s) = static_cast<int>(who);
      } else {
        acc.leader(t, s) = Accounting::kTie;
        Accounting::Tie tie{t, s, {}};
        for (int r = 0; r < r_count; ++r)
          if (attains[r]) tie.ranks.push_back(r);
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
