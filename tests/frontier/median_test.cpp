// White-box check of the labeler's selection routine (a hand-written branchless quickselect
// replaced std::nth_element for speed): every median it returns must equal the sorted one.
#include "frontier/detail.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <iostream>

namespace {

double sorted_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : v[n / 2 - 1] + (v[n / 2] - v[n / 2 - 1]) / 2;
}

}  // namespace

RC_GTEST_PROP(Median, equals_the_sorted_median_with_ties_and_long_inputs, ()) {
  const auto n = *rc::gen::inRange<std::size_t>(1, 700);  // crosses the small-range and ninther cut-overs
  const auto distinct = *rc::gen::inRange(1, 50);         // few distinct values: many ties
  std::vector<double> v = *rc::gen::container<std::vector<double>>(
      n, rc::gen::map(rc::gen::inRange(0, distinct), [](int x) { return x * 0.25; }));
  const double want = sorted_median(v);
  RC_ASSERT(sf::frontier::detail::median_inplace(v) == want);
}

TEST(Median, adversarial_patterns) {
  for (std::size_t n : {1u, 2u, 3u, 33u, 129u, 1000u, 4097u}) {
    std::vector<std::vector<double>> cases(4, std::vector<double>(n));
    for (std::size_t i = 0; i < n; ++i) {
      cases[0][i] = static_cast<double>(i);          // sorted
      cases[1][i] = static_cast<double>(n - i);      // reversed
      cases[2][i] = 1.0;                             // all equal
      cases[3][i] = static_cast<double>(i % 2 ? i : n - i);  // organ pipe
    }
    for (auto v : cases) EXPECT_EQ(sf::frontier::detail::median_inplace(v), sorted_median(v)) << n;
  }
}

// median_of: the read-only selection the labeler uses per step, on both its paths (AVX-512
// compress splits where the processor has them, the scalar quickselect otherwise): each must give
// the sorted median and leave the input as it was — long and short inputs, few distinct values
// (the pivot is often the range's smallest key), sorted and reversed runs.
RC_GTEST_PROP(Median, median_of_equals_the_sorted_median_on_both_paths, ()) {
  using sf::frontier::detail::SelectPath;
  const auto n = *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 300), rc::gen::inRange<std::size_t>(300, 30000));
  const auto distinct = *rc::gen::oneOf(rc::gen::inRange(1, 8), rc::gen::inRange(8, 1000000));
  const auto pattern = *rc::gen::inRange(0, 3);
  std::vector<double> v = *rc::gen::container<std::vector<double>>(
      n, rc::gen::map(rc::gen::inRange(0, distinct), [](int x) { return x * 0.001; }));
  if (pattern == 1) std::sort(v.begin(), v.end());
  if (pattern == 2) std::sort(v.rbegin(), v.rend());
  const auto before = v;
  const double want = sorted_median(v);
  sf::frontier::detail::SelectScratch scratch;
  RC_ASSERT(sf::frontier::detail::median_of(v, scratch, SelectPath::portable) == want);
  RC_ASSERT(sf::frontier::detail::median_of(v, scratch, SelectPath::fastest) == want);
  RC_ASSERT(sf::frontier::detail::median_of(v, scratch, SelectPath::fastest) == want);  // scratch reused
  RC_ASSERT(v == before);
}

TEST(Median, median_of_adversarial_long_patterns_on_both_paths) {
  using sf::frontier::detail::SelectPath;
  if (!sf::frontier::detail::vector_select_available()) std::cout << "[ note ] no AVX-512 here: both runs are the scalar path\n";
  sf::frontier::detail::SelectScratch scratch;
  for (std::size_t n : {63u, 64u, 65u, 1023u, 1024u, 1025u, 4096u, 100001u}) {
    std::vector<std::vector<double>> cases(7, std::vector<double>(n));
    for (std::size_t i = 0; i < n; ++i) {
      cases[0][i] = static_cast<double>(i);                         // sorted
      cases[1][i] = static_cast<double>(n - i);                     // reversed
      cases[2][i] = 1.0;                                            // all equal
      cases[3][i] = static_cast<double>(i % 2 ? i : n - i);         // organ pipe
      cases[4][i] = i < n / 2 ? 0.0 : static_cast<double>(i);       // half ties at the bottom
      cases[5][i] = static_cast<double>((i * 7919) % 97);           // few values, scattered
      cases[6][i] = i == n / 2 ? 1e300 : 1e-300 * static_cast<double>(i % 5);  // extremes
    }
    for (const auto& v : cases)
      for (auto path : {SelectPath::portable, SelectPath::fastest})
        EXPECT_EQ(sf::frontier::detail::median_of(v, scratch, path), sorted_median(v)) << n;
  }
}
