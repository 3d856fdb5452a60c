#include "sf/frontier/frontier.h"
#include "sf/verify/verify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace sf::frontier;

namespace {

StageMatrix three_stage(const std::vector<std::vector<double>>& ranks) {
  StageMatrix m(StageSchema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"}, false),
                static_cast<int>(ranks.size()), 0, 1);
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) m.set_record(0, r, ranks[r], std::nullopt);
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
  StageMatrix m(StageSchema({"data.next_wait", "model.backward_cpu_wall"}, false), 2, 0, 1);
  m.set_record(0, 0, std::vector<double>{10, 0}, std::nullopt);
  m.set_record(0, 1, std::vector<double>{0, 10}, std::nullopt);
  const auto e = evaluate(m);
  EXPECT_DOUBLE_EQ(e.advances_s[0], 10.0);
  EXPECT_DOUBLE_EQ(e.advances_s[1], 0.0);
  EXPECT_TRUE(e.has(Label::co_critical));
  EXPECT_EQ(names(e, e.co_critical_stages), (std::vector<std::string>{"data.next_wait", "model.backward_cpu_wall"}));
  EXPECT_FALSE(e.has(Label::direct_exposure));
}

TEST(Labels, sync_wait_window_is_co_critical_by_default_and_sync_wait_with_model) {
  const auto m = sync_window(8, 30, 5, 0, 0.150);
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
  EXPECT_EQ(e.missing_ranks, std::vector<int>{2});
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

TEST(Shares, floor_reports_raw_advances_only) {
  StageMatrix m(StageSchema({"a", "b"}, false), 2, 0, 1);
  m.set_record(0, 0, std::vector<double>{1e-9, 0}, std::nullopt);
  m.set_record(0, 1, std::vector<double>{0, 1e-9}, std::nullopt);
  const auto e = evaluate(m);
  EXPECT_FALSE(e.shares_valid);
  EXPECT_EQ(e.labels, std::vector<Label>{Label::frontier_accounting});
  EXPECT_FALSE(e.routing_set.empty());
}

TEST(Shares, single_rank_gets_a_reason_and_no_distributed_labels) {
  StageMatrix m(StageSchema({"a", "b"}, false), 1, 0, 3);
  for (int t = 0; t < 3; ++t) m.set_record(t, 0, std::vector<double>{1, 3}, std::nullopt);
  const auto e = evaluate(m);
  EXPECT_FALSE(e.has(Label::co_critical));
  EXPECT_FALSE(e.has(Label::sync_wait_dependent));
  EXPECT_NEAR(e.shares[1], 0.75, 1e-12);
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
