// Medians over ranks: the labeler's largest per-step cost (cohort medians, the lag's median
// prefix, window medians), so a selection routine of its own.
#include "detail.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

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

/// The k-th smallest of x[0, n) (and the (k−1)-th in *lower), x left as it is. Long inputs take
/// one read-only pass instead of quickselect's three or four partitions over the whole range
/// (Floyd & Rivest 1975, "Expected time bounds for selection"): two pivots from an evenly
/// strided sample bracket the k-th with high probability, one branchless pass counts what lies
/// below the bracket and copies what lies inside it, and the selection goes on in that copy (a
/// few percent of x). When the bracket misses, or holds too much (heavy ties), x is copied and
/// quickselect takes over: the answer is the same either way, only the time differs.
double select_kth_copy(const double* x, std::size_t n, std::size_t k, double* lower, SelectScratch& scratch,
                       int depth = 0) {
  constexpr std::size_t kSampled = 1024;  // below this, copy and quickselect
  // Each level reads the previous level's copy and writes the other buffer.
  std::vector<double>& buf = depth % 2 == 0 ? scratch.a : scratch.b;
  if (n < kSampled || depth > 1) {
    buf.assign(x, x + n);
    return select_kth(buf.data(), n, k, lower);
  }
  // Sample size ~ n^(2/3)/2 (at least 128), bracket ± 2.5 standard deviations of the sample
  // rank of the k-th (sqrt(s·p·(1−p)) with p = k/n), so a miss is rare.
  const std::size_t s = std::clamp<std::size_t>(static_cast<std::size_t>(0.5 * std::cbrt(static_cast<double>(n) * static_cast<double>(n))), 128, 16384);
  std::vector<double>& sample = scratch.sample;
  sample.resize(s);
  const double stride = static_cast<double>(n) / static_cast<double>(s);
  for (std::size_t i = 0; i < s; ++i) sample[i] = x[static_cast<std::size_t>((static_cast<double>(i) + 0.5) * stride)];
  const double p = (static_cast<double>(k) + 0.5) / static_cast<double>(n);
  const double at = p * static_cast<double>(s);
  const double spread = 2.5 * std::sqrt(static_cast<double>(s) * p * (1 - p)) + 2;
  const auto lo_i = static_cast<std::size_t>(std::max(0.0, at - spread));
  const auto hi_i = static_cast<std::size_t>(std::min(static_cast<double>(s - 1), at + spread));
  std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(lo_i), sample.end());
  const double lo = sample[lo_i];
  std::nth_element(sample.begin() + static_cast<std::ptrdiff_t>(lo_i), sample.begin() + static_cast<std::ptrdiff_t>(hi_i), sample.end());
  const double hi = sample[hi_i];
  // One pass without branches (the data decide nothing but counts): below = #{x < lo} and
  // buf = {lo ≤ x ≤ hi} in order.
  buf.resize(n);
  double* out = buf.data();
  std::size_t below = 0, inside = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    below += static_cast<std::size_t>(v < lo);
    out[inside] = v;
    inside += static_cast<std::size_t>(v >= lo) & static_cast<std::size_t>(v <= hi);
  }
  // The k-th (and the (k−1)-th when asked) must lie in the bracket.
  const std::size_t need = lower != nullptr ? 1 : 0;
  if (below + need <= k && k < below + inside && inside < n / 2)
    return select_kth_copy(out, inside, k - below, lower, scratch, depth + 1);
  buf.assign(x, x + n);
  return select_kth(buf.data(), n, k, lower);
}

}  // namespace

double median_inplace(std::vector<double>& v) {
  const std::size_t n = v.size();
  if (n % 2 == 1) return select_kth(v.data(), n, n / 2, nullptr);
  double lo = 0;
  const double hi = select_kth(v.data(), n, n / 2, &lo);
  return lo + (hi - lo) / 2;
}

double median_of(std::span<const double> x, SelectScratch& scratch) {
  const std::size_t n = x.size();
  if (n % 2 == 1) return select_kth_copy(x.data(), n, n / 2, nullptr, scratch);
  double lo = 0;
  const double hi = select_kth_copy(x.data(), n, n / 2, &lo, scratch);
  return lo + (hi - lo) / 2;
}

}  // namespace sf::frontier::detail
