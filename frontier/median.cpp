// Medians over ranks: the labeler's largest per-step cost (cohort medians, the lag's median
// prefix, window medians), so a selection routine of its own.
#include "detail.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SF_VECTOR_SELECT 1
#include <immintrin.h>
#else
#define SF_VECTOR_SELECT 0
#endif

namespace sf::frontier::detail {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

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
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, mx);
  double top = *std::max_element(lanes, lanes + 8);
  for (; i < n; ++i) {
    const double v = src[i];
    if (v < pivot) {
      lt[nl++] = v;
      top = std::max(top, v);
    } else {
      ge[ng++] = v;
    }
  }
  *n_ge = ng;
  *lt_max = top;
  return nl;
}

double median_of_three(double a, double b, double c) { return std::max(std::min(a, b), std::min(std::max(a, b), c)); }

/// The k-th smallest of x[0, n), and the (k−1)-th in *lower when asked (0 < k), x left as it
/// is: quickselect out of place, each round splitting the range into three rotating buffers of
/// scratch with split_avx512. Same answers as select_kth.
__attribute__((target("avx512f,popcnt"))) double select_kth_avx512(const double* x, std::size_t n, std::size_t k,
                                                                   double* lower, SelectScratch& scratch) {
  for (auto* b : {&scratch.a, &scratch.b, &scratch.c})
    if (b->size() < n + 8) b->resize(n + 8);
  double* bufs[3] = {scratch.a.data(), scratch.b.data(), scratch.c.data()};
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
  // The last few (or a range that would not shrink): select_kth on a copy.
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

}  // namespace
#endif

bool vector_select_available() {
#if SF_VECTOR_SELECT
  return have_avx512();
#else
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
