#include "sf/formats/formats.h"

#include <gtest/gtest.h>

#include <fstream>
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
      R"({"step":10,"rank":0,"d":[1,2],"side":{"fwd_event":"ready","fwd_event_s":0.125,"sync_wait":[null,0.5]}})"
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
  EXPECT_EQ(w[1].matrix.ranks(), 4);
  EXPECT_EQ(w[1].header_line, 3);
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
  expect_error(h + std::string("\x01\xff\xfe garbage \x00 bytes", 19), 2, "not valid JSON");
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
  EXPECT_EQ(j["schema"], "sf.evidence/2");
  EXPECT_NEAR(j["exposed_makespan_s"].get<double>(), 8.2, 1e-12);
  EXPECT_EQ(j["leaders"]["data.next_wait"][0]["rank"], 0);
  EXPECT_EQ(j["baselines"]["per_stage_max"]["ranked"][0], "model.backward_cpu_wall");
  EXPECT_TRUE(j["telemetry"]["closure_residual_share"].is_null());  // no wall in the file
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
