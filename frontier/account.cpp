#include "detail.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace sf::frontier {

namespace {
using detail::kNegInf;

struct TopTwo {
  double top = kNegInf, second = kNegInf;  ///< the largest value and the largest of the rest
  void add(double v) {
    second = std::max(second, std::min(top, v));
    top = std::max(top, v);
  }
};

/// p[r] += d[r] for r < n (the prefix identity, paper eq. (1): P[t,r,s] = Σ_{j≤s} d[t,r,j]),
/// returning the two largest prefixes. One pass without branches: eight lanes of ranks each
/// keep their own two largest, so the max/min chains are independent and vectorise.
TopTwo add_stage(double* p, const double* d, int n) {
  using Lanes = Eigen::Array<double, 8, 1>;
  Lanes top = Lanes::Constant(kNegInf), second = Lanes::Constant(kNegInf);
  int r = 0;
  for (; r + Lanes::SizeAtCompileTime <= n; r += Lanes::SizeAtCompileTime) {
    const Lanes v = Eigen::Map<const Lanes>(p + r) + Eigen::Map<const Lanes>(d + r);
    Eigen::Map<Lanes>(p + r) = v;
    second = second.max(top.min(v));
    top = top.max(v);
  }
  TopTwo out;
  for (int j = 0; j < Lanes::SizeAtCompileTime; ++j) {
    out.add(top[j]);
    out.second = std::max(out.second, second[j]);
  }
  for (; r < n; ++r) out.add(p[r] += d[r]);
  return out;
}
}  // namespace

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

namespace detail {

namespace {

/// out's row sized for s_count stages, every stage unled and every tie set empty.
void reset_row(int s_count, StepFrontier& out) {
  out.frontier.assign(s_count, 0.0);
  out.advance.assign(s_count, 0.0);
  out.gap.assign(s_count, 0.0);
  out.leader.assign(s_count, Accounting::kNone);
  out.tie.resize(s_count);
  for (auto& tie : out.tie) tie.clear();
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/// first_not_below's eight-lane loop on AVX-512: one packed compare to a mask per eight values
/// (GCC turned the generic vector's all-lanes test into eight scalar compares).
__attribute__((target("avx512f"))) int first_not_below_avx512(const double* p, int n, double v) {
  int r = 0;
  const __m512d bar = _mm512_set1_pd(v);
  for (; r + 8 <= n; r += 8)
    if (const __mmask8 hit = _mm512_cmp_pd_mask(_mm512_loadu_pd(p + r), bar, _CMP_NLT_UQ); hit != 0)
      return r + std::countr_zero(static_cast<unsigned>(hit));
  while (p[r] < v) ++r;
  return r;
}
#endif

/// The first r < n with !(p[r] < v), which the caller knows exists. kEights: eight values a
/// compare on AVX-512 where the machine has it (account_from_prefixes; account_step keeps the
/// scalar loop it was measured with). A generic eight-lane loop was tried before it: GCC made its
/// all-lanes test eight scalar compares, no faster than this loop.
template <bool kEights>
[[gnu::always_inline]] inline int first_not_below(const double* p, int n, double v) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if constexpr (kEights)
    if (vector_select_available()) return first_not_below_avx512(p, n, v);
#endif
  int r = 0;
  while (p[r] < v) ++r;
  return r;
}

/// Stage s of out from its prefixes (missing ranks at −inf), their largest value top.top and the
/// largest of the rest top.second; f_prev: F[t,s−1] (0 at the first stage). Returns F[t,s].
/// unique_leader(attain): the one rank whose prefix is ≥ attain (asked only when exactly one is);
/// prefixes(): P[t,·,s], r_count values (asked only when several ranks attain the frontier).
template <class UniqueLeader, class Prefixes>
[[gnu::always_inline]] inline double settle_stage(const AccountOptions& opt, int s, const TopTwo& top, double f_prev,
                                                  int r_count, UniqueLeader unique_leader, Prefixes prefixes,
                                                  StepFrontier& out) {
  const double f = top.top;
  out.frontier[s] = f;
  const double a = f - f_prev;  // ≥ 0: prefixes are nondecreasing, so is their max
  out.advance[s] = a;

  const double tol = std::max(opt.tie_abs_s, opt.tie_rel * f);
  const double attain = f - tol;  // prefixes at or above this attain the frontier
  if (f >= attain && top.second < attain) [[likely]] {
    // Exactly one rank attains F[t,s]; the runner-up is the largest of the others.
    if (r_count > 1) out.gap[s] = std::isfinite(top.second) ? f - top.second : 0.0;
    if (a > 0) out.leader[s] = unique_leader(attain);
    return f;
  }
  // Several ranks within the tie tolerance (or none, for a negative tolerance).
  const double* p = prefixes();
  int count = 0, first = 0;
  double below = kNegInf;
  for (int r = 0; r < r_count; ++r) {
    if (p[r] >= attain) {
      if (count++ == 0) first = r;
    } else {
      below = std::max(below, p[r]);
    }
  }
  if (r_count > 1 && count == 1) out.gap[s] = std::isfinite(below) ? f - below : 0.0;
  if (a <= 0) return f;
  if (count == 1) {
    out.leader[s] = first;
  } else {
    out.leader[s] = Accounting::kTie;
    for (int r = 0; r < r_count; ++r)
      if (p[r] >= attain) out.tie[s].push_back(r);
  }
  return f;
}

}  // namespace

void account_step(const StageMatrix& m, int t, const AccountOptions& opt, std::vector<double>& p, StepFrontier& out) {
  const int r_count = m.ranks(), s_count = m.stages();
  reset_row(s_count, out);
  if (m.step_present_count(t) == 0) return;
  p.resize(r_count);  // running prefix P[t,·,s]; missing ranks sit at −inf
  if (m.step_complete(t)) {
    std::fill(p.begin(), p.end(), 0.0);
  } else {
    for (int r = 0; r < r_count; ++r) p[r] = m.present(t, r) ? 0.0 : kNegInf;
  }
  const auto block = m.step_block(t);
  double f_prev = 0;
  const double* row = p.data();
  for (int s = 0; s < s_count; ++s)
    f_prev = settle_stage(
        opt, s, add_stage(p.data(), block.col(s).data(), r_count), f_prev, r_count,
        [&](double attain) { return first_not_below<false>(row, r_count, attain); }, [&] { return row; }, out);
}

namespace {
/// account_from_prefixes' and account_from_tops' walk: each stage settled from its top two, the
/// leader (leader(s, attain)) and the prefixes (prefixes(s)) asked as settle_stage asks them.
template <class Leader, class Prefixes>
void settle_from_top_two(const AccountOptions& opt, int ranks, std::span<const double> top,
                         std::span<const double> second, Leader leader, Prefixes prefixes, StepFrontier& out) {
  const int s_count = static_cast<int>(top.size());
  reset_row(s_count, out);
  double f_prev = 0;
  for (int s = 0; s < s_count; ++s) {
    TopTwo two;
    two.top = top[s];
    two.second = second[s];
    f_prev = settle_stage(
        opt, s, two, f_prev, ranks, [&](double attain) { return leader(s, attain); }, [&] { return prefixes(s); }, out);
  }
}
}  // namespace

void account_from_prefixes(const AccountOptions& opt, int ranks, std::span<const double* const> prefix,
                           std::span<const double> top, std::span<const double> second, StepFrontier& out) {
  settle_from_top_two(
      opt, ranks, top.first(prefix.size()), second,
      [&](int s, double attain) { return first_not_below<true>(prefix[s], ranks, attain); },
      [&](int s) { return prefix[s]; }, out);
}

void account_from_tops(const AccountOptions& opt, int ranks, std::span<const double> top, std::span<const double> second,
                       std::span<const int> first_top, const std::function<const double*(int)>& prefixes,
                       StepFrontier& out) {
  // Exactly one rank at or above `attain`: the one whose prefix is the largest.
  settle_from_top_two(
      opt, ranks, top, second, [&](int s, double) { return first_top[s]; }, [&](int s) { return prefixes(s); }, out);
}

}  // namespace detail

namespace detail {

Accounting empty_accounting(const StageMatrix& m) {
  const int n = m.steps(), s_count = m.stages();
  Accounting acc;
  acc.steps = n;
  acc.ranks = m.ranks();
  acc.stages = s_count;
  acc.frontier = Eigen::MatrixXd::Zero(n, s_count);
  acc.advance = Eigen::MatrixXd::Zero(n, s_count);
  acc.gap = Eigen::MatrixXd::Zero(n, s_count);
  acc.leader = Eigen::MatrixXi::Constant(n, s_count, Accounting::kNone);
  acc.scored.assign(n, 0);
  return acc;
}

void store_step(Accounting& acc, int t, const StepFrontier& f) {
  acc.scored[t] = 1;
  for (int s = 0; s < acc.stages; ++s) {
    acc.frontier(t, s) = f.frontier[s];
    acc.advance(t, s) = f.advance[s];
    acc.gap(t, s) = f.gap[s];
    acc.leader(t, s) = f.leader[s];
    if (f.leader[s] == Accounting::kTie) acc.ties.push_back({t, s, f.tie[s]});
  }
}

}  // namespace detail

Accounting account(const StageMatrix& m, const AccountOptions& opt) {
  Accounting acc = detail::empty_accounting(m);
  std::vector<double> p;
  detail::StepFrontier f;
  for (int t = 0; t < m.steps(); ++t) {
    if (m.step_present_count(t) == 0) continue;
    detail::account_step(m, t, opt, p, f);
    detail::store_step(acc, t, f);
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
