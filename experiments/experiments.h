// sf::experiments — declared sweeps (experiments/specs/*.json) run as real mpirun subprocesses,
// resumable row by row, collected into results/<name>/ (rows/, rows.csv, manifest.json; table.md and
// plots come from experiments/report.py over the CSV). The tree keeps rows/ packed as rows.tar.xz
// (experiments/rowstore.py pack, after the run; docs/experiments.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sf::experiments {

/// One run of an experiment: the arguments of `sf-testbed run` and its rank count.
struct Row {
  std::string id;                 ///< stable, file-name safe: finished rows are not redone
  int ranks = 1;
  std::vector<std::string> args;  ///< `run` options (without --out/--quiet)
  nlohmann::ordered_json params;  ///< the row's parameters as declared (scenario, delay_ms, ...)
  /// "run": `mpirun -np ranks sf-testbed run` (run.json); "sim": `sf-testbed sim --json` on
  /// model-driven ranks, no MPI (its JSON line in sim.json), from a spec's "sim" block.
  std::string tool = "run";
};

struct Spec {
  std::string name, title;
  std::string kind;               ///< "runs", "overhead", "fixtures", "sensitivity", "torch" or "script"
  bool per_window = false;        ///< one CSV line per recorder window (A/B/A)
  /// "sham": true adds the null arms (issue 27): every row with a fault gets a twin with delay 0
  /// (same seed, target and settings: arm "sham"), and every fault row's verdict against a
  /// shuffled truth is a CSV line of its own (arm "shuffled").
  bool sham = false;
  /// "row_timeout_s": seconds before a row is killed when --row-timeout is not given (0:
  /// kDefaultRowTimeoutS); a soak whose rows run for half an hour says so in its spec.
  int row_timeout_s = 0;
  std::vector<Row> rows;
  /// kind "script": the script (relative to the project root), its arguments (quick: the
  /// "quick" list) and its report's, with {sf}, {build} and {out} filled in by the driver.
  std::string script;
  std::vector<std::string> script_args, report_args;
  nlohmann::ordered_json raw;     ///< the spec file, for the report
};

/// Reads a spec; `quick` takes its "quick" overrides (tiny rows for CI); `overrides`
/// ("key=value", value parsed as JSON when it is JSON) replace base options of every row, e.g.
/// device=cuda on a GPU host. Throws formats::FormatError naming the file and the problem.
Spec load_spec(const std::string& path, bool quick, const std::vector<std::string>& overrides = {});
/// Names of the specs in a directory (sorted).
std::vector<std::string> list_specs(const std::string& dir);

/// Seconds before a row is killed when neither --row-timeout nor the spec says.
constexpr int kDefaultRowTimeoutS = 900;

struct DriverOptions {
  std::vector<std::string> names;   ///< experiment names, or {"all"}
  bool quick = false;
  std::string specs_dir = "experiments/specs";
  /// Where results go: sf-results/ (untracked) unless --out names another, so that trying an
  /// experiment never rewrites the tracked results/ (its regeneration passes --out results).
  std::string out_dir = "sf-results";
  std::string self;                 ///< path of the sf-testbed binary
  std::string mpirun = "mpirun";
  std::string python = "/usr/bin/python3";
  std::string report_script = "experiments/report.py";
  bool force = false;               ///< redo finished rows
  bool keep_rows = false;           ///< leave rows/ unpacked (otherwise packed into rows.tar.xz after the report)
  std::vector<std::string> overrides; ///< --set key=value on every row's base options
  std::string tag;                  ///< results/NAME-TAG/ (e.g. "gpu")
  int row_timeout_s = 0;            ///< --row-timeout; 0: the spec's "row_timeout_s", else kDefaultRowTimeoutS
  std::string commit;
  std::vector<std::string> argv;
};

/// Runs the experiments; returns the process exit code (0 ok, 1 a row or report failed,
/// 2 bad input).
int run(const DriverOptions& opt);

}  // namespace sf::experiments
