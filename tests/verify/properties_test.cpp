// The frontier identities as RapidCheck properties; bodies live in sf::verify so that
// `sf-testbed verify` checks exactly the same statements.
#include "sf/verify/verify.h"
#include "verify/generators.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace v = sf::verify;

RC_GTEST_PROP(Frontier, advances_telescope, (const v::GenWindow& w)) { v::advances_telescope(w); }
RC_GTEST_PROP(Frontier, advances_nonnegative, (const v::GenWindow& w)) { v::advances_nonnegative(w); }
RC_GTEST_PROP(Frontier, slack_identity, (const v::GenWindow& w)) { v::slack_identity(w); }
RC_GTEST_PROP(Frontier, prop1_bounds, (const v::GenWindow& w)) { v::prop1_bounds(w); }
RC_GTEST_PROP(Frontier, prop1_tight, (const v::GenTightness& g)) { v::prop1_tight(g); }
RC_GTEST_PROP(Frontier, prop2_bounds, (const v::GenWindow& w)) { v::prop2_bounds(w); }
RC_GTEST_PROP(Frontier, prop2_tight, (const v::GenTightness& g)) { v::prop2_tight(g); }
RC_GTEST_PROP(Frontier, prop3_stability, (const v::GenPerturbed& p)) { v::prop3_stability(p); }
RC_GTEST_PROP(Frontier, clock_offset_invariance, (const v::GenClockWindow& w)) { v::clock_offset_invariance(w); }
RC_GTEST_PROP(Frontier, rank_permutation_invariance, (const v::GenWindow& w)) { v::rank_permutation_invariance(w); }
RC_GTEST_PROP(Frontier, monotone_in_delay, (const v::GenWindow& w)) { v::monotone_in_delay(w); }
RC_GTEST_PROP(Frontier, single_rank_is_own_vector, ()) { v::single_rank_is_own_vector(); }
RC_GTEST_PROP(Frontier, shares_sum_to_one, (const v::GenWindow& w)) { v::shares_sum_to_one(w); }
RC_GTEST_PROP(Frontier, streaming_equals_window, ()) { v::streaming_equals_window(); }
RC_GTEST_PROP(Frontier, routing_set_minimal, (const v::GenWindow& w)) { v::routing_set_minimal(w); }
RC_GTEST_PROP(Frontier, gain_in_unit_interval, (const v::GenWindow& w)) { v::gain_in_unit_interval(w); }
RC_GTEST_PROP(Frontier, telemetry_limited_suppresses_strong_labels, ()) {
  v::telemetry_limited_suppresses_strong_labels();
}

// Every registered property has a GoogleTest twin above.
TEST(Frontier, every_property_is_tested_here) { EXPECT_EQ(v::properties().size(), 17u); }
