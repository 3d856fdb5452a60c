// Medians over ranks: the labeler's largest per-step cost (cohort medians, the lag's median
// prefix, window medians), so a selection routine of its own.
#include "detail.h"

#include <algorithm>
#include <bit>
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

}  // namespace

double median_inplace(std::vector<double>& v) {
  const std::size_t n = v.size();
  if (n % 2 == 1) return select_kth(v.data(), n, n / 2, nullptr);
  double lo = 0;
  const double hi = select_kth(v.data(), n, n / 2, &lo);
  return lo + (hi - lo) / 2;
}

}  // namespace sf::frontier::detail
