// import kineto (docs/kineto.md): the forms users have, where rank and world size come from and
// in which order it is checked, the step structure and repeated keys refused, the stage map and
// the summary of unmapped time, side.sync_wait never above its stage (a property with
// overlapping collective threads), the wait stages, and a gzip bomb stopped at the limit.
// A property failure prints its seed: RC_PARAMS="seed=<seed>" build/tests/kineto_test.
#include "sf/formats/formats.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using sf::formats::FormatError;
using sf::formats::KinetoImport;
using sf::formats::KinetoOptions;

const std::string kData = std::string(SF_SOURCE_DIR) + "/tests/data/";
constexpr int kData_ = 0, kFwd = 1, kBwd = 2, kCb = 3, kOpt = 4;

/// One X event.
struct E {
  E(std::string n, double t, double d, std::string th = "1", std::string c = "")
      : name(std::move(n)), ts(t), dur(d), tid(std::move(th)), cat(std::move(c)) {}
  std::string name;
  double ts, dur;
  std::string tid;
  std::string cat;
};

std::string event(const E& e) {
  std::string s = R"({"ph":"X","name":")" + e.name + R"(","pid":1,"tid":)" + e.tid + R"(,"ts":)" + std::to_string(e.ts) +
                  R"(,"dur":)" + std::to_string(e.dur);
  if (!e.cat.empty()) s += R"(,"cat":")" + e.cat + "\"";
  return s + "}";
}

/// A Kineto trace (rank 0 of 1 unless head says otherwise) holding the events.
std::string trace(const std::vector<E>& evs, const std::string& head = R"("distributedInfo":{"rank":0,"world_size":1},)") {
  std::string s = "{" + head + R"("traceEvents":[)";
  for (std::size_t i = 0; i < evs.size(); ++i) s += (i ? "," : "") + event(evs[i]);
  return s + "]}";
}

KinetoImport import_text(const std::string& text, KinetoOptions opt = {}, const std::string& name = "t.json") {
  return sf::formats::import_kineto_buffers({{name, text}}, opt);
}

/// The error of f (one line), or "" when it succeeds.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
    return what;
  }
  return "";
}

#define EXPECT_ERROR(call, fragment)                                     \
  do {                                                                   \
    const std::string what_ = error_of([&] { (void)(call); });           \
    EXPECT_NE(what_.find(fragment), std::string::npos) << "got: " << what_; \
  } while (0)

/// Walls equal the ProfilerStep spans; stages sum to at most the wall; sync waits are at most
/// their stage; every step has a backward.
void expect_sound(const KinetoImport& imp, const std::vector<double>& walls_us) {
  const auto& m = imp.window.matrix;
  ASSERT_EQ(m.steps(), static_cast<int>(walls_us.size()));
  for (int t = 0; t < m.steps(); ++t) {
    EXPECT_NEAR(m.wall(t, 0), walls_us[t] * 1e-6, 1e-12) << "step row " << t;
    double sum = 0;
    for (int s = 0; s < m.schema().explicit_count(); ++s) {
      sum += m.d(t, 0, s);
      if (m.has_sync_wait() && !std::isnan(m.sync_wait(t, 0, s))) {
        EXPECT_LE(m.sync_wait(t, 0, s), m.d(t, 0, s));
      }
    }
    EXPECT_LE(sum, m.wall(t, 0) * (1 + 1e-12));
  }
  EXPECT_EQ(imp.traces[0].stage_steps[kBwd], imp.traces[0].steps);
}

// ---- forms -----------------------------------------------------------------------------------

TEST(KinetoForms, pytorch_19_backward_functions_and_a_worker_name_with_rank_flags) {
  KinetoOptions opt;
  EXPECT_ERROR(sf::formats::import_kineto({kData + "kineto/forms/pt19_worker0.json"}, opt), "expected --rank N (with --world-size)");
  opt.rank = 0;
  opt.world_size = 1;
  const auto imp = sf::formats::import_kineto({kData + "kineto/forms/pt19_worker0.json"}, opt);
  expect_sound(imp, {1000, 1000});
  const auto& t = imp.traces[0];
  EXPECT_EQ(t.rank_source, "--rank");
  EXPECT_EQ(t.world_source, "--world-size");
  EXPECT_EQ(t.stage_rules[kBwd], "autograd::engine / Backward events (2)");
  EXPECT_EQ(t.stage_steps[kData_], 2);  // DataLoader __next__
  EXPECT_EQ(t.stage_steps[kOpt], 2);    // Optimizer.step#SGD.step
  EXPECT_EQ(t.events, 20);
  EXPECT_EQ(t.kept, 16);  // kernels and copies (device, not collectives) are dropped while reading
  // Backward: CudnnConvolutionBackward from 330 to AccumulateGrad's end at 660 µs.
  EXPECT_NEAR(imp.window.matrix.d(0, 0, kBwd), 330e-6, 1e-12);
}

TEST(KinetoForms, rocm_mtia_and_ns_display_units) {
  const auto rocm = sf::formats::import_kineto({kData + "kineto/forms/rocm_rank1.json"});
  EXPECT_EQ(rocm.traces[0].rank, 1);
  EXPECT_EQ(rocm.traces[0].collectives, "device collective kernels (NCCL, RCCL, ...; device time)");
  EXPECT_GT(rocm.window.matrix.sync_wait(0, 0, kBwd), 0);
  const auto mtia = sf::formats::import_kineto({kData + "kineto/forms/mtia_rank0.json"});
  expect_sound(mtia, {1000, 1000});
  EXPECT_EQ(mtia.traces[0].collectives, "device collective kernels (NCCL, RCCL, ...; device time)");
  EXPECT_NEAR(mtia.window.matrix.sync_wait(0, 0, kBwd), 120e-6, 1e-9);  // allreduce_bucket0 600..800 inside backward 320..720
  // displayTimeUnit "ns" tells a viewer how to show times; ts and dur stay microseconds.
  const auto ns = sf::formats::import_kineto({kData + "kineto/forms/ns_rank0.json"});
  expect_sound(ns, {999.75, 999.75});
  EXPECT_NEAR(ns.window.matrix.d(0, 0, kFwd), 300.25e-6, 1e-12);
}

TEST(KinetoForms, bare_arrays_tail_metadata_and_steps_out_of_id_order) {
  KinetoOptions opt;
  opt.world_size = 4;
  const auto bare = sf::formats::import_kineto({kData + "bad/kineto_rank3_old_form.json"}, opt);
  EXPECT_EQ(bare.traces[0].form, "event array");
  EXPECT_EQ(bare.traces[0].rank_source, "file name");
  const auto tail = sf::formats::import_kineto({kData + "kineto/forms/tail_info.json"});
  EXPECT_EQ(tail.traces[0].rank, 1);
  EXPECT_EQ(tail.traces[0].world_size, 2);
  const auto order = sf::formats::import_kineto({kData + "kineto/forms/steps_out_of_order_rank0.json"});
  EXPECT_EQ(order.window.matrix.first_step(), 6);
  expect_sound(order, {500, 500});
}

// ---- where rank and world size come from, and when it is checked ----------------------------

TEST(KinetoRank, flags_fill_what_the_trace_lacks_and_must_agree_with_what_it_says) {
  const std::string bare = trace({{"ProfilerStep#1", 0, 100}, {"## backward ##", 10, 50}}, "");
  KinetoOptions opt;
  opt.rank = 2;
  opt.world_size = 4;
  EXPECT_EQ(import_text(bare, opt).traces[0].rank, 2);
  EXPECT_ERROR(import_text(trace({{"ProfilerStep#1", 0, 100}, {"## backward ##", 10, 50}}), opt),
               "distributedInfo.rank is 0 but --rank is 2");
  EXPECT_ERROR(sf::formats::import_kineto_buffers({{"a.json", bare}, {"b.json", bare}}, opt), "--rank names the rank of one trace");
  opt.world_size = 2;
  EXPECT_ERROR(import_text(bare, opt), "rank 2 outside world size 2 (rank from --rank");
}

TEST(KinetoRank, a_trace_without_steps_says_so_first_whatever_flags_it_got) {
  const std::string no_steps = trace({{"aten::mm", 0, 100}}, "");
  EXPECT_ERROR(import_text(no_steps), "no ProfilerStep#N events");
  KinetoOptions opt;
  opt.rank = 0;
  opt.world_size = 3;
  EXPECT_ERROR(import_text(no_steps, opt), "no ProfilerStep#N events");
  EXPECT_ERROR(import_text(trace({{"aten::mm", 0, 100}}), opt), "no ProfilerStep#N events");  // distributedInfo disagrees
}

TEST(KinetoRank, traces_of_two_jobs_fail_on_their_heads_before_any_events_are_read) {
  // Both traces' events are not JSON past their heads: an error about the world size (or the
  // rank) proves the heads were compared before either trace's events were read.
  const std::string a = R"({"distributedInfo":{"rank":0,"world_size":2},"traceEvents":[{"ph":"X",)";
  const std::string b = R"({"distributedInfo":{"rank":1,"world_size":4},"traceEvents":[{"ph":"X",)";
  EXPECT_ERROR(sf::formats::import_kineto_buffers({{"a.json", a}, {"b.json", b}}), "b.json: world size 4 but a.json has 2");
  const std::string a1 = R"({"distributedInfo":{"rank":1,"world_size":2},"traceEvents":[{"ph":"X",)";
  EXPECT_ERROR(sf::formats::import_kineto_buffers({{"a.json", a1}, {"b_rank1.json", a1}}), "rank 1 already given by a.json");
  // Where distributedInfo follows the events, the same conflict is found after them.
  const std::string tail2 = R"({"traceEvents":[{"ph":"X","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":9},)"
                            R"({"ph":"X","name":"## backward ##","pid":1,"tid":1,"ts":1,"dur":2}],"distributedInfo":{"rank":0,"world_size":2}})";
  std::string tail4 = tail2;
  tail4.replace(tail4.find("\"rank\":0,\"world_size\":2"), 23, "\"rank\":1,\"world_size\":4");
  EXPECT_ERROR(sf::formats::import_kineto_buffers({{"a.json", tail2}, {"b.json", tail4}}), "b.json: world size 4 but a.json has 2");
  // A file name is no rank while distributedInfo may still follow the events: rank0 in both
  // names, ranks 0 and 1 in their tails, one job.
  std::string tail1 = tail2;
  tail1.replace(tail1.find("\"rank\":0"), 8, "\"rank\":1");
  const auto two = sf::formats::import_kineto_buffers({{"x_rank0.json", tail2}, {"y_rank0.json", tail1}});
  EXPECT_EQ(two.traces[1].rank, 1);
}

// ---- step structure and repeated keys (issue 33) ----------------------------------------------

TEST(KinetoSteps, overlapping_nested_and_identical_spans_are_refused) {
  EXPECT_ERROR(sf::formats::import_kineto({kData + "hostile/kineto_steps_overlap.json"}),
               "kineto_steps_overlap.json: ProfilerStep#1 (ts 0.0, dur 100.0 us) overlaps ProfilerStep#2");
  EXPECT_ERROR(sf::formats::import_kineto({kData + "hostile/kineto_steps_nested.json"}),
               "ProfilerStep#2 (ts 10.0, dur 50.0 us) lies inside ProfilerStep#1");
  EXPECT_ERROR(sf::formats::import_kineto({kData + "hostile/kineto_steps_identical.json"}), "have the same span on the main thread");
  // Touching steps, and a crossing of a few ns (three-decimal rounding), are consecutive steps.
  const auto ok = import_text(trace({{"ProfilerStep#1", 0, 100.004}, {"## backward ##", 10, 20},
                                     {"ProfilerStep#2", 100, 100}, {"## backward ##", 110, 20}}));
  EXPECT_EQ(ok.window.matrix.steps(), 2);
  // Steps on another thread than the main one are not steps of this rank.
  const auto other = import_text(trace({{"ProfilerStep#1", 0, 100}, {"ProfilerStep#2", 100, 100}, {"## backward ##", 10, 20},
                                        {"## backward ##", 110, 20}, {"ProfilerStep#9", 50, 100, "7"}}));
  EXPECT_EQ(other.window.matrix.steps(), 2);
}

TEST(KinetoKeys, a_key_twice_is_refused_in_every_object_the_importer_reads) {
  EXPECT_ERROR(sf::formats::import_kineto({kData + "hostile/kineto_dup_dur.json"}),
               "traceEvents[1] ('## forward ##'), ph \"X\": key \"dur\" appears twice (byte ");
  EXPECT_ERROR(sf::formats::import_kineto({kData + "hostile/kineto_dup_rank.json"}), "key \"rank\" appears twice in distributedInfo");
  EXPECT_ERROR(sf::formats::import_kineto({kData + "hostile/kineto_dup_name.json"}), "traceEvents[2], ph \"X\": key \"name\" appears twice");
  EXPECT_ERROR(sf::formats::import_kineto({kData + "hostile/kineto_dup_top.json"}), "key \"traceEvents\" appears twice in the top-level object");
  // Any event, even one the reduction skips (metadata), and any key of it.
  const std::string meta = R"({"traceEvents":[{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{},"args":{}}]})";
  EXPECT_ERROR(import_text(meta), "traceEvents[0] ('thread_name'), ph \"M\": key \"args\" appears twice");
  // Inside args (never read) a repeat changes nothing the import uses: accepted.
  std::string args = trace({{"ProfilerStep#1", 0, 100}, {"## backward ##", 10, 20}});
  args.replace(args.find(R"("dur":100.000000)"), 16, R"("dur":100.000000,"args":{"a":1,"a":2})");
  EXPECT_EQ(import_text(args).window.matrix.steps(), 1);
}

// ---- stages: data anywhere, the stage map, what step.other holds -------------------------------

TEST(KinetoStages, a_data_load_after_forward_is_data) {
  const auto imp = import_text(trace({{"ProfilerStep#1", 0, 1000}, {"## forward ##", 10, 200}, {"## data_load ##", 220, 100},
                                      {"## backward ##", 400, 300}, {"## optimizer ##", 750, 200}}));
  EXPECT_NEAR(imp.window.matrix.d(0, 0, kData_), 100e-6, 1e-12);
  EXPECT_NEAR(imp.window.matrix.d(0, 0, kFwd), 200e-6, 1e-12);
}

const std::vector<E> kSparse = {{"ProfilerStep#1", 0, 1000},        {"## forward ##", 10, 100},
                                {"## sparse_data_dist ##", 120, 500}, {"## wait_sparse_data_dist ##", 130, 300},
                                {"## backward ##", 650, 200},        {"## optimizer ##", 860, 100}};

TEST(KinetoStages, unmapped_time_is_named_on_stderr_and_in_the_telemetry) {
  const auto imp = import_text(trace(kSparse));
  const auto& t = imp.traces[0];
  EXPECT_NEAR(t.other_share, 0.59, 1e-9);  // 500 µs of sparse_data_dist + 90 µs of gaps in 1000 (850-860 is callbacks)
  ASSERT_FALSE(t.unmapped.empty());
  EXPECT_EQ(t.unmapped[0].name, "## sparse_data_dist ##");  // the outermost event over the time
  EXPECT_NEAR(t.unmapped[0].seconds_per_step, 500e-6, 1e-12);
  const std::string line = sf::formats::kineto_unmapped_line(t);
  EXPECT_NE(line.find("t.json (rank 0): step.other 59 % of the step walls: ## sparse_data_dist ## 500 us/step"), std::string::npos) << line;
  const auto& reasons = imp.window.telemetry.reasons;
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), "kineto import: " + line), reasons.end());
  // Under 5 % (the labeler's default residual gate) the telemetry says nothing.
  const auto small = import_text(trace({{"ProfilerStep#1", 0, 1000}, {"## forward ##", 0, 500}, {"## backward ##", 500, 480}}));
  EXPECT_TRUE(small.window.telemetry.reasons.empty());
}

TEST(KinetoStages, user_annotations_a_fallback_backward_swallows_are_named) {
  // Backward from autograd events alone (no '## backward ##'): 300..900 µs; the user's
  // record_function ranges 'dispatch' (400..500) and 'combine' (600..800) run inside it (DeepSeek's
  // dispatch/combine once sat unnamed inside "backward 92 %").
  const std::vector<E> evs = {{"ProfilerStep#1", 0, 1000}, {"## forward ##", 0, 300},
                              {"autograd::engine::evaluate_function: MmBackward0", 300, 600, "2"},
                              {"dispatch", 400, 100, "1", "user_annotation"}, {"combine", 600, 200, "1", "user_annotation"},
                              {"aten::mm", 650, 50, "1", "cpu_op"}};
  const auto imp = import_text(trace(evs));
  const auto& t = imp.traces[0];
  ASSERT_EQ(t.in_fallback.size(), 2u);
  EXPECT_EQ(t.in_fallback[0].name, "combine");
  EXPECT_NEAR(t.in_fallback[0].seconds_per_step, 200e-6, 1e-12);
  EXPECT_EQ(t.in_fallback[1].name, "dispatch");
  EXPECT_NEAR(t.in_fallback[1].seconds_per_step, 100e-6, 1e-12);
  const std::string line = sf::formats::kineto_fallback_line(t);
  EXPECT_NE(line.find("t.json (rank 0): model.backward_cpu_wall is the span of autograd events (no '## backward ##' "
                      "annotation) and holds annotations combine 200 us/step, dispatch 100 us/step; --stage-map"),
            std::string::npos) << line;
  // With the annotation, backward is what the user marked: nothing swallowed.
  auto marked = evs;
  marked.push_back({"## backward ##", 300, 600});
  EXPECT_TRUE(import_text(trace(marked)).traces[0].in_fallback.empty());
}

TEST(KinetoStages, a_stage_map_maps_names_to_new_stages_in_the_schema) {
  KinetoOptions opt;
  opt.stage_map = sf::formats::parse_kineto_stage_map(
      R"({"stages":[{"stage":"comm.sparse_dist","after":"model.fwd_loss_cpu_wall","match":["## sparse_data_dist ##"]},)"
      R"({"stage":"data.next_wait","match":["## wait_sparse_*"]}]})",
      "map.json");
  const auto imp = import_text(trace(kSparse), opt);
  const auto& schema = imp.window.matrix.schema();
  ASSERT_EQ(schema.explicit_count(), 6);
  EXPECT_EQ(schema.name(2), "comm.sparse_dist");
  EXPECT_EQ(schema.name(6), "step.other_cpu_wall");
  // The inner wait goes to data (the innermost claim wins), the rest of sparse_data_dist to the new stage.
  EXPECT_NEAR(imp.window.matrix.d(0, 0, 0), 300e-6, 1e-12);
  EXPECT_NEAR(imp.window.matrix.d(0, 0, 2), 200e-6, 1e-12);
  EXPECT_EQ(imp.traces[0].stage_rules[2], "--stage-map stages[0] (1)");
  EXPECT_NEAR(imp.traces[0].other_share, 0.09, 1e-9);
}

TEST(KinetoStages, a_bad_stage_map_is_one_line_naming_the_file) {
  auto bad = [](const std::string& text, const std::string& fragment) {
    EXPECT_ERROR(sf::formats::parse_kineto_stage_map(text, "map.json"), fragment);
    EXPECT_ERROR(sf::formats::parse_kineto_stage_map(text, "map.json"), "map.json");
  };
  bad(R"({"stages":[{"stage":"a","match":["x"],"match":["y"]}]})", "appears twice");
  bad(R"({"stages":[{"stage":"a","match":["x"],"color":1}]})", "unknown key \"color\"");
  bad(R"({"stages":[{"stage":"a","match":[]}]})", "no \"match\" list");
  bad(R"({"stages":[{"stage":"step.other_cpu_wall","match":["x"]}]})", "the residual");
  bad(R"({"stages":[{"stage":"a","after":"nowhere","match":["x"]}]})", "placed after nowhere");
  bad(R"({"stages":[{"stage":"optim.step_cpu_wall","after":"data.next_wait","match":["x"]}]})", "a default stage");
  bad(R"({"stages":[{"stage":"a","thread":"gpu","match":["x"]}]})", "expected \"main\" or \"any\"");
  bad(R"([1])", "not an object with \"stages\"");
}

// ---- collectives: side.sync_wait and the wait stages -------------------------------------------

TEST(KinetoSync, two_gloo_workers_at_once_are_one_wait_never_above_the_stage) {
  // cpu_only_rank-34's shape: two all_reduce worker threads over the same 100 µs of a 120 µs backward.
  const auto imp = import_text(trace({{"ProfilerStep#1", 0, 300}, {"## forward ##", 0, 100}, {"## backward ##", 100, 120},
                                      {"gloo:all_reduce", 105, 110, "8"}, {"gloo:all_reduce", 100, 200, "9"}}));
  EXPECT_NEAR(imp.window.matrix.sync_wait(0, 0, kBwd), 120e-6, 1e-9);  // the union, clipped to the stage
  EXPECT_LE(imp.window.matrix.sync_wait(0, 0, kBwd), imp.window.matrix.d(0, 0, kBwd));
}

TEST(KinetoSync, a_collective_past_its_step_counts_in_the_next_one_too) {
  // The all-reduce starts in step 1's backward (250 µs) and ends in step 2's forward (350 µs): 50
  // µs in each step (it once lost the part in step 2: MI300 step 16, 9.20 ms of wait against
  // 12.93 ms of RCCL time in it).
  const auto imp = import_text(trace({{"ProfilerStep#1", 0, 300}, {"## forward ##", 0, 100}, {"## backward ##", 100, 200},
                                      {"gloo:all_reduce", 250, 100, "8"}, {"ProfilerStep#2", 300, 300},
                                      {"## forward ##", 300, 100}, {"## backward ##", 400, 200}}));
  EXPECT_NEAR(imp.window.matrix.sync_wait(0, 0, kBwd), 50e-6, 1e-9);
  EXPECT_NEAR(imp.window.matrix.sync_wait(1, 0, kFwd), 50e-6, 1e-9);
  EXPECT_NEAR(imp.window.matrix.sync_wait(1, 0, kBwd), 0.0, 1e-12);
}

TEST(KinetoSync, wait_stages_are_the_stage_groups_that_hold_a_collective) {
  const auto imp = import_text(trace({{"ProfilerStep#1", 0, 1000}, {"## forward ##", 0, 300}, {"## backward ##", 300, 300},
                                      {"record_param_comms", 400, 20, "2"}, {"## optimizer ##", 700, 200},
                                      {"ncclDevKernel_AllReduce", 750, 40, "7", "kernel"}, {"c10d::barrier", 950, 20}}));
  EXPECT_EQ(imp.wait_stages, (std::vector<std::string>{"model.backward_cpu_wall", "optim.step_cpu_wall", "step.other_cpu_wall"}));
  const auto none = import_text(trace({{"ProfilerStep#1", 0, 1000}, {"## backward ##", 300, 300}}));
  EXPECT_TRUE(none.wait_stages.empty());
}

/// Stage time from five annotations in random order and gaps, collectives from 1-4 threads whose
/// intervals overlap at random (and run past the step): side.sync_wait is the measure of their
/// union inside each stage, never above the stage, and the stages never sum above the wall.
RC_GTEST_PROP(KinetoSync, sync_wait_is_the_union_of_collectives_inside_each_stage, ()) {
  const int pieces = *rc::gen::inRange(5, 12);
  std::vector<int> stage_of = {kData_, kFwd, kBwd, kCb, kOpt};
  for (int i = 5; i < pieces; ++i) stage_of.push_back(*rc::gen::inRange(-1, 5));  // -1: a gap
  std::shuffle(stage_of.begin(), stage_of.end(), std::mt19937(*rc::gen::arbitrary<unsigned>()));
  static const char* kNames[] = {"## data_load ##", "## forward ##", "## backward ##", "## callbacks ##", "## optimizer ##"};
  std::vector<E> evs;
  std::vector<std::pair<int, int>> piece_span;
  int t = 0;
  for (int i = 0; i < pieces; ++i) {
    const int len = *rc::gen::inRange(1, 200);
    piece_span.emplace_back(t, t + len);
    if (stage_of[i] >= 0) evs.emplace_back(kNames[stage_of[i]], double(t), double(len));
    t += len;
  }
  const int wall = t;
  evs.emplace_back("ProfilerStep#1", 0, double(wall));
  std::vector<std::pair<int, int>> coll;
  const int threads = *rc::gen::inRange(1, 5);
  for (int k = 0; k < threads; ++k) {
    const int n = *rc::gen::inRange(0, 5);
    for (int i = 0; i < n; ++i) {
      const int b = *rc::gen::inRange(0, wall);
      const int len = *rc::gen::inRange(1, wall + 50);
      coll.emplace_back(b, std::min(b + len, wall));
      evs.emplace_back("gloo:all_reduce", double(b), double(len), std::to_string(10 + k));
    }
  }
  const auto imp = import_text(trace(evs));
  const auto& m = imp.window.matrix;
  double sum = 0;
  for (int s = 0; s < 5; ++s) {
    // The oracle: per microsecond, is it in stage s and in some collective?
    int want = 0, len = 0;
    for (int x = 0; x < wall; ++x) {
      const auto p = std::find_if(piece_span.begin(), piece_span.end(), [x](auto& ps) { return x >= ps.first && x < ps.second; });
      if (stage_of[p - piece_span.begin()] != s) continue;
      ++len;
      want += std::any_of(coll.begin(), coll.end(), [x](auto& c) { return x >= c.first && x < c.second; }) ? 1 : 0;
    }
    RC_ASSERT(std::fabs(m.d(0, 0, s) - len * 1e-6) < 1e-12);
    sum += m.d(0, 0, s);
    const double got = m.has_sync_wait() ? m.sync_wait(0, 0, s) : 0.0;
    RC_ASSERT((std::isnan(got) ? 0.0 : got) <= m.d(0, 0, s));
    RC_ASSERT(std::fabs((std::isnan(got) ? 0.0 : got) - want * 1e-6) < 1e-9);
  }
  RC_ASSERT(sum <= m.wall(0, 0) * (1 + 1e-12));
}

// ---- a gzip bomb ---------------------------------------------------------------------------------

/// `n` bytes of blanks, gzip'd in memory (a bomb: about a thousandth of its inflated size).
std::string gzip_blanks(std::size_t n) {
  z_stream zs{};
  deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY);
  const std::string block(1 << 20, ' ');
  std::string out(1 << 16, '\0');
  std::string gz;
  for (std::size_t done = 0; done < n;) {
    const std::size_t take = std::min(block.size(), n - done);
    done += take;
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(block.data()));
    zs.avail_in = static_cast<uInt>(take);
    do {
      zs.next_out = reinterpret_cast<Bytef*>(out.data());
      zs.avail_out = static_cast<uInt>(out.size());
      deflate(&zs, done == n ? Z_FINISH : Z_NO_FLUSH);
      gz.append(out.data(), out.size() - zs.avail_out);
    } while (zs.avail_out == 0);
  }
  deflateEnd(&zs);
  return gz;
}

TEST(KinetoGzip, a_bomb_is_stopped_within_one_block_of_the_limit) {
  const std::string bomb = gzip_blanks(std::size_t{64} << 20);  // 64 MiB of blanks in ~64 KiB
  ASSERT_LT(bomb.size(), std::size_t{1} << 18);
  KinetoOptions opt;
  opt.limits.max_file_bytes = 4 << 20;
  const std::string what = error_of([&] { import_text(bomb, opt, "bomb.json.gz"); });
  EXPECT_NE(what.find("bomb.json.gz: the decompressed trace is above the limit of 4194304 bytes (stopped at "), std::string::npos) << what;
  // Stopped at the first block past the limit: never more than 256 KiB beyond it.
  const auto at = what.find("stopped at ") + 11;
  EXPECT_LE(std::stoull(what.substr(at)), (std::uint64_t{4} << 20) + (std::uint64_t{1} << 18)) << what;
}

}  // namespace
