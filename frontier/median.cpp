// Medians over ranks: the labeler's largest per-step cost (cohort medians, the lag's median
// prefix, window medians), so a selection routine of its own.
#include "detail.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SF_VECTOR_SELECT 1
#include <immintrin.h>
#else
#define SF_VECTOR_SELECT 0
#endif

namespace sf::frontier::detail {

namespace {

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

}  // namespace

}  // namespace sf::frontier::detail

namespace sf::frontier {

double median_inplace(std::span<double> v) {
  const std::size_t n = v.size();
  if (n % 2 == 1) return detail::select_kth(v.data(), n, n / 2, nullptr);
  double lo = 0;
  const double hi = detail::select_kth(v.data(), n, n / 2, &lo);
  return lo + (hi - lo) / 2;
}

void RunningSpread::add(double x) {
  ++n_;
  const double a = std::abs(x);
  if (a > scale_) {  // rescale to the new largest value: mean by the ratio, M2 by its square
    if (scale_ > 0) {
      const double k = scale_ / a;
      mean_ *= k;
      m2_ *= k * k;
    }
    scale_ = a;
  }
  if (scale_ == 0) return;  // every value so far is 0: mean and M2 stay 0
  const double u = x / scale_;  // |u| ≤ 1, so d ≤ 2 and M2 ≤ 4n: never overflows
  const double d = u - mean_;
  mean_ += d / n_;
  m2_ += d * (u - mean_);
}

double RunningSpread::sd() const {
  if (n_ < 2) return 0.0;
  return scale_ * std::sqrt(std::max(0.0, m2_ / (n_ - 1)));
}

}  // namespace sf::frontier

namespace sf::frontier::detail {

namespace {
constexpr double kBinsPerOctave = 1024;
std::int32_t bin_of(double v) { return static_cast<std::int32_t>(std::floor(std::log2(v) * kBinsPerOctave)); }
double bin_value(std::int32_t b) { return std::exp2((b + 0.5) / kBinsPerOctave); }
}  // namespace

void MedianKeeper::add(double v) {
  ++n_;
  if (!binned_) {
    values_.push_back(v);
    if (cap_ == 0 || values_.size() <= cap_) return;
    // Past the cap: every kept value moves into its bin and the values are freed.
    binned_ = true;
    for (const double x : values_) {
      if (x > 0) ++bins_[bin_of(x)];
      else ++zeros_;
    }
    std::vector<double>().swap(values_);
    return;
  }
  if (v > 0) ++bins_[bin_of(v)];
  else ++zeros_;
}

double MedianKeeper::kth(std::size_t k) const {
  if (k < static_cast<std::size_t>(zeros_)) return 0.0;
  std::size_t seen = static_cast<std::size_t>(zeros_);
  for (const auto& [b, c] : bins_) {
    seen += static_cast<std::size_t>(c);
    if (k < seen) return bin_value(b);
  }
  return bin_value(bins_.rbegin()->first);
}

double MedianKeeper::robust_sd() const {
  if (n_ < 4) return -1.0;
  // The p-quantile at h = p (n − 1), between the order statistics floor(h) and floor(h) + 1.
  std::vector<double> sorted;
  if (!binned_) {
    sorted = values_;
    std::sort(sorted.begin(), sorted.end());
  }
  auto at = [&](std::size_t k) { return binned_ ? kth(k) : sorted[k]; };
  auto quantile = [&](double p) {
    const double h = p * static_cast<double>(n_ - 1);
    const auto lo = static_cast<std::size_t>(h);
    const double frac = h - static_cast<double>(lo);
    const double a = at(lo);
    return lo + 1 < n_ ? a + frac * (at(lo + 1) - a) : a;
  };
  return (quantile(0.75) - quantile(0.25)) / 1.349;
}

double MedianKeeper::median() const {
  if (n_ == 0) return 0.0;
  if (!binned_) {
    std::vector<double> tmp = values_;
    return median_inplace(tmp);
  }
  if (n_ % 2 == 1) return kth(n_ / 2);
  const double lo = kth(n_ / 2 - 1), hi = kth(n_ / 2);
  return lo + (hi - lo) / 2;
}

#if SF_VECTOR_SELECT
namespace {

/// src[0, n) split around pivot into lt (values < pivot) and ge (the rest), each packed from its
/// start in src's order; returns |lt|, |ge| in *n_ge. Eight values a step: a compare to a mask
/// and a compress into a register per side (a compress straight to memory is microcoded on some
/// cores), stored whole — so lt and ge need 8 spare slots past n.
__attribute__((target("avx512f,popcnt"))) std::size_t split_avx512(const double* src, std::size_t n, double pivot,
                                                                   double* lt, double* ge, std::size_t* n_ge,
                                                                   double* lt_max) {
  std::size_t nl = 0, ng = 0, i = 0;
  const __m512d p = _mm512_set1_pd(pivot);
  __m512d mx = _mm512_set1_pd(kNegInf);
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_loadu_pd(src + i);
    const __mmask8 m = _mm512_cmp_pd_mask(v, p, _CMP_LT_OQ);
    _mm512_storeu_pd(lt + nl, _mm512_maskz_compress_pd(m, v));
    _mm512_storeu_pd(ge + ng, _mm512_maskz_compress_pd(static_cast<__mmask8>(~m), v));
    mx = _mm512_mask_max_pd(mx, m, mx, v);
    const auto c = static_cast<std::size_t>(__builtin_popcount(m));
    nl += c;
    ng += 8 - c;
  }
  if (i < n) {
    // The last 1–7 values the same way under a mask (a branch per value mispredicts every other
    // one on these ranges, which are a quickselect's few dozen values).
    const auto live = static_cast<__mmask8>((1u << (n - i)) - 1);
    const __m512d v = _mm512_maskz_loadu_pd(live, src + i);
    const __mmask8 m = _mm512_mask_cmp_pd_mask(live, v, p, _CMP_LT_OQ);
    _mm512_storeu_pd(lt + nl, _mm512_maskz_compress_pd(m, v));
    _mm512_storeu_pd(ge + ng, _mm512_maskz_compress_pd(static_cast<__mmask8>(live & ~m), v));
    mx = _mm512_mask_max_pd(mx, m, mx, v);
    const auto c = static_cast<std::size_t>(__builtin_popcount(m));
    nl += c;
    ng += n - i - c;
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, mx);
  *n_ge = ng;
  *lt_max = *std::max_element(lanes, lanes + 8);
  return nl;
}

/// The k-th smallest of v[0, n), n ≤ 16, and the (k−1)-th in *lower (left_max when k = 0), by
/// counting: with c_i the number of values below v_i, a[k] = max { v_i : c_i ≤ k } (a value above
/// a[k] has a[0..k] below it). The counts of all values at once, a compare per value, no branch:
/// std::nth_element on so few mispredicts about every other compare.
__attribute__((target("avx512f,popcnt"))) double tail_kth_avx512(const double* v, std::size_t n, std::size_t k,
                                                                  double* lower, double left_max) {
  const auto m0 = static_cast<__mmask8>(n >= 8 ? 0xffu : (1u << n) - 1);
  const auto m1 = static_cast<__mmask8>(n > 8 ? (1u << (n - 8)) - 1 : 0u);
  const __m512d a = _mm512_maskz_loadu_pd(m0, v), b = _mm512_maskz_loadu_pd(m1, v + 8);
  const __m512i one = _mm512_set1_epi64(1);
  __m512i ca = _mm512_setzero_si512(), cb = _mm512_setzero_si512();  // c_i per lane
  for (std::size_t j = 0; j < n; ++j) {
    const __m512d x = _mm512_set1_pd(v[j]);
    ca = _mm512_mask_add_epi64(ca, _mm512_mask_cmp_pd_mask(m0, x, a, _CMP_LT_OQ), ca, one);
    cb = _mm512_mask_add_epi64(cb, _mm512_mask_cmp_pd_mask(m1, x, b, _CMP_LT_OQ), cb, one);
  }
  const __m512d none = _mm512_set1_pd(kNegInf);
  double out[2] = {kNegInf, left_max};  // a[k], a[k − 1]
  for (std::size_t i = 0; i < (k > 0 ? 2u : 1u); ++i) {
    const __m512i at = _mm512_set1_epi64(static_cast<long long>(k - i));
    const __m512d in_a = _mm512_mask_mov_pd(none, _mm512_mask_cmple_epu64_mask(m0, ca, at), a);
    const __m512d in_b = _mm512_mask_mov_pd(none, _mm512_mask_cmple_epu64_mask(m1, cb, at), b);
    alignas(64) double lanes[8];
    _mm512_store_pd(lanes, _mm512_mask_max_pd(in_a, 0xff, in_a, in_b));
    out[i] = *std::max_element(lanes, lanes + 8);
  }
  if (lower) *lower = out[1];
  return out[0];
}

double median_of_three(double a, double b, double c) { return std::max(std::min(a, b), std::min(std::max(a, b), c)); }

/// The k-th smallest of x[0, n), and the (k−1)-th in *lower when asked (0 < k), x left as it
/// is: quickselect out of place, each round splitting the range into three rotating buffers of
/// scratch with split_avx512. Same answers as select_kth.
__attribute__((target("avx512f,popcnt"))) double select_kth_avx512(const double* x, std::size_t n, std::size_t k,
                                                                   double* lower, SelectScratch& scratch) {
  for (auto& b : scratch.split) b.grow(n + 8);
  double* bufs[3] = {scratch.split[0].data(), scratch.split[1].data(), scratch.split[2].data()};
  const double* src = x;
  int at = -1;               // the buffer src lies in, −1 for x
  double left_max = kNegInf; // the largest value left of the range (those are ≤ every value in it)
  const int rounds = 2 * static_cast<int>(std::bit_width(n));
  for (int round = 0; n > 16 && round < rounds; ++round) {
    // Tukey's ninther, as select_kth picks it.
    const std::size_t st = n / 9;
    const double pivot = median_of_three(median_of_three(src[0], src[st], src[2 * st]),
                                         median_of_three(src[3 * st], src[4 * st], src[5 * st]),
                                         median_of_three(src[6 * st], src[7 * st], src[8 * st]));
    const int a = at == 0 ? 1 : 0, b = at == 2 ? 1 : 2;  // the two buffers src is not in
    std::size_t ng = 0;
    double lt_max = kNegInf;
    const std::size_t nl = split_avx512(src, n, pivot, bufs[a], bufs[b], &ng, &lt_max);
    if (k < nl) {
      src = bufs[a], at = a, n = nl;
    } else if (nl > 0) {
      src = bufs[b], at = b, n = ng, k -= nl;
      left_max = lt_max;
    } else {
      // The pivot is the range's smallest key: split its copies off (the values below the next
      // double up) into a, the greater ones into the third buffer (src's, no longer needed).
      const int third = at < 0 ? 3 - a - b : at;
      const double above = std::nextafter(pivot, std::numeric_limits<double>::infinity());
      std::size_t n_greater = 0;
      double unused = 0;
      const std::size_t equal = split_avx512(bufs[b], ng, above, bufs[a], bufs[third], &n_greater, &unused);
      if (k < equal) {
        if (lower) *lower = k > 0 ? pivot : left_max;
        return pivot;
      }
      src = bufs[third], at = third, n = n_greater, k -= equal;
      left_max = pivot;
    }
  }
  if (n <= 16) return tail_kth_avx512(src, n, k, lower, left_max);
  // A range that would not shrink: select_kth on a copy.
  std::vector<double>& last = scratch.tail;
  last.assign(src, src + n);
  double lo = left_max;
  const double kth = select_kth(last.data(), n, k, k > 0 ? &lo : nullptr);
  if (lower) *lower = lo;
  return kth;
}

bool have_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("popcnt");
  return yes;
}

/// The values of x[0, n) inside [lo, hi], packed into keep in x's order (keep needs 8 spare slots
/// past n), returning their count; *below counts those under lo. Eight values a step: two
/// compares, a compress into a register stored whole, two popcounts; with kAhead, a prefetch of
/// next's line at the same place towards L2 (an array a later pass reads, which would otherwise
/// come from memory as that pass reads it).
template <bool kAhead>
__attribute__((target("avx512f,popcnt"))) std::size_t bracket_avx512(const double* x, std::size_t n, double lo,
                                                                     double hi, double* keep, std::size_t* below,
                                                                     const double* next) {
  std::size_t m = 0, nb = 0, i = 0;
  const __m512d l = _mm512_set1_pd(lo), h = _mm512_set1_pd(hi);
  for (; i + 8 <= n; i += 8) {
    if constexpr (kAhead) __builtin_prefetch(next + i, 0, 2);
    const __m512d v = _mm512_loadu_pd(x + i);
    const __mmask8 under = _mm512_cmp_pd_mask(v, l, _CMP_LT_OQ);
    const __mmask8 in = _mm512_mask_cmp_pd_mask(static_cast<__mmask8>(~under), v, h, _CMP_LE_OQ);
    _mm512_storeu_pd(keep + m, _mm512_maskz_compress_pd(in, v));
    m += static_cast<std::size_t>(__builtin_popcount(in));
    nb += static_cast<std::size_t>(__builtin_popcount(under));
  }
  if (i < n) {  // the last 1–7 under a mask, as split_avx512 takes them
    const auto live = static_cast<__mmask8>((1u << (n - i)) - 1);
    const __m512d v = _mm512_maskz_loadu_pd(live, x + i);
    const __mmask8 under = _mm512_mask_cmp_pd_mask(live, v, l, _CMP_LT_OQ);
    const __mmask8 in = _mm512_mask_cmp_pd_mask(static_cast<__mmask8>(live & ~under), v, h, _CMP_LE_OQ);
    _mm512_storeu_pd(keep + m, _mm512_maskz_compress_pd(in, v));
    m += static_cast<std::size_t>(__builtin_popcount(in));
    nb += static_cast<std::size_t>(__builtin_popcount(under));
  }
  *below = nb;
  return m;
}

/// Whether v[0, n) are all the same bits (n ≥ 1): a bracket holding only copies of one value
/// (a stage most ranks spend none of, or leave together) has it as every middle order statistic.
__attribute__((target("avx512f"))) bool all_same_avx512(const double* v, std::size_t n) {
  if (v[n / 2] != v[0] || v[n - 1] != v[0]) return false;  // the common case, without a pass
  std::uint64_t first;
  std::memcpy(&first, v, sizeof first);
  const __m512i f = _mm512_set1_epi64(static_cast<long long>(first));
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __mmask8 d = _mm512_cmpneq_epu64_mask(_mm512_loadu_si512(v + i), f) |
                       _mm512_cmpneq_epu64_mask(_mm512_loadu_si512(v + i + 8), f) |
                       _mm512_cmpneq_epu64_mask(_mm512_loadu_si512(v + i + 16), f) |
                       _mm512_cmpneq_epu64_mask(_mm512_loadu_si512(v + i + 24), f);
    if (d) return false;
  }
  for (; i < n; ++i)
    if (std::memcmp(v + i, &first, sizeof first) != 0) return false;
  return true;
}

/// The least value of x[0, n) above v (+inf when none) and, in *at_most, how many are ≤ v.
__attribute__((target("avx512f,popcnt"))) double least_above_avx512(const double* x, std::size_t n, double v,
                                                                    std::size_t* at_most) {
  std::size_t le = 0, i = 0;
  const __m512d p = _mm512_set1_pd(v);
  __m512d mn = _mm512_set1_pd(std::numeric_limits<double>::infinity());
  for (; i + 8 <= n; i += 8) {
    const __m512d y = _mm512_loadu_pd(x + i);
    const __mmask8 m = _mm512_cmp_pd_mask(y, p, _CMP_LE_OQ);
    le += static_cast<std::size_t>(__builtin_popcount(m));
    mn = _mm512_mask_min_pd(mn, static_cast<__mmask8>(~m), mn, y);
  }
  if (i < n) {  // the last 1–7 under a mask
    const auto live = static_cast<__mmask8>((1u << (n - i)) - 1);
    const __m512d y = _mm512_maskz_loadu_pd(live, x + i);
    const __mmask8 m = _mm512_mask_cmp_pd_mask(live, y, p, _CMP_LE_OQ);
    le += static_cast<std::size_t>(__builtin_popcount(m));
    mn = _mm512_mask_min_pd(mn, static_cast<__mmask8>(live & ~m), mn, y);
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, mn);
  *at_most = le;
  return *std::min_element(lanes, lanes + 8);
}

/// The kept values of a bracket [lo, hi] hold positions j − 1 … j (+ 1 when odd) of them; about
/// √inside / 2 values is how far the j-th's place wanders from where evenly spread values would
/// put it. Packs those inside an interpolated bracket two such spreads (and the neighbours) wide
/// about that place into scratch.inner and, when the positions fall inside it, points *from,
/// *len and *at (j's place there) at them: one compress pass over values in L1 in place of a
/// quickselect round or two over all of them (evaluate at 1024 ranks keeps about 100 values a
/// middle). Otherwise the outputs are left as they are. Only the time depends on it.
__attribute__((target("avx512f,popcnt"))) void narrow_bracket(const double* keep, std::size_t inside, std::size_t j,
                                                              bool odd, double lo, double hi, SelectScratch& scratch,
                                                              const double** from, std::size_t* len, std::size_t* at) {
  if (inside < 48) return;  // a round or two of quickselect costs no more
  const double unit = (hi - lo) / static_cast<double>(inside);
  if (!std::isfinite(unit) || !(unit > 0)) return;  // an open (sampled) end, or an empty span
  const double centre = lo + (static_cast<double>(j) + 0.5) * unit;
  const double half = (std::sqrt(static_cast<double>(inside)) + 3.0) * unit;
  scratch.inner.grow(inside + 8);
  std::size_t below = 0;
  const std::size_t n = bracket_avx512<false>(keep, inside, centre - half, centre + half, scratch.inner.data(), &below,
                                              nullptr);
  if (below + 1 <= j && j + (odd ? 1 : 0) < below + n) {
    *from = scratch.inner.data();
    *len = n;
    *at = j - below;
  }
}

/// middle_of's answer from a bracket's pass over n values: keep[0, inside) those inside
/// [lo, hi] (8 spare slots past them), `below` those under lo. False, out untouched but for n,
/// when positions k − 1 … k (+ 1 when odd), k = n/2, are not all among the kept.
__attribute__((target("avx512f,popcnt"))) bool middle_from_kept(const double* keep, std::size_t inside,
                                                                std::size_t below, std::size_t n, double lo, double hi,
                                                                SelectScratch& scratch, Middle& out) {
  const std::size_t k = n / 2;
  const bool odd = n % 2 == 1;
  out.n = n;
  // Positions k − 1 … k (+ 1 when odd) must fall among the values kept.
  if (!(below + 1 <= k && k + (odd ? 1 : 0) < below + inside)) return false;
  const std::size_t j = k - below;  // ≥ 1
  if (all_same_avx512(keep, inside)) {
    // The kept values are copies of one value: so is each middle order statistic (all kept,
    // by the test above), bit for bit.
    out.mid = out.lo = keep[0];
    if (odd) out.hi = keep[0];
    return true;
  }
  // Positions j − 1 … j (+ 1) among the kept, from a narrower bracket inside them where
  // one holds them, else from all of them (the same values either way).
  const double* from = keep;
  std::size_t len = inside, at = j;
  narrow_bracket(keep, inside, j, odd, lo, hi, scratch, &from, &len, &at);
  out.mid = select_kth_avx512(from, len, at, &out.lo, scratch);
  if (odd) {
    std::size_t at_most = 0;  // a[k+1] = a[k] when k + 2 values are ≤ it
    const double above = least_above_avx512(from, len, out.mid, &at_most);
    out.hi = at_most >= at + 2 ? out.mid : above;
  }
  return true;
}

}  // namespace
#endif

bool vector_select_available() {
#if SF_VECTOR_SELECT
  return have_avx512();
#else
  return false;
#endif
}

namespace {

/// middle_of over a copy with the scalar quickselect. After select_kth every value past k is
/// ≥ a[k], so a[k+1] is the least of them.
Middle middle_portable(std::span<const double> x, SelectScratch& scratch) {
  Middle out;
  const std::size_t n = out.n = x.size(), k = n / 2;
  scratch.a.assign(x.begin(), x.end());
  double* a = scratch.a.data();
  out.mid = select_kth(a, n, k, k > 0 ? &out.lo : nullptr);
  if (n % 2 == 1 && n > 1) out.hi = *std::min_element(a + k + 1, a + n);
  return out;
}

/// Arrays this long or longer are sampled after a miss (sample_bracket): below it, sorting the
/// sample's places costs more than the whole selection a miss takes.
constexpr std::size_t kSampleFrom = std::size_t{1} << 16;

/// A bracket for x's middle read off a sample of it, for an array whose middle moved past last
/// time's guess: m values at evenly spaced places, and their order statistics 2·√m places either
/// side of the middle's place among them (its place wanders by √m / 2 between samples, so the
/// bracket misses about once in 10^4 arrays); an end past the sample's ends is open. About 4/√m
/// of x's values fall inside.
void bracket_of_sample(std::span<double> s, std::size_t n, double* lo, double* hi) {
  const std::size_t m = s.size();
  const std::size_t at = (n / 2) * m / n, delta = static_cast<std::size_t>(2.0 * std::sqrt(static_cast<double>(m))) + 1;
  *lo = -std::numeric_limits<double>::infinity();
  *hi = std::numeric_limits<double>::infinity();
  auto from = s.begin();  // past the lower end's place, every value is ≥ it
  if (at >= delta) {
    from += static_cast<std::ptrdiff_t>(at - delta);
    std::nth_element(s.begin(), from, s.end());
    *lo = *from;
  }
  if (at + delta < m) {
    const auto h = s.begin() + static_cast<std::ptrdiff_t>(at + delta);
    std::nth_element(from, h, s.end());
    *hi = *h;
  }
}

void sample_bracket(std::span<const double> x, SelectScratch& scratch, double* lo, double* hi) {
  const std::size_t n = x.size(), m = StreamedMiddle::sample_count(n);
  auto& s = scratch.sample;
  s.resize(m);
  for (std::size_t i = 0; i < m; ++i) s[i] = x[i * n / m];
  bracket_of_sample(s, n, lo, hi);
}

/// The bracket a hint sets for the next array: about 3·√n values of n (at least 32) inside it —
/// three standard deviations of the middle's drift between two independent draws of the same
/// spread (its position wanders by about √n / 2). After a miss the next bracket comes from a
/// sample (sample_bracket) until a middle lies again within half a width of the last: a middle
/// that moves every array by more than its spread (ranks that leave a collective together) is
/// then found in two passes, not a bracket's pass and a whole selection. Only the time depends on it.
void move_hint(MiddleHint& h, const Middle& m, bool hit, std::size_t inside, bool sampled, double lo, double hi) {
  const double want = std::max(32.0, 3.0 * std::sqrt(static_cast<double>(m.n)));
  const double floor = std::max(std::abs(m.mid) * 0x1p-40, std::numeric_limits<double>::min());
  if (sampled) {
    // The sampled bracket's count over its span says how densely the values lie about the middle.
    if (hit && std::isfinite(hi - lo) && inside > 0)
      h.width = std::min(std::max((hi - lo) * want / (2.0 * static_cast<double>(inside)), floor),
                         std::numeric_limits<double>::max());
    if (!hit) ++h.misses;
    h.sample = m.n >= kSampleFrom && (!hit || !(std::abs(m.mid - h.centre) <= h.width / 2));
    h.centre = m.mid;
    return;
  }
  if (h.width < 0) {
    // First array: the gaps around the middle say how far apart neighbouring values lie.
    const double gap = std::max(m.mid - m.lo, m.n % 2 == 1 ? m.hi - m.mid : 0.0);
    h.width = std::max(gap * want / 2, floor);
  } else if (!hit) {
    ++h.misses;
    h.sample = m.n >= kSampleFrom;
    h.width = std::min(std::max(h.width * 4, floor), std::numeric_limits<double>::max());
  } else {
    // The values kept say how densely they lie: scale the width towards `want` of them.
    const double scale = std::clamp(want / std::max(1.0, static_cast<double>(inside)), 0.5, 2.0);
    h.width = std::max(h.width * scale, floor);
  }
  h.centre = m.mid;
}

}  // namespace

Middle middle_of(std::span<const double> x, SelectScratch& scratch, MiddleHint* hint, SelectPath path,
                 const double* next) {
  const std::size_t n = x.size();
#if SF_VECTOR_SELECT
  if (path != SelectPath::portable && have_avx512() && n >= 64) {
    const std::size_t k = n / 2;
    const bool odd = n % 2 == 1;
    Middle out;
    out.n = n;
    std::size_t inside = 0;
    bool hit = false, sampled = false;
    double lo = 0, hi = 0;
    if (hint && hint->width >= 0) {
      scratch.keep.grow(n + 8);
      double* keep = scratch.keep.data();
      std::size_t below = 0;
      sampled = hint->sample;
      if (sampled) {
        sample_bracket(x, scratch, &lo, &hi);
      } else {
        lo = hint->centre - hint->width;
        hi = hint->centre + hint->width;
      }
      inside = next ? bracket_avx512<true>(x.data(), n, lo, hi, keep, &below, next)
                    : bracket_avx512<false>(x.data(), n, lo, hi, keep, &below, nullptr);
      hit = middle_from_kept(keep, inside, below, n, lo, hi, scratch, out);
    }
    if (!hit) {
      out.mid = select_kth_avx512(x.data(), n, k, &out.lo, scratch);
      if (odd) {
        std::size_t at_most = 0;
        const double above = least_above_avx512(x.data(), n, out.mid, &at_most);
        out.hi = at_most >= k + 2 ? out.mid : above;
      }
    }
    if (hint) move_hint(*hint, out, hit, inside, sampled, lo, hi);
    return out;
  }
#else
  (void)path;
  (void)next;
#endif
  (void)hint;  // the scalar path selects over every value: a bracket would not pay
  return middle_portable(x, scratch);
}

std::size_t StreamedMiddle::sample_count(std::size_t n) { return std::min<std::size_t>(n / 64, 1024); }

bool StreamedMiddle::begin(MiddleHint& hint, std::size_t n, std::span<double> sample) {
  hint_ = nullptr;
#if SF_VECTOR_SELECT
  if (!have_avx512() || n < 64 || hint.width < 0) return false;
  if (hint.sample && sample.size() != sample_count(n))
    throw std::logic_error("StreamedMiddle::begin: a sample of " + std::to_string(sample.size()) + " values, expected " +
                           std::to_string(sample_count(n)));
  hint_ = &hint;
  n_ = n;
  inside_ = below_ = 0;
  sampled_ = hint.sample;
  if (sampled_) {
    bracket_of_sample(sample, n, &lo_, &hi_);
  } else {
    lo_ = hint.centre - hint.width;
    hi_ = hint.centre + hint.width;
  }
  // Every value may fall inside: room for all n (pages are touched only as values are kept).
  if (cap_ < n + 8) {
    keep_ = std::make_unique_for_overwrite<double[]>(n + 8);
    cap_ = n + 8;
  }
  return true;
#else
  (void)n;
  (void)sample;
  (void)hint;
  return false;
#endif
}

void StreamedMiddle::add(const double* v, std::size_t len) {
#if SF_VECTOR_SELECT
  if (hint_ == nullptr) return;  // begin() was false: nothing to filter through
  std::size_t under = 0;
  inside_ += bracket_avx512<false>(v, len, lo_, hi_, keep_.get() + inside_, &under, nullptr);
  below_ += under;
#else
  (void)v;
  (void)len;
#endif
}

bool StreamedMiddle::finish(SelectScratch& scratch, Middle& out) {
  if (hint_ == nullptr) return false;
#if SF_VECTOR_SELECT
  out = Middle{};
  if (!middle_from_kept(keep_.get(), inside_, below_, n_, lo_, hi_, scratch, out)) return false;
  move_hint(*hint_, out, true, inside_, sampled_, lo_, hi_);
  return true;
#else
  (void)scratch;
  (void)out;
  return false;
#endif
}

double median_of(std::span<const double> x, SelectScratch& scratch, SelectPath path) {
  const std::size_t n = x.size();
#if SF_VECTOR_SELECT
  if (path != SelectPath::portable && have_avx512() && n >= 64) {
    if (n % 2 == 1) return select_kth_avx512(x.data(), n, n / 2, nullptr, scratch);
    double lo = 0;
    const double hi = select_kth_avx512(x.data(), n, n / 2, &lo, scratch);
    return lo + (hi - lo) / 2;
  }
#else
  (void)path;
#endif
  // A copy and quickselect (≈1.2 ns a value from 10^3 to 10^6 values here). A Floyd–Rivest
  // bracket pass was tried and measured slower at every size: without compress instructions,
  // copying the bracket's values costs a branch or a dependent store per value.
  scratch.a.assign(x.begin(), x.end());
  return median_inplace(scratch.a);
}

}  // namespace sf::frontier::detail
