// White-box check of the labeler's selection routine (a hand-written branchless quickselect
// replaced std::nth_element for speed): every median it returns must equal the sorted one.
#include "frontier/detail.h"
#include "sf/frontier/frontier.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

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
  RC_ASSERT(sf::frontier::median_inplace(v) == want);
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
    for (auto v : cases) EXPECT_EQ(sf::frontier::median_inplace(v), sorted_median(v)) << n;
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

// middle_of: the order statistics a[k−1], a[k], a[k+1] (k = n/2) that the cohort medians, the
// lag's medians and the standings' leave-one-out medians read, with and without a hint, on both
// paths. A series of arrays through one hint — the same spread drifting, then jumping far away,
// then collapsing to ties — crosses the bracket's hits and misses, the sampled brackets that
// follow a miss on long arrays (2^16 values and more) and the bracket holding copies of one value
// only; every answer must be the sorted array's, whatever the hint.
namespace {
void expect_middle(const std::vector<double>& v, const sf::frontier::detail::Middle& m) {
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size(), k = n / 2;
  RC_ASSERT(m.n == n);
  RC_ASSERT(m.mid == s[k]);
  RC_ASSERT(m.lo == (n >= 2 ? s[k - 1] : 0.0));
  RC_ASSERT(m.hi == (n % 2 == 1 && n > 1 ? s[k + 1] : 0.0));
  RC_ASSERT(m.median() == sorted_median(v));
}
}  // namespace

RC_GTEST_PROP(Median, middle_of_is_the_sorted_middle_whatever_the_hint, ()) {
  using sf::frontier::detail::SelectPath;
  const auto n = *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 100), rc::gen::inRange<std::size_t>(100, 5000));
  const auto steps = *rc::gen::inRange(1, 12);
  const auto distinct = *rc::gen::oneOf(rc::gen::inRange(1, 8), rc::gen::inRange(8, 1000000));
  sf::frontier::detail::SelectScratch scratch;
  sf::frontier::detail::MiddleHint fast, portable;
  for (int t = 0; t < steps; ++t) {
    const auto kind = *rc::gen::inRange(0, 4);  // 0, 1: drift; 2: far away; 3: all ties
    const double shift = kind == 2 ? *rc::gen::inRange(-1000, 1000) * 1.0 : t * 0.01;
    std::vector<double> v = *rc::gen::container<std::vector<double>>(
        n, rc::gen::map(rc::gen::inRange(0, distinct), [&](int x) { return kind == 3 ? 0.5 : shift + x * 0.001; }));
    const auto before = v;
    expect_middle(v, sf::frontier::detail::middle_of(v, scratch, &fast, SelectPath::fastest));
    expect_middle(v, sf::frontier::detail::middle_of(v, scratch, &portable, SelectPath::portable));
    expect_middle(v, sf::frontier::detail::middle_of(v, scratch));
    RC_ASSERT(v == before);
  }
}

// Any guess at all over arrays of a few distinct values: the bracket then keeps copies of one
// value, or of several in any arrangement (first and last kept alike with others between them),
// or misses; the answer is the sorted array's in every case.
RC_GTEST_PROP(Median, middle_of_is_the_sorted_middle_from_any_bracket_over_few_values, ()) {
  using sf::frontier::detail::SelectPath;
  const auto n = *rc::gen::inRange<std::size_t>(64, 3000);
  const auto values = *rc::gen::container<std::vector<int>>(n, rc::gen::inRange(0, *rc::gen::inRange(1, 5)));
  std::vector<double> v(values.begin(), values.end());
  sf::frontier::detail::SelectScratch scratch;
  sf::frontier::detail::MiddleHint hint;
  hint.centre = *rc::gen::inRange(-1, 5) + *rc::gen::element(0.0, 0.25, 0.5);
  hint.width = *rc::gen::element(0.0, 0.1, 0.5, 1.0, 2.5, 10.0);
  hint.sample = false;
  expect_middle(v, sf::frontier::detail::middle_of(v, scratch, &hint, SelectPath::fastest));
}

// A hinted bracket that keeps 48 to 400 values (where middle_of narrows it again about the place
// evenly spread values would put the middle) spread any way inside it: evenly, bunched at one end
// (the narrowed bracket then misses the middle's place), in two bunches, or in a few tied values;
// the values outside it on both sides in any proportion that leaves the middle inside. The
// answer is the sorted array's in every case.
RC_GTEST_PROP(Median, middle_of_is_the_sorted_middle_however_the_bracket_spreads_its_values, ()) {
  using sf::frontier::detail::SelectPath;
  const auto inside = *rc::gen::inRange<std::size_t>(48, 400);
  const auto outside = *rc::gen::inRange<std::size_t>(16, 3000);
  // Below the bracket: enough that the middle falls among the kept (k − 1 … k + 1 inside).
  const std::size_t n = inside + outside, k = n / 2;
  const std::size_t below_min = k + 2 > inside ? k + 2 - inside : 0, below_max = std::min(outside, k - 1);
  RC_PRE(below_min <= below_max);
  const auto below = *rc::gen::inRange(below_min, below_max + 1);
  const double lo = 10.0, hi = 11.0;
  const auto shape = *rc::gen::inRange(0, 5);
  std::vector<double> v;
  for (std::size_t i = 0; i < below; ++i) v.push_back(lo - 1.0 - *rc::gen::inRange(0, 1000) * 0.001);
  for (std::size_t i = 0; i < outside - below; ++i) v.push_back(hi + 1.0 + *rc::gen::inRange(0, 1000) * 0.001);
  for (std::size_t i = 0; i < inside; ++i) {
    const double u = *rc::gen::inRange(0, 100000) * 1e-5;  // [0, 1)
    switch (shape) {
      case 0: v.push_back(lo + u); break;                               // evenly
      case 1: v.push_back(lo + 0.02 * u); break;                        // bunched at the low end
      case 2: v.push_back(hi - 0.02 * u); break;                        // bunched at the high end
      case 3: v.push_back(i % 2 ? lo + 0.01 * u : hi - 0.01 * u); break;  // two bunches
      default: v.push_back(lo + 0.25 * *rc::gen::inRange(0, 4)); break;  // a few tied values
    }
  }
  const auto order = *rc::gen::container<std::vector<int>>(n, rc::gen::inRange(0, 1 << 30));  // a shuffle
  std::vector<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return order[a] < order[b]; });
  std::vector<double> shuffled(n);
  for (std::size_t i = 0; i < n; ++i) shuffled[i] = v[idx[i]];
  sf::frontier::detail::SelectScratch scratch;
  sf::frontier::detail::MiddleHint hint;
  hint.centre = (lo + hi) / 2;
  hint.width = (hi - lo) / 2;
  hint.sample = false;
  expect_middle(shuffled, sf::frontier::detail::middle_of(shuffled, scratch, &hint, SelectPath::fastest));
}

// The same on long arrays (2^16 values and more, where a miss turns the guess to a sample): each
// array drifts, jumps, is one value throughout, mostly one value with the rest above it, or a
// narrow spike far from the last, in sequences drawn from a seed. (A plain loop over seeds, not a
// property: ten thousand cases of 10^5 values would take minutes, and a seed is all a failure
// needs to be replayed.)
TEST(Median, middle_of_long_arrays_is_the_sorted_middle_whatever_the_hint) {
  using sf::frontier::detail::SelectPath;
  for (std::uint64_t seed = 1; seed <= 48; ++seed) {
    std::uint64_t state = seed;
    auto uniform = [&] {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<double>(state >> 11) * 0x1p-53;
    };
    const auto n = static_cast<std::size_t>(65530 + uniform() * 4470);
    const int steps = 1 + static_cast<int>(uniform() * 6);
    sf::frontier::detail::SelectScratch scratch;
    sf::frontier::detail::MiddleHint hint;
    std::vector<double> v(n), s;
    for (int t = 0; t < steps; ++t) {
      const int kind = static_cast<int>(uniform() * 5);
      const double at = std::floor(uniform() * 1000) * 0.001;
      for (auto& x : v) {
        switch (kind) {
          case 0: x = 0.01 * t + 0.001 * std::floor(uniform() * 1000); break;  // drift
          case 1: x = 1000 * at + uniform(); break;                            // far away
          case 2: x = 0.5; break;                                              // one value
          case 3: x = uniform() < 0.6 ? at : at + uniform(); break;            // mostly one value
          default: x = at + 1e-6 * uniform(); break;                           // a narrow spike
        }
      }
      const auto m = sf::frontier::detail::middle_of(v, scratch, &hint, SelectPath::fastest);
      s = v;
      std::sort(s.begin(), s.end());
      const std::size_t k = n / 2;
      ASSERT_EQ(m.mid, s[k]) << "seed " << seed << " step " << t << " kind " << kind;
      ASSERT_EQ(m.lo, s[k - 1]) << "seed " << seed << " step " << t << " kind " << kind;
      ASSERT_EQ(m.hi, n % 2 == 1 ? s[k + 1] : 0.0) << "seed " << seed << " step " << t << " kind " << kind;
    }
  }
}

// The guess that follows a middle from array to array on long arrays (the model's columns at 10^5
// ranks and more): a spike of near-equal values that moves by far more than its own width every
// array misses the last array's bracket once, and from then on the bracket read off a sample of
// each array holds its middle (no further miss) — while the answers stay the sorted ones; an
// array whose middle stays put takes the cheap guess again after one sampled bracket; a column
// mostly of one value (a stage most ranks spend none of) is answered from the copies alone.
TEST(Median, a_middle_that_moves_every_array_is_found_through_a_sample) {
  using sf::frontier::detail::middle_of;
  if (!sf::frontier::detail::vector_select_available()) {
    GTEST_SKIP() << "the hinted path needs AVX-512";
  }
  const std::size_t n = 100001;
  sf::frontier::detail::SelectScratch scratch;
  sf::frontier::detail::MiddleHint hint;
  std::uint64_t state = 12345;
  auto noise = [&] {  // a small LCG: the same arrays on every platform
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1p-53;
  };
  auto check = [&](const std::vector<double>& v) {
    const auto m = middle_of(v, scratch, &hint);
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    EXPECT_EQ(m.lo, s[n / 2 - 1]);
    EXPECT_EQ(m.mid, s[n / 2]);
    EXPECT_EQ(m.hi, s[n / 2 + 1]);
  };
  std::vector<double> v(n);
  for (int t = 0; t < 8; ++t) {
    // 0.3 s + t·2 ms, each rank within 10 µs of it: the spike moves 200 widths per array.
    for (auto& x : v) x = 0.3 + 0.002 * t + 1e-5 * noise();
    check(v);
    if (t == 1) {
      EXPECT_TRUE(hint.sample) << "a miss on a long array turns to sampling";
    }
  }
  EXPECT_EQ(hint.misses, 1u) << "only the first moved array misses; every sampled bracket holds the middle";
  EXPECT_TRUE(hint.sample) << "the middle kept moving: the guess stays on the sample";
  check(v);  // the same array again: the middle did not move
  EXPECT_FALSE(hint.sample) << "a middle within half a width of the last takes the cheap guess again";
  // Two thirds copies of 0.25, the rest spread above it, then the copies jump to 0.75.
  for (double atom : {0.25, 0.75}) {
    for (std::size_t i = 0; i < n; ++i) v[i] = i % 3 == 0 ? atom + noise() : atom;
    check(v);
    check(v);
  }
  EXPECT_EQ(hint.misses, 3u) << "each jump (onto the copies, then with them) misses once; the sampled bracket after it holds them";
}

// MedianKeeper: the run-level medians of an always-on run in bounded memory (issue 16, item 2).
namespace {
using sf::frontier::detail::MedianKeeper;
constexpr double kBinRel = 0.00034;  // half a log2 bin of 1/1024 octave: 2^(0.5/1024) - 1 < 3.4e-4
}  // namespace

RC_GTEST_PROP(MedianKeeper, is_median_inplace_to_the_bit_up_to_its_cap, ()) {
  const auto cap = *rc::gen::inRange<std::size_t>(1, 300);
  const auto n = *rc::gen::inRange<std::size_t>(1, cap + 1);
  std::vector<double> v = *rc::gen::container<std::vector<double>>(
      n, rc::gen::map(rc::gen::inRange(0, 100000), [](int x) { return x * 1e-5; }));
  MedianKeeper k(cap);
  for (double x : v) k.add(x);
  RC_ASSERT(k.exact());
  RC_ASSERT(k.count() == n);
  RC_ASSERT(k.median() == sorted_median(v));
}

RC_GTEST_PROP(MedianKeeper, past_its_cap_is_within_half_a_bin_of_the_median, ()) {
  const auto cap = *rc::gen::inRange<std::size_t>(1, 64);
  const auto n = *rc::gen::inRange<std::size_t>(cap + 1, 3000);
  const auto zeros = *rc::gen::inRange<std::size_t>(0, n / 3 + 1);
  std::vector<double> v = *rc::gen::container<std::vector<double>>(
      n, rc::gen::map(rc::gen::inRange(1, 1000000), [](int x) { return 0.001 + x * 1e-6; }));
  for (std::size_t i = 0; i < zeros; ++i) v[i * 3 % n] = 0.0;
  MedianKeeper k(cap);
  for (double x : v) k.add(x);
  RC_ASSERT(!k.exact());
  RC_ASSERT(k.count() == n);
  // Each middle value is read back as its bin's midpoint (within kBinRel of it) or exactly 0, so
  // the median moves by at most kBinRel of the larger middle value.
  std::sort(v.begin(), v.end());
  const double want = sorted_median(v);
  const double scale = v[n / 2];
  RC_ASSERT(std::abs(k.median() - want) <= kBinRel * scale);
}

TEST(MedianKeeper, memory_does_not_grow_with_the_count) {
  // Step times around 200 ms with ±20 % spread: 10^4 and 10^6 values use the same bins, and the
  // bins are bounded by the spread (log2(1.5) * 1024 = 599), never by the count.
  MedianKeeper k(4096);
  std::size_t bins_at_1e4 = 0;
  std::uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 1000000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    const double u = static_cast<double>(x >> 11) * 0x1.0p-53;
    k.add(0.2 * (0.8 + 0.4 * u));
    if (i + 1 == 10000) bins_at_1e4 = k.bins();
  }
  EXPECT_FALSE(k.exact());
  EXPECT_EQ(k.count(), 1000000u);
  EXPECT_LE(k.bins(), 600u);
  EXPECT_EQ(k.bins(), bins_at_1e4);  // every bin of the spread is hit within 10^4 values
  EXPECT_NEAR(k.median(), 0.2, 0.2 * 0.01);
}

TEST(MedianKeeper, zero_cap_keeps_every_value_and_empty_is_zero) {
  MedianKeeper k;
  EXPECT_EQ(k.median(), 0.0);
  for (int i = 0; i < 10000; ++i) k.add(i);
  EXPECT_TRUE(k.exact());
  EXPECT_EQ(k.median(), 4999.5);
  MedianKeeper z(2);
  for (int i = 0; i < 5; ++i) z.add(0.0);
  z.add(1.0);
  EXPECT_FALSE(z.exact());
  EXPECT_EQ(z.median(), 0.0);  // the zero bin is exact
}

// ZeroArray: the accumulators' per-(group, rank) sums of 10^6 ranks, most of which stay zero
// (issue 16, item 3: page faults and memset of those arrays were ~13 % of `sim` at 10^6 ranks).
namespace {
/// Resident set of this process in bytes (/proc/self/statm's second field, in pages).
std::int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return got == 2 ? static_cast<std::int64_t>(resident) * 4096 : -1;
}
}  // namespace

TEST(ZeroArray, reads_zero_and_holds_no_memory_until_written) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer allocators keep their own shadow of every allocation";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
  GTEST_SKIP() << "sanitizer allocators keep their own shadow of every allocation";
#endif
#endif
  using sf::frontier::detail::ZeroArray;
  constexpr std::size_t kBytes = std::size_t{512} << 20;  // what a std::vector<double>(n) would write
  const std::int64_t before = resident_bytes();
  ASSERT_GT(before, 0);
  ZeroArray<double> a(kBytes / sizeof(double));
  EXPECT_EQ(a.size(), kBytes / sizeof(double));
  EXPECT_LT(resident_bytes() - before, std::int64_t{32} << 20);  // not written: not resident
  // Writing one value per 4 KiB in a sixteenth of it makes that sixteenth resident, no more.
  for (std::size_t i = 0; i < a.size() / 16; i += 512) a[i] = 1.0;
  const std::int64_t written = resident_bytes() - before;
  EXPECT_GE(written, std::int64_t{30} << 20);
  EXPECT_LT(written, std::int64_t{64} << 20);
  // Every value reads 0 except those written, in pages touched and untouched alike: the
  // written indices are even, the sampled ones odd, one every ~4 KiB.
  std::size_t nonzero = 0, ones = 0;
  for (std::size_t i = 1; i < a.size(); i += 510) nonzero += a[i] != 0;
  for (std::size_t i = 0; i < a.size() / 16; i += 512) ones += a[i] == 1.0;
  EXPECT_EQ(nonzero, 0u);
  EXPECT_EQ(ones, a.size() / 16 / 512);
  EXPECT_EQ(a[512], 1.0);
  EXPECT_EQ(a[513], 0.0);
}

TEST(ZeroArray, empty_and_moved) {
  using sf::frontier::detail::ZeroArray;
  ZeroArray<int> none(0);
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.begin(), none.end());
  ZeroArray<int> a(1000);
  a[999] = 7;
  ZeroArray<int> b = std::move(a);
  EXPECT_EQ(b.size(), 1000u);
  EXPECT_EQ(b[999], 7);
  EXPECT_EQ(b[0], 0);
}

TEST(MedianKeeperRobust, one_stalled_step_of_six_does_not_set_the_spread) {
  MedianKeeper k;
  for (double x : {0.200, 0.201, 0.199, 0.200, 0.202, 0.900}) k.add(x);
  EXPECT_GT(k.robust_sd(), 0.0);
  EXPECT_LT(k.robust_sd(), 0.003);
  MedianKeeper three;
  for (double x : {0.2, 0.3, 0.4}) three.add(x);
  EXPECT_EQ(three.robust_sd(), -1.0);
}

// The what-if's arrival log: each logged step's latest arrivals are the k = min(8, n) largest
// totals (each rank's own work over the step), largest first, ties to the lower rank — a
// brute-force sort beside evaluate()'s selection (on AVX-512 a lane-maxima bar and a pass over
// what reaches it). Few distinct values make ties at the k-th place common; some ranks miss a
// step; groups of one stage and of two take the two ways the totals are formed.
RC_GTEST_PROP(Arrivals, latest_are_the_largest_totals_ties_to_the_lower_rank, ()) {
  using namespace sf::frontier;
  const int n = *rc::gen::oneOf(rc::gen::inRange(2, 40), rc::gen::inRange(40, 1500));
  const int steps = *rc::gen::inRange(1, 4);
  const int distinct = *rc::gen::oneOf(rc::gen::inRange(1, 5), rc::gen::inRange(5, 100000));
  const bool two_stage_group = *rc::gen::arbitrary<bool>();
  const std::vector<std::string> names =
      two_stage_group ? std::vector<std::string>{"a.x", "b.x", "b.y"} : std::vector<std::string>{"a.x", "b.x", "c.x"};
  StageMatrix m(StageSchema(names, false), n, 0, steps);
  const int absent_every = *rc::gen::oneOf(rc::gen::just(0), rc::gen::inRange(2, 9));
  std::vector<std::vector<double>> total(steps, std::vector<double>(n, -1.0));  // −1: absent
  for (int t = 0; t < steps; ++t)
    for (int r = 0; r < n; ++r) {
      if (absent_every > 0 && (r + t) % absent_every == 0) continue;
      std::vector<double> d(names.size());
      double sum = 0;
      for (double& v : d) sum += v = *rc::gen::inRange(0, distinct) * 0.25;  // exact in any order
      m.set_record(t, r, d, std::nullopt);
      total[t][r] = sum;
    }
  const Evidence e = evaluate(m);
  std::size_t logged = 0;
  for (int t = 0; t < steps; ++t) {
    std::vector<int> present;
    for (int r = 0; r < n; ++r)
      if (total[t][r] >= 0) present.push_back(r);
    if (present.size() < 2) continue;  // a rank alone has no peers: nothing logged
    std::stable_sort(present.begin(), present.end(), [&](int a, int b) { return total[t][a] > total[t][b]; });
    RC_ASSERT(logged < e.arrivals.steps.size());
    const StepArrivals& a = e.arrivals.steps[logged++];
    RC_ASSERT(a.count == 1u);  // no sync wait: one segment, the whole step
    const ArrivalSegment& sg = e.arrivals.segments[a.first];
    const int k = std::min<int>(ArrivalSegment::kTop, static_cast<int>(present.size()));
    RC_ASSERT(sg.top_count == k);
    for (int j = 0; j < k; ++j) {
      RC_ASSERT(sg.top_rank[j] == present[j]);
      RC_ASSERT(sg.top_s[j] == static_cast<float>(total[t][present[j]]));
    }
  }
  RC_ASSERT(logged == e.arrivals.steps.size());
}
