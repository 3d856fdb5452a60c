// sf::testbed, what the user is given — the files a run, sim or score writes beside its answer
// (--trace, --plot, --metrics) as reporters: each output format one Reporter of its own, fed
// each judged window and the end of the run (issue 41, design change 19).
#pragma once

#include "sf/testbed/judge.h"

#include <memory>
#include <string>
#include <vector>

namespace sf::testbed {

// ---- reporters -----------------------------------------------------------------------------------

/// One judged window, as every reporter is told it.
struct ReportedWindow {
  const frontier::Evidence& evidence;
  formats::MetricsState counts;  ///< the run so far: its source, windows, steps, change points, failed gathers
};
/// The end of a run, as every reporter is told it.
struct ReportedEnd {
  std::string packets;                    ///< the windows' evidence packets, one per line (sim, score)
  std::vector<std::string> packet_files;  ///< or the files they were written to (run --out) ...
  std::string packet_dir;                 ///< ... in this directory (for the line when none was)
  const nlohmann::ordered_json* trace = nullptr;  ///< --trace's Chrome trace-event JSON when the run was watched
};

/// A file written beside the answer, in the manner of google/benchmark's BenchmarkReporter: told
/// each judged window as it is judged and the end of the run, by `run` (rank 0), `sim` and
/// `score` alike. A new output format is one new Reporter (metrics_reporter.cpp and
/// trace_reporter.cpp are one file each). Each call returns "" or the one line of its failure,
/// naming its option and file ("--metrics FILE: cannot ..."); the front-end decides what a
/// failure costs (run: the evidence is downgraded, the workload goes on; sim and score: exit 2).
class Reporter {
public:
  virtual ~Reporter() = default;
  virtual std::string window(const ReportedWindow& w);
  virtual std::string finish(const ReportedEnd& end);
  /// The line the answer carries once finish() succeeded (no "# ", no newline); "" for none.
  virtual std::string said() const;
};

/// Several reporters as one (nvbench's printer multiplex): each call goes to every reporter, in
/// the order added, and returns the first failure; a reporter that failed is not told again.
class Reporters {
public:
  void add(std::unique_ptr<Reporter> r);
  bool empty() const { return list_.empty(); }
  std::string window(const ReportedWindow& w);
  std::string finish(const ReportedEnd& end);
  /// What the finished reporters say, in the order added.
  std::vector<std::string> said() const;

private:
  /// `call` on every reporter that has not failed; marks those that fail; the first failure.
  template <typename Call>
  std::string tell(Call call);
  struct Entry {
    std::unique_ptr<Reporter> reporter;
    bool failed = false;
  };
  std::vector<Entry> list_;
};

/// --metrics FILE: Prometheus text of the latest window, rewritten (atomically) after each.
std::unique_ptr<Reporter> metrics_reporter(std::string file);
/// --trace FILE: the watch's Chrome trace-event JSON, written at the end.
std::unique_ptr<Reporter> trace_reporter(std::string file);
/// --plot FILE.png|svg: the run drawn from its packets at the end (plot_packets); `what` says what
/// the picture shows, for the line the answer carries.
std::unique_ptr<Reporter> plot_reporter(std::string file, std::string what);

/// The line a command prints once it wrote a --trace file: where, how much, and how to open it.
std::string trace_written_line(const std::string& file, const nlohmann::ordered_json& trace);

// ---- a picture of a run (--plot) ---------------------------------------------------------------

/// "" when `file` may be a --plot target (a .png or .svg name), else the one line saying why.
std::string plot_file_problem(const std::string& file);
/// Draws the run's picture into `out` from evidence packet files (python/sf_torch/plot.py through
/// Debian's python3 and matplotlib, no shell; SF_PYTHON and SF_PLOT_SCRIPT override where they
/// are): per window, each rank x stage's change against the reference with the culprits outlined,
/// and the step time over the run. "" on success, else one line ("--plot FILE: why").
std::string plot_packets(const std::vector<std::string>& packet_files, const std::string& out);
/// plot_packets from packets in memory (one per line), through a temporary file.
std::string plot_packets_text(const std::string& packets, const std::string& out);

}  // namespace sf::testbed
