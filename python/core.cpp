// sf_torch._core: the C++ engine as seen from a PyTorch trainer. A window gathered by sf_torch is
// built into the very frontier::StageMatrix the C++ recorder would build, scored by
// frontier::evaluate, written by formats::evidence_to_json / write_jsonl, and judged by
// testbed::judge, the road `run`, `sim` and `score` take — so its packet is byte-identical to
// `sf-testbed score --json` on the dumped matrix, and its verdict is the testbed's.
#include "sf/formats/formats.h"
#include "sf/frontier/frontier.h"
#include "sf/inject/inject.h"
#include "sf/testbed/testbed.h"

#include "hot_path.h"
#include "sf_build_info.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <sstream>

namespace py = pybind11;
using namespace sf;

namespace {

/// A scored window: the evidence and the rank identities its packet carries.
struct Scored {
  frontier::Evidence evidence;
  std::vector<formats::RankInfo> ranks;
};

frontier::LabelConfig label_config(const std::string& config_json) {
  frontier::LabelConfig cfg;
  if (config_json.empty()) return cfg;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument(std::string("labeler config is not valid JSON: ") + e.what());
  }
  formats::apply_config_json(j, cfg, "labeler config");
  return cfg;
}

/// records: one row per (step, rank) present, columns
///   [t (step offset), rank, wall, d_0 … d_{K−1}, event state (0 unsampled, 1 ready, 2 missing),
///    event seconds, sync_0 … sync_{K−1} (NaN: not recorded)]
/// A row the matrix rejects (negative, non-finite) is dropped and named in the telemetry, as the
/// C++ recorder's root does.
formats::Window make_window(const std::vector<std::string>& stages, int world_size, std::int64_t first_step, int steps,
                            py::array_t<double, py::array::c_style | py::array::forcecast> records, bool gather_ok,
                            const std::vector<std::string>& reasons, std::int64_t dropped_records,
                            const std::vector<std::tuple<int, int, int, std::string>>& ranks, int accumulation) {
  formats::Window w;
  w.matrix = frontier::StageMatrix(frontier::StageSchema(stages, true, accumulation), world_size, first_step, steps);
  w.telemetry.gather_ok = gather_ok;
  w.telemetry.reasons = reasons;
  w.telemetry.dropped_records = dropped_records;
  for (const auto& [rank, local, node, host] : ranks) w.ranks.push_back({rank, local, node, host});
  const int K = static_cast<int>(stages.size());
  const auto cols = static_cast<py::ssize_t>(5 + 2 * K);
  if (records.ndim() != 2 || (records.shape(0) > 0 && records.shape(1) != cols))
    throw std::invalid_argument("records must be an (n, " + std::to_string(cols) + ") array");
  const auto r = records.unchecked<2>();
  std::vector<double> d(K);
  for (py::ssize_t i = 0; i < records.shape(0); ++i) {
    const double tf = r(i, 0), rf = r(i, 1);
    if (!(tf >= 0 && tf < steps && rf >= 0 && rf < world_size)) continue;
    const int t = static_cast<int>(tf), rank = static_cast<int>(rf);
    for (int s = 0; s < K; ++s) d[s] = r(i, 3 + s);
    try {
      w.matrix.set_record(t, rank, d, r(i, 2));
      const double state = r(i, 3 + K);
      if (state == 1) w.matrix.set_fwd_event(t, rank, frontier::EventState::ready, r(i, 4 + K));
      if (state == 2) w.matrix.set_fwd_event(t, rank, frontier::EventState::missing, 0);
      for (int s = 0; s < K; ++s)
        if (const double v = r(i, 5 + K + s); !std::isnan(v)) w.matrix.set_sync_wait(t, rank, s, v);
    } catch (const std::invalid_argument& e) {
      w.telemetry.gather_ok = false;
      w.telemetry.reasons.push_back("rank " + std::to_string(rank) + ": inconsistent record (" + e.what() + ")");
      w.matrix.clear_record(t, rank);
    }
  }
  return w;
}

/// The fault as train.py's options give it: one inject::FaultSpec, checked and planned by the
/// C++ that `run` and `sim` use (std::invalid_argument, a ValueError in Python, for a bad spec).
inject::FaultSpec fault_spec(const std::string& scenario, std::optional<double> delay_ms, const std::vector<int>& ranks,
                             std::int64_t onset, std::int64_t offset, int every) {
  inject::FaultSpec f;
  f.scenario = scenario;
  f.delay_ms = delay_ms;
  f.target_ranks = ranks;
  f.onset = onset;
  f.offset = offset < 0 ? inject::kForever : offset;
  f.every = every;
  return f;
}

inject::FaultPlan make_plan(const std::string& scenario, double delay_ms, const std::vector<int>& ranks,
                            std::int64_t onset, std::int64_t offset, int every) {
  return inject::make_plan(fault_spec(scenario, delay_ms, ranks, onset, offset, every), 0, 0);
}


/// The module's constants and the stage schema's names and hash.
void bind_names(py::module_& m) {
  m.attr("git_commit") = SF_GIT_COMMIT;
  m.attr("max_delay_ms") = inject::kMaxDelayMs;  // train.py's --delay-ms bound: the C++ one
  m.def("details_pointer", [](const std::string& where_else) { return formats::details_pointer(where_else); },
        py::arg("where_else") = "", "the short answer's last line: where the details are and what the terms mean");
  m.attr("stages_schema") = std::string(formats::kStagesSchema);
  m.attr("evidence_schema") = std::string(frontier::Evidence::kSchema);

  m.def("default_stages", &frontier::default_explicit_stages, "the paper's five explicit stages, in order");
  m.def(
      "order_hash",
      [](const std::vector<std::string>& stages, int accumulation) {
        return frontier::StageSchema(stages, true, accumulation).order_hash();
      },
      py::arg("stages"), py::arg("accumulation") = 1,
      "FNV-1a 64 of the ordered stages with the residual, as the recorder's payload header carries it");
  m.def(
      "config_names_problem",
      [](const std::vector<std::string>& stages, const std::string& config_json, int accumulation) {
        return frontier::config_names_problem(frontier::StageSchema(stages, true, accumulation), label_config(config_json));
      },
      py::arg("stages"), py::arg("config_json"), py::arg("accumulation") = 1,
      "\"\" when every stage group the labeler config names (its wait model) is one of these stages', else why not");
}

/// frontier::Reference and reading one from a file.
void bind_reference(py::module_& m) {
  py::class_<frontier::Reference>(m, "Reference", "what a window's diagnosis is compared with (frontier::Reference)")
      .def_readonly("name", &frontier::Reference::name)
      .def_readonly("steps", &frontier::Reference::steps)
      .def_readonly("groups", &frontier::Reference::groups);
  m.def(
      "read_reference",
      [](const std::string& path, const std::string& config_json) {
        try {
          return formats::read_reference(path, label_config(config_json));
        } catch (const formats::FormatError& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("path"), py::arg("config_json") = "",
      "a reference from a healthy run's stage-matrix dump or evidence packet (ValueError with one line on bad input)");
}

/// A scored window: its packet, table, answer, diagnosis, what-if, metrics.
void bind_evidence(py::module_& m) {
  py::class_<Scored>(m, "Evidence", "a scored window (frontier::Evidence with the rank identities)")
      .def("packet", [](const Scored& s) { return formats::evidence_to_json(s.evidence, s.ranks).dump(); },
           "the sf.evidence/6 packet, exactly as `sf-testbed score --json` prints it (without the newline)")
      .def("table", [](const Scored& s, const std::string& title) { return formats::evidence_table(s.evidence, title); })
      .def("answer", [](const Scored& s) { return formats::answer_lines(s.evidence); },
           "the answer first: the diagnosis, the what-if, how sure and what the evidence lacks, as `sf-testbed run` prints them")
      .def(
          "summary",
          [](const Scored& s, int index, const std::string& packet_error) {
            return testbed::window_summary(formats::evidence_to_json(s.evidence, s.ranks), index, packet_error).dump();
          },
          py::arg("index"), py::arg("packet_error") = "",
          "the window's windows.jsonl line (testbed::window_summary), as `run --out` writes it")
      .def("reference", [](const Scored& s, const std::string& name) { return frontier::make_reference(s.evidence, name); },
           py::arg("name"), "this window as the reference of later windows' diagnoses")
      .def("reference_file", [](const Scored& s, const std::string& name) { return formats::reference_to_json(s.evidence, name).dump(); },
           py::arg("name"), "this window as an sf.reference/1 file's text (score --reference reads it)")
      .def(
          "diagnose_against",
          [](Scored& s, const frontier::Reference& ref) {
            auto judged = testbed::judge(std::move(s.evidence), {.reference = &ref});
            s.evidence = std::move(judged.evidence);
            return judged.reference_problem;
          },
          py::arg("reference"),
          "the diagnosis against `reference` (frontier::diagnose_against); returns \"\" or why it could not be used")
      .def_property_readonly("diagnosis", [](const Scored& s) { return formats::diagnosis_to_json(s.evidence, s.ranks).dump(); },
                             "the packet's diagnosis object (JSON text)")
      .def_property_readonly("diagnosis_line", [](const Scored& s) { return formats::diagnosis_line(s.evidence, s.ranks); })
      .def_property_readonly("whatif_line", [](const Scored& s) { return formats::whatif_line(s.evidence, s.ranks); },
                             "what fixing the diagnosis' culprits would buy (formats::whatif_line)")
      .def(
          "metrics",
          [](const Scored& s, const std::string& source, std::int64_t windows, std::int64_t steps, std::int64_t change_points,
             std::int64_t gather_failures) {
            return formats::metrics_text(s.evidence, {source, windows, steps, change_points, gather_failures});
          },
          py::arg("source"), py::arg("windows"), py::arg("steps"), py::arg("change_points") = -1,
          py::arg("gather_failures") = 0, "the window as Prometheus text exposition (docs/formats.md, Metrics)")
      .def_property_readonly("exposed_makespan_s", [](const Scored& s) { return s.evidence.exposed_makespan_s; })
      .def_property_readonly("median_step_s", [](const Scored& s) { return s.evidence.median_step_s; })
      .def_property_readonly("steps", [](const Scored& s) { return s.evidence.steps; });
}

/// A stage-matrix window: made from the recorder's rows, read from a file, evaluated.
void bind_window(py::module_& m) {
  py::class_<formats::Window>(m, "Window", "a stage-matrix window (formats::Window)")
      .def(py::init(&make_window), py::arg("stages"), py::arg("world_size"), py::arg("first_step"), py::arg("steps"),
           py::arg("records"), py::arg("gather_ok") = true, py::arg("reasons") = std::vector<std::string>{},
           py::arg("dropped_records") = 0, py::arg("ranks") = std::vector<std::tuple<int, int, int, std::string>>{},
           py::arg("accumulation") = 1)
      .def_property_readonly("world_size", [](const formats::Window& w) { return w.matrix.ranks(); })
      .def_property_readonly("first_step", [](const formats::Window& w) { return w.matrix.first_step(); })
      .def_property_readonly("steps", [](const formats::Window& w) { return w.matrix.steps(); })
      .def_property_readonly("gather_ok", [](const formats::Window& w) { return w.telemetry.gather_ok; })
      .def_property_readonly("reasons", [](const formats::Window& w) { return w.telemetry.reasons; })
      .def("present", [](const formats::Window& w, int t, int r) { return w.matrix.present(t, r); })
      .def("d", [](const formats::Window& w, int t, int r, int s) { return w.matrix.d(t, r, s); })
      .def("wall", [](const formats::Window& w, int t, int r) { return w.matrix.wall(t, r); })
      .def("sync_wait", [](const formats::Window& w, int t, int r, int s) { return w.matrix.sync_wait(t, r, s); })
      .def(
          "evaluate",
          [](const formats::Window& w, const std::string& config_json) {
            const auto cfg = label_config(config_json);
            Scored s;
            {
              py::gil_scoped_release unlocked;  // pure C++: let the trainer's threads run
              s.evidence = frontier::evaluate(w.matrix, cfg, w.telemetry);
            }
            s.ranks = w.ranks;
            return s;
          },
          py::arg("config_json") = "", "frontier::evaluate with the labeler config (JSON, keys of docs/labeler.md)")
      .def("to_jsonl", [](const formats::Window& w) {
        std::ostringstream out;
        formats::write_jsonl(out, w);
        return out.str();
      }, "the window as sf.stages/1 JSON Lines (header + records), as `run --dump` writes it")
      .def("makespan_check", [](const formats::Window& w, const Scored& s) {
        const auto c = testbed::makespan_check(s.evidence, w.matrix);
        return py::make_tuple(c.wall_sum_s, c.gap);
      }, "(slowest-rank wall sum, relative gap to the exposed makespan), as `run` cross-checks it");

  m.def("read_stage_file", [](const std::string& path) { return formats::read_stage_file(path); },
        "windows of a stage-matrix file (JSONL or CSV); raises ValueError with file:line on bad input");
  py::register_exception<formats::FormatError>(m, "FormatError", PyExc_ValueError);
}

/// The fault catalogue, the hidden targets, the truth and the verdict against it.
void bind_catalogue(py::module_& m) {
  m.def("scenarios", [] {
    py::list out;
    for (const auto& s : inject::catalogue()) {
      py::dict d;
      d["name"] = s.name;
      d["site"] = std::string(inject::to_string(s.site));
      d["kind"] = std::string(inject::to_string(s.kind));
      d["stage"] = s.stage;
      d["sync_bearing"] = s.sync_bearing;
      d["sync_callbacks"] = s.sync_callbacks;
      d["default_delay_ms"] = s.default_delay_ms;
      d["should_route"] = s.should_route;
      d["injects"] = s.injects;
      out.append(d);
    }
    return out;
  }, "the fault catalogue of `sf-testbed scenarios`");
  m.def(
      "fault_plan",
      [](const std::string& scenario, int world, std::uint64_t seed, std::optional<double> delay_ms,
         const std::vector<int>& target_ranks, std::int64_t onset, std::int64_t offset, int every) {
        const auto plan = inject::make_plan(fault_spec(scenario, delay_ms, target_ranks, onset, offset, every), world, seed);
        py::dict d;
        d["scenario"] = plan.scenario->name;
        d["site"] = std::string(inject::to_string(plan.scenario->site));
        d["delay_ms"] = plan.delay_ms;
        d["ranks"] = plan.ranks;
        d["onset"] = plan.onset;
        d["offset"] = plan.offset == inject::kForever ? -1 : plan.offset;
        d["every"] = plan.every;
        return d;
      },
      py::arg("scenario"), py::arg("world"), py::arg("seed"), py::arg("delay_ms") = py::none(),
      py::arg("target_ranks") = std::vector<int>{}, py::arg("onset") = 0, py::arg("offset") = -1, py::arg("every") = 1,
      "the fault plan `run` and `sim` make from the same options (inject::make_plan): scenario, site, delay_ms, "
      "ranks, onset, offset (-1: never), every; ValueError with one line for a bad option");
  m.def("draw_targets", &inject::draw_targets, py::arg("seed"), py::arg("world"), py::arg("count") = 1,
        "the hidden target ranks `sf-testbed run` draws from a seed");
  m.def(
      "truth",
      [](const std::string& scenario, double delay_ms, const std::vector<int>& ranks, std::int64_t onset, std::int64_t offset,
         int every) { return testbed::truth_json(inject::truth(make_plan(scenario, delay_ms, ranks, onset, offset, every))).dump(); },
      py::arg("scenario"), py::arg("delay_ms"), py::arg("ranks"), py::arg("onset") = 0, py::arg("offset") = -1,
      py::arg("every") = 1, "truth records (JSON) as run.json carries them");
  m.def(
      "verdict",
      [](const std::string& scenario, double delay_ms, const std::vector<int>& ranks, const Scored& s, double makespan_gap,
         std::int64_t onset, std::int64_t offset, int every, std::uint64_t seed) {
        const auto plan = make_plan(scenario, delay_ms, ranks, onset, offset, every);
        const auto vr = *testbed::judge(s.evidence, {.plan = &plan, .makespan_gap = makespan_gap, .shuffle_seed = seed}).verdict;
        py::dict d;
        d["json"] = vr.json.dump();
        d["claim_pass"] = vr.claim_pass;
        d["claim"] = vr.claim;
        d["truth_text"] = vr.truth_text;
        d["verdict_text"] = vr.verdict_text;
        d["answer_text"] = vr.answer_text;
        return d;
      },
      py::arg("scenario"), py::arg("delay_ms"), py::arg("ranks"), py::arg("evidence"), py::arg("makespan_gap"),
      py::arg("onset") = 0, py::arg("offset") = -1, py::arg("every") = 1, py::arg("seed") = 0,
      "testbed::judge: the verdict against the truth and the scenario's claim (seed: the shuffled-target null's draw)");
}

/// Provenance as the C++ writers have it.
void bind_provenance(py::module_& m) {
  m.def("provenance", [](const std::string& schema, const std::vector<std::string>& argv, const std::string& commit) {
    return testbed::provenance_json(schema, argv, commit).dump();
  });
  m.def("machine", [] { return testbed::machine_json().dump(); });
  m.def("utc_now", &testbed::utc_now);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "sf-testbed's C++ engine for sf_torch: stage matrices, frontier::evaluate, sf.evidence/6, verdicts";
  bind_names(m);
  bind_reference(m);
  bind_evidence(m);
  bind_window(m);
  bind_catalogue(m);
  bind_provenance(m);
  if (sf_torch::add_hot_path(m.ptr()) < 0) throw py::error_already_set();
}
