#include "detail.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

// Lanes8 below is a 64-byte GCC vector: GCC notes that passing one by value changes the ABI
// without AVX-512. Its helpers are always inline, so no such vector crosses a call. Clang
// honours this pragma; GCC's note reads only the command line (-Wno-psabi in CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace sf::frontier::detail {

namespace {
constexpr std::size_t kMaxLeadersPerStage = 8;

// The per-rank loops below are written as plain loops over eight lanes (no Eigen packets, which
// are SSE2-wide in this build): the rank pass and the standings are compiled twice, for the
// baseline target and for AVX-512 (chosen at run time), and the compiler widens these loops in
// the second. Max is exact in any order; every sum keeps its order, lanes or not.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SF_WIDE_LOOPS 1
#define SF_WIDE_TARGET __attribute__((target("avx512f,popcnt")))
#else
#define SF_WIDE_LOOPS 0
#define SF_WIDE_TARGET
#endif
#define SF_INLINE [[gnu::always_inline]] inline
// GCC's optimize attribute keeps a loop scalar (chain_sums_of); clang has no such attribute and
// warns on it, so it gets none (its result is the same: each chain's adds stay in index order).
#if defined(__GNUC__) && !defined(__clang__)
#define SF_NO_SLP __attribute__((optimize("no-tree-slp-vectorize", "no-tree-vectorize")))
#else
#define SF_NO_SLP
#endif

constexpr int kLanes = 8;

// GCC (12) compiles std::max and std::min on doubles lane by lane, never packed: their rule for
// NaN and signed zeros is not a plain max's unless the build assumes finite math, so the loops
// of eight lanes ran scalar in both builds. These take eight lanes as one GCC vector, where
// a < b ? b : a (std::max's own expression, lane by lane: the same value for every input,
// NaN and ±0 included) becomes one packed max (AVX-512) or compares and blends (SSE2).
using Lanes8 = double __attribute__((vector_size(64)));
SF_INLINE Lanes8 load8(const double* p) {
  Lanes8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
SF_INLINE void store8(double* p, Lanes8 v) { __builtin_memcpy(p, &v, sizeof v); }
/// x in every lane: lane 0's value shuffled to all eight (one broadcast; GCC built the
/// eight-value initialiser as eight masked broadcasts). __builtin_shufflevector, not
/// __builtin_shuffle: clang, which builds the sanitizer trees, has only the former.
SF_INLINE Lanes8 splat8(double x) {
  const Lanes8 v{x};
  return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);
}
/// std::max(a, b) and std::min(a, b), lane by lane.
SF_INLINE Lanes8 max8(Lanes8 a, Lanes8 b) { return a < b ? b : a; }
SF_INLINE Lanes8 min8(Lanes8 a, Lanes8 b) { return b < a ? b : a; }

/// The largest of eight lanes, in lane order.
SF_INLINE double lanes_max(Lanes8 top) {
  double out = top[0];
  for (int j = 1; j < kLanes; ++j) out = std::max(out, top[j]);
  return out;
}

/// p[i] += x[i] for i < n, returning the largest p (−inf for n = 0). One pass, eight lanes at a
/// time, each lane its own maximum.
SF_INLINE double add_and_max(double* p, const double* x, int n) {
  Lanes8 top = splat8(kNegInf);
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Lanes8 v = load8(p + i) + load8(x + i);
    store8(p + i, v);
    top = max8(top, v);
  }
  double out = lanes_max(top);
  for (; i < n; ++i) out = std::max(out, p[i] += x[i]);
  return out;
}

/// The largest of v[0, n) (−inf for n = 0): two independent maxima of eight lanes each (one
/// would wait on its own max every eight values).
SF_INLINE double block_max(const double* v, int n) {
  Lanes8 a = splat8(kNegInf), b = a;
  int i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    a = max8(a, load8(v + i));
    b = max8(b, load8(v + i + kLanes));
  }
  if (i + kLanes <= n) {
    a = max8(a, load8(v + i));
    i += kLanes;
  }
  double out = lanes_max(max8(a, b));
  for (; i < n; ++i) out = std::max(out, v[i]);
  return out;
}

/// top and second become the largest and the second largest (the largest of the rest) of their
/// two values and v[0, n): the top two of a multiset, whatever order max and min take it in.
SF_INLINE void top_two(const double* v, int n, double& top, double& second) {
  Lanes8 hi = splat8(kNegInf), lo = hi;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Lanes8 w = load8(v + i);
    lo = max8(lo, min8(hi, w));
    hi = max8(hi, w);
  }
  for (int j = 0; j < kLanes; ++j) {
    second = std::max({second, lo[j], std::min(top, hi[j])});
    top = std::max(top, hi[j]);
  }
  for (; i < n; ++i) {
    second = std::max(second, std::min(top, v[i]));
    top = std::max(top, v[i]);
  }
}

/// Whether any of v[0, 8) is above x.
SF_INLINE bool any_above(const double* v, double x) { return lanes_max(load8(v)) > x; }

/// One stage of a block of a complete step, in one pass over its values x[0, n): next = prev + x
/// (0 + x at the first stage, kFirst, as a zeroed prefix forms it), own += x, xmax and (kTwo)
/// top/second taken on as block_max and top_two take them.
template <bool kFirst, bool kTwo>
SF_INLINE void stage_block(const double* x, const double* prev, double* next, double* own, int n, double& xmax,
                           double& top, double& second) {
  // Two sets of lanes, sixteen values a turn: each max/min chain waits on its own last result,
  // so one set would leave the loop waiting on that latency every eight values.
  Lanes8 mx[2] = {splat8(kNegInf), splat8(kNegInf)}, hi[2] = {mx[0], mx[0]}, lo[2] = {mx[0], mx[0]};
  // Every load of a turn before its stores: the arrays lie at the same offsets within a page, and
  // a load that follows a store to an address a multiple of 4 KiB away can wait on it.
  auto lane_step = [&](int i, int u) {
    const Lanes8 xv = load8(x + i);
    const Lanes8 pv = kFirst ? splat8(0.0) + xv : load8(prev + i) + xv;
    const Lanes8 ov = load8(own + i) + xv;
    store8(next + i, pv);
    store8(own + i, ov);
    mx[u] = max8(mx[u], xv);
    if constexpr (kTwo) {
      lo[u] = max8(lo[u], min8(hi[u], pv));
      hi[u] = max8(hi[u], pv);
    }
  };
  int i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    lane_step(i, 0);
    lane_step(i + kLanes, 1);
  }
  if (i + kLanes <= n) {
    lane_step(i, 0);
    i += kLanes;
  }
  xmax = std::max(xmax, lanes_max(max8(mx[0], mx[1])));
  if constexpr (kTwo)
    for (int u = 0; u < 2; ++u)
      for (int j = 0; j < kLanes; ++j) {
        second = std::max({second, lo[u][j], std::min(top, hi[u][j])});
        top = std::max(top, hi[u][j]);
      }
  for (; i < n; ++i) {
    const double v = next[i] = (kFirst ? 0.0 : prev[i]) + x[i];
    own[i] += x[i];
    xmax = std::max(xmax, x[i]);
    if constexpr (kTwo) {
      second = std::max(second, std::min(top, v));
      top = std::max(top, v);
    }
  }
}

/// The largest of p[i] − (x[i] − min(x[i], c)) for i < n (−inf for n = 0): a total with one
/// stage clipped at c (eq. 4).
SF_INLINE double clipped_max(const double* p, const double* x, double c, int n) {
  Lanes8 top = splat8(kNegInf), top2 = top;  // two chains, as in block_max
  const Lanes8 cc = splat8(c);
  int i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const Lanes8 xv = load8(x + i), xw = load8(x + i + kLanes);
    top = max8(top, load8(p + i) - (xv - min8(xv, cc)));
    top2 = max8(top2, load8(p + i + kLanes) - (xw - min8(xw, cc)));
  }
  if (i + kLanes <= n) {
    const Lanes8 xv = load8(x + i);
    top = max8(top, load8(p + i) - (xv - min8(xv, cc)));
    i += kLanes;
  }
  double out = lanes_max(max8(top, top2));
  for (; i < n; ++i) out = std::max(out, p[i] - (x[i] - std::min(x[i], c)));
  return out;
}

/// p[i] = 0 + x[i] for i < n (a zeroed prefix's first stage), returning the largest p.
SF_INLINE double copy_and_max(double* p, const double* x, int n) {
  for (int i = 0; i < n; ++i) p[i] = 0.0 + x[i];
  return block_max(p, n);
}

/// out[i] = min(d, b̃) of stage s for present ranks i0 … i0 + n − 1 of the step (eq. 4).
SF_INLINE void clip_block(const StepBaseline& b, const StageSchema& schema, const PresentStep& d, int s, int i0, int n,
                          double* out) {
  const double* x = d.stage(s).data() + i0;
  if (b.kind != GainBaseline::rank_median) {
    const double v = b.value(schema, 0, s);
    int i = 0;
    for (; i + kLanes <= n; i += kLanes) store8(out + i, min8(load8(x + i), splat8(v)));
    for (; i < n; ++i) out[i] = std::min(x[i], v);
    return;
  }
  for (int i = 0; i < n; ++i) out[i] = std::min(x[i], (*b.rank_median)(d.rank(i0 + i), s));
}

/// The middle of the values 0 + x from x's: 0 + v is monotone and depends on v's value alone
/// (−0 and +0 both become +0), so the order statistics of an array formed as 0 + x (a group's
/// own work of one stage without a sync wait) are 0 + those of x, bit for bit.
Middle plus_zero(Middle m) {
  m.lo = 0.0 + m.lo;
  m.mid = 0.0 + m.mid;
  m.hi = 0.0 + m.hi;
  return m;
}

/// sum[j] += x[j·stride] + x[j·stride + 1] + … (len values) for j < L and, with kTel, the same
/// for the three columns of tel into sum[L … L + 2]: each sum added in index order (the order one
/// loop per sum takes), all of them independent chains, so one index's adds overlap.
/// Kept scalar: GCC's SLP pass packs two chains into one register with a load and a shuffle per
/// pair, and each packed chain then waits on its own add twice per index.
template <int L, bool kTel>
SF_NO_SLP void chain_sums_of(const double* x, std::size_t stride, const double* const* tel, double* sum, int len) {
  double acc[L + 3];
  for (int j = 0; j < L + (kTel ? 3 : 0); ++j) acc[j] = sum[j];
  const double* t0 = kTel ? tel[0] : nullptr;
  const double* t1 = kTel ? tel[1] : nullptr;
  const double* t2 = kTel ? tel[2] : nullptr;
  for (int i = 0; i < len; ++i) {
    for (int j = 0; j < L; ++j) acc[j] += x[j * stride + static_cast<std::size_t>(i)];
    if constexpr (kTel) {
      acc[L] += t0[i];
      acc[L + 1] += t1[i];
      acc[L + 2] += t2[i];
    }
  }
  for (int j = 0; j < L + (kTel ? 3 : 0); ++j) sum[j] = acc[j];
}

template <int L>
void chain_sums_tel(const double* x, std::size_t stride, const double* const* tel, double* sum, int len) {
  if (tel) chain_sums_of<L, true>(x, stride, tel, sum, len);
  else chain_sums_of<L, false>(x, stride, tel, sum, len);
}

#if SF_WIDE_LOOPS
/// chain_sums_of<6, true> with eight of its nine chains in the lanes of one AVX-512 register:
/// eight ranks of each chain are loaded and transposed, so that one packed add per rank takes
/// each lane's chain one rank further, in rank order, as its own scalar add did (the ninth chain,
/// the wall, stays scalar beside it). Each sum's adds and their order are unchanged; nine scalar
/// adds per rank become one packed and one scalar.
SF_WIDE_TARGET void chain_sums_6_tel_wide(const double* x, std::size_t stride, const double* const* tel, double* sum,
                                          int len) {
  alignas(64) double lanes[8];
  for (int j = 0; j < 8; ++j) lanes[j] = sum[j];
  __m512d acc = _mm512_load_pd(lanes);
  double wall = sum[8];
  const double* row[8] = {x, x + stride, x + 2 * stride, x + 3 * stride, x + 4 * stride, x + 5 * stride, tel[0], tel[1]};
  const double* w = tel[2];
  const __m512i lo2 = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi2 = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  int i = 0;
  for (; i + 8 <= len; i += 8) {
    __m512d r[8];
    for (int j = 0; j < 8; ++j) r[j] = _mm512_loadu_pd(row[j] + i);
    // r[j][k] is chain j at rank i + k; col[k][j] the same value. (The maskz forms with every
    // lane kept are the plain shuffles; GCC 12 warns about the plain forms' undefined source.)
    __m512d t[8], v[8], col[8];
    for (int j = 0; j < 8; j += 2) {
      t[j] = _mm512_maskz_unpacklo_pd(0xFF, r[j], r[j + 1]);      // (r_j, r_j+1) at ranks 0, 2, 4, 6
      t[j + 1] = _mm512_maskz_unpackhi_pd(0xFF, r[j], r[j + 1]);  // at ranks 1, 3, 5, 7
    }
    for (int h = 0; h < 2; ++h)     // chains 0-3 (h = 0) and 4-7 (h = 1)
      for (int o = 0; o < 2; ++o) {  // even (o = 0) or odd ranks
        const __m512d a = t[4 * h + o], b = t[4 * h + 2 + o];
        v[4 * h + o] = _mm512_permutex2var_pd(a, lo2, b);      // 4 chains at ranks o, 4 + o
        v[4 * h + 2 + o] = _mm512_permutex2var_pd(a, hi2, b);  // at ranks 2 + o, 6 + o
      }
    for (int k = 0; k < 4; ++k) {  // v[k]: chains 0-3 at ranks k and 4 + k; v[4 + k]: chains 4-7 there
      col[k] = _mm512_maskz_shuffle_f64x2(0xFF, v[k], v[4 + k], 0x44);
      col[k + 4] = _mm512_maskz_shuffle_f64x2(0xFF, v[k], v[4 + k], 0xEE);
    }
    for (int k = 0; k < 8; ++k) {
      acc = _mm512_add_pd(acc, col[k]);
      wall += w[i + k];
    }
  }
  _mm512_store_pd(lanes, acc);
  for (; i < len; ++i) {
    for (int j = 0; j < 8; ++j) lanes[j] += row[j][i];
    wall += w[i];
  }
  for (int j = 0; j < 8; ++j) sum[j] = lanes[j];
  sum[8] = wall;
}
#endif

/// chain_sums_of for `stages` columns of x (stride apart) into sum[0, stages) and, when tel is
/// not null, its three columns into sum[stages, stages + 3).
void chain_sums(const double* x, std::size_t stride, int stages, const double* const* tel, double* sum, int len) {
#if SF_WIDE_LOOPS
  if (stages == 6 && tel && vector_select_available()) return chain_sums_6_tel_wide(x, stride, tel, sum, len);
#endif
  switch (stages) {
    case 1: return chain_sums_tel<1>(x, stride, tel, sum, len);
    case 2: return chain_sums_tel<2>(x, stride, tel, sum, len);
    case 3: return chain_sums_tel<3>(x, stride, tel, sum, len);
    case 4: return chain_sums_tel<4>(x, stride, tel, sum, len);
    case 5: return chain_sums_tel<5>(x, stride, tel, sum, len);
    case 6: return chain_sums_tel<6>(x, stride, tel, sum, len);
    default: break;
  }
  // Many stages: six at a time, then the three others.
  int s = 0;
  for (; s + 6 <= stages; s += 6) chain_sums_of<6, false>(x + s * stride, stride, nullptr, sum + s, len);
  for (; s < stages; ++s) chain_sums_of<1, false>(x + s * stride, stride, nullptr, sum + s, len);
  if (tel)
    for (int j = 0; j < 3; ++j) chain_sums_of<1, false>(tel[j], 0, nullptr, sum + stages + j, len);
}

/// Ranks are visited in blocks of this many, so a block of every stage stays in cache (L2: 192 KiB
/// at six stages) while the passes over it (one per stage and group) run. Each block also
/// pays its passes' calls and lane reductions: paired frontier_bench at 1024 × 600 × 6, blocks of
/// 128 took evaluate 1.17× as long as blocks of 512, one block of 1024 0.98× (16384 ranks: 0.98×);
/// paired sim runs at 10^6 ranks × 50 (the streamed scorer, one thread and two) took about 0.94–0.97
/// of 1024's user time at 4096 (512 and 256 were slower than 1024, 8192 no better than 4096 by
/// more than the noise, with twice the stack).
constexpr int kBlock = 4096;
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

void step_frontier_from(const Accounting& acc, int t, StepFrontier& f) {
  const int S = acc.stages;
  f.frontier.resize(S);
  f.advance.resize(S);
  f.gap.resize(S);
  f.leader.resize(S);
  f.tie.resize(S);
  for (int s = 0; s < S; ++s) {
    f.frontier[s] = acc.frontier(t, s);
    f.advance[s] = acc.advance(t, s);
    f.gap[s] = acc.gap(t, s);
    f.leader[s] = acc.leader(t, s);
    f.tie[s].clear();
  }
  // Ties are stored in (t, s) order: find this step's range by binary search.
  auto lo = std::lower_bound(acc.ties.begin(), acc.ties.end(), t,
                             [](const Accounting::Tie& tie, int step) { return tie.t < step; });
  for (; lo != acc.ties.end() && lo->t == t; ++lo) f.tie[lo->s] = lo->ranks;
}

void cohort_middles(const StageMatrix& m, int t, std::span<Middle> out, std::span<MiddleHint> hints,
                    SelectScratch& scratch) {
  const PresentStep d(m, t);
  // This pass is the first to read a step's columns, and each would come from memory as it is
  // filtered: the column two on in the matrix (this step's, or the next step's first two) is fetched
  // towards L2 meanwhile, near enough to stay there at 16384 ranks too.
  const std::size_t columns = static_cast<std::size_t>(m.steps()) * m.stages();
  for (int s = 0; s < m.stages(); ++s) {
    const std::size_t ahead = static_cast<std::size_t>(t) * m.stages() + s + 2;
    const double* next = ahead < columns ? m.data().data() + ahead * m.ranks() : nullptr;
    out[s] = d.size() == 0 ? Middle{}
                           : middle_of({d.stage(s).data(), static_cast<std::size_t>(d.size())}, scratch,
                                       hints.empty() ? nullptr : &hints[s], SelectPath::fastest, next);
  }
}

void cohort_medians(const StageMatrix& m, int t, std::span<double> out, SelectScratch& scratch) {
  const PresentStep d(m, t);
  for (int s = 0; s < m.stages(); ++s)
    out[s] = d.size() == 0 ? 0.0 : median_of({d.stage(s).data(), static_cast<std::size_t>(d.size())}, scratch);
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
    case GainBaseline::reference:
      return static_cast<int>(reference.size()) == schema.size() ? reference[s] : reference[schema.group_of(s)];
  }
  return 0;
}

void step_gains(const PresentStep& d, std::span<const double> totals, const StageSchema& schema, const StepBaseline& b,
                double exposed, std::span<double> gain_out, std::vector<double>& scratch) {
  // F'[t,S] = max_r (P[t,r,S] − Σ_{s∈g} (d − min(d, b̃))), the reduction summed in stage order.
  const int n = d.size();
  double clip[kBlock];
  for (int g = 0; g < schema.group_count(); ++g) {
    double f_cf = kNegInf;
    int first = -1, count = 0;
    for (int s = 0; s < d.stages(); ++s)
      if (schema.group_of(s) == g) {
        if (first < 0) first = s;
        ++count;
      }
    if (n > 0 && count == 0) {
      for (int i = 0; i < n; ++i) f_cf = std::max(f_cf, totals[i]);
    } else if (n > 0) {
      // One pass per block: the reduction of the group's stages (0 + that, exactly, for the
      // first), then the counterfactual total's max.
      if (count > 1) scratch.resize(kBlock);
      for (int i0 = 0; i0 < n; i0 += kBlock) {
        const int len = std::min(kBlock, n - i0);
        double* red = count > 1 ? scratch.data() : nullptr;
        for (int s = first, seen = 0; s < d.stages() && seen < count; ++s) {
          if (schema.group_of(s) != g) continue;
          clip_block(b, schema, d, s, i0, len, clip);
          const double* x = d.stage(s).data() + i0;
          if (count == 1) {
            for (int i = 0; i < len; ++i) f_cf = std::max(f_cf, totals[i0 + i] - (x[i] - clip[i]));
          } else if (seen == 0) {
            for (int i = 0; i < len; ++i) red[i] = x[i] - clip[i];
          } else {
            for (int i = 0; i < len; ++i) red[i] += x[i] - clip[i];
          }
          ++seen;
        }
        if (count > 1)
          for (int i = 0; i < len; ++i) f_cf = std::max(f_cf, totals[i0 + i] - red[i]);
      }
    }
    gain_out[g] = std::isfinite(f_cf) ? std::max(0.0, exposed - f_cf) : 0.0;
  }
}

void step_gains(const StageMatrix& m, int t, const StepBaseline& b, double exposed, std::span<double> gain_out) {
  const PresentStep d(m, t);
  const Eigen::ArrayXd totals = d.totals();
  std::vector<double> scratch;
  step_gains(d, {totals.data(), static_cast<std::size_t>(totals.size())}, m.schema(), b, exposed, gain_out, scratch);
}

void step_counterfactuals(const PresentStep& d, const StageSchema& schema, const StepBaseline& b,
                          std::span<const int> groups, std::span<double> adv_out, std::span<double> exposed_out) {
  // Per group g: the prefixes with g's stages clipped, P'[t,r,s], and their max over ranks per
  // stage, F'[t,s]; a'[t,s] = F'[t,s] − F'[t,s−1] credited to s's group. Ranks in blocks: the
  // maxima are taken block by block (max is exact in any order), the prefixes in stage order.
  const int S = d.stages(), G = schema.group_count(), n = d.size();
  const auto K = groups.size();
  std::vector<double> front(K * static_cast<std::size_t>(S), kNegInf);
  double p[kBlock], clip[kBlock];
  for (int i0 = 0; i0 < n; i0 += kBlock) {
    const int len = std::min(kBlock, n - i0);
    for (std::size_t k = 0; k < K; ++k) {
      std::fill_n(p, len, 0.0);
      for (int s = 0; s < S; ++s) {
        const double* x = d.stage(s).data() + i0;
        if (schema.group_of(s) == groups[k]) {
          clip_block(b, schema, d, s, i0, len, clip);
          x = clip;
        }
        double& f = front[k * static_cast<std::size_t>(S) + s];
        f = std::max(f, add_and_max(p, x, len));
      }
    }
  }
  for (std::size_t k = 0; k < K; ++k) {
    double* adv = adv_out.data() + k * static_cast<std::size_t>(G);
    std::fill_n(adv, G, 0.0);
    double f_prev = 0;
    for (int s = 0; s < S; ++s) {
      const double f = front[k * static_cast<std::size_t>(S) + s];
      adv[schema.group_of(s)] += f - f_prev;
      f_prev = f;
    }
    exposed_out[k] = f_prev;
  }
}

// --- baselines ---------------------------------------------------------------------------------

BaselineAccumulator::BaselineAccumulator(const StageSchema& s) : schema(&s) {
  for (auto& v : score) v.assign(s.group_count(), 0.0);
}

void BaselineAccumulator::add_step(const StageMatrix& m, int t, std::span<const double> cohort_median) {
  const PresentStep d(m, t);
  const Eigen::ArrayXd totals = d.totals();
  add_step(m, t, d, {totals.data(), static_cast<std::size_t>(totals.size())}, cohort_median);
}

void BaselineAccumulator::add_step(const StageMatrix& m, int t, const PresentStep& d, std::span<const double> total,
                                   std::span<const double> cohort_median) {
  const int S = m.stages();
  if (d.size() == 0) return;
  std::vector<double> stage_max(S), stage_sum(S);
  for (int s = 0; s < S; ++s) stage_max[s] = d.stage(s).maxCoeff();
  // The per-stage sums stay in rank order. Four stages at a time, so the four running sums
  // are independent chains in registers rather than one latency-bound chain after another.
  constexpr int kChains = 4;
  for (int s0 = 0; s0 < S; s0 += kChains) {
    const double* col[kChains];
    for (int j = 0; j < kChains; ++j) col[j] = d.stage(std::min(s0 + j, S - 1)).data();  // spare lanes repeat the last stage
    double sum[kChains] = {};
    for (int i = 0; i < d.size(); ++i)
      for (int j = 0; j < kChains; ++j) sum[j] += col[j][i];
    for (int j = 0; j < kChains && s0 + j < S; ++j) stage_sum[s0 + j] = sum[j];
  }
  // Slowest-rank breakdown (§6.2): "the largest stage of the per-step slowest rank" — the slowest
  // rank (largest P[t,r,S]; ties: lowest rank) names its largest reporting group (ties: the
  // upstream one), which is credited with that group's duration on that rank.
  int slowest = 0;
  for (int i = 1; i < d.size(); ++i)
    if (total[i] > total[slowest]) slowest = i;
  add_stats(m, t, stage_max, stage_sum, d.rank(slowest), cohort_median);
}

void BaselineAccumulator::add_stats(const StageMatrix& m, int t, std::span<const double> stage_max,
                                    std::span<const double> stage_sum, int slowest, std::span<const double> cohort_median) {
  const int S = m.stages();
  std::vector<double> slow_group(schema->group_count(), 0.0);
  const int n = m.step_present_count(t);
  for (int s = 0; s < S; ++s) {
    const int g = schema->group_of(s);
    const double mx = stage_max[s];
    const double mean = stage_sum[s] / n;
    score[static_cast<int>(BaselineRule::per_stage_max)][g] += mx;
    score[static_cast<int>(BaselineRule::per_stage_avg)][g] += mean;
    score[static_cast<int>(BaselineRule::raw_spread)][g] += mx - cohort_median[s];
    slow_group[g] += m.d(t, slowest, s);
    if (m.rank_id(0) == 0 && m.present(t, 0)) score[static_cast<int>(BaselineRule::rank0_total)][g] += m.d(t, 0, s);
    per_stage_max_s += mx;
    per_stage_avg_s += mean;
  }
  const auto largest = std::max_element(slow_group.begin(), slow_group.end());  // first of equals: upstream
  score[static_cast<int>(BaselineRule::slowest_rank)][largest - slow_group.begin()] += *largest;
}

BaselineSet BaselineAccumulator::finish(double tau_c) const {
  BaselineSet b;
  for (std::size_t i = 0; i < std::size(kBaselineRules); ++i) b.rules[i] = rank_stages(score[i], tau_c);
  b.per_stage_max_s = per_stage_max_s;
  b.per_stage_avg_s = per_stage_avg_s;
  return b;
}

// --- window statistics -------------------------------------------------------------------------

WindowStats::WindowStats(const StageSchema& schema, int columns, int world_size, std::vector<int> rank_ids,
                         const LabelConfig& cfg)
    : schema_(schema), world_(columns), declared_world_(world_size), rank_ids_(std::move(rank_ids)), cfg_(cfg), S_(schema.size()), G_(schema.group_count()), base_(schema) {
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
  const auto R = static_cast<std::size_t>(world_);
  credit_ = ZeroArray<double>(gr);
  credited_.assign(G_, {});
  sync_seen_.assign(G_, 0);
  conf_credit_ = ZeroArray<double>(gr);
  led_ = ZeroArray<int>(gr);
  sync_sum_.assign(G_, {});
  sync_full_.assign(G_, 0);
  sync_n_.clear();
  sync_n_.resize(G_);
  ev_slot_ = ZeroArray<std::int32_t>(R);
  rank_missing_ = ZeroArray<std::uint8_t>(R);
  adv_spread_.assign(G_, {});
  lag_inc_spread_.assign(G_, {});
  step_adv_.assign(G_, 0.0);
  step_lag_inc_.assign(G_, 0.0);
  own_sum_.assign(gr, 0.0);
  rank_n_ = ZeroArray<int>(R);
  adv_keep_.assign(G_, MedianKeeper());
  standing_on_ = world_ <= Evidence::kStandingMaxRanks;
  if (standing_on_) {
    const auto rows = static_cast<std::size_t>(G_ + 1) * world_;
    st_sum_ = ZeroArray<double>(rows);
    st_sq_ = ZeroArray<double>(rows);
    st_n_ = ZeroArray<int>(R);
    cw_sum_ = ZeroArray<double>(R);
    cw_sq_ = ZeroArray<double>(R);
    cw_n_ = ZeroArray<int>(R);
  }
  cf_adv_.assign(static_cast<std::size_t>(G_) * G_, 0.0);
  cf_denom_.assign(G_, 0.0);
  cf_seen_.assign(G_, 0);
  group_first_.assign(G_, -1);
  group_count_.assign(G_, 0);
  group_last_.assign(G_, -1);
  for (int s = 0; s < S_; ++s) {
    const int g = schema_.group_of(s);
    if (group_first_[g] < 0) group_first_[g] = s;
    ++group_count_[g];
    group_last_[g] = s;
  }
  one_stage_groups_ = G_ == S_;
  for (int s = 0; s < S_; ++s) one_stage_groups_ = one_stage_groups_ && schema_.group_of(s) == s;
  fwd_group_ = schema_.group_index(cfg_.forward_group);
  fwd_apart_ = fwd_group_ && group_count_[*fwd_group_] > 1;
  if (fwd_apart_) cpu_fwd_sum_.assign(static_cast<std::size_t>(world_), 0.0);
  prefix_hint_.assign(S_ > 1 ? S_ - 1 : 0, {});
  lag_mid_ = std::vector<StreamedMiddle>(prefix_hint_.size());  // a lean pass's, one per prefix hint
  own_hint_.assign(G_ + 1, {});
}

void WindowStats::bound_medians(std::size_t exact_cap) {
  if (steps_ > 0) throw std::logic_error("bound_medians after the first step");
  exposed_ = MedianKeeper(exact_cap);
  adv_keep_.assign(G_, MedianKeeper(exact_cap));
  ev_cap_ = exact_cap;
  // A run-level accumulator: the what-if's log at its full size up front (untouched pages cost no
  // memory), so that it grows by what each step writes, never by a doubling copy.
  arrivals_.steps.reserve(Evidence::kArrivalSteps);
  arrivals_.segments.reserve(2 * Evidence::kArrivalSteps);
}

void WindowStats::add_step(const StageMatrix& m, int t, const StepFrontier& f, std::span<const double> cohort_median,
                           const Eigen::MatrixXd* rank_median, std::span<const int> counterfactual_groups,
                           std::span<const Middle> stage_middles) {
  if (m.step_present_count(t) == 0) return;
  const double exposed = add_frontier_totals(f);
  const PresentStep d(m, t);
  const StepBaseline b{cfg_.gain_baseline, cohort_median, rank_median, cfg_.reference_s};
  const int slowest = rank_pass(m, t, d, m.step_complete(t), b, counterfactual_groups, false);
  add_step_rest(m, t, f, d, b, exposed, slowest, counterfactual_groups, stage_middles);
}

void WindowStats::add_step_accounting(const StageMatrix& m, int t, const AccountOptions& opt, StepFrontier& f,
                                      std::span<const double> cohort_median, std::span<const int> counterfactual_groups,
                                      std::span<const Middle> stage_middles) {
  const PresentStep d(m, t);
  const StepBaseline b{cfg_.gain_baseline, cohort_median, nullptr, cfg_.reference_s};
  const int slowest = rank_pass(m, t, d, true, b, counterfactual_groups, true);
  if (lean_) {
    // The rank pass kept each stage's top two and first top; a row is formed only for a tie.
    account_from_tops(opt, d.size(), prefix_top_, prefix_second_, first_top_,
                      [&](int s) { return formed_prefix(d, s); }, f);
  } else {
    // The rank pass formed every prefix account_step forms (0 + d, then + d stage by stage).
    prefix_rows_.resize(static_cast<std::size_t>(S_));
    prefix_rows_[0] = prefix0_.data();
    for (int s = 1; s < S_; ++s) prefix_rows_[s] = prefix_.data() + static_cast<std::size_t>(s - 1) * d.size();
    account_from_prefixes(opt, d.size(), prefix_rows_, prefix_top_, prefix_second_, f);
  }
  // add_step takes the frontier's sums before the rank pass; they share no accumulator with it.
  const double exposed = add_frontier_totals(f);
  add_step_rest(m, t, f, d, b, exposed, slowest, counterfactual_groups, stage_middles);
}

void WindowStats::add_step_rest(const StageMatrix& m, int t, const StepFrontier& f, const PresentStep& d,
                                const StepBaseline& b, double exposed, int slowest,
                                std::span<const int> counterfactual_groups, std::span<const Middle> stage_middles) {
  const std::span<const double> cohort_median = b.cohort_median;
  total_mid_ = Middle{};
  step_lag(f, cohort_median, d);
  // One stage: the total P[t,r,0] is 0 + d, its middle the stage's.
  if (S_ == 1 && !stage_middles.empty()) total_mid_ = plus_zero(stage_middles[0]);
  add_lag(step_lag_);
  base_.add_stats(m, t, stage_max_, stage_sum_, d.rank(slowest), cohort_median);
  add_gains(f, exposed, counterfactual_groups);
  add_leaders(f, exposed);
  add_sync_waits(m, t, d);
  add_standing(m, t, d, f, stage_middles);
  add_forward(m, t, d);
  add_telemetry(m, t, d);
}

void WindowStats::add_segment_step(const StageMatrix& m, int t, const StepFrontier& f, std::span<const double> lag) {
  if (m.step_present_count(t) == 0) return;
  const double exposed = add_frontier_totals(f);
  const PresentStep d(m, t);
  total_mid_ = Middle{};
  telemetry_summed_ = false;
  segment_pass(d, m.step_complete(t), lag.empty());
  if (lag.empty()) {
    // The cohort median of the first stage, as cohort_medians() takes it (P = d there).
    const double first = median_of({d.stage(0).data(), static_cast<std::size_t>(d.size())}, sel_);
    step_lag(f, std::span<const double>(&first, 1), d);
  } else {
    step_lag_.assign(lag.begin(), lag.end());
  }
  add_lag(step_lag_);
  add_leaders(f, exposed);
  add_sync_waits(m, t, d);
  add_standing(m, t, d, f, {});
  add_forward(m, t, d);
  add_telemetry(m, t, d);
}

void WindowStats::segment_pass(const PresentStep& d, bool complete, bool prefixes) {
  // Each rank's own work per group, stage by stage (rank_pass adds the same values in the same
  // order per rank, block by block); the prefixes only when the lag is formed here.
  const int n = d.size();
  lean_ = false;  // step_lag reads the prefixes formed here
  if (prefixes) {
    prefix_.resize(static_cast<std::size_t>(S_ > 1 ? S_ - 1 : 0) * n);
    totals_.resize(n);
  }
  double* p = totals_.data();
  for (int s = 0; s < S_; ++s) {
    const double* x = d.stage(s).data();
    double* own = own_sum_.data() + static_cast<std::size_t>(schema_.group_of(s)) * world_;
    if (complete) {
      for (int i = 0; i < n; ++i) own[i] += x[i];
    } else {
      for (int i = 0; i < n; ++i) own[d.rank(i)] += x[i];
    }
    if (!prefixes) continue;
    if (s == 0) {
      for (int i = 0; i < n; ++i) p[i] = 0.0 + x[i];  // the same 0 + d a zeroed prefix forms
    } else {
      for (int i = 0; i < n; ++i) p[i] += x[i];
      std::copy_n(p, n, prefix_.data() + static_cast<std::size_t>(s - 1) * n);
    }
  }
}

double WindowStats::add_frontier_totals(const StepFrontier& f) {
  ++steps_;
  const double exposed = f.frontier[S_ - 1];
  denom_ += exposed;
  exposed_.add(exposed);
  exposed_spread_.add(exposed);
  std::fill(step_adv_.begin(), step_adv_.end(), 0.0);
  for (int s = 0; s < S_; ++s) {
    adv_[schema_.group_of(s)] += f.advance[s];
    step_adv_[schema_.group_of(s)] += f.advance[s];
  }
  for (int g = 0; g < G_; ++g) {
    adv_spread_[g].add(step_adv_[g]);
    adv_keep_[g].add(std::max(0.0, step_adv_[g]));
  }
  return exposed;
}

int WindowStats::rank_pass(const StageMatrix& m, int t, const PresentStep& d, bool complete, const StepBaseline& b,
                           std::span<const int> counterfactual_groups, bool accounts) {
#if SF_WIDE_LOOPS
  if (vector_select_available()) return rank_pass_wide(m, t, d, complete, b, counterfactual_groups, accounts);
#endif
  return rank_pass_body(m, t, d, complete, b, counterfactual_groups, accounts);
}

SF_WIDE_TARGET int WindowStats::rank_pass_wide(const StageMatrix& m, int t, const PresentStep& d, bool complete,
                                               const StepBaseline& b, std::span<const int> counterfactual_groups,
                                               bool accounts) {
  return rank_pass_body(m, t, d, complete, b, counterfactual_groups, accounts);
}

namespace {

/// Fetches ranks [i0, i0 + len) of step t's rows outside the stage columns (the wall and overlap
/// error, the CPU wait, the forward events) towards L2 while the step before is walked. The stage
/// columns are fetched ahead by the cohort middles' pass (cohort_middles); these rows are read
/// first by the rank pass's telemetry sums and the add_* passes after it, and each would otherwise
/// come from memory as it is read (evaluate at 1024 × 600 × 6, whose wall and overlap rows are a
/// third of the stage columns' bytes: about 10.5 → 9.5 ms). Only the time depends on it.
void prefetch_side_rows(const StageMatrix& m, int t, int i0, int len) {
  auto ahead = [i0, len](const auto* row) {
    const char* c = reinterpret_cast<const char*>(row + i0);
    const std::size_t bytes = static_cast<std::size_t>(len) * sizeof(*row);
    for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 2);
  };
  if (m.schema().has_residual()) {
    ahead(m.wall_row(t));
    ahead(m.overlap_row(t));
  }
  if (const float* cw = m.cpu_wait_row(t)) ahead(cw);
  if (const EventState* st = m.fwd_state_row(t)) ahead(st);
  if (const float* fs = m.fwd_s_row(t)) ahead(fs);
}

}  // namespace

SF_INLINE void WindowStats::block_static_gain(const PresentStep& d, const StepBaseline& b, int i0, int len,
                                              const double* p) {
  double clip[kBlock], red[kBlock], q[kBlock];
  // Static gain: F'[t,S] = max_r (P[t,r,S] − Σ_{s∈g} (d − min(d, b̃))), the reduction in stage order.
  for (int g = 0; g < G_; ++g) {
    if (group_count_[g] == 1 && b.kind != GainBaseline::rank_median) {
      // One stage, one baseline value: the whole expression in one vectorised pass.
      const int s = group_first_[g];
      gain_front_[g] = std::max(gain_front_[g], clipped_max(p, d.stage(s).data() + i0, b.value(schema_, 0, s), len));
      continue;
    }
    for (int s = group_first_[g], seen = 0; s < S_ && seen < group_count_[g]; ++s) {
      if (schema_.group_of(s) != g) continue;
      clip_block(b, schema_, d, s, i0, len, clip);
      const double* x = d.stage(s).data() + i0;
      if (seen == 0) {
        for (int i = 0; i < len; ++i) red[i] = x[i] - clip[i];
      } else {
        for (int i = 0; i < len; ++i) red[i] += x[i] - clip[i];
      }
      ++seen;
    }
    for (int i = 0; i < len; ++i) q[i] = p[i] - red[i];
    gain_front_[g] = std::max(gain_front_[g], block_max(q, len));
  }
}

SF_INLINE void WindowStats::block_counterfactuals(const PresentStep& d, const StepBaseline& b, int i0, int len,
                                                  std::span<const int> counterfactual_groups) {
  const int n = d.size();
  const auto K = counterfactual_groups.size();
  double clip[kBlock], q[kBlock];
  // Residual-leader counterfactuals: group g's stages clipped, re-accounted. Before g's first
  // stage the prefixes are the original ones (their max is F[t,s], set after the blocks), so
  // the clipped prefixes start from P[t,r,first−1].
  for (std::size_t k = 0; k < K; ++k) {
    const int g = counterfactual_groups[k], first = group_first_[g];
    if (first == 1) {
      const double* x0 = d.stage(0).data() + i0;
      for (int i = 0; i < len; ++i) q[i] = 0.0 + x0[i];
    } else if (first > 1) {
      std::copy_n(prefix_.data() + static_cast<std::size_t>(first - 2) * n + i0, len, q);
    }
    for (int s = first; s < S_; ++s) {
      const double* x = d.stage(s).data() + i0;
      if (schema_.group_of(s) == g) {
        clip_block(b, schema_, d, s, i0, len, clip);
        x = clip;
      }
      double& front = cf_front_[k * static_cast<std::size_t>(S_) + s];
      front = std::max(front, s == 0 ? copy_and_max(q, x, len) : add_and_max(q, x, len));
    }
  }
}

void WindowStats::begin_lean(const PresentStep& d) {
  const auto n = static_cast<std::size_t>(d.size());
  first_top_.assign(static_cast<std::size_t>(S_), 0);
  // Brackets read off a sample: P[t,r,s] at the sample's places, summed as the pass sums them,
  // every stage's from one walk along the places (each place's stages read once).
  const std::size_t m = StreamedMiddle::sample_count(n);
  int last = 0;  // the last stage whose hint samples
  for (int s = 1; s < S_; ++s)
    if (prefix_hint_[static_cast<std::size_t>(s - 1)].sample) last = s;
  if (last > 0) {
    lag_sample_.resize(static_cast<std::size_t>(last) * m);
    for (std::size_t i = 0; i < m; ++i) {
      const auto r = static_cast<Eigen::Index>(i * n / m);
      double v = 0.0 + d.stage(0)[r];
      for (int s = 1; s <= last; ++s) {
        v = v + d.stage(s)[r];
        lag_sample_[static_cast<std::size_t>(s - 1) * m + i] = v;
      }
    }
  }
  for (int s = 1; s < S_; ++s) {
    auto& hint = prefix_hint_[static_cast<std::size_t>(s - 1)];
    const std::span<double> sample =
        s <= last ? std::span<double>(lag_sample_).subspan(static_cast<std::size_t>(s - 1) * m, m) : std::span<double>();
    lag_mid_[static_cast<std::size_t>(s - 1)].begin(hint, n, sample);
  }
}

void WindowStats::lean_block(int s, int i0, int len, const double* p, double top_before) {
  // The stage's first top: where a block lifts the top, its first rank at the new top.
  if (const double top = prefix_top_[static_cast<std::size_t>(s)]; top > top_before) {
    int i = 0;
    while (p[i] != top) ++i;
    first_top_[static_cast<std::size_t>(s)] = i0 + i;
  }
  if (s >= 1) lag_mid_[static_cast<std::size_t>(s - 1)].add(p, static_cast<std::size_t>(len));
}

SF_INLINE int WindowStats::rank_pass_body(const StageMatrix& m, int t, const PresentStep& d, bool complete,
                                          const StepBaseline& b, std::span<const int> counterfactual_groups,
                                          bool accounts) {
  // One pass over the present ranks in blocks (kBlock) that stay near while every per-rank quantity of
  // the step is taken from them: the prefixes P[t,r,s] (kept for the lag's medians), the totals
  // P[t,r,S], each stage's max and rank-order sum (baselines), the slowest rank, each group's
  // counterfactual total (static gain) and, when asked, the residual-leader counterfactuals.
  // Every sum is formed in the order the per-quantity loops formed it; max is exact in any order.
  const int n = d.size();
  const int S = S_, G = G_;
  const auto K = counterfactual_groups.size();
  // Lean: a complete step accounted here with no counterfactual asked (the only reader of a kept
  // row in the pass) keeps no prefix row: each stage's running prefix stays in a block buffer,
  // the lag's middles are bracketed as the blocks go by (StreamedMiddle: middle_of's bracket,
  // its values and hints), and the frontier's leaders come from each stage's first top
  // (account_from_tops). A row is formed again only where a bracket missed or ranks tie. At
  // 10^6 ranks this spares writing six rows of prefixes and reading them back.
  const auto step_bytes = static_cast<std::int64_t>(n) * (2 * S - 1) * static_cast<std::int64_t>(sizeof(double));
  lean_ = accounts && complete && K == 0 && step_bytes >= lean_rank_pass_bytes.load(std::memory_order_relaxed);
  if (!lean_) prefix_.resize(static_cast<std::size_t>(S > 1 ? S - 1 : 0) * n);
  totals_.resize(n);
  stage_max_.assign(S, kNegInf);
  stage_sum_.assign(S, 0.0);
  gain_front_.assign(G, kNegInf);
  cf_front_.assign(K * static_cast<std::size_t>(S), kNegInf);
  if (accounts) {
    if (!lean_) prefix0_.resize(n);
    prefix_top_.assign(S, kNegInf);
    prefix_second_.assign(S, kNegInf);
  }
  if (lean_) begin_lean(d);
  const bool fuse_telemetry = complete && schema_.has_residual();
  const int lanes = S + (fuse_telemetry ? 3 : 0);
  chain_sum_.assign(static_cast<std::size_t>(lanes), 0.0);
  if (fuse_telemetry) {
    chain_sum_[S] = residual_sum_;
    chain_sum_[S + 1] = overlap_sum_;
    chain_sum_[S + 2] = wall_sum_;
  }
  double best_total = kNegInf;
  int slowest = 0;
  double p0[kBlock];
  for (int i0 = 0; i0 < n; i0 += kBlock) {
    const int len = std::min(kBlock, n - i0);
    // The next step's rows at this block's place (its ranks when the step is complete; n <= ranks).
    if (t + 1 < m.steps()) prefetch_side_rows(m, t + 1, i0, len);
    // The running prefix is written where the lag's medians read it (stage s ≥ 1 at prefix_'s
    // row s − 1; stage 0's in p0), so p is always the latest stage's. Lean: every stage's in p0,
    // in place.
    double* p = accounts && !lean_ ? prefix0_.data() + i0 : p0;
    for (int s = 0; s < S; ++s) {
      const double* x = d.stage(s).data() + i0;
      if (complete) {
        // The same values as the loops below, in one pass over the stage's block.
        double* own = own_sum_.data() + static_cast<std::size_t>(schema_.group_of(s)) * world_ + i0;
        // Lean: in place, the last stage's straight into totals_.
        double* next = lean_ && s == S - 1 ? totals_.data() + i0
                       : s == 0 || lean_   ? p
                                           : prefix_.data() + static_cast<std::size_t>(s - 1) * n + i0;
        double unused = kNegInf;  // stage_block<…, false> reads no top two
        double& top = accounts ? prefix_top_[s] : unused;
        double& second = accounts ? prefix_second_[s] : unused;
        const double top_before = top;
        if (s == 0 && accounts) stage_block<true, true>(x, p, next, own, len, stage_max_[s], top, second);
        else if (s == 0) stage_block<true, false>(x, p, next, own, len, stage_max_[s], top, second);
        else if (accounts) stage_block<false, true>(x, p, next, own, len, stage_max_[s], top, second);
        else stage_block<false, false>(x, p, next, own, len, stage_max_[s], top, second);
        p = next;
        if (lean_) lean_block(s, i0, len, p, top_before);
        continue;
      }
      if (s == 0) {
        for (int i = 0; i < len; ++i) p[i] = 0.0 + x[i];  // the same 0 + d a zeroed prefix forms
      } else {
        double* next = prefix_.data() + static_cast<std::size_t>(s - 1) * n + i0;
        for (int i = 0; i < len; ++i) next[i] = p[i] + x[i];
        p = next;
      }
      stage_max_[s] = std::max(stage_max_[s], block_max(x, len));
      if (accounts) top_two(p, len, prefix_top_[s], prefix_second_[s]);
      // Each rank's own work per group (the diagnosis' cohort excess); the sync wait comes off below.
      double* own = own_sum_.data() + static_cast<std::size_t>(schema_.group_of(s)) * world_;
      if (complete) {
        for (int i = 0; i < len; ++i) own[i0 + i] += x[i];
      } else {
        for (int i = 0; i < len; ++i) own[d.rank(i0 + i)] += x[i];
      }
    }
    // Per-stage sums in rank order and, on a complete step, the window's residual, overlap and
    // wall sums (add_telemetry's chains, in the same order): every running sum an independent
    // chain beside the others, rather than one latency-bound chain after another.
    const double* tel[3] = {};
    if (fuse_telemetry) {
      tel[0] = d.stage(schema_.residual_index()).data() + i0;
      tel[1] = m.overlap_row(t) + i0;
      tel[2] = m.wall_row(t) + i0;
    }
    chain_sums(d.stage(0).data() + i0, static_cast<std::size_t>(n), S, fuse_telemetry ? tel : nullptr,
               chain_sum_.data(), len);
    if (p != totals_.data() + i0) std::copy_n(p, len, totals_.data() + i0);
    // The slowest rank: the first with the largest total. The block's max in lanes; its position
    // only when it beats the blocks before (a max chain per rank would be latency-bound).
    if (const double bm = block_max(p, len); bm > best_total) {
      best_total = bm;
      int i = 0;
      while (p[i] != bm) ++i;
      slowest = i0 + i;
    }
    block_static_gain(d, b, i0, len, p);
    block_counterfactuals(d, b, i0, len, counterfactual_groups);
  }
  std::copy_n(chain_sum_.data(), S, stage_sum_.data());
  telemetry_summed_ = fuse_telemetry;
  if (fuse_telemetry) {
    residual_sum_ = chain_sum_[S];
    overlap_sum_ = chain_sum_[S + 1];
    wall_sum_ = chain_sum_[S + 2];
  }
  return slowest;
}

void WindowStats::step_lag(const StepFrontier& f, std::span<const double> cohort_median, const PresentStep& d) {
  // Lag L[t,s] = max_r P − median_r P (paper §4).
  const auto n = static_cast<std::size_t>(d.size());
  step_lag_.resize(S_);
  for (int s = 0; s < S_; ++s) {
    // At the first stage P = d: its median is the cohort median, already at hand.
    double median = cohort_median[0];
    if (s >= 1) {
      auto& hint = prefix_hint_[static_cast<std::size_t>(s - 1)];
      Middle mid;
      // A lean pass bracketed the prefixes as it went; where that missed, the row is formed again.
      if (!lean_)
        mid = middle_of(std::span<const double>(prefix_).subspan(static_cast<std::size_t>(s - 1) * n, n), sel_, &hint);
      else if (!lag_mid_[static_cast<std::size_t>(s - 1)].finish(sel_, mid))
        mid = middle_of({formed_prefix(d, s), n}, sel_, &hint);
      median = mid.median();
      if (s == S_ - 1) total_mid_ = mid;  // the totals P[t,r,S]: the whole step's own work without waits
    }
    step_lag_[s] = f.frontier[s] - median;  // F[t,s] = max_r P[t,r,s], summed the same way
  }
}

const double* WindowStats::formed_prefix(const PresentStep& d, int s) {
  const int n = d.size();
  formed_.resize(static_cast<std::size_t>(n));
  double* p = formed_.data();
  const double* x0 = d.stage(0).data();
  for (int i = 0; i < n; ++i) p[i] = 0.0 + x0[i];
  for (int j = 1; j <= s; ++j) {
    const double* x = d.stage(j).data();
    for (int i = 0; i < n; ++i) p[i] = p[i] + x[i];
  }
  return p;
}

void WindowStats::add_lag(std::span<const double> lag) {
  // The lag's increments per group and its value at each group's last stage.
  double lag_prev = 0;
  std::fill(step_lag_inc_.begin(), step_lag_inc_.end(), 0.0);
  for (int s = 0; s < S_; ++s) {
    const int g = schema_.group_of(s);
    lag_inc_sum_[g] += lag[s] - lag_prev;
    step_lag_inc_[g] += lag[s] - lag_prev;
    lag_prev = lag[s];
    if (group_last_[g] == s) lag_sum_[g] += lag[s];
  }
  for (int g = 0; g < G_; ++g) lag_inc_spread_[g].add(step_lag_inc_[g]);
}

void WindowStats::add_gains(const StepFrontier& f, double exposed, std::span<const int> counterfactual_groups) {
  const int S = S_, G = G_;
  for (int g = 0; g < G; ++g)
    gain_num_[g] += std::isfinite(gain_front_[g]) ? std::max(0.0, exposed - gain_front_[g]) : 0.0;
  for (std::size_t k = 0; k < counterfactual_groups.size(); ++k) {
    const int g = counterfactual_groups[k];
    double f_prev = 0;
    for (int s = 0; s < S; ++s) {
      const double front = s < group_first_[g] ? f.frontier[s] : cf_front_[k * static_cast<std::size_t>(S) + s];
      cf_adv_[static_cast<std::size_t>(g) * G + schema_.group_of(s)] += front - f_prev;
      f_prev = front;
    }
    cf_denom_[g] += f_prev;
    cf_seen_[g] = 1;
  }
}

void WindowStats::add_leaders(const StepFrontier& f, double exposed) {
  for (int s = 0; s < S_; ++s) {
    const double a = f.advance[s];
    if (a <= 0) continue;
    const int g = schema_.group_of(s);
    gap_sum_[g] += f.gap[s];
    ++gap_n_[g];
    const auto row = static_cast<std::size_t>(g) * world_;
    if (f.leader[s] >= 0) {
      const int r = f.leader[s];
      credit(g, r, a);
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
      for (int r : f.tie[s]) credit(g, r, part);
    }
  }
}

void WindowStats::add_sync_waits(const StageMatrix& m, int t, const PresentStep& d) {
  const int n = d.size();
  if (m.has_sync_wait())
    for (int s = 0; s < S_; ++s) {
      const float* col = m.sync_wait_column(t, s);
      if (col == nullptr) continue;  // no rank has a sync wait for s in this step
      const int g = schema_.group_of(s);
      sync_seen_[g] = 1;
      if (sync_sum_[g].empty()) {
        sync_sum_[g].assign(static_cast<std::size_t>(world_), 0.0);
        sync_n_[g] = ZeroArray<int>(static_cast<std::size_t>(world_));
      }
      double* sum = sync_sum_[g].data();
      int* count = sync_n_[g].data();
      double* own = own_sum_.data() + static_cast<std::size_t>(g) * world_;
      if (fwd_group_ == g && !fwd_apart_) {
        // The forward sum leaves own_sum_ before its first wait comes off (this step's value is in).
        cpu_fwd_sum_.assign(own, own + world_);
        fwd_apart_ = fwd_step_taken_ = true;
      }
      // No branch per rank: a rank without a wait (NaN) adds 0 to its sums, which leaves them as
      // they were bit for bit (a sum of waits >= 0 is never -0). A complete step indexes its
      // ranks directly, so the loop runs several ranks per instruction.
      // A complete step's counts: one for the whole column when every rank has a wait (the
      // pass counts the ranks without), else per rank in a second pass.
      int without = 0;
      auto add = [&](auto rank_of, auto counted) {
        for (int i = 0; i < n; ++i) {
          const int r = rank_of(i);
          const double w = col[r];
          const bool has = std::isfinite(w);
          sum[r] += has ? w : 0.0;
          own[r] -= has ? w : 0.0;
          if constexpr (decltype(counted)::value) count[r] += has ? 1 : 0;
          else without += has ? 0 : 1;
        }
      };
      if (d.complete()) {
        add([](int i) { return i; }, std::false_type{});
        if (without == 0) ++sync_full_[g];
        else
          for (int r = 0; r < n; ++r) count[r] += std::isfinite(col[r]) ? 1 : 0;
      } else {
        add([&](int i) { return d.rank(i); }, std::true_type{});
      }
    }
}

void WindowStats::add_forward(const StageMatrix& m, int t, const PresentStep& d) {
  const int n = d.size();
  if (fwd_apart_ && !std::exchange(fwd_step_taken_, false)) {
    // The forward group's CPU-wall time per rank, summed over its stages in stage order (else
    // it is in own_sum_, fwd_group_).
    const int gf = *fwd_group_;
    const double* fwd = nullptr;
    if (group_count_[gf] == 1) {
      fwd = d.stage(group_first_[gf]).data();  // 0 + d, exactly
    } else {
      red_.assign(n, 0.0);
      for (int s = 0; s < S_; ++s)
        if (schema_.group_of(s) == gf) {
          const double* x = d.stage(s).data();
          for (int i = 0; i < n; ++i) red_[i] += x[i];
        }
      fwd = red_.data();
    }
    if (m.step_complete(t)) {
      for (int i = 0; i < n; ++i) cpu_fwd_sum_[i] += fwd[i];
    } else {
      for (int i = 0; i < n; ++i) cpu_fwd_sum_[d.rank(i)] += fwd[i];
    }
  }

  if (const EventState* state = m.fwd_state_row(t)) {
    const float* secs = m.fwd_s_row(t);
    for (int i = 0; i < n; ++i) {
      const int r = d.rank(i);
      switch (state[r]) {
        case EventState::unsampled: break;
        case EventState::ready:
          ++ev_sampled_;
          ++ev_ready_;
          if (ev_slot_[r] == 0) {
            ev_keepers_.emplace_back(ev_cap_);
            ev_slot_[r] = static_cast<std::int32_t>(ev_keepers_.size());
          }
          ev_keepers_[ev_slot_[r] - 1].add(secs[r]);
          break;
        case EventState::missing:
          ++ev_sampled_;
          ++ev_missing_;
          break;
      }
    }
  }
}

void WindowStats::add_telemetry(const StageMatrix& m, int t, const PresentStep& d) {
  const int R = m.ranks(), n = d.size();
  const bool complete = m.step_complete(t);
  has_wall_ = schema_.has_residual();
  double residual_sum = residual_sum_, overlap_sum = overlap_sum_, wall_sum = wall_sum_;  // in registers
  if (!complete)
    for (int r = 0; r < R; ++r)
      if (!m.present(t, r)) {
        rank_missing_[r] = 1;
        ++missing_records_;
      }
  if (complete) {
    ++complete_steps_;
  } else {
    for (int i = 0; i < n; ++i) ++rank_n_[d.rank(i)];
  }
  if (has_wall_ && !telemetry_summed_) {  // else rank_pass took these sums
    // Rank order, present ranks only, as one loop over all ranks would add them.
    const double* residual = d.stage(schema_.residual_index()).data();
    const double* overlap = m.overlap_row(t);
    const double* wall = m.wall_row(t);
    for (int i = 0; i < n; ++i) {
      const int r = d.rank(i);
      residual_sum += residual[i];
      overlap_sum += overlap[r];
      wall_sum += wall[r];
    }
  }
  // Ranks of a sparse layout hold no column: absent from every scored step.
  missing_records_ += declared_world_ - R;
  residual_sum_ = residual_sum;
  overlap_sum_ = overlap_sum;
  wall_sum_ = wall_sum;
  if (roles_.empty() && !m.roles().empty()) roles_ = m.roles();
}

void WindowStats::add_counterfactuals(const StageMatrix& m, int t, std::span<const int> groups,
                                      std::span<const double> cohort_median, const Eigen::MatrixXd* rank_median) {
  if (m.step_present_count(t) == 0) return;
  const StepBaseline b{cfg_.gain_baseline, cohort_median, rank_median, cfg_.reference_s};
  const PresentStep d(m, t);
  cf_step_adv_.resize(groups.size() * static_cast<std::size_t>(G_));
  cf_step_exposed_.resize(groups.size());
  step_counterfactuals(d, schema_, b, groups, cf_step_adv_, cf_step_exposed_);
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const int g = groups[k];
    for (int h = 0; h < G_; ++h) cf_adv_[static_cast<std::size_t>(g) * G_ + h] += cf_step_adv_[k * G_ + h];
    cf_denom_[g] += cf_step_exposed_[k];
    cf_seen_[g] = 1;
  }
}

void WindowStats::cohort_excess(Evidence& e) const {
  // Per group: each present rank's own work per step, the cohort's median and robust spread,
  // and the ranks furthest above the median (ties: lower rank first).
  e.rank_excess.assign(G_, {});
  e.cohort_own_median_s.assign(G_, 0.0);
  e.cohort_own_spread_s.assign(G_, 0.0);
  std::vector<double> own, dev;
  std::vector<int> cols;
  for (int c = 0; c < world_; ++c)
    if (steps_in(c) > 0) cols.push_back(c);
  e.observed_ranks = static_cast<int>(cols.size());
  if (cols.empty()) return;
  for (int g = 0; g < G_; ++g) {
    const double* sum = own_sum_.data() + static_cast<std::size_t>(g) * world_;
    own.resize(cols.size());
    for (std::size_t i = 0; i < cols.size(); ++i) own[i] = sum[cols[i]] / steps_in(cols[i]);
    dev = own;
    const double median = median_inplace(dev);
    for (std::size_t i = 0; i < cols.size(); ++i) dev[i] = std::abs(own[i] - median);
    e.cohort_own_median_s[g] = median;
    e.cohort_own_spread_s[g] = 1.4826 * median_inplace(dev);
    std::vector<int> top(cols.size());
    std::iota(top.begin(), top.end(), 0);
    const auto k = std::min(Evidence::kExcessRanks, top.size());
    std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(k), top.end(),
                      [&](int a, int b) { return own[a] > own[b] || (own[a] == own[b] && a < b); });
    for (std::size_t j = 0; j < k; ++j) {
      const int c = cols[top[j]];
      e.rank_excess[g].push_back({rank_ids_.empty() ? c : rank_ids_[c], own[top[j]], own[top[j]] - median});
    }
  }
}

namespace {

/// loo_median's rule, here where the standings' loop can inline it (an exported function of a
/// shared library is called, element by element).
SF_INLINE double loo_rule(double v, std::size_t n, double lo, double mid, double hi) {
  if (n % 2 == 0) return v <= lo ? mid : lo;  // a[k − 1] = lo, a[k] = mid
  return v > mid ? mid : hi;                  // the others' upper middle: a[k] or a[k + 1]
}

}  // namespace

double loo_median(double v, std::size_t n, double lo, double mid, double hi) { return loo_rule(v, n, lo, mid, hi); }

namespace {

/// For each of a step's values, the median of the others (leave-one-out), from three order
/// statistics of the n values: with n = 2k the others (2k − 1 of them) have a middle value, a[k]
/// or a[k−1]; with n = 2k + 1 they have two, and the upper one is taken (of a[k], a[k+1]), so that
/// among few peers one slow rank cannot make another look slow by pulling a mean of two down.
/// With two ranks each one's peer is the other. Classifying by value gives the same result as by
/// position when values tie.
class LeaveOneOutMedian {
public:
  /// From the n values' middle order statistics (middle_of); n >= 2.
  explicit LeaveOneOutMedian(const Middle& m) : n_(m.n), lo_(m.lo), mid_(m.mid), hi_(m.hi) {}
  double of(double v) const { return loo_rule(v, n_, lo_, mid_, hi_); }
  double lo() const { return lo_; }
  double mid() const { return mid_; }
  double hi() const { return hi_; }

private:
  std::size_t n_;
  double lo_ = 0, mid_ = 0, hi_ = 0;
};

/// sum[i] += x and sq[i] += x² for x = own[i] − the median of the others, i < n; with
/// `plus_zero`, own[i] is read as 0 + own[i] (a group's own work formed from its one stage).
template <bool kPlusZero>
SF_INLINE void add_standings_body(const double* own, int n, const LeaveOneOutMedian& peers, double* sum, double* sq) {
  for (int i = 0; i < n; ++i) {
    const double v = kPlusZero ? 0.0 + own[i] : own[i];
    const double x = v - peers.of(v);
    sum[i] += x;
    sq[i] += x * x;
  }
}

template <bool kPlusZero>
SF_WIDE_TARGET void add_standings_wide(const double* own, int n, const LeaveOneOutMedian& peers, double* sum, double* sq) {
  add_standings_body<kPlusZero>(own, n, peers, sum, sq);
}

template <bool kPlusZero>
void add_standings(const double* own, int n, const LeaveOneOutMedian& peers, double* sum, double* sq) {
#if SF_WIDE_LOOPS
  if (vector_select_available()) return add_standings_wide<kPlusZero>(own, n, peers, sum, sq);
#endif
  add_standings_body<kPlusZero>(own, n, peers, sum, sq);
}

/// add_standings_body for two steps at once: each rank's sums take step one's x, then step two's
/// (the two calls' adds in the same order), read and written once.
template <bool kPlusZero>
SF_INLINE void add_standings_pair_body(const double* own0, const LeaveOneOutMedian& peers0, const double* own1,
                                       const LeaveOneOutMedian& peers1, int n, double* sum, double* sq) {
  for (int i = 0; i < n; ++i) {
    const double v0 = kPlusZero ? 0.0 + own0[i] : own0[i], v1 = kPlusZero ? 0.0 + own1[i] : own1[i];
    const double x0 = v0 - peers0.of(v0), x1 = v1 - peers1.of(v1);
    sum[i] = (sum[i] + x0) + x1;
    sq[i] = (sq[i] + x0 * x0) + x1 * x1;
  }
}

template <bool kPlusZero>
SF_WIDE_TARGET void add_standings_pair_wide(const double* own0, const LeaveOneOutMedian& peers0, const double* own1,
                                            const LeaveOneOutMedian& peers1, int n, double* sum, double* sq) {
  add_standings_pair_body<kPlusZero>(own0, peers0, own1, peers1, n, sum, sq);
}

template <bool kPlusZero>
void add_standings_pair(const double* own0, const LeaveOneOutMedian& peers0, const double* own1,
                        const LeaveOneOutMedian& peers1, int n, double* sum, double* sq) {
#if SF_WIDE_LOOPS
  if (vector_select_available()) return add_standings_pair_wide<kPlusZero>(own0, peers0, own1, peers1, n, sum, sq);
#endif
  add_standings_pair_body<kPlusZero>(own0, peers0, own1, peers1, n, sum, sq);
}

/// The k best values offered so far, largest first (ties: the lower index first), and their indices.
struct KeepBest {
  const double* v;
  int k;
  int* at;
  int have = 0;
  double val[ArrivalSegment::kTop] = {};
  bool full() const { return have == k; }
  /// The k-th best, which a later value must be above to enter (only when full()).
  double floor() const { return val[k - 1]; }
  SF_INLINE void offer(int i) {
    const double x = v[i];
    if (have == k ? !(x > val[k - 1]) : !(x >= kNegInf)) return;  // NaN never enters
    int j = have < k ? have++ : k - 1;
    for (; j > 0 && val[j - 1] < x; --j) {
      val[j] = val[j - 1];
      at[j] = at[j - 1];
    }
    val[j] = x;
    at[j] = i;
  }
};

/// The indices of the k largest of v[0, n), largest first, ties by lower index (what a partial
/// sort by (value descending, index ascending) puts first), into top; k ≤ ArrivalSegment::kTop.
/// One pass keeps the k best so far in order: a later index enters only above the k-th value (a
/// tie keeps the lower index ahead), which eight values at a time almost never reach, so the
/// pass is a block maximum and a compare per eight values.
SF_INLINE int latest_body(const double* v, int n, int k, int* at) {
  KeepBest best{v, k, at};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    if (!best.full() || any_above(v + i, best.floor()))
      for (int j = i; j < i + kLanes; ++j) best.offer(j);
  for (; i < n; ++i) best.offer(i);
  return best.have;
}

#if SF_WIDE_LOOPS
/// latest_body in two passes: the eight lanes' largest values are eight different elements, so
/// the least of them is at most the k-th best (k ≤ 8) and a value under it has eight elements
/// above it; the second pass offers, in index order, only the values at or above that bar — the
/// same k the one pass keeps, with a handful of offers instead of one per rising value (about
/// k·ln(n/k) on unordered data, each a shift of the kept values). A NaN anywhere: latest_body.
SF_WIDE_TARGET int latest_wide(const double* v, int n, int k, int* at) {
  static_assert(ArrivalSegment::kTop <= kLanes);
  if (n < kLanes) return latest_body(v, n, k, at);
  // Intrinsics only: clang refuses a 64-byte GCC vector passed to or from the generic helpers
  // inside an AVX-512 function (the two would disagree on the calling convention).
  __m512d top = _mm512_set1_pd(kNegInf);
  __mmask8 nan = 0;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512d x = _mm512_loadu_pd(v + i);
    nan |= _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    top = _mm512_mask_max_pd(top, 0xff, top, x);  // the masked form: no undefined pass-through
  }
  for (int j = i; j < n; ++j) nan |= v[j] != v[j] ? 1 : 0;
  if (nan != 0) return latest_body(v, n, k, at);
  double lane_top[kLanes];
  _mm512_storeu_pd(lane_top, top);
  const double bar = *std::min_element(lane_top, lane_top + kLanes);
  KeepBest best{v, k, at};
  const __m512d b = _mm512_set1_pd(bar);
  for (i = 0; i + kLanes <= n; i += kLanes)
    for (unsigned in = _mm512_cmp_pd_mask(_mm512_loadu_pd(v + i), b, _CMP_GE_OQ); in != 0; in &= in - 1)
      best.offer(i + std::countr_zero(in));
  for (; i < n; ++i)
    if (v[i] >= bar) best.offer(i);
  return best.have;
}
#endif

void latest(const double* v, int n, int k, std::vector<int>& top) {
  top.clear();
  if (k <= 0) return;
  int at[ArrivalSegment::kTop];
#if SF_WIDE_LOOPS
  const int have = vector_select_available() ? latest_wide(v, n, k, at) : latest_body(v, n, k, at);
#else
  const int have = latest_body(v, n, k, at);
#endif
  top.assign(at, at + have);
}

}  // namespace

void WindowStats::add_standing(const StageMatrix& m, int t, const PresentStep& d, const StepFrontier& f,
                               std::span<const Middle> stage_middles) {
  const int n = d.size();
  if (!standing_on_ || n < 2) return;  // a rank alone has no peers to stand against
  const auto N = static_cast<std::size_t>(n);
  // Groups whose own work has a sync wait taken off this step.
  step_synced_.assign(G_, 0);
  bool any_synced = false;
  if (m.has_sync_wait())
    for (int s = 0; s < S_; ++s)
      if (m.sync_wait_column(t, s) != nullptr) step_synced_[schema_.group_of(s)] = 1, any_synced = true;
  const bool complete = m.step_complete(t);
  // One stage per group in stage order and no wait taken off: group g's own work is 0 + its
  // stage (the cohort median's array, whose middle is at hand) and the whole step's is the
  // total P[t,r,S] (the lag's last prefix, summed the same way): nothing to form or select.
  const bool at_hand = one_stage_groups_ && !any_synced && !stage_middles.empty() && total_mid_.n == N;
  const bool pairs = at_hand && complete && pair_standings_;
  if (held_n_ > 0 && !(pairs && held_n_ == n)) settle_standings();
  auto stand = [&](int k, const double* own, bool plus_zero, const Middle& mid) {
    const LeaveOneOutMedian peers(mid);
    double* sum = st_sum_.data() + static_cast<std::size_t>(k) * world_;
    double* sq = st_sq_.data() + static_cast<std::size_t>(k) * world_;
    if (complete && plus_zero) {
      add_standings<true>(own, n, peers, sum, sq);
    } else if (complete) {
      add_standings<false>(own, n, peers, sum, sq);
    } else {
      for (int i = 0; i < n; ++i) {
        const double v = plus_zero ? 0.0 + own[i] : own[i];
        const double x = v - peers.of(v);
        sum[d.rank(i)] += x;
        sq[d.rank(i)] += x * x;
      }
    }
  };
  if (pairs && held_n_ == 0) {
    hold_standings(d, stage_middles);
  } else if (pairs) {
    add_standings_with_held(d, stage_middles);
  } else if (at_hand) {
    for (int g = 0; g < G_; ++g)
      stand(g, d.stage(g).data(), true, plus_zero(stage_middles[static_cast<std::size_t>(g)]));
    whole_ = totals_.data();
    whole_mid_ = total_mid_;
    stand(G_, whole_, false, whole_mid_);
  } else {
    form_step_own(m, t, d, any_synced);
    double* whole = step_own_.data() + static_cast<std::size_t>(G_) * N;
    for (int k = 0; k <= G_; ++k) {
      const double* own = step_own_.data() + static_cast<std::size_t>(k) * N;
      Middle mid;
      if (k < G_ && one_stage_groups_ && !step_synced_[k] && !stage_middles.empty()) {
        mid = plus_zero(stage_middles[static_cast<std::size_t>(k)]);
      } else if (k == G_ && one_stage_groups_ && !any_synced && total_mid_.n == N) {
        mid = total_mid_;
      } else {
        mid = middle_of({own, N}, sel_, &own_hint_[static_cast<std::size_t>(k)]);
      }
      if (k == G_) whole_mid_ = mid;
      stand(k, own, false, mid);
    }
    whole_ = whole;
  }
  if (complete) {
    for (int i = 0; i < n; ++i) ++st_n_[i];
  } else {
    for (int i = 0; i < n; ++i) ++st_n_[d.rank(i)];
  }
  if (arrivals_.size() < Evidence::kArrivalSteps) add_arrivals(m, t, d, f);
  add_cpu_wait_standing(m, t, d);
}

void WindowStats::hold_standings(const PresentStep& d, std::span<const Middle> stage_middles) {
  // Held back for the next step's pass; the totals move out of the next rank pass's way.
  held_own_.resize(static_cast<std::size_t>(G_) + 1);
  held_mid_.resize(static_cast<std::size_t>(G_) + 1);
  for (int g = 0; g < G_; ++g) {
    held_own_[static_cast<std::size_t>(g)] = d.stage(g).data();
    held_mid_[static_cast<std::size_t>(g)] = plus_zero(stage_middles[static_cast<std::size_t>(g)]);
  }
  std::swap(totals_, held_totals_);
  whole_ = held_own_[static_cast<std::size_t>(G_)] = held_totals_.data();
  whole_mid_ = held_mid_[static_cast<std::size_t>(G_)] = total_mid_;
  held_n_ = d.size();
}

void WindowStats::add_standings_with_held(const PresentStep& d, std::span<const Middle> stage_middles) {
  // The held step's x, then this step's, per rank in one pass (held_n_ == d.size(): both complete).
  for (int k = 0; k <= G_; ++k) {
    const auto K = static_cast<std::size_t>(k);
    const double* own = k < G_ ? d.stage(k).data() : totals_.data();
    const Middle mid = k < G_ ? plus_zero(stage_middles[K]) : total_mid_;
    double* sum = st_sum_.data() + K * world_;
    double* sq = st_sq_.data() + K * world_;
    const LeaveOneOutMedian held(held_mid_[K]), now(mid);
    if (k < G_) add_standings_pair<true>(held_own_[K], held, own, now, held_n_, sum, sq);
    else add_standings_pair<false>(held_own_[K], held, own, now, held_n_, sum, sq);
  }
  held_n_ = 0;
  whole_ = totals_.data();
  whole_mid_ = total_mid_;
}

void WindowStats::form_step_own(const StageMatrix& m, int t, const PresentStep& d, bool any_synced) {
  const int n = d.size();
  const auto N = static_cast<std::size_t>(n);
  step_own_.resize(static_cast<std::size_t>(G_ + 1) * N);
  // Each group's own work, 0 + its stages in stage order (a zeroed sum's first addition).
  for (int g = 0; g < G_; ++g) {
    double* own = step_own_.data() + static_cast<std::size_t>(g) * N;
    for (int s = group_first_[g]; s <= group_last_[g]; ++s) {
      if (schema_.group_of(s) != g) continue;
      const double* x = d.stage(s).data();
      if (s == group_first_[g]) {
        for (int i = 0; i < n; ++i) own[i] = 0.0 + x[i];
      } else {
        for (int i = 0; i < n; ++i) own[i] += x[i];
      }
    }
  }
  if (any_synced)
    for (int s = 0; s < S_; ++s)
      if (const float* col = m.sync_wait_column(t, s)) {
        double* own = step_own_.data() + static_cast<std::size_t>(schema_.group_of(s)) * N;
        for (int i = 0; i < n; ++i)
          if (const double w = col[d.rank(i)]; std::isfinite(w)) own[i] -= w;
      }
  // The whole step's, after the groups': row G_.
  double* whole = step_own_.data() + static_cast<std::size_t>(G_) * N;
  for (int i = 0; i < n; ++i) whole[i] = 0.0 + step_own_[i];  // a zeroed sum's first addition
  for (int g = 1; g < G_; ++g)
    for (int i = 0; i < n; ++i) whole[i] += step_own_[static_cast<std::size_t>(g) * N + i];
}

void WindowStats::add_cpu_wait_standing(const StageMatrix& m, int t, const PresentStep& d) {
  // The CPU wait, among the present ranks that have one.
  const float* cw = m.cpu_wait_row(t);
  if (!cw) return;
  step_cw_.clear();
  step_cw_rank_.clear();
  for (int i = 0; i < d.size(); ++i)
    if (const double v = cw[d.rank(i)]; std::isfinite(v)) {
      step_cw_.push_back(v);
      step_cw_rank_.push_back(d.rank(i));
    }
  if (step_cw_.size() < 2) return;
  const LeaveOneOutMedian peers(middle_of(step_cw_, sel_, &cw_hint_));
  for (std::size_t i = 0; i < step_cw_.size(); ++i) {
    const double x = step_cw_[i] - peers.of(step_cw_[i]);
    cw_sum_[step_cw_rank_[i]] += x;
    cw_sq_[step_cw_rank_[i]] += x * x;
    ++cw_n_[step_cw_rank_[i]];
  }
}

void WindowStats::add_arrivals(const StageMatrix& m, int t, const PresentStep& d, const StepFrontier& f) {
  const int n = d.size();
  const auto N = static_cast<std::size_t>(n);
  StepArrivals a;
  a.exposed_s = f.frontier.empty() ? 0.0 : f.frontier.back();
  a.ranks = n;
  a.first = static_cast<std::uint32_t>(arrivals_.segments.size());
  const int k = std::min<int>(ArrivalSegment::kTop, n);
  int first = 0;
  double before = 0;  // F at the end of the previous segment
  for (int g = 0; g < G_; ++g) {
    // Accumulation microsteps interleave their groups' stages: one segment, the whole step.
    bool sync = false;
    if (m.has_sync_wait() && !schema_.microstep_expanded())
      for (int s = group_first_[g]; s <= group_last_[g] && !sync; ++s)
        sync = schema_.group_of(s) == g && m.sync_wait_column(t, s) != nullptr;
    if (!sync && g + 1 < G_) continue;
    // The segment first..g: each rank's own work there (the whole step's, summed the same way,
    // when it is the one segment).
    const double* seg = nullptr;
    Middle mid;
    if (first == 0 && g == G_ - 1) {
      seg = whole_;
      mid = whole_mid_;
    } else {
      seg_own_.assign(N, 0.0);
      for (int h = first; h <= g; ++h) {
        const double* own = step_own_.data() + static_cast<std::size_t>(h) * N;
        for (int i = 0; i < n; ++i) seg_own_[i] += own[i];
      }
      seg = seg_own_.data();
      mid = middle_of(seg_own_, sel_);
    }
    ArrivalSegment sg;
    sg.first_group = static_cast<std::int16_t>(std::min(first, 32767));
    sg.last_group = static_cast<std::int16_t>(std::min(g, 32767));
    const double end = f.frontier[static_cast<std::size_t>(group_last_[g])];
    const LeaveOneOutMedian peers(mid);
    sg.lo_s = static_cast<float>(peers.lo());
    sg.mid_s = static_cast<float>(peers.mid());
    sg.hi_s = static_cast<float>(peers.hi());
    // The lower median for an even count: with two ranks, the faster one (a mean with the
    // straggler would charge half its delay to the ideal).
    sg.median_s = N % 2 == 1 ? sg.mid_s : sg.lo_s;
    // The latest arrivals, latest first (ties: the lower rank first).
    latest(seg, n, k, top_buf_);
    sg.top_count = k;
    for (int j = 0; j < k; ++j) {
      const int c = d.rank(top_buf_[j]);
      sg.top_rank[j] = rank_ids_.empty() ? c : rank_ids_[c];
      sg.top_s[j] = static_cast<float>(seg[top_buf_[j]]);
    }
    sg.end_s = static_cast<float>(end);
    sg.after_s = static_cast<float>(end - before - seg[top_buf_[0]]);
    before = end;
    arrivals_.segments.push_back(sg);
    ++a.count;
    first = g + 1;
  }
  arrivals_.steps.push_back(a);
}

void WindowStats::fill_standing(Standing& out, const double* sum, const double* sq, const int* n_of) const {
  std::vector<int> cols;
  for (int c = 0; c < world_; ++c)
    if (n_of[c] > 0) cols.push_back(c);
  out = Standing{};
  if (cols.empty()) return;
  std::vector<double> means(cols.size()), dev;
  for (std::size_t i = 0; i < cols.size(); ++i) means[i] = sum[cols[i]] / n_of[cols[i]];
  dev = means;
  out.median_s = median_inplace(dev);
  for (std::size_t i = 0; i < cols.size(); ++i) dev[i] = std::abs(means[i] - out.median_s);
  out.spread_s = 1.4826 * median_inplace(dev);
  std::vector<int> order(cols.size());
  std::iota(order.begin(), order.end(), 0);
  out.complete = static_cast<int>(cols.size()) <= Evidence::kStandingAll;
  const auto keep = out.complete ? order.size() : std::min(Evidence::kStandingTop, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                    [&](int a, int b) { return means[a] > means[b] || (means[a] == means[b] && a < b); });
  for (std::size_t j = 0; j < keep; ++j) {
    const int c = cols[order[j]];
    const int n = n_of[c];
    RankStanding rs{rank_ids_.empty() ? c : rank_ids_[c], means[order[j]], -1.0, n};
    if (n >= 2) rs.sd_s = std::sqrt(std::max(0.0, (sq[c] - n * rs.mean_s * rs.mean_s) / (n - 1)));
    out.ranks.push_back(rs);
  }
}

void WindowStats::settle_standings() {
  if (held_n_ == 0) return;
  for (int k = 0; k <= G_; ++k) {
    const auto K = static_cast<std::size_t>(k);
    const LeaveOneOutMedian peers(held_mid_[K]);
    double* sum = st_sum_.data() + K * world_;
    double* sq = st_sq_.data() + K * world_;
    if (k < G_) add_standings<true>(held_own_[K], held_n_, peers, sum, sq);
    else add_standings<false>(held_own_[K], held_n_, peers, sum, sq);
  }
  held_n_ = 0;
}

void WindowStats::standings(Evidence& e) const {
  if (held_n_ != 0) throw std::logic_error("WindowStats: standings read with a step held back (settle_standings first)");
  e.standing.clear();
  e.cpu_wait = Standing{};
  if (!standing_on_) return;
  fill_standing(e.cpu_wait, cw_sum_.data(), cw_sq_.data(), cw_n_.data());
  e.cpu_wait.waits_off = true;
  e.standing.assign(G_ + 1, {});
  bool any_waits = false;
  for (int g = 0; g < G_; ++g) any_waits = any_waits || sync_seen_[g];
  for (int k = 0; k <= G_; ++k) {
    const auto row = static_cast<std::size_t>(k) * world_;
    fill_standing(e.standing[k], st_sum_.data() + row, st_sq_.data() + row, st_n_.data());
    e.standing[k].waits_off = k < G_ ? sync_seen_[k] != 0 : any_waits;
  }
}

int WindowStats::top_group() const {
  const RankedStages ranked = rank_stages(adv_, cfg_.tau_c);
  return ranked.order.empty() || adv_[ranked.order[0]] <= 0 ? -1 : ranked.order[0];
}

WindowSummary WindowStats::finish(std::int64_t first_step, std::int64_t last_step, int missing_steps) const {
  WindowSummary out;
  Evidence& e = out.evidence;
  SideEvidence& side = out.side;
  e.schema = schema_;
  e.config = cfg_;
  e.first_step = first_step;
  e.last_step = last_step;
  e.steps = steps_;
  e.world_size = declared_world_;
  e.missing_steps = missing_steps;
  e.exposed_makespan_s = denom_;
  e.per_stage_max_s = base_.per_stage_max_s;
  e.per_stage_avg_s = base_.per_stage_avg_s;
  e.gain_baseline = cfg_.gain_baseline;
  if (!exposed_.empty()) e.median_step_s = exposed_.median();
  e.medians_exact = exposed_.exact();
  finish_shares(e);
  finish_spreads(e);
  cohort_excess(e);
  standings(e);
  e.arrivals = arrivals_;
  finish_leaders(e, side);
  finish_events(e, side);
  finish_telemetry(e);
  finish_side(e, side);
  return out;
}

void WindowStats::finish_shares(Evidence& e) const {
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
}

void WindowStats::finish_spreads(Evidence& e) const {
  e.advance_sd_s.assign(G_, 0.0);
  for (int g = 0; g < G_; ++g) e.advance_sd_s[g] = adv_spread_[g].sd();
  e.exposed_sd_s = exposed_spread_.sd();
  e.lag_increment_sd_s.assign(G_, 0.0);
  for (int g = 0; g < G_; ++g) e.lag_increment_sd_s[g] = lag_inc_spread_[g].sd();
  e.advance_robust_sd_s.assign(G_, -1.0);
  for (int g = 0; g < G_; ++g) e.advance_robust_sd_s[g] = adv_keep_[g].robust_sd();
  e.exposed_robust_sd_s = exposed_.robust_sd();
}

void WindowStats::finish_leaders(Evidence& e, SideEvidence& side) const {
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
    // The kMaxLeadersPerStage largest credits (ties: the lower rank first), kept in that order
    // while the credited ranks go by in the order they were first credited; a tie of every rank
    // (the residual's zeros) credits about all of them, so none is listed or sorted whole.
    auto before = [](const LeaderCredit& a, const LeaderCredit& b) {
      return a.advance_s > b.advance_s || (a.advance_s == b.advance_s && a.rank < b.rank);
    };
    std::vector<LeaderCredit> list;
    list.reserve(kMaxLeadersPerStage + 1);
    auto& confident = side.confident_credit.emplace_back();
    for (int r : credited_[g]) {
      const auto i = static_cast<std::size_t>(g) * world_ + r;
      if (conf_credit_[i] > 0) confident.push_back({r, conf_credit_[i]});
      const LeaderCredit c{r, credit_[i], led_[i]};
      if (list.size() == kMaxLeadersPerStage && !before(c, list.back())) continue;
      list.insert(std::upper_bound(list.begin(), list.end(), c, before), c);
      if (list.size() > kMaxLeadersPerStage) list.pop_back();
    }
    std::sort(confident.begin(), confident.end(),
              [](const SideEvidence::Credit& a, const SideEvidence::Credit& b) { return a.rank < b.rank; });
    e.leaders[g] = std::move(list);
  }
  side.switch_chances.assign(G_, 0);
  for (int s = 0; s < S_; ++s) {
    e.leader_switches[schema_.group_of(s)] += switches_[s];
    e.confident_leaders[schema_.group_of(s)] += conf_n_[s];
    if (conf_n_[s] > 1) side.switch_chances[schema_.group_of(s)] += conf_n_[s] - 1;
  }
}

void WindowStats::finish_events(Evidence& e, SideEvidence& side) const {
  // Forward-event side channel summary.
  e.events.sampled = ev_sampled_;
  e.events.ready = ev_ready_;
  e.events.missing = ev_missing_;
  e.events.ready_ratio = ev_sampled_ > 0 ? static_cast<double>(ev_ready_) / ev_sampled_ : 0.0;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<double>& rank_medians = side.fwd_event_median_s;
  if (!ev_keepers_.empty()) {  // else both stay empty: no rank has a sample
    rank_medians.assign(world_, kNaN);
    side.fwd_event_ready.assign(world_, 0);
  }
  for (int r = 0; r < world_; ++r) {
    if (ev_slot_[r] == 0) continue;
    const MedianKeeper& k = ev_keepers_[ev_slot_[r] - 1];
    side.fwd_event_ready[r] = static_cast<int>(k.count());
    e.medians_exact = e.medians_exact && k.exact();
    rank_medians[r] = k.median();
    if (e.events.max_rank < 0 || rank_medians[r] > e.events.max_rank_median_s) {
      e.events.max_rank_median_s = rank_medians[r];
      e.events.max_rank = r;
    }
  }
  // The largest rank's cohort is the other ranks (leave-one-out: with two ranks, the other one;
  // a median including the rank itself would halve its excess there). Alone, it is its own.
  std::vector<double> others;
  for (int r = 0; r < world_; ++r)
    if (ev_slot_[r] != 0 && r != e.events.max_rank) others.push_back(rank_medians[r]);
  if (!others.empty()) e.events.cohort_median_s = median_inplace(others);
  else if (e.events.max_rank >= 0) e.events.cohort_median_s = e.events.max_rank_median_s;
}

void WindowStats::finish_telemetry(Evidence& e) const {
  // Telemetry facts.
  e.has_wall = has_wall_;
  // Shares of the recorded step time Σ max(w, Σd) = Σ (w + o), never of Σ w alone: a present
  // wall below the explicit sum is overlap error whatever its size, and walls of 0 must not
  // hide it behind a zero denominator (both shares are then in [0, 1]).
  if (const double recorded = wall_sum_ + overlap_sum_; recorded > 0) {
    e.closure_residual_share = residual_sum_ / recorded;
    e.overlap_error_share = overlap_sum_ / recorded;
  }
  // Missing ranks as ranges over rank ids: columns absent from some scored step, and (sparse
  // layout, once a step is scored) every rank without a column. Time and memory follow the
  // columns and gaps, not the world.
  auto missing = [&e](int first, int last) {
    if (first > last) return;
    if (!e.missing_ranks.empty() && e.missing_ranks.back().last + 1 == first) e.missing_ranks.back().last = last;
    else e.missing_ranks.push_back({first, last});
    e.missing_rank_count += static_cast<std::int64_t>(last) - first + 1;
  };
  const bool gaps = !rank_ids_.empty() && steps_ > 0;
  int next = 0;  // the first rank id not yet visited
  for (int c = 0; c < world_; ++c) {
    const int id = rank_ids_.empty() ? c : rank_ids_[c];
    if (gaps) missing(next, id - 1);
    if (rank_missing_[c]) missing(id, id);
    next = id + 1;
  }
  if (gaps) missing(next, declared_world_ - 1);
  e.missing_records = missing_records_;
}

void WindowStats::finish_side(Evidence& e, SideEvidence& side) const {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  // Per-rank side facts the labeler reads.
  side.ranks = world_;
  side.rank_ids = rank_ids_;
  side.roles = roles_;
  // The declared wait model, resolved to groups once (validate() refused a name that is none).
  for (const auto& w : cfg_.wait_model)
    if (const auto g = schema_.group_index(w); g && std::find(e.wait_declared.begin(), e.wait_declared.end(), *g) == e.wait_declared.end())
      e.wait_declared.push_back(*g);
  std::sort(e.wait_declared.begin(), e.wait_declared.end());
  for (int g = 0; g < G_; ++g)
    if (std::binary_search(e.wait_declared.begin(), e.wait_declared.end(), g) || sync_seen_[g]) e.wait_groups.push_back(g);
  side.sync_wait_mean_s.assign(G_, {});
  for (int g = 0; g < G_; ++g) {
    if (!sync_seen_[g]) continue;
    auto& mean = side.sync_wait_mean_s[g];
    mean.assign(world_, kNaN);
    const std::vector<double>& sum = sync_sum_[g];
    const ZeroArray<int>& count = sync_n_[g];
    for (int r = 0; r < world_; ++r)
      if (const int n = sync_full_[g] + count[static_cast<std::size_t>(r)]; n > 0) mean[r] = sum[r] / n;
  }
  side.fwd_cpu_mean_s.assign(world_, kNaN);
  if (fwd_group_) {
    const double* sum = fwd_apart_ ? cpu_fwd_sum_.data() : own_sum_.data() + static_cast<std::size_t>(*fwd_group_) * world_;
    for (int r = 0; r < world_; ++r)
      if (const int n = steps_in(r); n > 0) side.fwd_cpu_mean_s[r] = sum[r] / n;
  }
  // The residual-leader counterfactual of the top group (only it is needed; the streaming path
  // keeps every group's because the top one is known only now).
  const int s1 = e.share_order.empty() ? -1 : e.share_order[0];
  if (s1 >= 0 && cf_seen_[s1] && cf_denom_[s1] > 0) {
    side.residual_shares.assign(G_, 0.0);
    for (int h = 0; h < G_; ++h) side.residual_shares[h] = cf_adv_[static_cast<std::size_t>(s1) * G_ + h] / cf_denom_[s1];
  }
}


}  // namespace sf::frontier::detail
