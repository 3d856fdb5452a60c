// The frontier identities as RapidCheck properties; bodies live in sf::verify so that
// `sf-testbed verify` checks exactly the same statements.
#include "sf/verify/verify.h"
#include "verify/generators.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace v = sf::verify;
using sf::frontier::Label;

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
RC_GTEST_PROP(Frontier, account_equals_scalar_loop, (const v::GenWindow& w)) { v::account_equals_scalar_loop(w); }
RC_GTEST_PROP(Frontier, one_pass_equals_accounting, ()) { v::one_pass_equals_accounting(); }
RC_GTEST_PROP(Frontier, streaming_equals_window, ()) { v::streaming_equals_window(); }
RC_GTEST_PROP(Frontier, sparse_layout_equals_dense, ()) { v::sparse_layout_equals_dense(); }
RC_GTEST_PROP(Frontier, segment_equals_window, ()) { v::segment_equals_window(); }
RC_GTEST_PROP(Frontier, segment_tight, (const v::GenTightness& g)) { v::segment_tight(g); }
RC_GTEST_PROP(Frontier, routing_set_minimal, (const v::GenWindow& w)) { v::routing_set_minimal(w); }
RC_GTEST_PROP(Frontier, gain_equals_counterfactual, (const v::GenWindow& w)) { v::gain_equals_counterfactual(w); }
RC_GTEST_PROP(Frontier, differential_telescopes, (const v::GenWindow& w)) { v::differential_telescopes(w); }
RC_GTEST_PROP(Frontier, differential_tight, (const v::GenTightness& g)) { v::differential_tight(g); }
RC_GTEST_PROP(Frontier, telemetry_limited_suppresses_strong_labels, ()) {
  v::telemetry_limited_suppresses_strong_labels();
}

RC_GTEST_PROP(Labels, labels_consistent, (const v::GenLabelCase& c)) { v::labels_are_consistent(c); }
RC_GTEST_PROP(Labels, label_gradient_accumulation_ambiguous, (const v::GenAccumulation& a)) {
  v::accumulation_label_iff_collapsed_or_mixed(a);
}
#define SF_LABEL_PROP(NAME) \
  RC_GTEST_PROP(Labels, label_##NAME, (const v::GenLabelCase& c)) { v::label_fires_exactly_on_its_trigger(Label::NAME, c); }
SF_LABEL_PROP(frontier_accounting)
SF_LABEL_PROP(likely_sync_wait)
SF_LABEL_PROP(sync_wait_dependent)
SF_LABEL_PROP(direct_exposure)
SF_LABEL_PROP(forward_device_supported)
SF_LABEL_PROP(forward_spillover_suspected)
SF_LABEL_PROP(forward_host_overhead_suspected)
SF_LABEL_PROP(forward_event_scope_limited)
SF_LABEL_PROP(co_critical)
SF_LABEL_PROP(role_aware_needed)
SF_LABEL_PROP(telemetry_limited)
#undef SF_LABEL_PROP

// The label generator reaches both sides of every label's trigger: each label fires on some
// drawn case and stays silent on another (a generator that never produces a forward or sync-wait
// label could not test those labels).
TEST(Labels, generator_covers_both_sides_of_every_trigger) {
  int fired[sf::frontier::kLabelCount] = {}, silent[sf::frontier::kLabelCount] = {};
  const auto gen = v::gen_label_case();
  for (int i = 0; i < 3000; ++i) {
    const v::GenLabelCase c = gen(rc::Random(static_cast<std::uint64_t>(i) * 7919 + 1), 100).value();
    const auto e = sf::frontier::evaluate(c.matrix(), c.config());
    for (int l = 0; l < sf::frontier::kLabelCount; ++l) (e.has(static_cast<Label>(l)) ? fired : silent)[l]++;
  }
  for (int l = 0; l < sf::frontier::kLabelCount; ++l) {
    const auto name = sf::frontier::to_string(static_cast<Label>(l));
    if (static_cast<Label>(l) == Label::gradient_accumulation_ambiguous) continue;  // its own generator
    EXPECT_GT(fired[l], 0) << name << " never fires on the generated cases";
    if (static_cast<Label>(l) != Label::frontier_accounting) {
      EXPECT_GT(silent[l], 0) << name << " always fires";
    }
  }
}

// Every registered property has a GoogleTest twin above.
TEST(Frontier, every_property_is_tested_here) { EXPECT_EQ(v::properties().size(), 37u); }
