#include "sf/formats/formats.h"
#include "sf/verify/verify.h"
#include "formats/stage_text.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>
#include <thread>
#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>
#include <bit>
#include <random>
#include <charconv>
#include <fstream>
#include <iterator>
#include <sstream>

using namespace sf;
using formats::FormatError;
using formats::MatrixFormat;

namespace {

std::vector<formats::Window> parse(const std::string& text, MatrixFormat f = MatrixFormat::jsonl,
                                   formats::ReadOptions opt = {}) {
  return formats::parse_stage_text(text, "t.jsonl", f, opt);
}

/// Expects a FormatError at `line` whose message contains `fragment`.
void expect_error(const std::string& text, std::int64_t line, const std::string& fragment,
                  MatrixFormat f = MatrixFormat::jsonl) {
  try {
    parse(text, f);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const FormatError& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

const std::string kHeader = R"({"schema":"sf.stages/1","stages":["a","b"],"world_size":2})";

}  // namespace

TEST(Jsonl, parses_records_in_any_order_with_residual) {
  const auto w = parse(kHeader + "\n" + R"({"step":4,"rank":1,"d":[1,2],"wall":3.5})" + "\n" +
                       R"({"step":3,"rank":0,"d":[0.5,0.25],"wall":1})" + "\n");
  ASSERT_EQ(w.size(), 1u);
  const auto& m = w[0].matrix;
  EXPECT_EQ(m.first_step(), 3);
  EXPECT_EQ(m.steps(), 2);
  EXPECT_EQ(m.stages(), 3);  // residual appended because wall is present
  EXPECT_DOUBLE_EQ(m.d(1, 1, 2), 0.5);
  EXPECT_DOUBLE_EQ(m.d(0, 0, 2), 0.25);
  EXPECT_FALSE(m.present(0, 1));
}

TEST(Jsonl, side_evidence_roles_and_telemetry_round_trip) {
  const std::string text =
      R"({"schema":"sf.stages/1","stages":["a","b"],"world_size":2,"roles":["x","y"],"window":{"first_step":10,"steps":3},)"
      R"("telemetry":{"gather_ok":false,"reasons":["late"],"dropped_records":2},"ranks":[{"rank":0,"local_rank":0,"node_rank":0,"hostname":"h0"},{"rank":1,"local_rank":1,"node_rank":0,"hostname":"h0"}]})"
      "\n"
      R"({"step":10,"rank":0,"d":[1,2],"side":{"fwd_event":"ready","fwd_event_s":0.125,"sync_wait":[null,0.5],"cpu_wait":0.03}})"
      "\n"
      R"({"step":11,"rank":1,"d":[1,2],"side":{"fwd_event":"missing"}})"
      "\n";
  const auto w = parse(text);
  ASSERT_EQ(w.size(), 1u);
  const auto& m = w[0].matrix;
  EXPECT_EQ(m.steps(), 3);
  EXPECT_EQ(m.roles(), (std::vector<std::string>{"x", "y"}));
  EXPECT_FALSE(w[0].telemetry.gather_ok);
  EXPECT_EQ(w[0].telemetry.dropped_records, 2);
  EXPECT_EQ(w[0].ranks.size(), 2u);
  EXPECT_EQ(m.fwd_event_state(0, 0), frontier::EventState::ready);
  EXPECT_DOUBLE_EQ(m.fwd_event_s(0, 0), 0.125);
  EXPECT_EQ(m.fwd_event_state(1, 1), frontier::EventState::missing);
  EXPECT_TRUE(std::isnan(m.sync_wait(0, 0, 0)));
  EXPECT_DOUBLE_EQ(m.sync_wait(0, 0, 1), 0.5);
  EXPECT_DOUBLE_EQ(m.cpu_wait(0, 0), 0.03f);
  EXPECT_TRUE(std::isnan(m.cpu_wait(1, 1)));

  std::ostringstream out;
  formats::write_jsonl(out, w[0]);
  const auto again = parse(out.str());
  const auto a = frontier::evaluate(w[0].matrix, {}, w[0].telemetry);
  const auto b = frontier::evaluate(again[0].matrix, {}, again[0].telemetry);
  EXPECT_EQ(formats::evidence_to_json(a, w[0].ranks).dump(), formats::evidence_to_json(b, again[0].ranks).dump());
}

TEST(Jsonl, a_second_header_closes_the_window) {
  const auto w = parse(kHeader + "\n" + R"({"step":0,"rank":0,"d":[1,2]})" + "\n" +
                       R"({"schema":"sf.stages/1","stages":["a","b","c"],"world_size":4})" + "\n" +
                       R"({"step":7,"rank":3,"d":[1,2,3]})" + "\n");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].matrix.world_size(), 4);
  EXPECT_EQ(w[1].matrix.ranks(), 1);  // only rank 3 has records: one column
  EXPECT_EQ(w[1].matrix.rank_id(0), 3);
  EXPECT_EQ(w[1].header_line, 3);
}

// A world far larger than the ranks with records is read sparse: one column per rank present, the
// rest reported as missing ranges, ranks named by id (issue 12, class 5: memory follows records).
TEST(SparseWorld, jsonl_two_records_in_a_world_of_2_pow_24) {
  const int world = formats::kWorldSizeCeiling;
  std::string text = R"({"schema":"sf.stages/1","stages":["a","b"],"world_size":)" + std::to_string(world) + "}\n";
  for (int t = 0; t < 3; ++t) {
    text += R"({"step":)" + std::to_string(t) + R"(,"rank":7,"d":[0.1,0.2]})" + "\n";
    text += R"({"step":)" + std::to_string(t) + R"(,"rank":)" + std::to_string(world - 1) + R"(,"d":[0.1,0.9]})" + "\n";
  }
  formats::ReadOptions opt;
  opt.limits.max_world_size = world;
  const auto w = parse(text, MatrixFormat::jsonl, opt);
  ASSERT_EQ(w.size(), 1u);
  const auto& m = w[0].matrix;
  EXPECT_EQ(m.world_size(), world);
  EXPECT_EQ(m.ranks(), 2);
  EXPECT_EQ(m.data().size(), 2 * 3 * 2);  // dense would be 2^24 x 3 x 2 doubles
  EXPECT_EQ(m.rank_id(1), world - 1);
  const auto e = frontier::evaluate(m);
  EXPECT_EQ(e.world_size, world);
  EXPECT_EQ(e.missing_rank_count, world - 2);
  EXPECT_EQ(e.missing_ranks, (std::vector<frontier::RankRange>{{0, 6}, {8, world - 2}}));
  EXPECT_EQ(e.missing_records, std::int64_t{3} * (world - 2));
  EXPECT_EQ(e.suspect.rank, world - 1);  // b leads on the last rank, named by its id
  ASSERT_FALSE(e.leaders.empty());
  for (const auto& list : e.leaders)
    for (const auto& l : list) EXPECT_TRUE(l.rank == 7 || l.rank == world - 1) << l.rank;
  const std::string packet = formats::evidence_to_json(e, w[0].ranks).dump();
  EXPECT_NE(packet.find(R"("missing_ranks":[[0,6],[8,16777214]],"missing_rank_count":16777214)"), std::string::npos) << packet;
  // Written back, the file says the same world and rank ids.
  std::ostringstream out;
  formats::write_jsonl(out, w[0]);
  const auto again = parse(out.str(), MatrixFormat::jsonl, opt);
  EXPECT_EQ(formats::evidence_to_json(frontier::evaluate(again[0].matrix), again[0].ranks).dump(), packet);
}

TEST(SparseWorld, csv_with_a_large_declared_world_and_its_duplicates) {
  formats::ReadOptions opt;
  opt.limits.max_world_size = 1 << 22;
  opt.world_size = 1 << 22;
  const std::string csv = "step,rank,a,b\n0,5,0.1,0.2\n0,4000000,0.3,0.1\n1,5,0.1,0.2\n1,4000000,0.3,0.1\n";
  const auto w = parse(csv, MatrixFormat::csv, opt);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].matrix.ranks(), 2);
  EXPECT_EQ(w[0].matrix.world_size(), 1 << 22);
  const auto e = frontier::evaluate(w[0].matrix);
  EXPECT_EQ(e.missing_rank_count, (1 << 22) - 2);
  EXPECT_EQ(e.suspect.rank, 4000000);
  try {
    parse(csv + "1,4000000,0.3,0.1\n", MatrixFormat::csv, opt);
    ADD_FAILURE() << "no error for a duplicate";
  } catch (const FormatError& err) {
    EXPECT_EQ(err.line(), 6);
    EXPECT_NE(std::string(err.what()).find("(step 1, rank 4000000), first seen at line 5"), std::string::npos) << err.what();
  }
  // Without --world-size the world is max(rank) + 1: still two columns.
  opt.world_size = 0;
  const auto w2 = parse(csv, MatrixFormat::csv, opt);
  EXPECT_EQ(w2[0].matrix.world_size(), 4000001);
  EXPECT_EQ(w2[0].matrix.ranks(), 2);
}

TEST(Jsonl, window_option_splits_by_step) {
  std::string text = kHeader + "\n";
  for (int t = 0; t < 10; ++t) text += R"({"step":)" + std::to_string(t) + R"(,"rank":0,"d":[1,2]})" + "\n";
  formats::ReadOptions opt;
  opt.window_steps = 4;
  const auto w = parse(text, MatrixFormat::jsonl, opt);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[2].matrix.first_step(), 8);
  EXPECT_EQ(w[2].matrix.steps(), 2);
}

TEST(Jsonl, malformed_inputs_name_the_line_and_the_expectation) {
  const std::string h = kHeader + "\n";
  expect_error("", 0, "empty file");
  expect_error("\n  \n", 0, "empty file");
  expect_error(R"({"step":0,"rank":0,"d":[1,2]})", 1, "record before any header");
  expect_error(R"({"schema":"sf.stages/9","stages":["a"],"world_size":1})", 1, "expected \"sf.stages/1\"");
  expect_error(R"({"schema":"sf.stages/1","stages":[],"world_size":1})", 1, "non-empty array");
  expect_error(R"({"schema":"sf.stages/1","stages":["a","a"],"world_size":1})", 1, "duplicate stage");
  expect_error(R"({"schema":"sf.stages/1","stages":["a"],"world_size":0})", 1, "world_size is 0");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,2])", 2, "not valid JSON");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,-2]})", 2, "expected a finite number of seconds >= 0");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,"x"]})", 2, "is a string, expected a number");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,NaN]})", 2, "not valid JSON");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,1e999]})", 2, "out of range");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,2,3]})", 2, "expected 2");
  expect_error(h + R"({"step":0,"rank":0})", 2, "missing \"d\"");
  expect_error(h + R"({"step":0.5,"rank":0,"d":[1,2]})", 2, "expected an integer");
  expect_error(h + R"({"rank":0,"d":[1,2]})", 2, "missing field \"step\"");
  expect_error(h + R"({"step":0,"rank":2,"d":[1,2]})", 2, "outside world size 2");
  expect_error(h + R"({"step":0,"rank":-1,"d":[1,2]})", 2, "outside world size 2");
  expect_error(h + R"({"step":0,"rank":1,"d":[1,2]})" + "\n" + R"({"step":0,"rank":1,"d":[1,2]})", 3,
               "duplicate record for (step 0, rank 1), first seen at line 2");
  expect_error(h + R"({"step":0,"rank":1,"d":[1,2],"wall":3})" + "\n" + R"({"step":1,"rank":1,"d":[1,2]})", 3,
               "no \"wall\"");
  expect_error(h + R"({"step":0,"rank":1,"d":[1,2],"wall":-3})", 2, "\"wall\"");
  expect_error(h + R"({"step":0,"rank":1,"d":[1,2],"side":{"fwd_event":"maybe"}})", 2, "expected \"ready\"");
  expect_error(h + "[1,2]", 2, "expected a JSON object");
  expect_error(h + std::string("\x01\xff\xfe garbage \x00 bytes", 19), 2, "a NUL byte at column 13");  // refused where it stands
  expect_error(h + std::string("\x01\xff\xfe garbage bytes", 17), 2, "not valid JSON");
}

TEST(Csv, parses_wide_rows_and_reports_bad_cells) {
  const auto w = parse("step,rank,a,b,wall\n0,0,1,2,3.5\n0,1, 0.5 ,0.25,1\n", MatrixFormat::csv);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].matrix.ranks(), 2);
  EXPECT_DOUBLE_EQ(w[0].matrix.d(0, 1, 0), 0.5);
  EXPECT_DOUBLE_EQ(w[0].matrix.d(0, 0, 2), 0.5);
  expect_error("", 0, "empty file", MatrixFormat::csv);
  expect_error("rank,step,a\n", 1, "expected step,rank", MatrixFormat::csv);
  expect_error("step,rank,a,wall\n0,0,abc,1\n", 2, "column 'a' is 'abc'", MatrixFormat::csv);
  expect_error("step,rank,a,wall\n0,0,nan,1\n", 2, "column 'a' is 'nan'", MatrixFormat::csv);
  expect_error("step,rank,a,wall\n0,0,-1,1\n", 2, "finite number", MatrixFormat::csv);
  expect_error("step,rank,a\n0,0,1,2\n", 2, "4 columns, expected 3", MatrixFormat::csv);
  expect_error("step,rank,a,b\n0,0,1\n", 2, "3 columns, expected 4", MatrixFormat::csv);
  expect_error("step,rank,a\n0,0,1\n0,0,2\n", 3, "duplicate record", MatrixFormat::csv);
  expect_error("step,rank,a\nx,0,1\n", 2, "integer step", MatrixFormat::csv);
}

TEST(Csv, write_then_read_is_identical) {
  const auto w = parse(kHeader + "\n" + R"({"step":0,"rank":0,"d":[0.1,0.30000000000000004],"wall":0.5})" + "\n" +
                       R"({"step":1,"rank":1,"d":[1e-9,2],"wall":2.1})" + "\n");
  std::ostringstream out;
  formats::write_csv(out, w[0].matrix);
  const auto back = parse(out.str(), MatrixFormat::csv);
  EXPECT_TRUE(back[0].matrix.data().isApprox(w[0].matrix.data(), 0.0));
}

TEST(Files, bundled_examples_and_extension_detection) {
  const std::string dir = std::string(SF_SOURCE_DIR) + "/examples/";
  const auto a = formats::read_stage_file(dir + "figure1.jsonl");
  const auto b = formats::read_stage_file(dir + "figure1.csv");
  EXPECT_TRUE(a[0].matrix.data().isApprox(b[0].matrix.data(), 0.0));
  EXPECT_THROW(formats::read_stage_file(dir + "does-not-exist.jsonl"), FormatError);
  EXPECT_THROW(formats::read_stage_file(dir + "figure1.txt"), FormatError);
  EXPECT_EQ(formats::format_from_path("x.ndjson"), MatrixFormat::jsonl);
}

TEST(Evidence, packet_has_documented_fields) {
  const auto w = formats::read_stage_file(std::string(SF_SOURCE_DIR) + "/examples/figure1.jsonl");
  const auto j = formats::evidence_to_json(frontier::evaluate(w[0].matrix));
  for (const char* k : {"schema", "stages", "window", "exposed_makespan_s", "per_stage_max_s", "per_stage_avg_s",
                        "advances_s", "shares", "static_gain", "routing_set", "co_critical_stages", "labels", "leaders",
                        "suspect", "baselines", "telemetry", "downgrade_reasons"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["schema"], "sf.evidence/6");
  EXPECT_NEAR(j["exposed_makespan_s"].get<double>(), 8.2, 1e-12);
  EXPECT_EQ(j["leaders"]["data.next_wait"][0]["rank"], 0);
  EXPECT_EQ(j["baselines"]["per_stage_max"]["ranked"][0], "model.backward_cpu_wall");
  EXPECT_TRUE(j["telemetry"]["closure_residual_share"].is_null());  // no wall in the file
}

TEST(Evidence, packet_carries_the_diagnosis_and_serves_as_a_reference) {
  // A straggler window and a healthy one from the project's builder: the packet of the healthy
  // one is a reference as good as its evidence (same means, spreads and cohort), and the diagnosis
  // against it is the same either way.
  sf::verify::WindowSpec spec;
  spec.ranks = 6;
  spec.steps = 12;
  const auto healthy = frontier::evaluate(sf::verify::build_window(spec));
  spec.slow_rank = 4;
  spec.slow_stage = 0;
  spec.delay_s = 0.08;
  spec.seed = 7;
  auto faulty = frontier::evaluate(sf::verify::build_window(spec));
  const auto packet = nlohmann::json::parse(formats::evidence_to_json(healthy).dump());
  const auto from_packet = formats::reference_from_packet(packet, "healthy.json");
  const auto direct = frontier::make_reference(healthy, "healthy.json");
  EXPECT_EQ(from_packet.groups, direct.groups);
  EXPECT_EQ(from_packet.steps, direct.steps);
  for (std::size_t g = 0; g < direct.groups.size(); ++g) {
    EXPECT_DOUBLE_EQ(from_packet.advance_mean_s[g], direct.advance_mean_s[g]);
    EXPECT_DOUBLE_EQ(from_packet.advance_sd_s[g], direct.advance_sd_s[g]);
    EXPECT_DOUBLE_EQ(from_packet.cohort_own_median_s[g], direct.cohort_own_median_s[g]);
  }
  auto a = faulty;
  frontier::diagnose_against(a, from_packet);
  frontier::diagnose_against(faulty, direct);
  EXPECT_EQ(a.diagnosis.group, faulty.diagnosis.group);
  EXPECT_EQ(a.diagnosis.rank, 4);
  EXPECT_DOUBLE_EQ(a.diagnosis.excess_s, faulty.diagnosis.excess_s);
  const auto j = formats::evidence_to_json(a);
  EXPECT_EQ(j["diagnosis"]["stage"], "data.next_wait");
  EXPECT_EQ(j["diagnosis"]["rank"], 4);
  EXPECT_EQ(j["diagnosis"]["basis"], "differential");
  EXPECT_EQ(j["diagnosis"]["reference"], "healthy.json");
  double sum = 0;
  for (const auto& [k, v] : j["differential"]["delta_advance_s"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, j["differential"]["delta_exposed_s"].get<double>(), 1e-12);
  EXPECT_NE(formats::diagnosis_line(a).find("rank 4 data.next_wait +"), std::string::npos);
  EXPECT_EQ(formats::evidence_table(a, "t").rfind("# diagnosis: rank 4 data.next_wait", 0), 0u);  // the first line
  // A second culprit named for its CPU wait alone (its stages inside their floors) is said as such,
  // not as a change of the stage where the step's change showed.
  {
    auto b = a;
    frontier::Diagnosis::Culprit c;
    c.rank = 3;
    c.group = b.diagnosis.group;
    c.excess_s = c.cpu_wait_s = 0.005;
    c.by_group_s.assign(static_cast<std::size_t>(b.schema.group_count()), 0.0);
    b.diagnosis.culprits.push_back(c);
    const auto l = formats::diagnosis_line(b);
    EXPECT_NE(l.find("; also rank 3 CPU wait +5.0 ms/step"), std::string::npos) << l;
    EXPECT_EQ(formats::answer_lines(b).rfind("# diagnosis: rank 4 data.next_wait", 0), 0u);
  }
  // Not a packet, or a packet without what a reference needs: one FormatError naming the file.
  EXPECT_THROW(formats::reference_from_packet(nlohmann::json::parse(R"({"x":1})"), "r.json"), FormatError);
  auto broken = packet;
  broken.erase("advances_s");
  try {
    formats::reference_from_packet(broken, "r.json");
    ADD_FAILURE() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("r.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("advances_s"), std::string::npos);
  }
}

TEST(Evidence, a_packet_reference_carries_the_collectives_costs_the_what_if_heals_a_starved_rank_to) {
  // Rank 2 starved of CPU: 40 ms late and the collective 60 ms past the last arrival instead of
  // 2 ms (tests/frontier/diagnose_test.cpp has the arithmetic). The healthy window's packet must
  // give the fix the same healthy collective as the window itself: run's packets come from the
  // reference in memory, `score --reference reference.json` from its packet.
  const auto make = [](double late_s, double collective_s) {
    const frontier::StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"}, false);
    frontier::StageMatrix m(schema, 5, 0, 12);
    for (int t = 0; t < 12; ++t)
      for (int r = 0; r < 5; ++r) {
        const bool slow = r == 2;
        m.set_record(t, r, std::vector<double>{0.010, 0.040, 0.100 + late_s + collective_s, 0.020}, std::nullopt);
        m.set_sync_wait(t, r, 2, collective_s + (slow ? 0.0 : late_s));
        m.set_cpu_wait(t, r, slow && late_s > 0 ? 0.200 + 0.001 * (t % 3) : 0.001 + 0.0001 * ((t + r) % 3));
      }
    return m;
  };
  const auto healthy = frontier::evaluate(make(0.0, 0.002));
  const auto packet = nlohmann::json::parse(formats::evidence_to_json(healthy).dump());
  ASSERT_TRUE(packet["whatif"]["collective_s"].is_object());
  EXPECT_NEAR(packet["whatif"]["collective_s"]["model.backward_cpu_wall"].get<double>(), 0.002, 1e-9);
  EXPECT_TRUE(packet["whatif"]["collective_s"]["data.next_wait"].is_null());
  const auto direct = frontier::make_reference(healthy, "healthy");
  const auto from_packet = formats::reference_from_packet(packet, "healthy");
  ASSERT_EQ(from_packet.collective_s.size(), direct.collective_s.size());
  for (std::size_t g = 0; g < direct.collective_s.size(); ++g) EXPECT_EQ(from_packet.collective_s[g], direct.collective_s[g]);
  auto a = frontier::evaluate(make(0.040, 0.060));
  auto b = a;
  frontier::diagnose_against(a, direct);
  frontier::diagnose_against(b, from_packet);
  ASSERT_EQ(b.whatif.fixes.size(), 1u);
  EXPECT_NEAR(b.whatif.fixes[0].healed_s, 0.172, 1e-6);  // the healthy step, not 230 ms
  EXPECT_EQ(formats::evidence_to_json(a).dump(), formats::evidence_to_json(b).dump());
  // An sf.evidence/5 packet has no costs (the fix keeps the slow collective); a bad cost is named.
  auto v5 = packet;
  v5["schema"] = "sf.evidence/5";
  EXPECT_TRUE(formats::reference_from_packet(v5, "old.json").collective_s.empty());
  auto bad = packet;
  bad["whatif"]["collective_s"]["model.backward_cpu_wall"] = -1;
  try {
    formats::reference_from_packet(bad, "r.json");
    ADD_FAILURE() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("whatif.collective_s\" for stage model.backward_cpu_wall"), std::string::npos) << e.what();
  }
}

TEST(Evidence, a_reference_file_is_a_dump_or_a_packet) {
  const std::string dir = ::testing::TempDir();
  sf::verify::WindowSpec spec;
  spec.ranks = 4;
  spec.steps = 8;
  const auto m = sf::verify::build_window(spec);
  formats::Window w{m, {}, {}, 1, {}};
  {
    std::ofstream out(dir + "sf_ref_dump.jsonl");
    formats::write_jsonl(out, w);
    std::ofstream pk(dir + "sf_ref_packet.json");
    pk << formats::evidence_to_json(frontier::evaluate(m)).dump() << "\n";
  }
  const auto a = formats::read_reference(dir + "sf_ref_dump.jsonl", {});
  const auto b = formats::read_reference(dir + "sf_ref_packet.json", {});
  EXPECT_EQ(a.steps, 8);
  EXPECT_EQ(a.groups, b.groups);
  for (std::size_t g = 0; g < a.groups.size(); ++g) EXPECT_DOUBLE_EQ(a.advance_mean_s[g], b.advance_mean_s[g]);
  EXPECT_THROW(formats::read_reference(dir + "sf_ref_missing.jsonl", {}), FormatError);
}

TEST(Config, file_keys_apply_and_unknown_keys_fail) {
  frontier::LabelConfig c;
  formats::apply_config_json(nlohmann::json::parse(R"({"tau_c":0.7,"gain_baseline":"rank_median","wait_model":["x"]})"),
                             c, "c.json");
  EXPECT_DOUBLE_EQ(c.tau_c, 0.7);
  EXPECT_EQ(c.gain_baseline, frontier::GainBaseline::rank_median);
  EXPECT_EQ(c.wait_model, std::vector<std::string>{"x"});
  EXPECT_THROW(formats::apply_config_json(nlohmann::json::parse(R"({"tau":0.7})"), c, "c.json"), FormatError);
  EXPECT_THROW(formats::apply_config_json(nlohmann::json::parse(R"({"tau_c":"high"})"), c, "c.json"), FormatError);
}

TEST(Files, atomic_write_replaces_content) {
  const std::string path = ::testing::TempDir() + "sf_atomic_test.json";
  formats::write_file_atomic(path, "first");
  formats::write_file_atomic(path, "second");
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(s, "second");
  EXPECT_THROW(formats::write_file_atomic("/nonexistent-dir/x.json", "x"), std::runtime_error);
}

// A path naming a device or FIFO is written in place, never replaced by a rename: `--out
// /dev/null` as root once turned /dev/null into a regular file. A FIFO made for the test stands
// in for the device (its reader sees the content; the FIFO is still a FIFO afterwards).
TEST(Files, atomic_write_leaves_a_fifo_a_fifo) {
  const std::string fifo = ::testing::TempDir() + "sf_atomic_fifo_" + std::to_string(::getpid());
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo);
    got.assign((std::istreambuf_iterator<char>(in)), {});
  });
  formats::write_file_atomic(fifo, "through the fifo");
  reader.join();
  EXPECT_EQ(got, "through the fifo");
  struct stat st{};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  std::remove(fifo.c_str());
  EXPECT_THROW(formats::write_file_atomic(::testing::TempDir(), "x"), std::runtime_error);  // a directory
}

// ---- audit of issue 12 (fix12): wraps, accepted forms, messages ----------------------------

// INT64_MIN..INT64_MAX is 2^64 steps: the span used to wrap to 0, pass the limit and index out
// of bounds. It is refused, in either format, at the record that widens the window.
TEST(StepSpan, int64_min_to_max_is_refused_not_wrapped) {
  const std::string jsonl = R"({"schema":"sf.stages/1","stages":["a"],"world_size":1})"
                            "\n"
                            R"({"step":-9223372036854775808,"rank":0,"d":[1]})"
                            "\n"
                            R"({"step":9223372036854775807,"rank":0,"d":[1]})"
                            "\n";
  expect_error(jsonl, 3, "window spans 18446744073709551616 steps");
  expect_error("step,rank,a\n-9223372036854775808,0,1\n9223372036854775807,0,1\n", 3,
               "window spans 18446744073709551616 steps", MatrixFormat::csv);
  // Reversed order and the last possible span within the limit still read.
  expect_error("step,rank,a\n9223372036854775807,0,1\n-9223372036854775808,0,1\n", 3, "--max-window-steps", MatrixFormat::csv);
  const auto w = parse("step,rank,a\n9223372036854775806,0,1\n9223372036854775807,0,2\n", MatrixFormat::csv);
  EXPECT_EQ(w[0].matrix.steps(), 2);
  EXPECT_EQ(w[0].matrix.first_step(), 9223372036854775806);
}

// Integer fields written as floats: accepted when the number as written is an exact integer.
TEST(Jsonl, integral_floats_are_integers_and_fractions_are_not) {
  const auto w = parse(R"({"schema":"sf.stages/1","stages":["a","b"],"world_size":2.0,"window":{"first_step":1e0,"steps":2.0}})"
                       "\n"
                       R"({"step":1.0,"rank":0.0,"d":[1,2]})"
                       "\n"
                       R"({"step":2,"rank":1e0,"d":[1,2]})"
                       "\n");
  EXPECT_EQ(w[0].matrix.first_step(), 1);
  EXPECT_EQ(w[0].matrix.steps(), 2);
  EXPECT_TRUE(w[0].matrix.present(0, 0));
  EXPECT_TRUE(w[0].matrix.present(1, 1));
  const std::string h = kHeader + "\n";
  // 2^53 + 1 is exact as an integer literal with a fraction of zeros: no rounding to 2^53.
  const auto big = parse(h + R"({"step":9007199254740993.000,"rank":0,"d":[1,2]})" + "\n");
  EXPECT_EQ(big[0].matrix.first_step(), 9007199254740993);
  expect_error(h + R"({"step":0.5,"rank":0,"d":[1,2]})", 2, "not a whole number; expected an integer");
  expect_error(h + R"({"step":1.0000000000000000001,"rank":0,"d":[1,2]})", 2, "not a whole number");
  expect_error(h + R"({"step":1,"rank":0.5,"d":[1,2]})", 2, "field \"rank\" is 0.5");
  // Past 64 bits: out of range, not "a number".
  expect_error(h + R"({"step":-9223372036854775809,"rank":0,"d":[1,2]})", 2, "outside the 64-bit integer range");
  expect_error(h + R"({"step":1e19,"rank":0,"d":[1,2]})", 2, "outside the 64-bit integer range");
  expect_error(h + R"({"step":9223372036854775808,"rank":0,"d":[1,2]})", 2, "outside the 64-bit integer range");
}

TEST(Jsonl, duplicate_keys_numbers_out_of_range_and_negative_underflow_name_the_field) {
  const std::string h = kHeader + "\n";
  expect_error(h + R"({"step":0,"rank":0,"d":[1,2],"step":1})", 2, "key \"step\" appears twice");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,2],"side":{"fwd_event":"missing","fwd_event":"ready"}})", 2,
               "key \"fwd_event\" appears twice in the object \"side\"");
  expect_error(R"({"schema":"sf.stages/1","stages":["a"],"world_size":1,"world_size":2})", 1, "key \"world_size\" appears twice");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,1e309]})", 2, "field \"d\"[1] is 1e309, a number out of range");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,2],"side":{"sync_wait":[null,1e999]}})", 2, "field \"side\".\"sync_wait\"[1] is 1e999");
  expect_error(h + R"({"step":0,"rank":0,"d":[1,-1e-400]})", 2, "field \"d\"[1] is -1e-400, a negative number");
  // A number deep inside an unknown field: the path keeps its ends.
  expect_error(h + R"({"step":0,"rank":0,"d":[1,2],"x":[[[[[[[[[[[[7,1e999]]]]]]]]]]]]})", 2,
               "field \"x\"[0][0][0]...[0][0][0][1] is 1e999");
  // -0 is zero, and a positive underflow reads as 0.
  const auto w = parse(h + R"({"step":0,"rank":0,"d":[-0.0,1e-400]})" + "\n");
  EXPECT_EQ(w[0].matrix.d(0, 0, 0), 0.0);
  EXPECT_FALSE(std::signbit(w[0].matrix.d(0, 0, 0)));
  EXPECT_EQ(w[0].matrix.d(0, 0, 1), 0.0);
}

TEST(Config, integral_floats_duplicate_keys_and_range_messages) {
  const auto c = formats::parse_config_text(R"({"max_missing_ranks":1e3,"min_event_samples":2.0})", "c.json");
  EXPECT_EQ(c.max_missing_ranks, 1000);
  EXPECT_EQ(c.min_event_samples, 2);
  auto message = [](const std::string& text) {
    try {
      formats::parse_config_text(text, "c.json");
    } catch (const FormatError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error for " << text;
    return std::string();
  };
  EXPECT_NE(message(R"({"max_missing_ranks":1.5})").find("not a whole number"), std::string::npos);
  EXPECT_NE(message(R"({"max_missing_ranks":3e9})").find("expected an integer in [0, 2147483647]"), std::string::npos);
  EXPECT_NE(message(R"({"tau_c":0.5,"tau_c":0.9})").find("key \"tau_c\" appears twice"), std::string::npos);
  EXPECT_NE(message(R"({"tau_c":1e309})").find("field \"tau_c\" is 1e309, a number out of range"), std::string::npos);
  EXPECT_NE(message(R"({"reference_s":[1e308]})").find("entry 0 is 1e+308, above the largest window time"), std::string::npos);
  EXPECT_NE(message(R"({"reference_s":[1,-2]})").find("entry 1 is -2, expected seconds >= 0"), std::string::npos);
  // An unknown key is quoted printably: a JSON "\n" in it once split the message (fuzz finding).
  EXPECT_NE(message(R"({"\n_bsdline":1})").find(R"(unknown config key "?_bsdline")"), std::string::npos);
  // A caller's own JSON (not parsed by parse_config_text) holding an integral float.
  frontier::LabelConfig d;
  formats::apply_config_json(nlohmann::json::parse(R"({"max_missing_ranks":7.0})"), d, "c.json");
  EXPECT_EQ(d.max_missing_ranks, 7);
}

// A header alone is no window, in either format (it printed "steps 0..-1").
TEST(EmptyWindow, header_only_is_no_records_in_jsonl_and_csv) {
  expect_error(kHeader + "\n", 1, "no records after the header; expected one record per (step, rank)");
  expect_error(kHeader + "\n" + kHeader + "\n" + R"({"step":0,"rank":0,"d":[1,2]})", 1, "no records after the header");
  expect_error(R"({"schema":"sf.stages/1","stages":["a"],"world_size":1,"window":{"first_step":5,"steps":0}})", 1,
               "no records after the header");
  expect_error("step,rank,a,b\n", 1, "no records after the header; expected one record per (step, rank)", MatrixFormat::csv);
  // A declared window of steps without records is still a window (every record missing).
  const auto w = parse(R"({"schema":"sf.stages/1","stages":["a"],"world_size":1,"window":{"first_step":5,"steps":2}})");
  EXPECT_EQ(w[0].matrix.steps(), 2);
}

// A float column writes integers as "12.0" or "1.2E+1": read exactly from the text, so step ids past
// 2^53 (where a double rounds) keep every digit; a fraction that is not zero is an error.
TEST(Csv, step_and_rank_written_as_integral_floats_are_read_exactly) {
  const auto w = formats::parse_stage_text("step,rank,a\n9007199254740993.0,0,1\n9007199254740993,1.0e0,1\n"
                                           "9.007199254740994E+15,0.00,2\n",
                                           "f.csv", MatrixFormat::csv);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].matrix.first_step(), 9007199254740993);
  EXPECT_EQ(w[0].matrix.steps(), 2);
  EXPECT_EQ(w[0].matrix.world_size(), 2);
  for (const char* bad : {"1.5", "1e-1", "1.0e", "1..0", "9223372036854775808.0", "1e400", "0x10"}) {
    try {
      formats::parse_stage_text("step,rank,a\n" + std::string(bad) + ",0,1\n", "f.csv", MatrixFormat::csv);
      ADD_FAILURE() << bad << " read as a step";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("expected an integer step"), std::string::npos) << bad << ": " << e.what();
    }
  }
}

TEST(Csv, negative_numbers_are_rejected_even_when_they_underflow) {
  expect_error("step,rank,a\n0,0,-1e-400\n", 2, "column 'a' is '-1e-400', expected a finite number of seconds >= 0",
               MatrixFormat::csv);
  expect_error("step;rank;a\n0;0;-1,5e-400\n", 2, "column 'a' is '-1,5e-400'", MatrixFormat::csv);
  const auto w = parse("step,rank,a,b\n0,0,-0.0,1e-400\n", MatrixFormat::csv);
  EXPECT_EQ(w[0].matrix.d(0, 0, 0), 0.0);
  EXPECT_FALSE(std::signbit(w[0].matrix.d(0, 0, 0)));
  EXPECT_EQ(w[0].matrix.d(0, 0, 1), 0.0);
}

// The readers parse seconds with fast_float (libfast-float-dev), inline; what they accept and the
// values must stay those of the rules written against std::from_chars (libstdc++ 12): the oracle
// below is that former rule, and every field of a corpus (hand-picked edges: nan, inf, signs, hex,
// blanks, under- and overflow, subnormals, long mantissas; then random forms) reads the same
// through both the plain path (',') and the general one (';').
namespace {
std::optional<double> seconds_by_std_from_chars(std::string_view f) {
  while (!f.empty() && (f.front() == ' ' || f.front() == '\t')) f.remove_prefix(1);
  while (!f.empty() && (f.back() == ' ' || f.back() == '\t')) f.remove_suffix(1);
  if (f.size() > 1 && f[0] == '+' && f[1] != '-' && f[1] != '+') f.remove_prefix(1);
  if (f.empty()) return std::nullopt;
  double v = 0;
  const auto r = std::from_chars(f.data(), f.data() + f.size(), v);
  if (r.ptr != f.data() + f.size()) return std::nullopt;
  auto nonzero_mantissa = [&] {
    for (const char c : f) {
      if (c == 'e' || c == 'E') break;
      if (c >= '1' && c <= '9') return true;
    }
    return false;
  };
  if (r.ec == std::errc::result_out_of_range) {
    const auto e = f.find_first_of("eE");
    if (e == std::string_view::npos || e + 1 >= f.size() || f[e + 1] != '-' || f.front() == '-') return std::nullopt;
    v = 0;
  } else if (r.ec != std::errc()) {
    return std::nullopt;
  }
  if (!std::isfinite(v) || v < 0 || (v == 0 && f.front() == '-' && nonzero_mantissa())) return std::nullopt;
  return v + 0.0;
}
}  // namespace

TEST(Csv, seconds_read_as_std_from_chars_read_them) {
  std::vector<std::string> corpus = {
      "0", "1", "-0", "-0.0", "+0", "+1.5", "++1", "+-1", "-1", ".5", "5.", ".", "-.", "e5", ".e5", "1e", "1e+", "1e-",
      "1E5", "1e+5", "1e-5", "0x10", "0X1p3", "1_0", "nan", "NaN", "-nan", "nan(1)", "inf", "-inf", "INF", "infinity",
      "+inf", "infx", "1e308", "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308", "1e309",
      "1e400", "1e-400", "-1e-400", "2e-324", "2.4703282292062327e-324", "2.4703282292062328e-324", "3e-324",
      "4.9e-324", "1e-310", "2.2250738585072011e-308", "2.2250738585072014e-308", " 1", "1 ", " 1 ", "\t2", "1 2",
      "0.0052390269162987625", "0.10457389075469822", "00001.2500", "1.0000000000000000000000000000001",
      "0." + std::string(400, '0') + "1", "0." + std::string(400, '0') + "1e+5", "0." + std::string(300, '0') + "1e-30",
      "1" + std::string(400, '0'), "1" + std::string(310, '0') + "e-10", std::string(30, '9') + "e-300",
      "9007199254740993", "9007199254740993.000000000000000000001", "123456789012345678901234567890e-29"};
  std::mt19937_64 rng(44);
  const std::string alphabet = "0123456789.eE+-";
  for (int i = 0; i < 4000; ++i) {
    std::string f;
    const auto n = 1 + rng() % 24;
    for (std::size_t j = 0; j < n; ++j) f += alphabet[rng() % (j == 0 ? alphabet.size() : 10 + (rng() % 3 == 0) * 5)];
    corpus.push_back(f);
    char buf[64];
    const double x = std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 2200) - 1100);
    std::snprintf(buf, sizeof buf, rng() % 2 ? "%.*g" : "%.*e", static_cast<int>(rng() % 25), x);
    corpus.emplace_back(buf);
  }
  for (const auto& f : corpus) {
    const auto want = seconds_by_std_from_chars(f);
    if (want && *want > 1e299) continue;  // read, then refused as past the window's limit of recorded time
    for (const char sep : {',', ';'}) {
      const std::string s(1, sep);
      const std::string text = "step" + s + "rank" + s + "a" + s + "wall\n0" + s + "0" + s + f + s + "1\n";
      std::optional<double> got;
      try {
        const auto w = formats::parse_stage_text(text, "f.csv", MatrixFormat::csv);
        got = w[0].matrix.d(0, 0, 0);
      } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("expected a finite number of seconds >= 0"), std::string::npos) << f << ": " << e.what();
      }
      ASSERT_EQ(got.has_value(), want.has_value()) << "'" << f << "' sep '" << sep << "'";
      if (want) {
        EXPECT_EQ(std::bit_cast<std::uint64_t>(*got), std::bit_cast<std::uint64_t>(*want)) << "'" << f << "'";
      }
    }
  }
}

// The plain rows read whole (formats/plain_row.cpp: with AVX-512 VBMI, or AVX2, each path the
// processor has) must be read as the field-by-field path reads them: the same rows taken, the same
// step, rank and values to the bit, the same line end found. Random rows mix
// what a recorder writes (decimals of 1 to 25 fraction digits, leading zeros, integers, 16 to 21
// significant digits) with what the wide path leaves (signs, exponents, blanks, "5." and ".5",
// two points, empty fields, fields past 32 bytes, lines past 192 bytes, 15 values or more). Each
// line lies between digits and points that are not its own, so a read past its ends would show.
namespace {
std::string random_cell(std::mt19937_64& rng, bool integer) {
  char buf[96];
  const auto pick = rng() % 100;
  if (integer) {
    if (pick < 80) return std::to_string(rng() % 5000);
    if (pick < 85) return "000" + std::to_string(rng() % 100);
    if (pick < 88) return std::to_string(rng() >> (rng() % 64));  // up to 20 digits: past int64 at times
    if (pick < 90) return "1" + std::string(29 + rng() % 5, '0');  // 30 to 34 bytes, about a field's most
    if (pick < 93) return "1.0";
    if (pick < 96) return "-" + std::to_string(rng() % 10);
    return "";
  }
  const double x = std::ldexp(static_cast<double>(rng() >> 11), -53) * std::pow(10.0, static_cast<int>(rng() % 12) - 8);
  if (pick < 55) {  // the shortest form that reads back, as a recorder writes it (fixed or not)
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
  }
  if (pick < 75) {  // fixed with 1 to 25 fraction digits
    std::snprintf(buf, sizeof buf, "%.*f", 1 + static_cast<int>(rng() % 25), x);
    return buf;
  }
  if (pick < 80) {
    std::snprintf(buf, sizeof buf, "%0*.*f", 5 + static_cast<int>(rng() % 10), static_cast<int>(rng() % 6), x * 1000);
    return buf;  // leading zeros
  }
  if (pick < 84) return std::to_string(rng() % 100000);
  if (pick < 86) return std::to_string(rng()) + "." + std::to_string(rng() % 1000);  // 20+ digits
  if (pick < 88) return "0." + std::string(rng() % 30, '0') + std::to_string(rng() % 1000000);
  static const char* const odd[] = {"5.", ".5", "1.2.3", "-1.5", "+1", "1e5", "2.5E-3", " 1", "1 ", "", "0", "0.0", "00",
                                    "9999999999999999999", "18446744073709551616", "1.8446744073709551615", "12345678901234567890123456789012.5",
                                    // 32 and 33 bytes, a digit that is not a zero first
                                    "100000000000000000000000000000.5", "1000000000000000000000000000000.5",
                                    "2000000000000000000000000000000.0000000000000000000000000000001"};
  return odd[rng() % std::size(odd)];
}
}  // namespace

namespace {
/// The wide paths this processor has (the VBMI path where it has that, the AVX2 path where it has
/// that: both on a VBMI machine), each set as plain_row_path; "" for none.
std::vector<std::pair<formats::detail::RowPath, std::string>> wide_paths() {
  namespace fd = formats::detail;
  std::vector<std::pair<fd::RowPath, std::string>> paths;
  if (fd::plain_row_vbmi_available()) paths.emplace_back(fd::RowPath::fastest, "VBMI");
  if (fd::plain_row_avx2_available()) paths.emplace_back(fd::RowPath::avx2, "AVX2");
  return paths;
}

/// Sets plain_row_path back to the fastest path when it goes (a failed ASSERT included).
struct RowPathReset {
  ~RowPathReset() { formats::detail::plain_row_path = formats::detail::RowPath::fastest; }
};

/// body() once on each wide path the processor has, plain_row_path set to it and a trace naming it.
template <typename Body>
void on_each_wide_path(Body body) {
  const RowPathReset reset;
  for (const auto& [path, name] : wide_paths()) {
    formats::detail::plain_row_path = path;
    SCOPED_TRACE(name);
    body();
  }
}
}  // namespace

TEST(Csv, plain_lines_go_the_wide_way_only_in_the_comma_form_on_a_wide_path) {
  namespace fd = formats::detail;
  const RowPathReset reset;
  fd::CsvHeader h;  // ',' separated, no separator ending every line
  fd::CsvHeader semi = h, trailing = h;
  semi.sep = ';';
  trailing.lay.trailing_empty = true;
  for (const auto& [path, name] : wide_paths()) {
    fd::plain_row_path = path;
    EXPECT_EQ(fd::plain_lines_wide_fn(h), fd::plain_line_wide_fn()) << name;
    EXPECT_NE(fd::plain_lines_wide_fn(h), nullptr) << name;
    EXPECT_EQ(fd::plain_lines_wide_fn(semi), nullptr) << name;
    EXPECT_EQ(fd::plain_lines_wide_fn(trailing), nullptr) << name;
  }
  fd::plain_row_path = fd::RowPath::portable;
  EXPECT_EQ(fd::plain_line_wide_fn(), nullptr);
  EXPECT_EQ(fd::plain_lines_wide_fn(h), nullptr);
}

TEST(Csv, rows_read_whole_read_as_field_by_field) {
  namespace fd = formats::detail;
  if (wide_paths().empty()) GTEST_SKIP() << "no AVX-512 VBMI or AVX2 here: every row goes field by field";
  on_each_wide_path([&] {
    std::mt19937_64 rng(4404);
    int wide_took = 0, rows = 0, lines_took = 0;
    for (int trial = 0; trial < 60000; ++trial) {
      const std::size_t nvals = 1 + rng() % (trial % 10 == 0 ? 16 : 8);
      std::string line = random_cell(rng, true) + "," + random_cell(rng, true);
      for (std::size_t v = 0; v < nvals; ++v) line += "," + random_cell(rng, false);
      if (rng() % 50 == 0) line += ",";  // a field too many
      // The line between bytes that are not its own.
      const std::string text = "12.5,7" + line + "3.25,0.5,1";
      const std::string_view in(text.data() + 6, line.size());
      std::vector<double> a(nvals, -1), b(nvals, -1), c(nvals, -1);
      std::int64_t sa = -1, ra = -1, sb = -1, rb = -1, sc = -1, rc = -1;
      const bool by_field = fd::parse_plain_row_by_field(in, sa, ra, a, false);
      const bool wide = fd::parse_plain_row_wide(in.data(), in.size(), sb, rb, b);
      // The same line as the streaming reader meets it: its end to find, a '\n' and the next
      // line's digits after it, and (every other row) room to read around it in place rather
      // than a copy: digits and points before it, 200 bytes after it.
      const bool room = trial % 2 == 0;
      const std::string around = (room ? std::string("9.75,3.5,1.25,77,8.5,0.125,66,4.5,1.0,") : std::string()) + line + "\n" +
                                 (room ? std::string(200, '5') : std::string("1,2,3.5"));
      const std::size_t at = room ? 38 : 0;
      std::size_t len = 0;
      const bool took_line = fd::parse_plain_line_wide(around.data() + at, around.size() - at, at, len, sc, rc, c);
      // The parser the readers resolve once and call per line: the same answer, end and values.
      const fd::PlainLineFn fn = fd::plain_line_wide_fn();
      ASSERT_NE(fn, nullptr);
      std::vector<double> d(nvals, -1);
      std::int64_t sd = -1, rd = -1;
      std::size_t len_fn = 0;
      ASSERT_EQ(fn(around.data() + at, around.size() - at, at, len_fn, sd, rd, d), took_line) << line;
      ASSERT_EQ(len_fn, len) << line;
      if (took_line) {
        ASSERT_EQ(sd, sc) << line;
        ASSERT_EQ(rd, rc) << line;
        for (std::size_t v = 0; v < nvals; ++v) ASSERT_EQ(std::bit_cast<std::uint64_t>(d[v]), std::bit_cast<std::uint64_t>(c[v])) << line;
      }
      ++rows;
      if (len != static_cast<std::size_t>(-1)) {
        ASSERT_EQ(len, line.size()) << "the line's end, '" << line << "'";
      } else {
        ASSERT_TRUE(line.size() >= 192 || nvals > 14) << "no end found in a line of " << line.size() << " bytes, " << nvals << " values";
      }
      ASSERT_EQ(took_line, wide) << "the row and the line entries disagree on '" << line << "'";
      if (!wide) continue;
      ++wide_took;
      lines_took += room;
      ASSERT_TRUE(by_field) << "the wide path took a line the field-by-field path refuses: '" << line << "'";
      ASSERT_EQ(sa, sb) << line;
      ASSERT_EQ(ra, rb) << line;
      ASSERT_EQ(sc, sb) << line;
      ASSERT_EQ(rc, rb) << line;
      for (std::size_t v = 0; v < nvals; ++v) {
        ASSERT_EQ(std::bit_cast<std::uint64_t>(a[v]), std::bit_cast<std::uint64_t>(b[v])) << "value " << v << " of '" << line << "'";
        ASSERT_EQ(std::bit_cast<std::uint64_t>(a[v]), std::bit_cast<std::uint64_t>(c[v])) << "value " << v << " of '" << line << "'";
      }
    }
    // Not vacuous: the forms a recorder writes go the wide way (a row of 1 to 8 values, each a
    // recorder's form at about 3 in 4), found and read in place too.
    EXPECT_GT(wide_took, rows / 10) << wide_took << " of " << rows;
    EXPECT_GT(lines_took, wide_took / 3) << lines_took << " of " << wide_took;
    // And a recorder's rows all do: the shortest forms of values from 1e-4 s on, to 14 values.
    for (int trial = 0; trial < 20000; ++trial) {
      const std::size_t nvals = 1 + rng() % 14;
      std::string line = std::to_string(rng() % 100000) + "," + std::to_string(rng() % 4096);
      for (std::size_t v = 0; v < nvals; ++v) {
        char buf[40];
        const double x = 1e-4 + std::ldexp(static_cast<double>(rng() >> 11), -53) * 5.0;
        line += "," + std::string(buf, std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed).ptr);
      }
      if (line.size() > 192) continue;
      std::vector<double> b(nvals);
      std::int64_t s = 0, r = 0;
      EXPECT_TRUE(fd::parse_plain_row_wide(line.data(), line.size(), s, r, b)) << line;
    }
  });
}

// Halfway cases, where Eisel-Lemire rounds to even: integers 2^k + (2m + 1) * 2^(k - 53) for k
// from 53 to 63 (exactly between two doubles), written plain and with zero fractions.
TEST(Csv, rows_read_whole_round_halfway_values_as_field_by_field) {
  namespace fd = formats::detail;
  if (wide_paths().empty()) GTEST_SKIP() << "no AVX-512 VBMI or AVX2 here: every row goes field by field";
  on_each_wide_path([&] {
    std::mt19937_64 rng(4406);
    int cases = 0;
    for (int k = 53; k <= 63; ++k)
      for (int trial = 0; trial < 200; ++trial) {
        const std::uint64_t half = std::uint64_t{1} << (k - 53);
        const std::uint64_t tie = (std::uint64_t{1} << k) + (2 * (rng() % (std::uint64_t{1} << 20)) + 1) * half;
        const std::string digits = std::to_string(tie);
        for (const std::string& cell : {digits, digits + ".0", digits + ".00", digits.substr(0, digits.size() - 1) + "." + digits.back()}) {
          if (cell.size() - (cell.find('.') != std::string::npos) > 19) continue;
          const std::string line = "1,2," + cell + ",0.5";
          std::vector<double> a(2, -1), b(2, -1);
          std::int64_t s = 0, r = 0;
          ASSERT_TRUE(fd::parse_plain_row_by_field(line, s, r, a, false)) << line;
          ASSERT_TRUE(fd::parse_plain_row_wide(line.data(), line.size(), s, r, b)) << line;
          ASSERT_EQ(std::bit_cast<std::uint64_t>(a[0]), std::bit_cast<std::uint64_t>(b[0])) << line;
          ++cases;
        }
      }
    EXPECT_GT(cases, 4000);
  });
}

TEST(Csv, whole_files_read_the_same_on_either_row_path) {
  namespace fd = formats::detail;
  std::mt19937_64 rng(4405);
  auto read = [](const std::string& text, fd::RowPath path) -> std::string {
    fd::plain_row_path = path;
    std::string got;
    try {
      const auto w = formats::parse_stage_text(text, "f.csv", MatrixFormat::csv);
      for (int t = 0; t < w[0].matrix.steps(); ++t)
        for (int r = 0; r < w[0].matrix.world_size(); ++r)
          for (int s = 0; s < 3; ++s) got += std::to_string(std::bit_cast<std::uint64_t>(w[0].matrix.d(t, r, s))) + ",";
    } catch (const FormatError& e) {
      got = e.what();
    }
    fd::plain_row_path = fd::RowPath::fastest;
    return got;
  };
  // Files of random cells: most read, some refused at a bad cell (the message and its line
  // must match too).
  int read_whole = 0;
  for (int file = 0; file < 40; ++file) {
    std::string text = "step,rank,a,b,c,wall\n";
    for (int t = 0; t < 30; ++t)
      for (int r = 0; r < 8; ++r) {
        text += std::to_string(t) + "," + std::to_string(r);
        for (int v = 0; v < 4; ++v) text += "," + (file % 2 ? random_cell(rng, false) : std::to_string(rng() % 1000) + ".125");
        text += "\n";
      }
    const std::string fast = read(text, fd::RowPath::fastest);
    EXPECT_EQ(fast, read(text, fd::RowPath::portable)) << "file " << file;
    EXPECT_EQ(fast, read(text, fd::RowPath::avx2)) << "file " << file;
    read_whole += fast.find("f.csv") == std::string::npos;
  }
  EXPECT_GE(read_whole, 20);
}

// Spreadsheet forms: a separator ending every line, Excel's sep= line, wall in any column.
TEST(Csv, trailing_separator_sep_line_and_wall_anywhere_read_as_the_plain_form) {
  const std::string plain = "step,rank,a,b,wall\n0,0,1,2,3.5\n0,1,2,1,3.25\n1,0,1.5,2,3.75\n";
  const auto ref = parse(plain, MatrixFormat::csv);
  auto same = [&](const std::string& text) {
    const auto w = parse(text, MatrixFormat::csv);
    ASSERT_EQ(w.size(), 1u) << text;
    EXPECT_EQ(w[0].matrix.schema(), ref[0].matrix.schema()) << text;
    EXPECT_TRUE(w[0].matrix.data().isApprox(ref[0].matrix.data(), 0.0)) << text;
    for (int t = 0; t < 2; ++t)
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(w[0].matrix.present(t, r), ref[0].matrix.present(t, r)) << text;
        if (ref[0].matrix.present(t, r)) {
          EXPECT_EQ(w[0].matrix.wall(t, r), ref[0].matrix.wall(t, r)) << text;
        }
      }
  };
  same("step,rank,a,b,wall,\n0,0,1,2,3.5,\n0,1,2,1,3.25,\n1,0,1.5,2,3.75,\n");          // fast path
  same("step,rank,a,b,wall,\r\n0,0,1,2,3.5,\r\n0,1,2,1,3.25 ,\r\n1,0,1.5,2,3.75,\r\n");  // general path
  same("step;rank;a;b;wall;\n0;0;1;2;3,5;\n0;1;2;1;3,25;\n1;0;1,5;2;3,75;\n");
  same("sep=;\nstep;rank;a;b;wall\n0;0;1;2;3,5\n0;1;2;1;3,25\n1;0;1,5;2;3,75\n");
  same("\xEF\xBB\xBFsep=|\r\nstep|rank|a|b|wall\r\n0|0|1|2|3.5\r\n0|1|2|1|3.25\r\n1|0|1.5|2|3.75\r\n");
  same("sep=,\nstep,rank,a,b,wall\n0,0,1,2,3.5\n0,1,2,1,3.25\n1,0,1.5,2,3.75\n");
  same("step,rank,wall,a,b\n0,0,3.5,1,2\n0,1,3.25,2,1\n1,0,3.75,1.5,2\n");  // wall first (fast path)
  same("step,rank,a,WALL,b,\n0,0,1,3.5,2,\n0,1,2,3.25,1,\n1,0,1.5,3.75,2,\n");
  same("step,rank,a,Wall,b\n 0,0,1,3.5,2\n0,1,2,3.25,1\n1,0,1.5,3.75,2\n");
  // What stays an error, with its line.
  expect_error("step,rank,a,b,\n0,0,1,2,3\n", 2, "column 5 is '3' but has no name in the header", MatrixFormat::csv);
  expect_error("step,rank,a,b,\n0,0,1,2\n", 2, "4 columns, expected 5", MatrixFormat::csv);
  expect_error("step,rank,wall,a,Wall\n0,0,1,2,3\n", 1, "columns 3 and 5 are both named wall", MatrixFormat::csv);
  expect_error("step,rank,wall\n0,0,1\n", 1, "header names no stage column", MatrixFormat::csv);
  expect_error("sep=;\nstep,rank,a\n0,0,1\n", 2, "separated by the sep= line's ';'", MatrixFormat::csv);
  expect_error("sep=x\nstep,rank,a\n0,0,1\n", 1, "expected sep=, sep=; sep=| or sep= and a tab", MatrixFormat::csv);
  expect_error("sep=;\n", 1, "a separator line and no header", MatrixFormat::csv);
  expect_error("sep=;\nstep;rank;a\n\n", 2, "no records after the header", MatrixFormat::csv);
}

// ---- import kineto: integers, limits, timestamps, gzip (fix12) ------------------------------

namespace {

const std::string kData = std::string(SF_SOURCE_DIR) + "/tests/data/";

/// Expects import_kineto(files, opt) to fail with one line naming `file` and holding `fragment`.
void expect_import_error(const std::vector<std::string>& files, const std::string& fragment, formats::KinetoOptions opt = {}) {
  try {
    formats::import_kineto(files, opt);
    ADD_FAILURE() << "no error for " << files.front();
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

}  // namespace

TEST(Kineto, out_of_range_integers_are_refused_never_narrowed) {
  expect_import_error({kData + "hostile/kineto_rank_wrap.json"}, "rank 4294967296 outside world size 2 (rank from distributedInfo.rank");
  expect_import_error({kData + "hostile/kineto_rank_float.json"}, "distributedInfo.rank is 1e+300, expected an integer rank");
  expect_import_error({kData + "hostile/kineto_world_huge.json"}, "distributedInfo.world_size is 2147483647, expected an integer 1..16777216");
  expect_import_error({kData + "hostile/kineto_step_int64.json"}, "outside the 64-bit integer range");
  // ProfilerStep#INT64_MIN beside ProfilerStep#INT64_MAX would be 2^64 steps: the negative id is
  // refused first, by name (prof.step() counts from 0; issue 40).
  expect_import_error({kData + "hostile/kineto_steps_min_r0.json", kData + "hostile/kineto_steps_max_r1.json"},
                      "step annotation 'ProfilerStep#-9223372036854775808' has a negative step id; expected ProfilerStep#N with N >= 0");
  // An integral float is that integer.
  const auto imp = formats::import_kineto({kData + "hostile/kineto_rank_integral_float.json"});
  EXPECT_EQ(imp.traces[0].rank, 1);
}

TEST(Kineto, limits_are_those_of_score_and_memory_follows_the_traces) {
  expect_import_error({kData + "hostile/kineto_world_2pow24.json"}, "above the limit of 65536 ranks; expected a smaller world (raise the limit with --max-world-size)");
  expect_import_error({kData + "hostile/kineto_far_steps.json"}, "a window of 2000000001 steps, above the limit of 1000000 steps per window");
  formats::KinetoOptions opt;
  opt.limits.max_world_size = formats::kWorldSizeCeiling;
  const auto imp = formats::import_kineto({kData + "hostile/kineto_world_2pow24.json"}, opt);
  const auto& m = imp.window.matrix;
  EXPECT_EQ(m.world_size(), formats::kWorldSizeCeiling);
  EXPECT_EQ(m.ranks(), 1);  // sparse: one column, not 2^24
  EXPECT_EQ(m.steps(), 2);
  EXPECT_EQ(imp.missing_rank_count, formats::kWorldSizeCeiling - 1);
  EXPECT_EQ(imp.missing_ranks, (std::vector<frontier::RankRange>{{1, formats::kWorldSizeCeiling - 1}}));
  opt.limits.max_values = 5;  // 2 steps x 1 rank x 6 stages = 12 values
  expect_import_error({kData + "hostile/kineto_world_2pow24.json"}, "above the limit of 5 values", opt);
  opt.limits.max_file_bytes = 100;
  expect_import_error({kData + "hostile/kineto_world_2pow24.json"}, "bytes, above the limit of 100 bytes", opt);
  opt = {};
  opt.world_size = 70000;
  expect_import_error({kData + "bad/kineto_rank3_old_form.json"}, "--world-size 70000 is above the limit of 65536 ranks", opt);
  // Two traces of a world of 4: dense, ranks 1 and 2 missing as one range.
  const std::string r0 = R"({"distributedInfo":{"rank":0,"world_size":4},"traceEvents":[)"
                         R"({"ph":"X","name":"ProfilerStep#5","pid":1,"tid":1,"ts":0,"dur":10},)"
                         R"({"ph":"X","name":"autograd::engine::evaluate_function: X","pid":1,"tid":2,"ts":2,"dur":3}]})";
  std::string r3 = r0;
  r3.replace(r3.find("\"rank\":0"), 8, "\"rank\":3");
  const auto two = formats::import_kineto_buffers({{"a.json", r0}, {"b.json", r3}});
  EXPECT_EQ(two.window.matrix.ranks(), 2);
  EXPECT_EQ(two.missing_ranks, (std::vector<frontier::RankRange>{{1, 2}}));
  EXPECT_EQ(two.missing_rank_count, 2);
}

TEST(Kineto, timestamps_durations_and_names_are_checked_per_event) {
  expect_import_error({kData + "hostile/kineto_big_ts.json"}, "traceEvents[0] ('ProfilerStep#1'), ph \"X\": ts is 1e+308 us, beyond 2^53 us");
  expect_import_error({kData + "hostile/kineto_huge_dur.json"}, "traceEvents[1] ('## forward ##'), ph \"X\": ends at ts + dur");
  expect_import_error({kData + "hostile/kineto_negative_dur.json"}, "traceEvents[0] ('ProfilerStep#1'), ph \"X\": dur is -5, expected microseconds >= 0");
  expect_import_error({kData + "hostile/kineto_string_ts.json"}, "traceEvents[0] ('ProfilerStep#1'), ph \"X\": ts is a string, expected a number");
  expect_import_error({kData + "hostile/kineto_number_overflow.json"}, "number overflow parsing '1e309'");
  auto one = [](const std::string& events) {
    return R"({"distributedInfo":{"rank":0,"world_size":1},"traceEvents":[)" + events + "]}";
  };
  auto expect_buffer_error = [&](const std::string& events, const std::string& fragment) {
    const std::string text = one(events);
    try {
      formats::import_kineto_buffers({{"t.json", text}});
      ADD_FAILURE() << "no error for " << events;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_buffer_error(R"({"ph":"X","ts":1,"dur":2})", "traceEvents[0], ph \"X\", has no name");
  expect_buffer_error(R"({"ph":"X","name":"a","dur":2})", "traceEvents[0] ('a'), ph \"X\", has no ts");
  expect_buffer_error(R"({"ph":"X","name":"a","ts":1})", "has no dur");
  expect_buffer_error(R"({"ph":"B","name":"a","ts":5,"pid":1,"tid":1},{"ph":"E","ts":4,"pid":1,"tid":1})",
                      "traceEvents[1], ph \"E\": ends at ts 4 before its B event ('a') begins");
  expect_buffer_error(R"({"ph":"X","name":"ProfilerStep#1","ts":0,"dur":5},{"ph":"X","name":"ProfilerStep#1","ts":6,"dur":5})",
                      "ProfilerStep#1 appears twice");
  // B/E pairs whose E omits the name (as Chrome's format allows) time a span.
  const auto imp = formats::import_kineto_buffers(
      {{"t.json", one(R"({"ph":"B","name":"ProfilerStep#1","ts":0,"pid":1,"tid":1},)"
                      R"({"ph":"X","name":"autograd::engine::evaluate_function: X","ts":2,"dur":3,"pid":1,"tid":2},)"
                      R"({"ph":"E","ts":10,"pid":1,"tid":1})")}});
  EXPECT_DOUBLE_EQ(imp.window.matrix.wall(0, 0), 10e-6);
}

TEST(Kineto, gzip_must_be_whole) {
  const auto ok = formats::import_kineto({kData + "kineto/rank0.json.gz"});
  const auto plain = formats::import_kineto({kData + "kineto/rank0.json"});
  EXPECT_TRUE(ok.window.matrix.data().isApprox(plain.window.matrix.data(), 0.0));
  expect_import_error({kData + "hostile/kineto_gzip_no_trailer.json.gz"}, "corrupt gzip data (the stream ends early");
  expect_import_error({kData + "hostile/kineto_gzip_truncated.json.gz"}, "corrupt gzip data");
  std::ifstream in(kData + "kineto/rank0.json.gz", std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), {});
  // Two members read as their concatenation (as gzip and zcat do); junk after a member does not.
  const auto two = formats::import_kineto({kData + "kineto/rank1_two_members.json.gz"});
  const auto whole = formats::import_kineto({kData + "kineto/rank1.json"});
  EXPECT_TRUE(two.window.matrix.data().isApprox(whole.window.matrix.data(), 0.0));
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0x55;  // inside the CRC-32
  try {
    formats::import_kineto_buffers({{"t.json.gz", bad_crc}});
    ADD_FAILURE() << "a wrong CRC passed";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt gzip data (incorrect data check)"), std::string::npos) << e.what();
  }
  try {
    formats::import_kineto_buffers({{"t.json.gz", gz + "junk"}});
    ADD_FAILURE() << "junk after the stream passed";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("4 bytes after the end of the gzip stream"), std::string::npos) << e.what();
  }
}

// --- streaming (docs/formats.md, "Streaming") ------------------------------------------------------

namespace {

/// Keeps every streamed window as a matrix, rebuilt from its one-step matrices, so a test can
/// hold it against the window read_stage_file returns.
class CollectSink final : public formats::StepSink {
public:
  struct Got {
    formats::WindowHead head;
    std::vector<frontier::StageMatrix> steps;
  };
  void begin_window(const formats::WindowHead& head) override { open = Got{head, {}}; }
  void add_step(const frontier::StageMatrix& step) override { open.steps.push_back(step); }
  void end_window() override { windows.push_back(std::move(open)); }
  std::vector<Got> windows;
  Got open;
};

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

/// The streamed window holds the whole read's window: layout, span, every cell and side value.
void expect_same_window(const formats::Window& w, const CollectSink::Got& g) {
  const auto& m = w.matrix;
  const auto& l = g.head.layout;
  EXPECT_EQ(l.schema(), m.schema());
  EXPECT_EQ(l.world_size(), m.world_size());
  EXPECT_EQ(l.rank_ids(), m.rank_ids());
  EXPECT_EQ(l.roles(), m.roles());
  EXPECT_EQ(g.head.ranks, w.ranks);
  EXPECT_EQ(g.head.header_line, w.header_line);
  EXPECT_EQ(g.head.telemetry.gather_ok, w.telemetry.gather_ok);
  ASSERT_FALSE(g.steps.empty());
  EXPECT_EQ(g.steps.front().first_step(), m.first_step());
  EXPECT_EQ(g.steps.back().first_step(), m.first_step() + (m.steps() - 1));
  for (const auto& one : g.steps) {
    const int t = static_cast<int>(one.first_step() - m.first_step());
    ASSERT_TRUE(t >= 0 && t < m.steps());
    for (int c = 0; c < m.ranks(); ++c) {
      ASSERT_EQ(one.present(0, c), m.present(t, c)) << "step " << one.first_step() << " column " << c;
      if (!m.present(t, c)) continue;
      for (int s = 0; s < m.stages(); ++s) EXPECT_EQ(one.d(0, c, s), m.d(t, c, s));
      if (m.schema().has_residual()) {
        EXPECT_EQ(one.wall(0, c), m.wall(t, c));
      }
      EXPECT_EQ(one.fwd_event_state(0, c), m.fwd_event_state(t, c));
      const double cw_a = one.cpu_wait(0, c), cw_b = m.cpu_wait(t, c);
      EXPECT_TRUE(cw_a == cw_b || (std::isnan(cw_a) && std::isnan(cw_b)));
      for (int s = 0; s < m.schema().explicit_count(); ++s) {
        const double a = one.sync_wait(0, c, s), b = m.sync_wait(t, c, s);
        EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b)));
      }
    }
  }
  // Steps between those sent have no records in the whole read either.
  std::vector<char> sent(static_cast<std::size_t>(m.steps()), 0);
  for (const auto& one : g.steps) sent[static_cast<std::size_t>(one.first_step() - m.first_step())] = 1;
  for (int t = 0; t < m.steps(); ++t)
    if (!sent[static_cast<std::size_t>(t)]) {
      EXPECT_EQ(m.step_present_count(t), 0) << "step index " << t;
    }
}

/// Runs fn with this thread (and the threads it starts) on one processor: the streaming CSV
/// reader then reads in line, each block's rows as they are asked for, where on two it has two
/// threads parse blocks ahead. The mask is put back after.
template <typename Fn>
void on_one_cpu(Fn&& fn) {
  cpu_set_t was, one;
  ASSERT_EQ(::sched_getaffinity(0, sizeof was, &was), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &was)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  fn();
  ASSERT_EQ(::sched_setaffinity(0, sizeof was, &was), 0);
}

/// The streamed windows equal the whole read's, read ahead by two threads (where there are two
/// processors) and in line on one.
void expect_streams_as_read(const std::string& path, formats::ReadOptions opt = {}) {
  const auto whole = formats::read_stage_file(path, opt);
  auto stream = [&](const char* how) {
    CollectSink sink;
    std::string why;
    ASSERT_EQ(formats::stream_stage_file(path, opt, sink, &why), formats::StreamStatus::streamed) << how << ": " << why;
    ASSERT_EQ(sink.windows.size(), whole.size()) << how;
    for (std::size_t i = 0; i < whole.size(); ++i) expect_same_window(whole[i], sink.windows[i]);
  };
  stream("as the machine allows");
  on_one_cpu([&] { stream("on one processor"); });
  // Field by field on one processor: the plain rows read straight from the mapping where the
  // processor lacks the wide parse (here on any processor).
  namespace fd = formats::detail;
  fd::plain_row_path = fd::RowPath::portable;
  on_one_cpu([&] { stream("on one processor, field by field"); });
  // The AVX2 path where the processor has it (on a VBMI machine the fastest is the VBMI one).
  fd::plain_row_path = fd::RowPath::avx2;
  on_one_cpu([&] { stream("on one processor, the AVX2 path"); });
  fd::plain_row_path = fd::RowPath::fastest;
}

}  // namespace

TEST(Stream, csv_sorted_dense_sparse_gaps_and_split) {
  // Ranks 0..2, any rank order within a step, a gap at step 7.
  const std::string dense = "step,rank,a,b,wall\n5,1,1,2,4\n5,0,0.5,0.5,1\n5,2,3,1,4\n6,0,1,1,2\n6,2,1,1,2\n6,1,2,2,5\n"
                            "8,2,1,1,3\n8,0,1,1,2\n";
  expect_streams_as_read(write_temp("dense.csv", dense));
  expect_streams_as_read(write_temp("dense.csv", dense), {std::nullopt, 2, 0, 1, {}});
  // --world-size larger than the ranks seen: sparse, one column per rank with records.
  expect_streams_as_read(write_temp("dense.csv", dense), {std::nullopt, 0, 64, 1, {}});
  // Rank 1 never has a record, and the last line's rank is not the largest: the guess is wrong.
  const std::string sparse = "step,rank,a\n0,9,1\n0,0,2\n1,0,3\n1,9,0.5\n2,4,1\n";
  expect_streams_as_read(write_temp("sparse.csv", sparse));
  // Forms the plain-row path does not take: blanks, quotes, CRLF, a sep= line and decimal commas.
  expect_streams_as_read(write_temp("forms.csv", "sep=;\r\n\"step\";rank;a;b\r\n0; 0;1,5;2\r\n\r\n0;1;+1;2E0\r\n1;0;.5;5.\r\n"));
  // ',' separated: a separator ending every line (plain rows still), CRLF from a later line on (the
  // mapping left there), a row the plain path leaves between plain ones, no line end at the end.
  expect_streams_as_read(write_temp("trailing.csv", "step,rank,a,b,\n0,0,1,2,\n0,1,0.5,2.25,\n1,0,+1,2,\n1,1,3,4,"));
  expect_streams_as_read(write_temp("crlf.csv", "step,rank,a,b\n0,0,1,2\n0,1,0.5,2\r\n1,0,1, 2\r\n1,1,3,4\r\n"));
  expect_streams_as_read(write_temp("mixed.csv", "step,rank,a,b\n0,0,1,2\n0,1,\"0.5\",2\n1,0,1,2e0\n1,1,3,4"));
}

TEST(Stream, jsonl_windows_side_evidence_and_declared_spans) {
  const std::string text =
      R"({"schema":"sf.stages/1","stages":["a","b"],"world_size":4,"roles":["dp","dp","pp","pp"],"window":{"first_step":0,"steps":6},"telemetry":{"gather_ok":false,"reasons":["late"],"dropped_records":2}})" "\n"
      R"({"step":1,"rank":2,"d":[1,2],"side":{"fwd_event":"ready","fwd_event_s":0.5,"sync_wait":[0.25,null],"cpu_wait":0.02}})" "\n"
      R"({"step":1,"rank":0,"d":[2,1],"side":{"fwd_event":"missing"}})" "\n"
      R"({"step":3,"rank":1,"d":[0,1]})" "\n"
      R"({"schema":"sf.stages/1","stages":["x"],"world_size":100000,"ranks":[{"rank":7,"local_rank":1,"node_rank":3,"hostname":"h"}]})" "\n"
      R"({"step":10,"rank":7,"d":[1],"wall":2})" "\n"
      R"({"step":10,"rank":99999,"d":[2],"wall":1})" "\n"
      R"({"schema":"sf.stages/1","stages":["y"],"world_size":3,"window":{"first_step":4,"steps":3}})" "\n";
  formats::ReadOptions opt;
  opt.limits.max_world_size = 1 << 20;
  expect_streams_as_read(write_temp("multi.jsonl", text), opt);
  opt.window_steps = 4;
  expect_streams_as_read(write_temp("multi.jsonl", text), opt);
}

// Class 5 of issue 12: memory follows the records present. Two records in a world of 1.5 M
// ranks once got a dense guessed step of 1.5 M columns (~330 MB) before the pass found it sparse;
// a large world's first step is now looked at first, and only a dense one gets a dense layout.
TEST(Stream, a_sparse_window_in_a_large_world_never_gets_a_world_sized_step) {
  class WidestSink final : public formats::StepSink {
  public:
    void begin_window(const formats::WindowHead& head) override { widest = std::max(widest, head.layout.ranks()); }
    void add_step(const frontier::StageMatrix& step) override { widest = std::max(widest, step.ranks()); }
    void end_window() override { ++windows; }
    int widest = 0, windows = 0;
  };
  formats::ReadOptions opt;
  opt.limits.max_world_size = 2000000;
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"sparse_world.jsonl", "{\"schema\":\"sf.stages/1\",\"stages\":[\"a\"],\"world_size\":1500000}\n"
                                                                  "{\"step\":0,\"rank\":0,\"d\":[1]}\n{\"step\":0,\"rank\":1499999,\"d\":[1]}\n"
                                                                  "{\"step\":1,\"rank\":0,\"d\":[2]}\n"},
        {"sparse_world.csv", "step,rank,a\n0,0,1\n0,1499999,1\n1,0,2\n"}}) {
    const auto path = write_temp(name, text);
    WidestSink sink;
    ASSERT_EQ(formats::stream_stage_file(path, opt, sink), formats::StreamStatus::streamed) << name;
    EXPECT_EQ(sink.windows, 1) << name;
    EXPECT_EQ(sink.widest, 2) << name << ": a step or layout wider than the two ranks with records";
    expect_streams_as_read(path, opt);
  }
  // A dense window in a large world still streams in one dense layout.
  std::string dense = "step,rank,a\n";
  for (int t = 0; t < 2; ++t)
    for (int r = 0; r < 20000; ++r) dense += std::to_string(t) + "," + std::to_string(r) + ",1\n";
  WidestSink sink;
  ASSERT_EQ(formats::stream_stage_file(write_temp("dense_world.csv", dense), opt, sink), formats::StreamStatus::streamed);
  EXPECT_EQ(sink.widest, 20000);
}

// The reader's buffers: FileLines starts small and doubles while reads fill it, a CSV block keeps
// room for the line cut from the block before. A header past the first read, records past a
// block's room and files of several chunks stream as they read whole, in both formats.
TEST(Stream, headers_and_lines_past_a_buffer_and_files_of_many_reads_stream_as_read) {
  constexpr int kStages = 4000, kRanks = 3, kSteps = 16;  // lines of ~100 KB, files of ~5 MB
  formats::ReadOptions opt;
  opt.limits.max_stages = kStages;
  std::mt19937_64 rng(44);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::string names, csv = "step,rank", jsonl = "{\"schema\":\"sf.stages/1\",\"stages\":[";
  for (int s = 0; s < kStages; ++s) {
    const std::string name = "a_stage_named_at_some_length_" + std::to_string(s);
    csv += "," + name;
    jsonl += (s ? ",\"" : "\"") + name + "\"";
  }
  csv += ",wall\n";
  jsonl += "],\"world_size\":" + std::to_string(kRanks) + "}\n";
  ASSERT_GT(csv.size(), std::size_t{1} << 16);
  char num[32];
  for (int t = 0; t < kSteps; ++t)
    for (int r = 0; r < kRanks; ++r) {
      std::string row = std::to_string(t) + "," + std::to_string(r), d;
      for (int s = 0; s < kStages; ++s) {
        std::snprintf(num, sizeof num, "%.17g", u(rng) * 1e-3);
        row += std::string(",") + num;
        d += (s ? "," : "") + std::string(num);
      }
      csv += row + ",100\n";
      jsonl += "{\"step\":" + std::to_string(t) + ",\"rank\":" + std::to_string(r) + ",\"d\":[" + d + "],\"wall\":100}\n";
    }
  ASSERT_GT(csv.size(), std::size_t{4} << 20);
  expect_streams_as_read(write_temp("wide.csv", csv), opt);
  expect_streams_as_read(write_temp("wide.jsonl", jsonl), opt);
}

TEST(Stream, steps_out_of_order_fall_back_to_the_whole_read) {
  const std::string path = write_temp("unsorted.csv", "step,rank,a\n0,0,1\n1,0,2\n0,1,3\n1,1,1\n");
  CollectSink sink;
  std::string why;
  EXPECT_EQ(formats::stream_stage_file(path, {}, sink, &why), formats::StreamStatus::whole);
  EXPECT_NE(why.find("out of order"), std::string::npos) << why;
  // The same file read whole is a valid window of 2 steps x 2 ranks.
  const auto w = formats::read_stage_file(path);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].matrix.steps(), 2);
  EXPECT_TRUE(w[0].matrix.step_complete(0) && w[0].matrix.step_complete(1));
}

// On one processor a streamed CSV body is read through a mapping of the file. A file cut short
// while it is read (here by the sink, as the first step reaches it) faults with SIGBUS past its new
// end there; the reader must read on as pread sees the file: the windows are the whole read of the
// cut file, and the SIGBUS action is left as it was.
TEST(Stream, a_file_cut_while_read_through_a_mapping_reads_as_the_cut_file) {
  class CuttingSink final : public formats::StepSink {
  public:
    CuttingSink(std::string path, std::uint64_t at) : path_(std::move(path)), at_(at) {}
    void begin_window(const formats::WindowHead& head) override { open = CollectSink::Got{head, {}}; }
    void add_step(const frontier::StageMatrix& step) override {
      if (!cut) cut = ::truncate(path_.c_str(), static_cast<off_t>(at_)) == 0;
      open.steps.push_back(step);
    }
    void end_window() override { windows.push_back(std::move(open)); }
    std::vector<CollectSink::Got> windows;
    CollectSink::Got open;
    bool cut = false;

  private:
    std::string path_;
    std::uint64_t at_;
  };
  std::mt19937_64 rng(4407);
  std::string text = "step,rank,a,b,c,wall\n";
  std::uint64_t cut_at = 0;
  constexpr int kSteps = 400, kRanks = 64;  // ~5 MB: pages past the cut are read after it
  for (int t = 0; t < kSteps; ++t) {
    if (t == kSteps / 3) cut_at = text.size();  // the cut falls between two steps
    for (int r = 0; r < kRanks; ++r) {
      text += std::to_string(t) + "," + std::to_string(r);
      for (int v = 0; v < 4; ++v) {
        char buf[32];
        text += "," + std::string(buf, std::to_chars(buf, buf + sizeof buf, std::ldexp(static_cast<double>(rng() >> 11), -55) + 0.125).ptr);
      }
      text += "\n";
    }
  }
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGBUS, nullptr, &before), 0);
  const std::string path = write_temp("cut_while_read.csv", text);
  CuttingSink sink(path, cut_at);
  std::string why;
  on_one_cpu([&] { ASSERT_EQ(formats::stream_stage_file(path, {}, sink, &why), formats::StreamStatus::streamed) << why; });
  ASSERT_TRUE(sink.cut);
  const auto whole = formats::read_stage_file(path);  // the cut file
  ASSERT_EQ(sink.windows.size(), whole.size());
  for (std::size_t i = 0; i < whole.size(); ++i) expect_same_window(whole[i], sink.windows[i]);
  EXPECT_EQ(whole[0].matrix.steps(), kSteps / 3);
  struct sigaction after {};
  ASSERT_EQ(::sigaction(SIGBUS, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(Stream, a_line_error_is_the_whole_reads_message_other_problems_are_left_to_it) {
  // A bad cell, a blank line before it, a rank past --world-size, a row of empty cells, a line of
  // blanks, a row too short: the same message and line streamed (ahead or in line) as read whole.
  formats::ReadOptions sized;
  sized.world_size = 2;
  for (const auto& [case_text, case_opt] : {std::pair<std::string, formats::ReadOptions>{"step,rank,a\n0,0,1\n0,1,x\n", {}},
                                  {"step,rank,a,b\n0,0,1.5,2\n\n  \n0,1,0.25,x\n", {}},
                                  {"step,rank,a\n0,0,1\n0,1,2\n1,2,3\n", sized},
                                  {"step,rank,a,b\n0,0,1,2\n,,,\n1,0,1\n", {}}}) {
    const std::string text = case_text;  // (named: a lambda below takes them)
    const formats::ReadOptions opt = case_opt;
    const std::string bad = write_temp("bad.csv", text);
    std::string whole;
    try {
      formats::read_stage_file(bad, opt);
    } catch (const FormatError& e) {
      whole = e.what();
    }
    EXPECT_FALSE(whole.empty()) << text;
    auto streamed = [&] {
      CollectSink sink;
      try {
        formats::stream_stage_file(bad, opt, sink);
      } catch (const FormatError& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    EXPECT_EQ(streamed(), whole) << text;
    on_one_cpu([&] { EXPECT_EQ(streamed(), whole) << text << " (on one processor)"; });
  }
  // A line past --max-line-bytes, a plain row among plain rows (the wide paths read such rows in
  // place, the limit checked there too): left to the whole read, which refuses it naming its line,
  // on every row path, ahead, in line and mapped.
  {
    formats::ReadOptions opt;
    opt.limits.max_line_bytes = 40;
    std::string text = "step,rank,a,b\n";
    for (int t = 0; t < 3000; ++t)
      for (int r = 0; r < 2; ++r) text += std::to_string(t) + "," + std::to_string(r) + ",0.125,0.25\n";
    text += "3000,0,0.0052390269162987625,0.03192237860972117\n";  // 48 bytes
    const std::string bad = write_temp("long.csv", text);
    try {
      formats::read_stage_file(bad, opt);
      ADD_FAILURE() << "the whole read took a line past the limit";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(":6002: line 6002 runs past 40 bytes"), std::string::npos) << e.what();
    }
    const RowPathReset reset;
    for (const auto path : {formats::detail::RowPath::fastest, formats::detail::RowPath::avx2, formats::detail::RowPath::portable}) {
      formats::detail::plain_row_path = path;
      auto left_whole = [&](const char* how) {
        CollectSink sink;
        std::string why;
        EXPECT_EQ(formats::stream_stage_file(bad, opt, sink, &why), formats::StreamStatus::whole) << how << ", path " << static_cast<int>(path);
        EXPECT_NE(why.find("--max-line-bytes"), std::string::npos) << why;
      };
      left_whole("as the machine allows");
      on_one_cpu([&] { left_whole("on one processor"); });
    }
  }
  CollectSink sink;
  // A duplicate record is the window's error, reported after every line's: left to the whole read.
  const std::string dup = write_temp("dup.csv", "step,rank,a\n0,0,1\n0,0,2\n1,0,1\n");
  std::string why;
  EXPECT_EQ(formats::stream_stage_file(dup, {}, sink, &why), formats::StreamStatus::whole);
  EXPECT_NE(why.find("duplicate"), std::string::npos) << why;
  // Not a regular file: the whole read takes it.
  EXPECT_EQ(formats::stream_stage_file(::testing::TempDir(), {std::optional(MatrixFormat::csv), 0, 0, 1, {}}, sink),
            formats::StreamStatus::whole);
}
