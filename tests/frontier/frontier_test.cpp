#include "frontier/detail.h"
#include "sf/frontier/frontier.h"
#include "sf/verify/verify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <cmath>

using namespace sf::frontier;

namespace {

StageMatrix three_stage(const std::vector<std::vector<double>>& ranks) {
  StageMatrix m(StageSchema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"}, false),
                static_cast<int>(ranks.size()), 0, 1);
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) m.set_record(0, r, ranks[r], std::nullopt);
  return m;
}

/// One step whose records close (wall = Σ d, so the residual is 0): the closure gates pass.
StageMatrix one_step(const std::vector<std::string>& stages, const std::vector<std::vector<double>>& ranks,
                     int accumulation = 1) {
  StageMatrix m(StageSchema(stages, true, accumulation), static_cast<int>(ranks.size()), 0, 1);
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    double sum = 0;
    for (double v : ranks[r]) sum += v;
    m.set_record(0, r, ranks[r], sum);
  }
  return m;
}

/// Stage a is slow (5 s against 1 s) on rank t % 2 at step t: one stage clearly leads, and two
/// ranks take turns leading it (closed records).
StageMatrix alternating_leaders() {
  StageMatrix m(StageSchema({"a", "b"}, true), 2, 0, 4);
  for (int t = 0; t < 4; ++t)
    for (int r = 0; r < 2; ++r) m.set_record(t, r, std::vector<double>{r == t % 2 ? 5.0 : 1.0, 1.0}, r == t % 2 ? 6.0 : 2.0);
  return m;
}

std::vector<std::string> names(const Evidence& e, const std::vector<int>& g) {
  std::vector<std::string> out;
  for (int x : g) out.push_back(e.group_name(x));
  return out;
}

/// A synchronous window from the project's one builder: `slow` gets `delay` in `stage`;
/// everybody waits at the end of backward (when `sync`) or runs independently. Default
/// six-stage schema with a ~0.75% residual.
StageMatrix sync_window(int ranks, int steps, int slow, int stage, double delay, bool sync = true) {
  sf::verify::WindowSpec spec;
  spec.ranks = ranks;
  spec.steps = steps;
  spec.first_step = 100;
  spec.base_s = {0.010, 0.040, 0.120, 0.005, 0.020};
  spec.jitter_rel = 0.02;
  spec.residual_rel = 0.005;
  spec.slow_rank = slow;
  spec.slow_stage = stage;
  spec.delay_s = delay;
  spec.sync_backward = sync;
  return sf::verify::build_window(spec);
}

}  // namespace

TEST(Schema, default_has_six_ordered_stages_and_stable_hash) {
  const auto s = StageSchema::default_schema();
  ASSERT_EQ(s.size(), 6);
  EXPECT_EQ(s.name(0), "data.next_wait");
  EXPECT_EQ(s.name(5), "step.other_cpu_wall");
  EXPECT_EQ(s.residual_index(), 5);
  EXPECT_EQ(s.order_hash(), StageSchema::default_schema().order_hash());
  auto swapped = default_explicit_stages();
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(StageSchema(swapped, true).order_hash(), s.order_hash());  // order is identity
  EXPECT_EQ(s.order_hash_hex().size(), 16u);
}

TEST(Schema, rejects_bad_stage_lists) {
  EXPECT_THROW(StageSchema({}, true), std::invalid_argument);
  EXPECT_THROW(StageSchema({"a", "a"}, true), std::invalid_argument);
  EXPECT_THROW(StageSchema({"a", std::string(kResidualStage)}, true), std::invalid_argument);
  EXPECT_THROW(StageSchema({"a"}, true, 0), std::invalid_argument);
}

TEST(Schema, microstep_names_form_reporting_groups) {
  const StageSchema s({"data#0", "bwd#0", "data#1", "bwd#1", "optim"}, true, 2);
  EXPECT_TRUE(s.microstep_expanded());
  ASSERT_EQ(s.group_count(), 4);  // data, bwd, optim, residual
  EXPECT_EQ(s.groups()[0], "data");
  EXPECT_EQ(s.group_of(2), 0);
  EXPECT_EQ(s.group_of(3), 1);
}

TEST(StageMatrix, residual_and_overlap_come_from_wall) {
  StageMatrix m(StageSchema({"a", "b"}, true), 2, 0, 1);
  m.set_record(0, 0, std::vector<double>{1.0, 2.0}, 3.5);
  m.set_record(0, 1, std::vector<double>{1.0, 2.0}, 2.0);
  EXPECT_DOUBLE_EQ(m.d(0, 0, 2), 0.5);   // residual = w − Σ
  EXPECT_DOUBLE_EQ(m.overlap(0, 0), 0.0);
  EXPECT_DOUBLE_EQ(m.d(0, 1, 2), 0.0);   // never negative
  EXPECT_DOUBLE_EQ(m.overlap(0, 1), 1.0);
  EXPECT_THROW(m.set_record(0, 0, std::vector<double>{1.0, -1.0}, 3.0), std::invalid_argument);
  EXPECT_THROW(m.set_record(0, 0, std::vector<double>{1.0, NAN}, 3.0), std::invalid_argument);
  EXPECT_THROW(m.set_record(0, 0, std::vector<double>{1.0}, 3.0), std::invalid_argument);
  EXPECT_THROW(m.set_record(0, 0, std::vector<double>{1.0, 1.0}, std::nullopt), std::invalid_argument);
  EXPECT_THROW(m.set_record(0, 2, std::vector<double>{1.0, 1.0}, 3.0), std::invalid_argument);
}

// begin_step/commit_step write a whole row in place (the model's 10^6-rank steps): the row must
// equal set_record rank by rank — durations, residual, overlap, wall, presence, the window's
// recorded time — replacing whatever the row held (records and side evidence), and a bad value
// must leave the row without records and say which rank.
TEST(StageMatrix, a_row_written_in_place_equals_set_record_rank_by_rank) {
  const StageSchema schema({"a", "b", "c"}, true);
  const std::vector<std::vector<double>> d = {{1.0, 2.0, 0.5}, {0.25, 0.0, 3.0}, {2.0, 2.0, 2.0}, {0.0, 0.0, 0.0}};
  const std::vector<double> wall = {4.0, 3.0, 5.5, 0.125};  // rank 1: overlap error; rank 2: overlap 0.5
  StageMatrix by_record(schema, 4, 7, 2), in_place(schema, 4, 7, 2);
  for (int r = 0; r < 4; ++r) {
    by_record.set_record(1, r, d[r], wall[r]);
    by_record.set_record(0, r, std::vector<double>{9.0, 9.0, 9.0}, 30.0);
    in_place.set_record(0, r, std::vector<double>{9.0, 9.0, 9.0}, 30.0);
    in_place.set_record(1, r, std::vector<double>{5.0, 5.0, 5.0}, 15.0);  // replaced below
  }
  in_place.set_sync_wait(1, 2, 1, 0.5);  // side evidence of the old row goes with it
  in_place.set_fwd_event(1, 3, EventState::ready, 0.25);
  auto cols = in_place.begin_step(1);
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(in_place.step_present_count(1), 0);
  for (int s = 0; s < 3; ++s)
    for (int r = 0; r < 4; ++r) cols[s][r] = d[r][s];
  in_place.commit_step(1, wall.data());
  EXPECT_EQ(in_place.step_present_count(1), 4);
  EXPECT_DOUBLE_EQ(in_place.total_seconds(), by_record.total_seconds());
  for (int r = 0; r < 4; ++r) {
    for (int s = 0; s < 4; ++s) EXPECT_EQ(in_place.d(1, r, s), by_record.d(1, r, s)) << r << " " << s;
    EXPECT_EQ(in_place.wall(1, r), by_record.wall(1, r));
    EXPECT_EQ(in_place.overlap(1, r), by_record.overlap(1, r));
    EXPECT_TRUE(std::isnan(in_place.sync_wait(1, r, 1)));
    EXPECT_EQ(in_place.fwd_event_state(1, r), EventState::unsampled);
  }
  EXPECT_EQ(in_place.sync_wait_column(1, 1), nullptr);
  const Evidence a = evaluate(in_place), b = evaluate(by_record);
  EXPECT_EQ(a.exposed_makespan_s, b.exposed_makespan_s);
  EXPECT_EQ(a.shares, b.shares);

  // A negative duration: one line naming the rank, and the row has no records left.
  cols = in_place.begin_step(1);
  for (int s = 0; s < 3; ++s)
    for (int r = 0; r < 4; ++r) cols[s][r] = d[r][s];
  cols[2][3] = -1.0;
  try {
    in_place.commit_step(1, wall.data());
    ADD_FAILURE() << "a negative duration was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'c'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(in_place.step_present_count(1), 0);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(in_place.d(1, r, 2), 0.0);
  StageMatrix row0_only(schema, 4, 7, 2);
  for (int r = 0; r < 4; ++r) row0_only.set_record(0, r, std::vector<double>{9.0, 9.0, 9.0}, 30.0);
  EXPECT_DOUBLE_EQ(in_place.total_seconds(), row0_only.total_seconds());
  // A wall past the window's limit, and a commit without its begin.
  cols = in_place.begin_step(1);
  for (int s = 0; s < 3; ++s)
    for (int r = 0; r < 4; ++r) cols[s][r] = 1.0;
  std::vector<double> bad_wall = wall;
  bad_wall[1] = INFINITY;
  EXPECT_THROW(in_place.commit_step(1, bad_wall.data()), std::invalid_argument);
  EXPECT_THROW(in_place.commit_step(1, wall.data()), std::logic_error);
}

// Sync-wait columns are made on their first value and kept when a row is begun again or the
// window reset (the model reuses one row a step): a column cleared that way reads NaN, and one
// value set in it later leaves every other rank NaN, never the floats the column held before.
TEST(StageMatrix, a_reused_sync_wait_column_never_shows_its_old_values) {
  const StageSchema schema({"a", "b", "c"}, true);
  StageMatrix m(schema, 4, 0, 2);
  EXPECT_FALSE(m.has_sync_wait());
  m.set_sync_wait_column(0, 2, std::vector<double>{1.0, 2.0, 3.0, 4.0});
  ASSERT_NE(m.sync_wait_column(0, 2), nullptr);
  EXPECT_EQ(m.sync_wait_column(0, 1), nullptr);
  EXPECT_EQ(m.sync_wait_column(1, 2), nullptr);
  EXPECT_TRUE(std::isnan(m.sync_wait(1, 0, 2)));
  EXPECT_EQ(m.sync_wait(0, 3, 2), 4.0);
  static_cast<void>(m.begin_step(0));
  EXPECT_EQ(m.sync_wait_column(0, 2), nullptr);
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(std::isnan(m.sync_wait(0, r, 2))) << r;
  m.set_sync_wait(0, 1, 2, 0.5);
  ASSERT_NE(m.sync_wait_column(0, 2), nullptr);
  for (int r : {0, 2, 3}) EXPECT_TRUE(std::isnan(m.sync_wait_column(0, 2)[r])) << r;
  EXPECT_EQ(m.sync_wait(0, 1, 2), 0.5);
  m.reset(10);
  EXPECT_FALSE(m.has_sync_wait());
  EXPECT_TRUE(std::isnan(m.sync_wait(0, 1, 2)));
  m.set_sync_wait(0, 3, 2, 0.25);
  EXPECT_TRUE(m.has_sync_wait());
  for (int r : {0, 1, 2}) EXPECT_TRUE(std::isnan(m.sync_wait(0, r, 2))) << r;
  EXPECT_EQ(m.sync_wait(0, 3, 2), 0.25);
}

// commit_step's checks take eight values a compare where the machine has AVX-512: a bad value in
// any lane of any block, or in the tail, must be refused with its rank named, and the edge values
// that are good (−0, DBL_MAX alone in a record, a wall of exactly the limit) accepted.
TEST(StageMatrix, commit_step_checks_every_lane) {
  const StageSchema schema({"a", "b"}, true);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const int R : {1, 7, 8, 9, 16, 23, 40, 513}) {
    StageMatrix m(schema, R, 0, 1);
    auto commit = [&](int bad_r, int bad_s, double v, double bad_wall) {
      auto cols = m.begin_step(0);
      std::vector<double> wall(R, 1.0);
      for (int s = 0; s < 2; ++s)
        for (int r = 0; r < R; ++r) cols[s][r] = 0.25;
      if (bad_s >= 0) cols[bad_s][bad_r] = v;
      if (bad_s < 0) wall[bad_r] = bad_wall;
      m.commit_step(0, wall.data());
    };
    for (int r = 0; r < R; ++r) {
      for (const double v : {-1.0, nan, inf, -inf, -1e-300})
        for (int s = 0; s < 2; ++s) {
          try {
            commit(r, s, v, 0);
            ADD_FAILURE() << "R " << R << " rank " << r << " stage " << s << ": " << v << " accepted";
          } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(r) + ":"), std::string::npos) << e.what();
          }
          EXPECT_EQ(m.step_present_count(0), 0);
        }
      for (const double w : {-1.0, nan, inf, 2 * kMaxWindowSeconds}) {
        EXPECT_THROW(commit(r, -1, 0, w), std::invalid_argument) << R << " " << r << " wall " << w;
        EXPECT_EQ(m.step_present_count(0), 0);
      }
      EXPECT_THROW(commit(r, 1, DBL_MAX, 0), std::invalid_argument);  // 0.25 + DBL_MAX: past the limit
      for (const double v : {-0.0, 0.0, 1e-300}) {
        EXPECT_NO_THROW(commit(r, 0, v, 0)) << R << " " << r << " " << v;
        EXPECT_EQ(m.step_present_count(0), R);
      }
    }
  }
}

// A row committed in place touches its own cells only, whatever its width against the checks'
// eight lanes: the next row's cells, residuals, walls and overlaps stay as they were (a lane past
// the row's last rank would read and write them), and a bad value there fails no commit.
TEST(StageMatrix, commit_step_stays_inside_its_row) {
  const StageSchema schema({"a", "b", "c"}, true);
  for (const int R : {1, 5, 8, 13, 517}) {
    StageMatrix m(schema, R, 0, 2);
    for (int r = 0; r < R; ++r) m.set_record(1, r, std::vector<double>{0.5, 0.25, 0.125}, r % 2 ? 0.5 : 2.0);
    const StageMatrix before = m;
    auto cols = m.begin_step(0);
    std::vector<double> wall(static_cast<std::size_t>(R));
    for (int r = 0; r < R; ++r) {
      for (int s = 0; s < 3; ++s) cols[s][r] = 0.1 * (s + 1);
      wall[r] = r % 3 ? 0.4 : 0.9;
    }
    m.commit_step(0, wall.data());
    for (int r = 0; r < R; ++r) {
      for (int s = 0; s < m.stages(); ++s) EXPECT_EQ(m.d(1, r, s), before.d(1, r, s)) << R << " " << r << " " << s;
      EXPECT_EQ(m.wall(1, r), before.wall(1, r)) << R << " " << r;
      EXPECT_EQ(m.overlap(1, r), before.overlap(1, r)) << R << " " << r;
      EXPECT_EQ(m.wall(0, r), wall[r]);
      const double e = wall[r] - (0.0 + 0.1 + 0.2 + 0.1 * 3);  // the cells' sum, in stage order
      EXPECT_EQ(m.overlap(0, r), e < 0 ? -e : 0.0) << R << " " << r;
      EXPECT_EQ(m.d(0, r, 3), e > 0 ? e : 0.0) << R << " " << r;  // the residual
    }
  }
}

// commit_step takes a row in blocks of ranks: a bad value in a later block than another's still
// gets set_record's message (every stage's values before any sum, the sums before the walls, the
// lowest rank first), and a failed commit leaves the whole row as begin_step left it — no wall,
// no overlap, no duration — even where earlier blocks had been taken in already.
TEST(StageMatrix, commit_step_words_the_first_bad_value_across_blocks) {
  const StageSchema schema({"a", "b"}, true);
  const int R = 2000;
  StageMatrix m(schema, R, 0, 1);
  auto commit = [&](auto spoil) {
    auto cols = m.begin_step(0);
    std::vector<double> wall(R, 1.0);
    for (int s = 0; s < 2; ++s)
      for (int r = 0; r < R; ++r) cols[s][r] = 0.25 + 1e-3 * s;  // residual 0.499 on every rank
    spoil(cols, wall);
    try {
      m.commit_step(0, wall.data());
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(m.step_present_count(0), 0);
      for (int r = 0; r < R; ++r) {
        EXPECT_TRUE(std::isnan(m.wall(0, r))) << r;
        EXPECT_EQ(m.overlap(0, r), 0.0) << r;
        for (int s = 0; s < 3; ++s) EXPECT_EQ(m.d(0, r, s), 0.0) << r << " " << s;
      }
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  // A bad wall early, a bad stage-b value late: the stage's, as set_record checks durations first.
  EXPECT_EQ(commit([](auto& c, auto& w) { w[3] = -1.0; c[1][1700] = nan; }).rfind("rank 1700: duration of stage 'b'", 0), 0u);
  // Stage a before stage b, whichever rank comes first.
  EXPECT_EQ(commit([](auto& c, auto&) { c[1][5] = -1.0; c[0][1999] = -2.0; }).rfind("rank 1999: duration of stage 'a'", 0), 0u);
  // A sum past the limit late, a bad wall early: the sum's.
  EXPECT_EQ(commit([](auto& c, auto& w) { w[600] = nan; c[0][1500] = DBL_MAX; c[1][1500] = DBL_MAX; })
                .rfind("rank 1500: stage durations sum to", 0),
            0u);
  // Two bad walls: the lower rank.
  EXPECT_EQ(commit([](auto&, auto& w) { w[1999] = -1.0; w[1024] = -1.0; }).rfind("rank 1024: wall time is", 0), 0u);
  // A good row after all that: every rank present, the overlap and the walls in place.
  EXPECT_EQ(commit([](auto&, auto&) {}), "accepted");
  EXPECT_EQ(m.step_present_count(0), R);
  for (const int r : {0, 511, 512, 1999}) {
    EXPECT_EQ(m.wall(0, r), 1.0);
    EXPECT_EQ(m.overlap(0, r), 0.0);
    EXPECT_EQ(m.d(0, r, 2), 1.0 - (0.0 + 0.25 + 0.251));
  }
}

// commit_ranks: a row committed in pieces (the model commits each block of ranks as its last
// pass writes it) is the row commit_step makes at once, bit for bit: cells, residuals, walls,
// overlaps, presence and the window's total, whatever the cuts (empty pieces, repeated ends,
// ends inside commit_step's blocks of 512).
TEST(StageMatrix, commit_ranks_in_any_pieces_is_commit_step) {
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    std::mt19937_64 rng(seed);
    const int R = 1 + static_cast<int>(rng() % 3000), k = 1 + static_cast<int>(rng() % 4);
    std::vector<std::string> names;
    for (int s = 0; s < k; ++s) names.push_back("s" + std::to_string(s));
    const bool with_wall = seed % 3 != 0;
    const StageSchema schema(names, with_wall);
    StageMatrix whole(schema, R, 0, 2), pieces(schema, R, 0, 2);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int t = 0; t < 2; ++t) {
      std::vector<std::vector<double>> d(k, std::vector<double>(R));
      std::vector<double> wall(R);
      for (int r = 0; r < R; ++r) {
        double sum = 0;
        for (int s = 0; s < k; ++s) sum += d[s][r] = rng() % 5 == 0 ? 0.0 : u(rng) * std::pow(10.0, static_cast<int>(rng() % 7) - 4);
        wall[r] = sum * (0.5 + u(rng));  // overlaps (wall < Σ) and residuals both
      }
      std::vector<int> cuts = {0, R};
      for (int i = 0, n = static_cast<int>(rng() % 9); i < n; ++i) cuts.push_back(static_cast<int>(rng() % (R + 1)));
      std::sort(cuts.begin(), cuts.end());
      for (StageMatrix* m : {&whole, &pieces}) {
        auto cols = m->begin_step(t);
        for (int s = 0; s < k; ++s) std::copy(d[s].begin(), d[s].end(), cols[s]);
        if (m == &pieces)
          for (const int c : cuts) m->commit_ranks(t, c, with_wall ? wall.data() : nullptr);
        m->commit_step(t, with_wall ? wall.data() : nullptr);
      }
      for (int r = 0; r < R; ++r) {
        ASSERT_EQ(pieces.present(t, r), whole.present(t, r)) << "seed " << seed << " rank " << r;
        for (int s = 0; s < schema.size(); ++s) ASSERT_EQ(pieces.d(t, r, s), whole.d(t, r, s)) << "seed " << seed << " rank " << r;
        if (with_wall) {
          ASSERT_EQ(pieces.wall(t, r), whole.wall(t, r)) << "seed " << seed << " rank " << r;
          ASSERT_EQ(pieces.overlap(t, r), whole.overlap(t, r)) << "seed " << seed << " rank " << r;
        }
      }
      ASSERT_EQ(pieces.total_seconds(), whole.total_seconds()) << "seed " << seed << " step " << t;
    }
  }
}

// A bad value in a piece is worded among the ranks committed so far, and leaves the whole row as
// begin_step left it, the pieces taken in before it too; misuse is a logic error.
TEST(StageMatrix, commit_ranks_refuses_a_bad_piece_and_resets_the_row) {
  const StageSchema schema({"a", "b"}, true);
  const int R = 1500;
  StageMatrix m(schema, R, 0, 1);
  std::vector<double> wall(R, 1.0);
  auto fill = [&] {
    auto cols = m.begin_step(0);
    for (int s = 0; s < 2; ++s) std::fill_n(cols[s], R, 0.25);
    return cols;
  };
  EXPECT_THROW(m.commit_ranks(0, 10, wall.data()), std::logic_error);  // no begin_step
  auto cols = fill();
  cols[1][1200] = -1.0;  // past the first two pieces: not theirs to word
  m.commit_ranks(0, 512, wall.data());
  EXPECT_THROW(m.commit_ranks(0, 100, wall.data()), std::logic_error);  // backwards
  EXPECT_THROW(m.commit_ranks(0, R + 1, wall.data()), std::logic_error);
  m.commit_ranks(0, 1024, wall.data());
  try {
    m.commit_step(0, wall.data());
    ADD_FAILURE() << "a bad rank 1200 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("rank 1200: duration of stage 'b'", 0), 0u) << e.what();
  }
  EXPECT_EQ(m.step_present_count(0), 0);
  for (const int r : {0, 511, 700, 1023, 1499}) {
    EXPECT_TRUE(std::isnan(m.wall(0, r))) << r;
    EXPECT_EQ(m.overlap(0, r), 0.0) << r;
    EXPECT_EQ(m.d(0, r, 2), 0.0) << r;
  }
  EXPECT_THROW(m.commit_step(0, wall.data()), std::logic_error);  // the failed row is no longer pending
  // A piece with a bad value fails at once, worded among its ranks (rank 300's wall, not 1200's stage).
  cols = fill();
  cols[1][1200] = -1.0;
  wall[300] = -2.0;
  try {
    m.commit_ranks(0, 600, wall.data());
    ADD_FAILURE() << "a bad wall at rank 300 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("rank 300: wall time is", 0), 0u) << e.what();
  }
  wall[300] = 1.0;
  cols = fill();
  m.commit_ranks(0, 700, wall.data());
  m.commit_step(0, wall.data());
  EXPECT_EQ(m.step_present_count(0), R);
  EXPECT_EQ(m.total_seconds(), 1.0 * R);
}

// Sync waits are stored as one column per (step, stage): the column accessor sees exactly what
// set_sync_wait and set_sync_wait_column wrote, and nothing for an unwritten stage.
TEST(StageMatrix, sync_wait_columns) {
  StageMatrix m(StageSchema({"a", "b"}, false), 3, 0, 2);
  EXPECT_FALSE(m.has_sync_wait());
  m.set_sync_wait(1, 2, 0, 0.5);
  m.set_sync_wait_column(0, 1, std::vector<double>{0.25, 0.0, 1.0});
  ASSERT_NE(m.sync_wait_column(1, 0), nullptr);
  EXPECT_EQ(m.sync_wait_column(1, 1), nullptr);
  EXPECT_EQ(m.sync_wait_column(0, 0), nullptr);
  EXPECT_EQ(m.sync_wait_column(1, 0)[2], 0.5f);
  EXPECT_TRUE(std::isnan(m.sync_wait_column(1, 0)[0]));
  EXPECT_EQ(m.sync_wait(0, 2, 1), 1.0);
  EXPECT_EQ(m.sync_wait(0, 1, 1), 0.0);
  EXPECT_THROW(m.set_sync_wait_column(0, 1, std::vector<double>{0.25, -1.0, 1.0}), std::invalid_argument);
  // Every lane of the vector check: a bad wait anywhere in 1–40 ranks is refused, the good edge
  // values (-0, FLT_MAX) beside it pass.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const int R : {1, 8, 9, 17, 40}) {
    StageMatrix w(StageSchema({"a", "b"}, false), R, 0, 1);
    for (int r = 0; r < R; ++r) {
      std::vector<double> col(R, 0.5);
      for (const double bad : {-1.0, nan, inf, 2.0 * FLT_MAX}) {
        col[r] = bad;
        EXPECT_THROW(w.set_sync_wait_column(0, 0, col), std::invalid_argument) << R << " " << r << " " << bad;
      }
      for (const double good : {-0.0, static_cast<double>(FLT_MAX)}) {
        col[r] = good;
        EXPECT_NO_THROW(w.set_sync_wait_column(0, 0, col)) << R << " " << r << " " << good;
      }
    }
  }
  EXPECT_THROW(m.set_sync_wait_column(0, 1, std::vector<double>{0.25}), std::invalid_argument);
  EXPECT_THROW(m.set_sync_wait_column(0, 2, std::vector<double>{0.25, 0.0, 1.0}), std::invalid_argument);
}

// A column given a block at a time (ModelStepper's passes) holds what the whole column would,
// reads as not set until its last block is in, and refuses a block out of order (naming where the
// next one starts) or a bad wait (naming its rank: the block's offset counted in).
TEST(StageMatrix, sync_wait_blocks_in_column_order) {
  const int R = 10;
  StageMatrix whole(StageSchema({"a", "b"}, false), R, 0, 1), blocks(StageSchema({"a", "b"}, false), R, 0, 1);
  std::vector<double> col(R);
  for (int r = 0; r < R; ++r) col[r] = 0.125 * r;
  whole.set_sync_wait_column(0, 1, col);
  const std::span<const double> all(col);
  blocks.set_sync_wait_block(0, 1, 0, all.subspan(0, 4));
  EXPECT_EQ(blocks.sync_wait_column(0, 1), nullptr);
  blocks.set_sync_wait_block(0, 1, 4, all.subspan(4, 3));
  EXPECT_EQ(blocks.sync_wait_column(0, 1), nullptr);
  try {
    blocks.set_sync_wait_block(0, 1, 8, all.subspan(8, 2));  // skips column 7
    ADD_FAILURE() << "a block past the next one was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("from column 7"), std::string::npos) << e.what();
  }
  blocks.set_sync_wait_block(0, 1, 7, all.subspan(7, 3));
  ASSERT_NE(blocks.sync_wait_column(0, 1), nullptr);
  for (int r = 0; r < R; ++r) EXPECT_EQ(blocks.sync_wait(0, r, 1), whole.sync_wait(0, r, 1)) << r;
  // Starting over at column 0 unsets the column until its last block comes again.
  blocks.set_sync_wait_block(0, 1, 0, all.subspan(0, 5));
  EXPECT_EQ(blocks.sync_wait_column(0, 1), nullptr);
  blocks.set_sync_wait_block(0, 1, 5, all.subspan(5, 5));
  EXPECT_NE(blocks.sync_wait_column(0, 1), nullptr);
  EXPECT_THROW(blocks.set_sync_wait_block(0, 1, 8, all.subspan(0, 3)), std::invalid_argument);  // past the row
  EXPECT_THROW(blocks.set_sync_wait_block(0, 2, 0, all.subspan(0, 3)), std::invalid_argument);  // no stage 2
  // A bad wait names its rank id (a sparse matrix: column 1 of the second block is rank 12).
  StageMatrix sparse(StageSchema({"a", "b"}, false), 20, std::vector<int>{1, 3, 5, 8, 12, 19}, 0, 1);
  sparse.set_sync_wait_block(0, 0, 0, all.subspan(0, 3));
  std::vector<double> bad{0.5, -1.0, 0.25};
  try {
    sparse.set_sync_wait_block(0, 0, 3, bad);
    ADD_FAILURE() << "a negative wait was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 12: sync wait is -1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sparse.sync_wait_column(0, 0), nullptr);
}

TEST(Accounting, figure1_exposed_8_2_against_per_stage_max_13_2) {
  const auto m = three_stage({{6.0, 1.0, 1.2}, {1.0, 1.0, 6.2}, {1.1, 1.0, 6.0}});
  const auto acc = account(m);
  EXPECT_NEAR(acc.advance(0, 0), 6.0, 1e-12);
  EXPECT_NEAR(acc.advance(0, 1), 1.0, 1e-12);
  EXPECT_NEAR(acc.advance(0, 2), 1.2, 1e-12);
  EXPECT_NEAR(acc.exposed(0), 8.2, 1e-12);
  EXPECT_NEAR(per_stage_max_step(m, 0), 13.2, 1e-12);
  const auto e = evaluate(m);
  EXPECT_NEAR(e.exposed_makespan_s, 8.2, 1e-12);
  EXPECT_NEAR(e.per_stage_max_s, 13.2, 1e-12);
  EXPECT_EQ(e.group_name(e.share_order[0]), "data.next_wait");
  EXPECT_EQ(e.suspect.rank, 0);
  EXPECT_EQ(acc.leader(0, 0), 0);
}

TEST(Accounting, figure2_a_different_rank_leads_each_boundary) {
  const auto m = three_stage({{4.0, 0.5, 0.5}, {3.0, 3.0, 1.0}, {1.0, 2.0, 5.5}});
  const auto acc = account(m);
  EXPECT_NEAR(acc.advance(0, 0), 4.0, 1e-12);
  EXPECT_NEAR(acc.advance(0, 1), 2.0, 1e-12);
  EXPECT_NEAR(acc.advance(0, 2), 2.5, 1e-12);
  EXPECT_NEAR(acc.exposed(0), 8.5, 1e-12);
  EXPECT_EQ(acc.leader(0, 0), 0);
  EXPECT_EQ(acc.leader(0, 1), 1);
  EXPECT_EQ(acc.leader(0, 2), 2);
}

TEST(Accounting, ties_and_missing_ranks) {
  auto m = three_stage({{1.0, 1.0, 1.0}, {1.0, 1.0, 1.0}, {0.5, 0.5, 0.5}});
  auto acc = account(m);
  EXPECT_EQ(acc.leader(0, 0), Accounting::kTie);
  EXPECT_EQ(acc.tie_ranks(0, 0), (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(acc.gap(0, 0), 0.0);
  m.clear_record(0, 0);
  acc = account(m);
  EXPECT_EQ(acc.leader(0, 0), 1);
  EXPECT_DOUBLE_EQ(acc.gap(0, 0), 0.5);
  StageMatrix empty(StageSchema({"a"}, false), 2, 0, 2);
  empty.set_record(1, 0, std::vector<double>{1.0}, std::nullopt);
  acc = account(empty);
  EXPECT_EQ(acc.scored[0], 0);
  EXPECT_DOUBLE_EQ(acc.exposed_makespan(), 1.0);
}

TEST(Labels, section4_charges_data_and_is_co_critical_with_backward) {
  StageMatrix m(StageSchema({"data.next_wait", "model.backward_cpu_wall"}, true), 2, 0, 1);
  m.set_record(0, 0, std::vector<double>{10, 0}, 10.0);  // closed steps: wall = Σ d
  m.set_record(0, 1, std::vector<double>{0, 10}, 10.0);
  const auto e = evaluate(m);
  EXPECT_DOUBLE_EQ(e.advances_s[0], 10.0);
  EXPECT_DOUBLE_EQ(e.advances_s[1], 0.0);
  EXPECT_TRUE(e.has(Label::co_critical));
  // Appendix C's E_amb = C_A ∪ C_G is {data}; the §4 text's {data, backward} is C_R's reading.
  EXPECT_EQ(names(e, e.co_critical_stages), (std::vector<std::string>{"data.next_wait"}));
  EXPECT_FALSE(e.has(Label::direct_exposure));
  LabelConfig cfg;
  cfg.ambiguity_residual_leaders = true;
  EXPECT_EQ(names(e, evaluate(m, cfg).co_critical_stages), (std::vector<std::string>{"data.next_wait", "model.backward_cpu_wall"}));
}

TEST(Labels, sync_wait_window_is_co_critical_by_default_and_sync_wait_with_model) {
  auto m = sync_window(8, 30, 5, 0, 0.150);
  m.set_roles(std::vector<std::string>(8, "dp"));  // homogeneous data-parallel ranks, declared
  auto e = evaluate(m);
  EXPECT_EQ(e.group_name(e.share_order[0]), "data.next_wait");
  EXPECT_TRUE(e.has(Label::co_critical));
  EXPECT_FALSE(e.has(Label::sync_wait_dependent));
  EXPECT_EQ(e.suspect.rank, 5);
  EXPECT_EQ(e.suspect.basis, "frontier_leader");
  EXPECT_LT(e.static_gain[0], 0.1);  // the others' waits stay in place
  LabelConfig cfg;
  cfg.wait_model = {"data.next_wait"};
  e = evaluate(m, cfg);
  EXPECT_TRUE(e.has(Label::sync_wait_dependent));
  EXPECT_TRUE(e.has(Label::likely_sync_wait));  // lag opens at data, collapses at backward
  EXPECT_FALSE(e.has(Label::co_critical));
  // The name is resolved to its group once, where the configuration meets the window.
  EXPECT_EQ(e.wait_declared, std::vector<int>{*m.schema().group_index("data.next_wait")});
  EXPECT_NE(std::find(e.wait_groups.begin(), e.wait_groups.end(), e.wait_declared[0]), e.wait_groups.end());
  EXPECT_EQ(m.schema().group_problem("data.next_wait", "x: ", "here"), "");
  EXPECT_EQ(m.schema().group_problem("data.nxt", "--opt data.nxt: ", "this run").rfind(
                "--opt data.nxt: not a stage group of this run; expected one of data.next_wait, ", 0),
            0u);
  cfg.wait_model = {"data.nxt"};
  EXPECT_THROW(evaluate(m, cfg), std::invalid_argument);
}

TEST(Labels, independent_slow_stage_is_direct_exposure) {
  const auto m = sync_window(8, 30, 3, 4, 0.400, /*sync=*/false);
  const auto e = evaluate(m);
  EXPECT_EQ(e.group_name(e.share_order[0]), "optim.step_cpu_wall");
  EXPECT_TRUE(e.has(Label::direct_exposure));
  EXPECT_GT(e.static_gain[4], 0.5);
  EXPECT_EQ(e.suspect.rank, 3);
}

TEST(Labels, missing_rank_downgrades_to_telemetry_limited) {
  auto m = sync_window(4, 10, 1, 0, 0.2);
  m.clear_record(4, 2);
  const auto e = evaluate(m);
  EXPECT_TRUE(e.has(Label::telemetry_limited));
  EXPECT_EQ(e.missing_ranks, (std::vector<RankRange>{{2, 2}}));
  EXPECT_EQ(e.missing_rank_count, 1);
  EXPECT_EQ(e.missing_records, 1);
  EXPECT_FALSE(e.has(Label::co_critical));
  EXPECT_FALSE(e.routing_set.empty());  // accounting still stands
}

TEST(Labels, gather_failure_and_closure_gates) {
  const auto m = sync_window(4, 10, 1, 0, 0.2);
  TelemetryInput tel;
  tel.gather_ok = false;
  tel.reasons = {"rank 3 contribution arrived after the 50 ms deadline"};
  auto e = evaluate(m, {}, tel);
  EXPECT_TRUE(e.has(Label::telemetry_limited));
  EXPECT_FALSE(e.gather_ok);
  EXPECT_NE(std::find(e.downgrade_reasons.begin(), e.downgrade_reasons.end(), tel.reasons[0]), e.downgrade_reasons.end());

  StageMatrix open(StageSchema({"a", "b"}, true), 2, 0, 1);
  open.set_record(0, 0, std::vector<double>{1, 1}, 2.5);  // 20% residual
  open.set_record(0, 1, std::vector<double>{1, 1}, 2.0);
  e = evaluate(open);
  EXPECT_TRUE(e.has(Label::telemetry_limited));
  EXPECT_NEAR(e.closure_residual_share, 0.5 / 4.5, 1e-12);
}

TEST(Labels, heterogeneous_roles_need_role_aware_grouping) {
  auto m = sync_window(4, 5, 1, 0, 0.2);
  m.set_roles({"tp", "tp", "pp", "pp"});
  const auto e = evaluate(m);
  EXPECT_TRUE(e.has(Label::role_aware_needed));
  for (auto l : e.labels) EXPECT_FALSE(is_strong(l));
}

TEST(Labels, collapsed_accumulation_is_ambiguous_expanded_is_not) {
  StageMatrix collapsed(StageSchema({"data", "bwd"}, false, 4), 2, 0, 1);
  collapsed.set_record(0, 0, std::vector<double>{1, 2}, std::nullopt);
  collapsed.set_record(0, 1, std::vector<double>{1, 2}, std::nullopt);
  EXPECT_TRUE(evaluate(collapsed).has(Label::gradient_accumulation_ambiguous));

  StageMatrix expanded(StageSchema({"data#0", "bwd#0", "data#1", "bwd#1"}, false, 2), 2, 0, 1);
  expanded.set_record(0, 0, std::vector<double>{3, 1, 0.5, 1}, std::nullopt);
  expanded.set_record(0, 1, std::vector<double>{0.5, 3.5, 0.5, 1}, std::nullopt);
  const auto e = evaluate(expanded);
  EXPECT_FALSE(e.has(Label::gradient_accumulation_ambiguous));
  ASSERT_EQ(e.schema.group_count(), 2);
  // Frontier over the expanded list, then grouped: data 3 + 0.5, bwd 1 + 1.
  EXPECT_NEAR(e.advances_s[0], 3.5, 1e-12);
  EXPECT_NEAR(e.advances_s[1], 2.0, 1e-12);
}

TEST(Labels, forward_event_channel_drives_forward_labels) {
  // fwd_device: forward kernels of rank 2 run long on the device; the host sees it in backward.
  auto m = sync_window(8, 40, 2, 2, 0.150);
  for (int t = 0; t < 40; ++t)
    for (int r = 0; r < 8; ++r) m.set_fwd_event(t, r, EventState::ready, r == 2 ? 0.180 : 0.030);
  auto e = evaluate(m);
  EXPECT_TRUE(e.has(Label::forward_device_supported));
  EXPECT_TRUE(e.has(Label::forward_spillover_suspected));
  EXPECT_FALSE(e.has(Label::forward_host_overhead_suspected));
  EXPECT_EQ(e.events.max_rank, 2);

  // fwd_host: CPU-wall forward is long while the device forward time stays low.
  m = sync_window(8, 40, 6, 1, 0.150);
  for (int t = 0; t < 40; ++t)
    for (int r = 0; r < 8; ++r) m.set_fwd_event(t, r, (t % 4 == 0) ? EventState::ready : EventState::unsampled, 0.030);
  e = evaluate(m);
  EXPECT_EQ(e.group_name(e.share_order[0]), "model.fwd_loss_cpu_wall");
  EXPECT_TRUE(e.has(Label::forward_host_overhead_suspected));
  EXPECT_FALSE(e.has(Label::forward_device_supported));

  // Low readiness: the channel cannot support device labels.
  for (int t = 0; t < 40; ++t)
    for (int r = 0; r < 8; ++r) m.set_fwd_event(t, r, (t % 2 == 0) ? EventState::missing : EventState::ready, 0.2);
  e = evaluate(m);
  EXPECT_TRUE(e.has(Label::forward_event_scope_limited));
  EXPECT_FALSE(e.has(Label::forward_device_supported));

  // Too few samples: no device labels, with a reason.
  m = sync_window(8, 40, 2, 2, 0.150);
  m.set_fwd_event(0, 2, EventState::ready, 0.2);
  e = evaluate(m);
  EXPECT_FALSE(e.has(Label::forward_device_supported));
  EXPECT_NE(e.downgrade_reasons.back().find("ready event samples"), std::string::npos);
}

TEST(Suspect, sync_wait_side_evidence_names_the_rank_a_collective_waited_for) {
  // Backward compute delay before the all-reduce: every rank's backward ends together, so the
  // frontier leader is a tie; the rank that blocks least inside the collective is the suspect.
  auto m = sync_window(8, 20, 6, 2, 0.150);
  for (int t = 0; t < 20; ++t)
    for (int r = 0; r < 8; ++r) m.set_sync_wait(t, r, 2, r == 6 ? 0.0005 : 0.150);
  const auto e = evaluate(m);
  EXPECT_EQ(e.group_name(e.share_order[0]), "model.backward_cpu_wall");
  EXPECT_EQ(e.suspect.rank, 6);
  EXPECT_EQ(e.suspect.basis, "sync_wait_side_evidence");
}

TEST(Suspect, a_rank_without_recorded_waits_is_not_the_one_waited_for) {
  // As above, but rank 3 never records its wait and rank 6 only on even steps: a wait not
  // recorded is no wait of 0 (rank 3 would block least), and rank 6's mean is over its records.
  auto m = sync_window(8, 20, 6, 2, 0.150);
  for (int t = 0; t < 20; ++t)
    for (int r = 0; r < 8; ++r)
      if (r != 3 && (r != 6 || t % 2 == 0)) m.set_sync_wait(t, r, 2, r == 6 ? 0.0005 : 0.150);
  const auto e = evaluate(m);
  EXPECT_EQ(e.suspect.rank, 6);
  EXPECT_EQ(e.suspect.basis, "sync_wait_side_evidence");
}

TEST(Suspect, ranks_tied_on_confident_credit_name_the_lower_one) {
  // alternating_leaders mirrored: stage a is slow on rank 1 at even steps and on rank 0 at odd
  // ones, so rank 1 is credited first and both end with the same confident credit. The suspect
  // and the first leader are rank 0, whichever rank was credited first.
  StageMatrix m(StageSchema({"a", "b"}, true), 2, 0, 4);
  for (int t = 0; t < 4; ++t)
    for (int r = 0; r < 2; ++r) {
      const bool slow = r == (t + 1) % 2;
      m.set_record(t, r, std::vector<double>{slow ? 5.0 : 1.0, 1.0}, slow ? 6.0 : 2.0);
    }
  const auto e = evaluate(m);
  ASSERT_EQ(e.leaders[0].size(), 2u);
  EXPECT_EQ(e.leaders[0][0].rank, 0);
  EXPECT_EQ(e.leaders[0][0].advance_s, e.leaders[0][1].advance_s);
  EXPECT_EQ(e.suspect.group, 0);
  EXPECT_EQ(e.suspect.rank, 0);
}

TEST(WindowSide, forward_cpu_mean_is_the_forward_stages_mean_with_and_without_sync_waits) {
  // The forward group's CPU-wall mean per rank (the host-overhead label reads it) is its stages'
  // total over the steps the rank is in: whether the sum rides on the group's own-work sum (one
  // stage, no wait yet), goes apart once the group's first sync wait comes off that sum (step 3),
  // or is apart from the start (two microsteps, two stages); rank 2 misses step 4.
  const int R = 5, N = 7;
  for (const int accumulation : {1, 2}) {
    const StageSchema schema(default_explicit_stages(), true, accumulation);
    const LabelConfig cfg;
    const int gf = *schema.group_index(cfg.forward_group);
    StageMatrix m(schema, R, 0, N);
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0.001, 0.05);
    std::vector<double> sum(R, 0.0);
    std::vector<int> n(R, 0);
    for (int t = 0; t < N; ++t)
      for (int r = 0; r < R; ++r) {
        if (t == 4 && r == 2) continue;
        std::vector<double> d(static_cast<std::size_t>(schema.explicit_count()));
        double total = 0, fwd = 0;
        for (int s = 0; s < schema.explicit_count(); ++s) {
          total += d[s] = u(rng);
          if (schema.group_of(s) == gf) fwd += d[s];
        }
        m.set_record(t, r, d, total * 1.01);
        for (int s = 0; s < schema.explicit_count(); ++s)
          if (schema.group_of(s) == gf && t >= 3 && r % 2 == 0) m.set_sync_wait(t, r, s, 0.25 * d[s]);
        sum[r] += fwd;
        ++n[r];
      }
    detail::WindowStats ws(schema, R, R, {}, cfg);
    std::vector<double> p, cm(static_cast<std::size_t>(schema.size()));
    std::vector<detail::Middle> mids(cm.size());
    std::vector<detail::MiddleHint> hints(cm.size());
    detail::SelectScratch scratch;
    detail::StepFrontier f;
    for (int t = 0; t < N; ++t) {
      detail::cohort_middles(m, t, mids, hints, scratch);
      for (int s = 0; s < schema.size(); ++s) cm[s] = mids[s].median();
      detail::account_step(m, t, cfg.account, p, f);
      ws.add_step(m, t, f, cm, nullptr, {}, mids);
    }
    const auto w = ws.finish(0, N - 1, 0);
    for (int r = 0; r < R; ++r)
      EXPECT_EQ(w.side.fwd_cpu_mean_s[r], sum[r] / n[r]) << "accumulation " << accumulation << " rank " << r;
  }
}

TEST(Shares, floor_reports_raw_advances_only) {
  const auto e = evaluate(one_step({"a", "b"}, {{1e-9, 0}, {0, 1e-9}}));
  EXPECT_FALSE(e.shares_valid);
  EXPECT_EQ(e.labels, std::vector<Label>{Label::frontier_accounting});
  EXPECT_FALSE(e.routing_set.empty());
}

TEST(Shares, single_rank_gets_a_reason_and_no_distributed_labels) {
  StageMatrix m(StageSchema({"a", "b"}, false), 1, 0, 3);
  for (int t = 0; t < 3; ++t) m.set_record(t, 0, std::vector<double>{1, 3}, std::nullopt);
  LabelConfig cfg;
  cfg.wait_model = {"b"};  // even an asserted wait model needs other ranks to wait
  const auto e = evaluate(m, cfg);
  EXPECT_FALSE(e.has(Label::co_critical));
  EXPECT_FALSE(e.has(Label::sync_wait_dependent));
  EXPECT_FALSE(e.has(Label::likely_sync_wait));
  EXPECT_NEAR(e.shares[1], 0.75, 1e-12);
  const std::string reason = "world size 1: the frontier is the rank's own vector, no cross-rank evidence";
  EXPECT_NE(std::find(e.downgrade_reasons.begin(), e.downgrade_reasons.end(), reason), e.downgrade_reasons.end());
}

TEST(Routing, smallest_prefix_reaching_tau_c) {
  const auto r = rank_stages({0.1, 0.5, 0.3, 0.1}, 0.8);
  EXPECT_EQ(r.order, (std::vector<int>{1, 2, 0, 3}));
  EXPECT_EQ(r.candidates, (std::vector<int>{1, 2}));
  EXPECT_EQ(rank_stages({0.1, 0.5, 0.3, 0.1}, 0.81).candidates, (std::vector<int>{1, 2, 0}));
  EXPECT_TRUE(rank_stages({0, 0}, 0.8).candidates.empty());
}

TEST(Gain, three_baselines_on_a_direct_stall) {
  const auto m = sync_window(6, 20, 1, 3, 0.3, false);
  const auto acc = account(m);
  const auto cohort = static_gain(m, acc, GainBaseline::cohort_median);
  const auto own = static_gain(m, acc, GainBaseline::rank_median);
  std::vector<double> ref = {0.01, 0.04, 0.12, 0.005, 0.02, 0.0};
  const auto reference = static_gain(m, acc, GainBaseline::reference, ref);
  EXPECT_GT(cohort[3], 0.4);
  EXPECT_LT(own[3], 0.01);   // a persistent stall is the rank's own median: no gain visible
  EXPECT_GT(reference[3], 0.4);
  EXPECT_THROW(static_gain(m, acc, GainBaseline::reference, std::vector<double>{1.0}), std::invalid_argument);
}

TEST(Streaming, rejects_rank_median_and_mismatched_steps) {
  LabelConfig cfg;
  cfg.gain_baseline = GainBaseline::rank_median;
  EXPECT_THROW(StreamingAccumulator(StageSchema::default_schema(), 4, cfg), std::invalid_argument);
  StreamingAccumulator acc(StageSchema({"a"}, false), 2, {});
  StageMatrix one(StageSchema({"a"}, false), 2, 5, 1);
  one.set_record(0, 0, std::vector<double>{1}, std::nullopt);
  acc.add_step(one);
  EXPECT_THROW(acc.add_step(one), std::invalid_argument);  // step ids must increase
  StageMatrix other(StageSchema({"b"}, false), 2, 6, 1);
  EXPECT_THROW(acc.add_step(other), std::invalid_argument);
  const auto e = acc.finish();
  EXPECT_EQ(e.first_step, 5);
  EXPECT_TRUE(e.has(Label::telemetry_limited));  // rank 1 never reported
}

TEST(Streaming, bounded_medians_change_only_the_median_and_say_so) {
  // An always-on run caps its run-level medians (issue 16, item 2): past the cap the median step
  // time comes from log2 bins (within 0.034 %), every running sum stays exact to the bit.
  const StageSchema schema({"a", "b", "c"}, false);
  StreamingAccumulator exact(schema, 4, {}), bounded(schema, 4, {});
  bounded.bound_medians(100);
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int t = 0; t < 3000; ++t) {
    StageMatrix one(schema, 4, t, 1);
    for (int r = 0; r < 4; ++r) {
      std::vector<double> d(3);
      for (auto& v : d) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v = 0.01 + static_cast<double>(x >> 40) * 1e-9;
      }
      one.set_record(0, r, d, std::nullopt);
    }
    exact.add_step(one);
    bounded.add_step(one);
    if (t == 0) {
      EXPECT_THROW(bounded.bound_medians(10), std::invalid_argument);
    }
  }
  const Evidence a = exact.finish(), b = bounded.finish();
  EXPECT_TRUE(a.medians_exact);
  EXPECT_FALSE(b.medians_exact);
  EXPECT_NE(a.median_step_s, b.median_step_s);
  EXPECT_NEAR(b.median_step_s, a.median_step_s, 3.4e-4 * a.median_step_s);
  EXPECT_EQ(a.exposed_makespan_s, b.exposed_makespan_s);
  EXPECT_EQ(a.shares, b.shares);
  EXPECT_EQ(a.static_gain, b.static_gain);
  EXPECT_EQ(a.lag_mean_s, b.lag_mean_s);
  EXPECT_EQ(a.routing_set, b.routing_set);
  EXPECT_EQ(a.labels, b.labels);
}

// ---- issue 10: the labeler as the paper defines it (each test failed on the labeler before) ----

namespace {

bool has_reason(const Evidence& e, const std::string& needle) {
  for (const auto& r : e.downgrade_reasons)
    if (r.find(needle) != std::string::npos) return true;
  return false;
}


}  // namespace

TEST(Labeler, single_rank_near_tie_is_not_co_critical) {
  // Finding 1: R = 1 has no cross-rank evidence, so no co_critical even for near-tied stages.
  const auto e = evaluate(one_step({"a", "b"}, {{1.0, 0.98}}));
  EXPECT_NEAR(e.shares[0] - e.shares[1], 0.02 / 1.98, 1e-12);
  EXPECT_FALSE(e.has(Label::co_critical));
  EXPECT_TRUE(has_reason(e, "world size 1"));
}

TEST(Labeler, gain_tie_downgrades_direct_exposure) {
  // Finding 2: two stages whose clipped gains tie within eta_G: the window is co-critical and
  // carries no direct_exposure, though a dominates by share (0.526 vs 0.474, not a share tie).
  const auto m = one_step({"a", "b"}, {{4.0, 3.6}, {1.0, 1.0}});
  LabelConfig cfg;
  cfg.gain_baseline = GainBaseline::reference;
  cfg.reference_s = {1.0, 0.8, 0.0};  // a, b, residual
  const auto e = evaluate(m, cfg);
  ASSERT_GT(e.shares[0], cfg.gamma_a);
  ASSERT_GT(e.shares[0] - e.shares[1], cfg.eta_a);
  ASSERT_LT(std::abs(e.static_gain[0] - e.static_gain[1]), cfg.eta_g);
  EXPECT_TRUE(e.has(Label::co_critical));
  EXPECT_FALSE(e.has(Label::direct_exposure));
  EXPECT_EQ(names(e, e.co_critical_stages), (std::vector<std::string>{"a", "b"}));
}

TEST(Labeler, high_leader_switch_rate_downgrades_direct_exposure) {
  // Finding 2: the slow rank alternates every step: the stage is clear, the rank is not; strong
  // labels are withdrawn and the reason says so.
  const auto e = evaluate(alternating_leaders());
  ASSERT_GT(e.static_gain[0], 0.1);
  EXPECT_EQ(e.leader_switches[0], 3);
  EXPECT_FALSE(e.has(Label::direct_exposure));
  EXPECT_TRUE(has_reason(e, "switched"));
  // One stage in the ambiguity set: the co-critical claim is about ranks (issue 28: labelled).
  EXPECT_EQ(e.co_critical_stages.size(), 1u);
  EXPECT_TRUE(e.has(Label::co_critical));
}

TEST(Labeler, forward_device_and_host_overhead_never_fire_together) {
  // Finding 3: rank 6's CPU-wall forward is slow with a low event time while rank 2's event time
  // is high: the event evidence is high, so the host-overhead reading does not stand.
  auto m = sync_window(8, 40, 6, 1, 0.150);
  for (int t = 0; t < 40; ++t)
    for (int r = 0; r < 8; ++r) m.set_fwd_event(t, r, EventState::ready, r == 2 ? 0.200 : 0.030);
  const auto e = evaluate(m);
  EXPECT_EQ(e.group_name(e.share_order[0]), "model.fwd_loss_cpu_wall");
  EXPECT_TRUE(e.has(Label::forward_device_supported));
  EXPECT_FALSE(e.has(Label::forward_host_overhead_suspected));
}

TEST(Labeler, mixed_or_partial_accumulation_is_ambiguous) {
  // Finding 4: one '#' is not an unfolded schema.
  EXPECT_TRUE(evaluate(one_step({"data#0", "bwd"}, {{1, 2}, {1, 2}}, 4)).has(Label::gradient_accumulation_ambiguous));
  EXPECT_TRUE(evaluate(one_step({"data#0", "bwd#0", "data#1", "bwd#1"}, {{1, 2, 1, 2}, {1, 2, 1, 2}}, 4))
                  .has(Label::gradient_accumulation_ambiguous));  // microsteps 2 and 3 missing
  EXPECT_TRUE(evaluate(one_step({"data#0", "bwd", "data#1"}, {{1, 2, 1}, {1, 2, 1}}, 2))
                  .has(Label::gradient_accumulation_ambiguous));  // a collapsed stage inside the loop
  EXPECT_FALSE(evaluate(one_step({"data#0", "bwd#0", "data#1", "bwd#1", "optim"}, {{1, 2, 1, 2, 1}, {1, 2, 1, 2, 1}}, 2))
                   .has(Label::gradient_accumulation_ambiguous));
}

TEST(Labeler, co_critical_names_at_least_two_stages) {
  // Finding 5, since issue 28 the extension co_critical_needs_two_stages (with C_R): a healthy
  // synchronous window has backward as its largest stage with gain ~0; the ambiguity set is
  // {backward} alone, so co_critical (read as "stages are not separable") does not fire.
  LabelConfig ext;
  ext.co_critical_needs_two_stages = true;
  ext.ambiguity_residual_leaders = true;
  const auto healthy = evaluate(sync_window(8, 30, -1, 0, 0.0), ext);
  EXPECT_EQ(healthy.group_name(healthy.share_order[0]), "model.backward_cpu_wall");
  EXPECT_EQ(healthy.co_critical_stages.size(), 1u);
  EXPECT_FALSE(healthy.has(Label::co_critical));
  // A data tail on a synchronous step: data leads, the displaced waits keep backward in play
  // (C_R: backward leads once data is at its baseline).
  const auto tail = evaluate(sync_window(8, 30, 5, 0, 0.150), ext);
  EXPECT_TRUE(tail.has(Label::co_critical));
  EXPECT_EQ(names(tail, tail.co_critical_stages), (std::vector<std::string>{"data.next_wait", "model.backward_cpu_wall"}));
  // Appendix C's set (the default) names data alone; the low-gain rule labels it all the same.
  const auto paper = evaluate(sync_window(8, 30, 5, 0, 0.150));
  EXPECT_TRUE(paper.has(Label::co_critical));
  EXPECT_EQ(names(paper, paper.co_critical_stages), (std::vector<std::string>{"data.next_wait"}));
}

TEST(Labeler, share_tie_is_exactly_the_share_part_of_the_ambiguity_set) {
  // Finding 5: six stages with shares 0.19 .. 0.155, all within eta_A of the top: every one is in
  // C_A, so the near tie fires (the old rule also asked A_s2 >= gamma_A / 2 = 0.2 and did not).
  const std::vector<double> d = {1.9, 3.6, 5.25, 6.85, 8.45, 10.0};  // rank k works in stage k only
  std::vector<std::vector<double>> ranks(6, std::vector<double>(6, 0.0));
  for (int k = 0; k < 6; ++k) ranks[k][k] = d[k];
  const auto e = evaluate(one_step({"a", "b", "c", "d", "e", "f"}, ranks));
  ASSERT_NEAR(e.shares[0], 0.19, 1e-12);
  ASSERT_NEAR(e.shares[1], 0.17, 1e-12);
  EXPECT_TRUE(e.has(Label::co_critical));
  EXPECT_EQ(e.co_critical_stages.size(), 6u);
}

TEST(Labeler, likely_sync_wait_needs_role_metadata) {
  // Finding 6: no role metadata is weak role metadata (Table 12), not proof of homogeneity.
  auto m = sync_window(8, 30, 5, 0, 0.150);
  LabelConfig cfg;
  cfg.wait_model = {"data.next_wait"};
  auto e = evaluate(m, cfg);
  EXPECT_TRUE(e.has(Label::sync_wait_dependent));
  EXPECT_FALSE(e.has(Label::likely_sync_wait));
  EXPECT_TRUE(has_reason(e, "role metadata"));
  m.set_roles(std::vector<std::string>(8, "dp"));
  e = evaluate(m, cfg);
  EXPECT_TRUE(e.has(Label::likely_sync_wait));
  // Partly declared roles are weak metadata, not different roles.
  std::vector<std::string> partial(8, "dp");
  partial[3] = "";
  m.set_roles(partial);
  e = evaluate(m, cfg);
  EXPECT_FALSE(e.has(Label::role_aware_needed));
  EXPECT_FALSE(e.has(Label::likely_sync_wait));
}

TEST(Labeler, event_scope_limited_needs_samples) {
  // Finding 7: with no event sampled there is no device evidence to limit.
  LabelConfig cfg;
  cfg.event_scope_limited = true;
  const auto e = evaluate(sync_window(4, 10, 1, 0, 0.2), cfg);
  EXPECT_FALSE(e.has(Label::forward_event_scope_limited));
}

TEST(Labeler, switch_rate_counts_chances_per_microstep_stage) {
  // Finding 7: group a has three microstep stages, each with two confident leaders; two of them
  // switch. Two switches in three chances (0.67 > gamma_switch), not 2 / (6 - 1) = 0.4.
  StageMatrix m(StageSchema({"a#0", "a#1", "a#2"}, true, 3), 2, 0, 2);
  m.set_record(0, 0, std::vector<double>{3, 3, 3}, 9.0);  // closed steps: wall = Σ d
  m.set_record(0, 1, std::vector<double>{1, 1, 1}, 3.0);
  m.set_record(1, 0, std::vector<double>{1, 1, 6}, 8.0);
  m.set_record(1, 1, std::vector<double>{3, 3, 1}, 7.0);
  const auto e = evaluate(m);
  ASSERT_EQ(e.confident_leaders[0], 6);
  ASSERT_EQ(e.leader_switches[0], 2);
  EXPECT_TRUE(has_reason(e, "switched"));
}

TEST(Labeler, spillover_needs_forward_itself_to_stay_short) {
  // Finding 9: rank 2's forward event time is high, but its CPU-wall forward is long too (0.14 s
  // exposed per step) and backward leads: the device time did not spill over, it was paid in
  // forward. No forward_spillover_suspected.
  sf::verify::WindowSpec spec;
  spec.ranks = 8;
  spec.steps = 30;
  spec.base_s = {0.010, 0.140, 0.420, 0.005, 0.020};
  spec.jitter_rel = 0.02;
  const auto m0 = sf::verify::build_window(spec);
  auto m = m0;
  for (int t = 0; t < 30; ++t)
    for (int r = 0; r < 8; ++r) m.set_fwd_event(t, r, EventState::ready, r == 2 ? 0.200 : 0.030);
  const auto e = evaluate(m);
  EXPECT_EQ(e.group_name(e.share_order[0]), "model.backward_cpu_wall");
  EXPECT_FALSE(e.has(Label::forward_spillover_suspected));
}

TEST(Labeler, event_gate_counts_samples_of_the_deciding_rank) {
  // Finding 10: rank 2's one ready sample cannot make the forward event time high, however many
  // samples the other ranks have.
  auto m = sync_window(8, 40, 2, 2, 0.150);
  for (int t = 0; t < 40; ++t)
    for (int r = 0; r < 8; ++r)
      if (r != 2) m.set_fwd_event(t, r, EventState::ready, 0.030);
  m.set_fwd_event(7, 2, EventState::ready, 0.200);
  const auto e = evaluate(m);
  EXPECT_FALSE(e.has(Label::forward_device_supported));
  EXPECT_FALSE(e.has(Label::forward_spillover_suspected));
}

TEST(Labeler, slowest_rank_baseline_reports_the_largest_stage_of_the_slowest_rank) {
  // Finding 11 (§6.2: "the largest stage of the per-step slowest rank"): step 0's slowest rank
  // has a as its largest stage, step 1's has c; b is never anyone's largest stage, though it is
  // the largest sum of the slowest rank's durations.
  StageMatrix m(StageSchema({"a", "b", "c"}, false), 2, 0, 2);
  m.set_record(0, 0, std::vector<double>{3.0, 2.9, 0.0}, std::nullopt);
  m.set_record(0, 1, std::vector<double>{1, 1, 1}, std::nullopt);
  m.set_record(1, 0, std::vector<double>{0.0, 2.9, 3.0}, std::nullopt);
  m.set_record(1, 1, std::vector<double>{1, 1, 1}, std::nullopt);
  const auto e = evaluate(m);
  const auto& slow = e.baselines[BaselineRule::slowest_rank];
  EXPECT_DOUBLE_EQ(slow.score[0], 3.0);
  EXPECT_DOUBLE_EQ(slow.score[1], 0.0);
  EXPECT_DOUBLE_EQ(slow.score[2], 3.0);
  EXPECT_EQ(slow.order[0], 0);  // exact tie: the upstream stage first
}

TEST(Labeler, direct_exposure_needs_duration_spread_and_gain_to_agree) {
  // Finding 7 (decision: AND): a leads by share (0.5) and by gain against the no-stall reference
  // (0.375), and by raw duration, but every rank spends the same 4 s in it: its raw spread is 0,
  // below b and c. The three do not agree, so no direct_exposure.
  const auto m = one_step({"a", "b", "c"}, {{4, 1, 1}, {4, 2, 2}});
  LabelConfig cfg;
  cfg.gain_baseline = GainBaseline::reference;
  cfg.reference_s = {1.0, 2.0, 2.0, 0.0};  // a, b, c, residual
  const auto e = evaluate(m, cfg);
  ASSERT_NEAR(e.shares[0], 0.5, 1e-12);
  ASSERT_NEAR(e.static_gain[0], 0.375, 1e-12);
  EXPECT_FALSE(e.has(Label::direct_exposure));
  EXPECT_TRUE(has_reason(e, "raw spread ranks it below top-2"));
  // The same stall on one rank only: now spread agrees too.
  const auto one = evaluate(one_step({"a", "b", "c"}, {{1, 1, 1}, {4, 2, 2}}), cfg);
  EXPECT_TRUE(one.has(Label::direct_exposure));
}

TEST(Labeler, walls_of_zero_with_stage_time_are_overlap_error) {
  // A clock that steps back inside every step makes each wall read 0 s while the stages hold
  // time: that is all overlap, not none (the share was 0 when the wall sum was 0).
  StageMatrix m(StageSchema({"a", "b"}, true), 2, 0, 2);
  for (int t = 0; t < 2; ++t)
    for (int r = 0; r < 2; ++r) m.set_record(t, r, std::vector<double>{0.1, 0.2}, 0.0);
  const auto e = evaluate(m);
  EXPECT_DOUBLE_EQ(e.overlap_error_share, 1.0);
  EXPECT_TRUE(e.has(Label::telemetry_limited));
}

// ---- issue 28: the labeler as Table 12 says (each test failed on the labeler of 6cba82c) ----

TEST(Labeler28, healthy_events_on_every_step_give_no_device_label) {
  // N1: every rank's forward event time is ~65 ms on a ~200 ms step (0.25 of it is 50 ms): high
  // against the step, ordinary against the cohort. No forward device label on a healthy window.
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    sf::verify::WindowSpec spec;
    spec.ranks = 8;
    spec.steps = 40;
    spec.jitter_rel = 0.02;
    spec.residual_rel = 0.005;
    spec.seed = seed;
    auto m = sf::verify::build_window(spec);
    for (int t = 0; t < 40; ++t)
      for (int r = 0; r < 8; ++r) m.set_fwd_event(t, r, EventState::ready, 0.065 * (1 + 0.01 * ((t + 3 * r) % 5)));
    const auto e = evaluate(m);
    EXPECT_FALSE(e.has(Label::forward_device_supported)) << "seed " << seed;
    EXPECT_FALSE(e.has(Label::forward_spillover_suspected)) << "seed " << seed;
    for (auto l : e.labels) EXPECT_FALSE(is_strong(l)) << to_string(l) << " seed " << seed;
    EXPECT_TRUE(has_reason(e, "cohort"));
  }
}

TEST(Labeler28, ranks_trading_the_lead_of_one_stage_are_co_critical) {
  // N2 (Table 12: "multiple stages *or ranks* can plausibly remain bottlenecks"): stage a is
  // clearly the bottleneck, but ranks 0 and 1 take turns leading it. The ambiguity set holds a
  // alone; the window is still co_critical, and the reason names the ranks.
  const auto e = evaluate(alternating_leaders());
  ASSERT_EQ(e.leader_switches[0], 3);
  EXPECT_EQ(names(e, e.co_critical_stages), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(e.has(Label::co_critical));
  EXPECT_FALSE(e.has(Label::direct_exposure));
  EXPECT_TRUE(has_reason(e, "ranks 0,1"));
}

TEST(Labeler28, ambiguity_set_is_appendix_c_and_residual_leaders_an_option) {
  // N3: Appendix C's E_amb = C_A ∪ C_G. On §4's matrix r0 = (10, 0), r1 = (0, 10) no baseline
  // gives a gain and backward has no share, so E_amb = {data}; the low-gain rule with W = 0 makes
  // the window co_critical all the same. The §4 text's {data, backward} is C_R's reading (backward
  // leads once data is at its baseline): an option, off by default.
  const auto m = one_step({"data.next_wait", "model.backward_cpu_wall"}, {{10, 0}, {0, 10}});
  auto e = evaluate(m);
  EXPECT_EQ(names(e, e.co_critical_stages), (std::vector<std::string>{"data.next_wait"}));
  EXPECT_TRUE(e.has(Label::co_critical));
  LabelConfig cfg;
  cfg.ambiguity_residual_leaders = true;
  e = evaluate(m, cfg);
  EXPECT_EQ(names(e, e.co_critical_stages), (std::vector<std::string>{"data.next_wait", "model.backward_cpu_wall"}));
  EXPECT_TRUE(e.has(Label::co_critical));
}

TEST(Labeler28, low_gain_without_wait_model_is_co_critical_whatever_the_set) {
  // N3: Appendix C: "the same low-gain configuration with W_s1 = 0 is co_critical". A healthy
  // synchronous window (backward dominant, gain ~0) is co_critical with E_amb = {backward}; the
  // extension that asks for a second stage withholds it.
  const auto m = sync_window(8, 30, -1, 0, 0.0);
  auto e = evaluate(m);
  ASSERT_EQ(e.group_name(e.share_order[0]), "model.backward_cpu_wall");
  EXPECT_EQ(e.co_critical_stages.size(), 1u);
  EXPECT_TRUE(e.has(Label::co_critical));
  LabelConfig cfg;
  cfg.co_critical_needs_two_stages = true;
  e = evaluate(m, cfg);
  EXPECT_FALSE(e.has(Label::co_critical));
  EXPECT_TRUE(has_reason(e, "no co_critical"));
}

TEST(Labeler28, spread_agreement_is_decided_by_value_not_stage_order) {
  // N4: every rank spends the same time in each stage, so every raw spread is 0. The same
  // pattern at index 0 and at index 2 must get the same answer; a spread of 0 agrees with no
  // straggler, so neither is direct_exposure (the old top-2 by sort order said yes at index 0).
  LabelConfig cfg;
  cfg.gain_baseline = GainBaseline::reference;
  cfg.reference_s = {1.0, 1.0, 1.0, 0.0};
  const auto first = evaluate(one_step({"a", "b", "c"}, {{4, 1, 1}, {4, 1, 1}}), cfg);
  const auto last = evaluate(one_step({"a", "b", "c"}, {{1, 1, 4}, {1, 1, 4}}), cfg);
  ASSERT_GT(first.static_gain[0], cfg.gamma_g);
  ASSERT_GT(last.static_gain[2], cfg.gamma_g);
  EXPECT_EQ(first.has(Label::direct_exposure), last.has(Label::direct_exposure));
  EXPECT_FALSE(first.has(Label::direct_exposure));
  // R = 1: no spread at all, so no agreement and no direct_exposure.
  const auto one = evaluate(one_step({"a", "b", "c"}, {{4, 1, 1}}), cfg);
  ASSERT_GT(one.static_gain[0], cfg.gamma_g);
  EXPECT_FALSE(one.has(Label::direct_exposure));
  // c leads (share 0.6) and its spread 0.5 ties b's behind a's 1.0: c is among the top two by
  // value, though sort order put b second.
  const auto tie2 = evaluate(one_step({"a", "b", "c"}, {{3, 1, 6}, {1, 2, 7}}), cfg);
  ASSERT_EQ(tie2.share_order[0], 2);
  ASSERT_EQ(tie2.baselines[BaselineRule::raw_spread].order[1], 1);
  EXPECT_TRUE(tie2.has(Label::direct_exposure));
}

TEST(Labeler28, collapsed_forward_and_backward_beside_unfolded_data_are_mixed) {
  // N5 (Table 12: "accumulation microsteps were collapsed or mixed"): m = 4, data unfolded per
  // microstep, forward and backward collapsed into one stage each after the loop. Structurally
  // they look like once-per-step stages (optimizer, callbacks); by name they are the stages every
  // microstep runs.
  const std::vector<std::string> mixed = {"data.next_wait#0", "data.next_wait#1", "data.next_wait#2", "data.next_wait#3",
                                          "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"};
  StageMatrix m(StageSchema(mixed, true, 4), 2, 0, 1);
  for (int r = 0; r < 2; ++r) m.set_record(0, r, std::vector<double>{1, 1, 1, 1, 4, 8, 1}, 17.0);
  const auto ev = evaluate(m);
  EXPECT_TRUE(ev.has(Label::gradient_accumulation_ambiguous));
  EXPECT_TRUE(has_reason(ev, "model.fwd_loss_cpu_wall"));
  // Unfolded as the recorder unfolds it (data, forward, backward per microstep; callbacks and
  // optimizer once): not ambiguous.
  std::vector<std::string> unfolded;
  for (int i = 0; i < 4; ++i)
    for (const char* n : {"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"})
      unfolded.push_back(std::string(n) + "#" + std::to_string(i));
  unfolded.push_back("callbacks.cpu_wall");
  unfolded.push_back("optim.step_cpu_wall");
  StageMatrix u(StageSchema(unfolded, true, 4), 2, 0, 1);
  for (int r = 0; r < 2; ++r) u.set_record(0, r, std::vector<double>(14, 1.0), 14.0);
  EXPECT_FALSE(evaluate(u).has(Label::gradient_accumulation_ambiguous));
}

TEST(Labeler28, a_window_without_wall_times_cannot_pass_the_closure_gates) {
  // N6 (Table 12, telemetry_limited: "missing probes cap confidence"; Table 13: the closure and
  // overlap gates "suppress strong labels when explicit spans do not close the step"): with no
  // step wall the closure cannot be checked, so the window is telemetry_limited and carries no
  // strong label; it said nothing and could get direct_exposure.
  const auto m = sync_window(8, 30, 3, 4, 0.400, /*sync=*/false);
  StageMatrix bare(StageSchema(default_explicit_stages(), false), 8, 100, 30);
  for (int t = 0; t < 30; ++t)
    for (int r = 0; r < 8; ++r) {
      std::vector<double> d(5);
      for (int s = 0; s < 5; ++s) d[s] = m.d(t, r, s);
      bare.set_record(t, r, d, std::nullopt);
    }
  ASSERT_TRUE(evaluate(m).has(Label::direct_exposure));
  auto e = evaluate(bare);
  EXPECT_TRUE(e.has(Label::telemetry_limited));
  for (auto l : e.labels) EXPECT_FALSE(is_strong(l)) << to_string(l);
  EXPECT_TRUE(has_reason(e, "no step wall"));
  // The option that accepts such windows still says the gates were not checked.
  LabelConfig cfg;
  cfg.require_wall = false;
  e = evaluate(bare, cfg);
  EXPECT_FALSE(e.has(Label::telemetry_limited));
  EXPECT_TRUE(e.has(Label::direct_exposure));
  EXPECT_TRUE(has_reason(e, "no step wall"));
}

TEST(Labeler28, spillover_needs_an_explicit_stage_to_lead) {
  // Table 12: the device time "appears later, often in backward": an explicit stage downstream of
  // forward. Here rank 2 spends 0.5 s per step outside every explicit stage, so the residual leads
  // (the closure gate opened to let the window through), while rank 5's forward event time stands
  // out. The residual is no stage the forward work spilled into: no forward_spillover_suspected.
  auto m0 = sync_window(8, 30, -1, 0, 0.0);
  StageMatrix m = StageMatrix::same_layout(m0, 100, 30);
  for (int t = 0; t < 30; ++t)
    for (int r = 0; r < 8; ++r) {
      std::vector<double> d(5);
      for (int s = 0; s < 5; ++s) d[s] = m0.d(t, r, s);
      m.set_record(t, r, d, m0.wall(t, r) + (r == 2 ? 0.5 : 0.0));
      m.set_fwd_event(t, r, EventState::ready, r == 5 ? 0.45 : 0.03);
    }
  LabelConfig cfg;
  cfg.max_closure_residual_share = 1.0;
  const auto e = evaluate(m, cfg);
  ASSERT_EQ(e.group_name(e.share_order[0]), "step.other_cpu_wall");
  ASSERT_FALSE(e.has(Label::telemetry_limited));
  EXPECT_FALSE(e.has(Label::forward_spillover_suspected));
}

namespace {

/// Step t of a window made to take every road of the lean rank pass: jittered stages whose
/// prefix middles jump between steps (stage 2 three times longer on odd steps: the brackets miss
/// and, past 2^16 ranks, sample), two ranks tied at the top of every stage (step 3), every rank
/// the same (step 5) and two tops within the tie tolerance (step 6).
StageMatrix lean_case_step(const StageSchema& schema, int ranks, int t, std::mt19937_64& rng) {
  StageMatrix one(schema, ranks, t, 1);
  const int E = schema.explicit_count();
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto cols = one.begin_step(0);
  std::vector<double> wall(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    double sum = 0;
    for (int s = 0; s < E; ++s) {
      double v = 0.01 * (s + 1) * (1 + 0.2 * u(rng)) * (s == 2 && t % 2 == 1 ? 3.0 : 1.0);
      if (t == 5) v = 0.01 * (s + 1);
      if (t == 3 && (r == 5 || r == ranks - 3)) v = 0.5 * (s + 1);
      if (t == 6 && (r == 7 || r == 9)) v = 0.5 * (s + 1) + (r == 9 && s == 0 ? 1e-10 : 0.0);
      cols[s][r] = v;
      sum += v;
    }
    wall[r] = sum + (t == 5 ? 0.002 : 0.004 * u(rng));
  }
  one.commit_step(0, wall.data());
  return one;
}

}  // namespace

// The lean rank pass (no prefix rows kept: the lag's middles bracketed as its blocks go by, each
// leader from its stage's first top, a row formed again only for a miss or a tie) gives the step
// facts and the evidence of the pass that keeps the rows, bit for bit: before any hint, where the
// brackets miss and the hints sample, where ranks tie at the top or everywhere, and below the 64
// values a bracket needs.
TEST(StreamingAccumulator, lean_rank_pass_gives_the_kept_rows_facts) {
  const StageSchema schema = StageSchema::default_schema();
  const std::int64_t kLeanFrom = detail::lean_rank_pass_bytes;
  for (const int ranks : {40, 300, 70000}) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(ranks));
    StreamingAccumulator lean(schema, ranks, {}), kept(schema, ranks, {});
    StepFacts a, b;
    for (int t = 0; t < 9; ++t) {
      const StageMatrix one = lean_case_step(schema, ranks, t, rng);
      detail::lean_rank_pass_bytes = 0;
      lean.add_step(one, &a);
      detail::lean_rank_pass_bytes = std::numeric_limits<std::int64_t>::max();
      kept.add_step(one, &b);
      detail::lean_rank_pass_bytes = kLeanFrom;
      SCOPED_TRACE("ranks " + std::to_string(ranks) + " step " + std::to_string(t));
      EXPECT_EQ(a.accounting.frontier, b.accounting.frontier);
      EXPECT_EQ(a.accounting.advance, b.accounting.advance);
      EXPECT_EQ(a.accounting.gap, b.accounting.gap);
      EXPECT_EQ(a.accounting.leader, b.accounting.leader);
      ASSERT_EQ(a.accounting.ties.size(), b.accounting.ties.size());
      for (std::size_t i = 0; i < a.accounting.ties.size(); ++i) EXPECT_EQ(a.accounting.ties[i].ranks, b.accounting.ties[i].ranks);
      EXPECT_EQ(a.lag_s, b.lag_s);
      if (t == 3) {
        EXPECT_EQ(a.accounting.leader(0, 1), Accounting::kTie);  // the tie was made
      }
    }
    EXPECT_EQ(sf::verify::evidence_difference(lean.finish(), kept.finish(), 0.0), "") << ranks << " ranks";
  }
}
