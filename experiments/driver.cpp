#include "sf/experiments/experiments.h"

#include "sf/formats/formats.h"
#include "sf/sim/sim.h"
#include "sf/testbed/testbed.h"
#include "sf/verify/verify.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <sys/prctl.h>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace sf::experiments {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ordered_json parse_json_file(const std::string& path) {
  if (!fs::exists(path)) throw formats::FormatError(path, 0, "no such file");
  try {
    return ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw formats::FormatError(path, 0, "not valid JSON at byte " + std::to_string(e.byte));
  }
}

std::string arg_value(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + arg_value(x);
    return s;
  }
  return v.dump();
}

/// Options of `sf-testbed run` from a row's parameters ("ranks" and "group" are not options).
std::vector<std::string> to_args(const ordered_json& p) {
  std::vector<std::string> args;
  for (const auto& [k, v] : p.items()) {
    if (k == "ranks" || k == "group" || k.rfind('_', 0) == 0) continue;
    std::string flag = "--" + k;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (v.is_boolean()) {
      if (v.get<bool>()) args.push_back(flag);
      continue;
    }
    args.push_back(flag);
    args.push_back(arg_value(v));
  }
  return args;
}

/// What distinguishes a row from the spec's base options (stable across runs: resume key).
std::string row_id(const ordered_json& p, const ordered_json& base) {
  std::string id;
  for (const auto& [k, v] : p.items()) {
    if (k.rfind('_', 0) == 0 || (base.contains(k) && base[k] == v)) continue;
    id += (id.empty() ? "" : "__") + k + "-" + arg_value(v);
  }
  for (auto& c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return id;
}

/// Cartesian product of a {key: [values]} object, in key order, merged over `base`.
std::vector<ordered_json> expand_matrix(const ordered_json& base, const ordered_json& matrix, const std::string& file) {
  std::vector<ordered_json> out{base};
  for (const auto& [k, vals] : matrix.items()) {
    if (!vals.is_array() || vals.empty())
      throw formats::FormatError(file, 0, "matrix \"" + k + "\" must be a non-empty array of values");
    std::vector<ordered_json> next;
    for (const auto& partial : out)
      for (const auto& v : vals) {
        ordered_json p = partial;
        p[k] = v;
        next.push_back(std::move(p));
      }
    out = std::move(next);
  }
  return out;
}

std::string hms(double s) {
  char buf[32];
  const int x = static_cast<int>(s);
  if (x >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm%02ds", x / 3600, x / 60 % 60, x % 60);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", x / 60, x % 60);
  return buf;
}

/// The row's process group while it runs: a driver that is interrupted or terminated takes it
/// down too, so no mpirun row outlives `experiment` (a killed driver left one running ~15 s).
std::atomic<pid_t> g_row_pgid{0};

extern "C" void on_driver_signal(int sig) {
  if (const pid_t pg = g_row_pgid.load(); pg > 0) kill(-pg, SIGTERM);
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_row_cleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, on_driver_signal);
}

/// Runs a command with stdout/stderr to `log`; kills its process group after `timeout_s`.
/// Returns the exit code, or −1 on timeout.
/// Runs cmd in its own process group, stdout and stderr to log (stdout to stdout_file instead when
/// one is named), killed after timeout_s; tick is called while it runs.
int spawn(const std::vector<std::string>& cmd, const std::string& log, int timeout_s, const std::function<void()>& tick,
          const std::string& stdout_file = "") {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // Killed with SIGKILL, the driver runs no handler: the row learns of it from the kernel.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) _exit(127);  // the driver died before prctl
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    if (!stdout_file.empty()) {
      const int out = open(stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out >= 0) {
        dup2(out, 1);
        close(out);
      }
    }
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot execute %s\n", argv[0]);
    _exit(127);
  }
  if (pid < 0) return 127;
  setpgid(pid, pid);  // also here: the handler may run before the child's own setpgid
  g_row_pgid = pid;
  struct Clear {
    ~Clear() { g_row_pgid = 0; }
  } clear;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

/// Rank 0's resident memory after the run-level what-if's arrival log stopped growing (it keeps the
/// run's first Evidence::kArrivalSteps scored steps): the least-squares slope, KiB per window, over
/// the sampled windows (telemetry.rank0_rss.per_window_kb) that end past the log's last step, and
/// how many samples it fits; the log's steps beside them. Nothing when the log never filled or fewer
/// than 3 samples lie past it.
void add_rss_after_log(ordered_json& base, const ordered_json& run) {
  const auto& rss = run["telemetry"]["rank0_rss"];
  if (!rss.contains("per_window_kb") || !run.contains("windows") || !run.contains("evidence")) return;
  const auto& wi = run["evidence"]["whatif"];
  if (!wi.value("available", false)) return;
  const auto log_steps = wi.value("steps", std::int64_t{0});
  base["whatif_log_steps"] = log_steps;
  // The window in which the log took its last step: the first whose steps, counted from the
  // first window's, reach log_steps.
  std::int64_t seen = 0;
  int full_at = -1;
  for (const auto& w : run["windows"]) {
    seen += w["last_step"].get<std::int64_t>() - w["first_step"].get<std::int64_t>() + 1;
    if (seen > log_steps) {
      full_at = w["index"].get<int>();
      break;
    }
  }
  if (full_at < 0) return;  // the log holds every step: it never filled
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& e : rss["per_window_kb"]) {
    const double x = e[0].get<double>(), y = e[1].get<double>();
    if (x <= full_at) continue;
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  if (n < 3 || n * sxx - sx * sx <= 0) return;
  base["rank0_rss_growth_kb_per_window_log_full"] = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  base["rank0_rss_windows_log_full"] = static_cast<int>(n);
}

/// Flattens a run's result file into CSV fields (one map per run, or per window).
/// --detect's fields (docs/detect.md) of a run.json or a sim JSON line as CSV columns.
void add_detect_columns(ordered_json& base, const ordered_json& run) {
  if (!run.contains("truth_detection")) return;
  const auto& td = run["truth_detection"];
  base["cp_count"] = run["change_points"].size();
  base["cp_detected"] = td["detected"];
  base["cp_missed"] = td["missed"];
  base["cp_false_alarms"] = td["false_alarms"];
  base["cp_steps_observed"] = run["detector"]["observed_steps"];
  base["cp_transients"] = run["detector"].value("transients", 0);
  for (const auto& c : run["change_points"])
    if (c.contains("truth") && c["truth"].value("matched", false))
      base["cp_steps_to_detect_" + c["truth"]["transition"].get<std::string>()] = c["truth"]["steps_to_detect"];
  base["cp_period"] = run["periodicity"]["period"];
  base["cp_period_hit"] = td.value("period_hit", false);
  base["stability_class"] = run["culprit_stability"]["class"];
  base["stability_culprit"] = run["culprit_stability"]["culprit"];
}

/// The experiment, the row and its declared parameters, and the commit of the result: what every
/// row's CSV line starts with, a skipped one's too.
ordered_json declared_columns(const ordered_json& result, const Row& row, const Spec& spec) {
  ordered_json base;
  base["experiment"] = spec.name;
  base["row"] = row.id;
  base["group"] = row.params.value("group", "");
  base["arm"] = row.params.value("_arm", "fault");
  base["ranks"] = row.ranks;
  for (const auto& [k, v] : row.params.items())
    if (k != "ranks" && k != "group" && k.rfind('_', 0) != 0) base[k] = v.is_array() ? ordered_json(arg_value(v)) : v;
  base["commit"] = result.value("commit", "");
  return base;
}

/// declared_columns, then the delay and seed in effect (from the result's config).
ordered_json row_columns(const ordered_json& result, const Row& row, const Spec& spec) {
  ordered_json base = declared_columns(result, row, spec);
  const auto& cfg = result["config"];
  base["delay_ms"] = cfg.value("delay_ms", 0.0);
  base["seed"] = cfg.value("seed", 0);
  return base;
}

/// The diagnosis' columns (docs/diagnosis.md): what it named, on what basis, and how that ended
/// against the truth.
void add_diagnosis_columns(ordered_json& base, const ordered_json& evidence, const ordered_json& verdict) {
  if (evidence.contains("diagnosis")) {
    const auto& d = evidence["diagnosis"];
    base["diag_stage"] = d["stage"].is_string() ? d["stage"] : ordered_json("");
    base["diag_rank"] = d["rank"].is_number() ? d["rank"] : ordered_json(-1);
    base["diag_basis"] = d.value("basis", "");
    base["diag_excess_ms"] = d.value("excess_s", 0.0) * 1e3;
    base["diag_floor_ms"] = d.value("noise_floor_s", 0.0) * 1e3;
    base["diag_confidence"] = d.value("confidence", 0.0);
    base["diag_rank_basis"] = d.value("rank_basis", "");
    base["diag_common"] = d.value("common", false);
    base["diag_culprits"] = d.contains("culprits") && d["culprits"].is_array() ? d["culprits"].size() : 0;
  }
  // The step's change against the reference and its floor (the rule the verdict's exposure uses).
  if (evidence.contains("differential") && evidence["differential"].is_object()) {
    const auto& df = evidence["differential"];
    base["exposed_change_ms"] = df.value("delta_exposed_s", 0.0) * 1e3;
    base["exposed_floor_ms"] = df.value("exposed_noise_floor_s", 0.0) * 1e3;
    base["needed_reference_steps"] = df.value("needed_reference_steps", 0);
  }
  // The what-if (docs/diagnosis.md §7): the step as it is, with every culprit fixed, as if no rank
  // straggled; and, under a fault, the prediction against the step without it.
  if (evidence.contains("whatif") && evidence["whatif"].is_object()) {
    const auto& w = evidence["whatif"];
    base["whatif_available"] = w.value("available", false);
    base["whatif_actual_ms"] = w.value("actual_s", 0.0) * 1e3;
    base["whatif_healed_ms"] = w.value("all_healed_s", 0.0) * 1e3;
    base["whatif_ideal_ms"] = w.value("ideal_s", 0.0) * 1e3;
    base["whatif_floor_ms"] = w.value("floor_s", 0.0) * 1e3;
    base["whatif_gains"] = w.value("gains", false);
    base["whatif_fixes"] = w.contains("fixes") && w["fixes"].is_array() ? w["fixes"].size() : 0;
  }
  if (verdict.contains("whatif") && verdict["whatif"].is_object()) {
    const auto& w = verdict["whatif"];
    base["whatif_ref_ms"] = w.value("measured_s", 0.0) * 1e3;
    base["whatif_ref_error"] = w.value("rel_error", 0.0);
  }
  if (verdict.contains("diagnosis")) {
    const auto& v = verdict["diagnosis"];
    base["diag_outcome"] = v.value("outcome", "");
    base["diag_correct"] = v.value("correct", false);
    base["diag_stage_hit"] = v.value("stage_hit", false);
    base["diag_rank_hit"] = v.value("rank_hit", false);
    base["diag_exposed"] = v.value("exposed", false);
    base["diag_precision"] = v.value("precision", 1.0);
    base["diag_recall"] = v.value("recall", 1.0);
  }
}

/// The paper's absolute verdict (frontier rule) against the expected stage and ranks.
void add_verdict_columns(ordered_json& base, const ordered_json& v) {
  if (v.contains("expected")) {
    const auto& st = v["expected"].contains("stage") ? v["expected"]["stage"] : ordered_json();
    base["expected_stage"] = st.is_string() ? st.get<std::string>() : std::string();  // a straggler: none
    std::string ranks;
    for (const auto& r : v["expected"].value("ranks", ordered_json::array())) ranks += (ranks.empty() ? "" : ";") + r.dump();
    base["truth_ranks"] = ranks;
  }
  base["top1"] = v["frontier"]["top1"];
  base["tie"] = v["frontier"].value("top1_tie", false);
  base["top2"] = v["frontier"]["top2"];
  base["cand_hit"] = v["frontier"].value("candidate_hit", false);
  base["cand_size"] = v["frontier"].value("candidate_size", 0);
  base["outcome"] = v.value("outcome", "");
  base["misroute"] = v.value("misroute", false);
  base["rank_hit"] = v.value("rank_hit", false);
}

/// The shuffled-target arm: the fault row's own evidence judged against the verdict's shuffled
/// truth (testbed::verdict_report), as a CSV line of its own beside the fault row.
void add_shuffled_row(std::vector<ordered_json>& out, const ordered_json& verdict) {
  const ordered_json& base = out.front();
  if (base.value("arm", "") != "fault" || !verdict.contains("shuffled")) return;
  const auto& sh = verdict["shuffled"];
  ordered_json r = base;
  r["arm"] = "shuffled";
  add_verdict_columns(r, sh);
  for (const char* k : {"absorbed_stage", "absorbed_share", "absorbed_basis", "check_pass"}) r.erase(k);
  const auto& d = sh["diagnosis"];
  r["diag_outcome"] = d.value("outcome", "");
  r["diag_correct"] = d.value("correct", false);
  r["diag_stage_hit"] = d.value("stage_hit", false);
  r["diag_rank_hit"] = d.value("rank_hit", false);
  r["diag_exposed"] = d.value("exposed", false);
  out.push_back(std::move(r));
}

/// One CSV line of a `sim --json` row: the row's parameters, the verdict and --detect's fields.
std::vector<ordered_json> summarize_sim(const ordered_json& sim, const Row& row, const Spec& spec) {
  ordered_json base = row_columns(sim, row, spec);
  base["tool"] = "sim";
  if (sim.contains("evidence") && sim["evidence"].contains("median_step_s"))
    base["median_step_ms"] = sim["evidence"].value("median_step_s", 0.0) * 1e3;
  if (sim.contains("verdict") && sim["verdict"].contains("frontier")) add_verdict_columns(base, sim["verdict"]);
  if (sim.contains("evidence") && sim.contains("verdict")) add_diagnosis_columns(base, sim["evidence"], sim["verdict"]);
  if (sim.contains("evidence") && sim["evidence"].contains("shares") && sim["evidence"]["shares"].is_object())
    for (const auto& [stage, v] : sim["evidence"]["shares"].items()) base["share:" + stage] = v;
  add_detect_columns(base, sim);
  std::vector<ordered_json> out{base};
  if (sim.contains("verdict")) add_shuffled_row(out, sim["verdict"]);
  return out;
}

std::vector<ordered_json> summarize_run(const ordered_json& run, const Row& row, const Spec& spec) {
  if (run.contains("skipped")) {
    // A run the machine could not make (a straggler's cgroup without a cpu controller): said, not scored.
    ordered_json base = declared_columns(run, row, spec);
    base["skipped"] = run["skipped"];
    return {base};
  }
  ordered_json base = row_columns(run, row, spec);
  const auto& cfg = run["config"];
  base["device"] = cfg.value("device", "");
  base["comm"] = cfg.value("comm", "");
  std::string truth_ranks;
  for (const auto& t : run["truth"]) truth_ranks += (truth_ranks.empty() ? "" : ";") + std::to_string(t["rank"].get<int>());
  base["truth_ranks"] = truth_ranks;
  if (!run.contains("evidence")) return {base};
  const auto& e = run["evidence"];
  const auto& m = run["measured"];
  base["median_step_ms"] = m.value("median_step_s", 0.0) * 1e3;
  base["exposed_makespan_s"] = m.value("exposed_makespan_s", 0.0);
  base["makespan_vs_wall_rel"] = m.value("makespan_vs_wall_rel", 0.0);
  base["steps_completed_min"] = m.value("steps_completed_min", 0);
  base["vm_steal_fraction"] = m.value("vm_steal_fraction", 0.0);
  auto join = [](const ordered_json& a) {
    std::string s;
    for (const auto& x : a) s += (s.empty() ? "" : ";") + x.get<std::string>();
    return s;
  };
  base["labels"] = join(e["labels"]);
  base["routing_set"] = join(e["routing_set"]);
  base["co_critical_stages"] = join(e["co_critical_stages"]);
  if (run.contains("verdict")) {
    const auto& v = run["verdict"];
    add_verdict_columns(base, v);
    if (v.contains("absorbed")) {
      const auto& a = v["absorbed"];
      base["absorbed_stage"] = a["stage"].is_string() ? a["stage"] : ordered_json("");
      base["absorbed_share"] = a["share"];
      base["absorbed_basis"] = a["basis"];
      base["exposed_ms_per_step"] = a["exposed_ms_per_step"];
    }
    base["suspect_rank"] = v["suspect"]["rank"];
    base["suspect_basis"] = v["suspect"]["basis"];
    base["check_pass"] = v["check"]["pass"];
    add_diagnosis_columns(base, e, v);
    // run --mitigate (issue 39): what was switched and the step after it against the prediction.
    if (run.contains("mitigation") && run["mitigation"].is_object()) {
      const auto& mi = run["mitigation"];
      base["mitig_rank"] = mi["rank"].is_number() ? mi["rank"] : ordered_json(-1);
      base["mitig_share"] = mi.value("share", 1.0);
      base["mitig_before_ms"] = mi.value("before_s", 0.0) * 1e3;
      base["mitig_predicted_ms"] = mi.value("predicted_s", 0.0) * 1e3;
      base["mitig_measured_ms"] = mi.value("measured_s", 0.0) * 1e3;
      base["mitig_error"] = mi.value("error", 0.0);
    }
    for (const auto& [rule, rv] : v["baselines"].items()) {
      base[rule + "_top1"] = rv["top1"];
      base[rule + "_tie"] = rv.value("top1_tie", false);
      base[rule + "_top2"] = rv["top2"];
      base[rule + "_cand_hit"] = rv["candidate_hit"];
      base[rule + "_cand_size"] = rv["candidate_size"];
    }
  }
  if (e["shares"].is_object())
    for (const auto& [stage, v] : e["shares"].items()) base["share:" + stage] = v;
  for (const auto& [stage, v] : e["static_gain"].items()) base["gain:" + stage] = v;
  for (const auto& [rule, b] : e["baselines"].items()) {
    double total = 0;
    for (const auto& [stage, v] : b["score_s"].items()) total += v.get<double>();
    for (const auto& [stage, v] : b["score_s"].items()) base[rule + ":" + stage] = total > 0 ? v.get<double>() / total : 0.0;
  }
  add_detect_columns(base, run);
  base["gather_ok"] = e["telemetry"]["gather_ok"];
  base["events_ready_ratio"] = e["events"]["ready_ratio"];
  base["packet_bytes"] = run["telemetry"].value("packet_bytes", 0);
  base["payload_bytes_per_rank_window"] = run["telemetry"].value("payload_bytes_per_rank_window", 0);
  if (const auto& t = run["telemetry"]; t.contains("rank0_rss")) {
    base["rank0_rss_first_kb"] = t["rank0_rss"]["first_kb"];
    base["rank0_rss_last_kb"] = t["rank0_rss"]["last_kb"];
    base["rank0_rss_growth_kb_per_window"] = t["rank0_rss"]["growth_kb_per_window"];
    base["rank0_rss_windows_fitted"] = t["rank0_rss"]["windows_fitted"];
    base["windows"] = run.contains("windows") ? run["windows"].size() : 0;
    add_rss_after_log(base, run);
  }
  if (!spec.per_window) {
    std::vector<ordered_json> out{base};
    if (run.contains("verdict")) add_shuffled_row(out, run["verdict"]);
    return out;
  }
  std::vector<ordered_json> out;
  for (const auto& w : run["windows"]) {
    ordered_json r = base;
    r["window"] = w["index"];
    r["window_first_step"] = w["first_step"];
    r["window_last_step"] = w["last_step"];
    r["window_median_step_ms"] = w.value("median_step_s", 0.0) * 1e3;
    r["window_labels"] = join(w["labels"]);
    r["window_routing_set"] = join(w["routing_set"]);
    if (w["shares"].is_object())
      for (const auto& [stage, v] : w["shares"].items()) r["window_share:" + stage] = v;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<ordered_json> summarize_overhead(const ordered_json& o, const Row& row, const Spec& spec) {
  std::vector<ordered_json> out;
  for (const std::string mode : {"cpu", "event"}) {
    ordered_json r;
    r["experiment"] = spec.name;
    r["row"] = row.id;
    r["ranks"] = row.ranks;
    r["seed"] = o.value("seed", 0);
    r["commit"] = o.value("commit", "");
    r["mode"] = mode;
    r["window_steps"] = o["window_steps"];
    r["blocks"] = o["blocks"];
    r["median_step_ms_off"] = o["median_step_ms"]["off"];
    r["median_step_ms"] = o["median_step_ms"][mode];
    r["overhead_mean_pct"] = o["overhead_pct"][mode]["mean"];
    r["overhead_ci_low_pct"] = o["overhead_pct"][mode]["ci_low"];
    r["overhead_ci_high_pct"] = o["overhead_pct"][mode]["ci_high"];
    r["median_overhead_pct"] = o["median_step_overhead_pct"][mode]["mean"];
    r["median_overhead_ci_low_pct"] = o["median_step_overhead_pct"][mode]["ci_low"];
    r["median_overhead_ci_high_pct"] = o["median_step_overhead_pct"][mode]["ci_high"];
    r["recorder_cpu_us_per_step"] = o["recorder_cpu_us_per_step"];
    r["boundary_ns"] = o["boundary_ns"];
    r["payload_bytes_per_rank_window"] = o["payload_bytes_per_rank_window"];
    r["packet_bytes"] = o["packet_bytes"];
    r["vm_steal_fraction"] = o.value("vm_steal_fraction", 0.0);
    r["peak_rss_mib_per_rank"] = o.value("peak_rss_mib_per_rank", 0.0);
    if (o.contains("rounds")) {  // sf.overhead/2: the A/A arm, paired µs, window-boundary work
      r["rounds"] = o["rounds"];
      r["aa_mean_pct"] = o["overhead_pct"]["aa"]["mean"];
      r["aa_ci_low_pct"] = o["overhead_pct"]["aa"]["ci_low"];
      r["aa_ci_high_pct"] = o["overhead_pct"]["aa"]["ci_high"];
      r["paired_diff_us"] = o["paired_diff_us"][mode];
      r["aa_paired_diff_us"] = o["paired_diff_us"]["aa"];
      r["boundary_rank0_us_per_step"] = o["window_boundary_us_per_recorded_step"]["rank0"];
      r["boundary_other_us_per_step"] = o["window_boundary_us_per_recorded_step"]["max_other_rank"];
      r["boundary_rank0_us_per_window"] = o["window_boundary_us_per_window_rank0"];
      r["recorder_cpu_us_per_step_other"] = o["recorder_cpu_us_per_step_other_max"];
    }
    out.push_back(std::move(r));
  }
  return out;
}

/// §6.1 figures computed in-process (no MPI): one CSV line per metric.
std::vector<ordered_json> fixtures_rows(const Spec& spec, std::uint64_t seed, int windows, const std::string& commit) {
  std::vector<ordered_json> out;
  auto add = [&](const std::string& metric, double ours, const std::string& paper, const std::string& note) {
    out.push_back({{"experiment", spec.name}, {"metric", metric}, {"ours", ours}, {"paper", paper}, {"note", note},
                   {"seed", seed}, {"commit", commit}});
  };
  const auto st = verify::algorithmic_validation(seed, windows);
  add("telescoping_max_abs_error_s", st.telescoping_max_abs_error, "8.88e-16", std::to_string(windows) + " random windows");
  add("telescoping_max_rel_error", st.telescoping_max_rel_error, "", "");
  add("prop1_violations", st.prop1_violations, "0", "random windows");
  add("prop2_violations", st.prop2_violations, "0", "random windows");
  add("prop1_tight_reached_fraction", static_cast<double>(st.prop1_tight_reached) / st.prop1_tight_cases, "1", "min(R,S) construction");
  add("prop2_tight_reached_fraction", static_cast<double>(st.prop2_tight_reached) / st.prop2_tight_cases, "1", "one-rank construction");
  add("stability_max_observed_over_bound", st.stability_max_ratio, "<= 0.9998", "Prop. 3, errors of +-eps");
  for (const auto& f : verify::run_fixtures(seed)) {
    const double n = f.rows;
    add(f.name + ":frontier", f.frontier_hits / n, f.name == "sync_wait" ? "1.00" : f.name == "direct_exposure" ? "1.00" : "fires",
        f.detail);
    if (f.name.rfind("downgrade:", 0) == 0) continue;
    for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i) {
      const std::string rule(frontier::to_string(frontier::kBaselineRules[i]));
      const bool paper_zero = f.name == "sync_wait" && (rule == "per_stage_max" || rule == "per_stage_avg");
      add(f.name + ":" + rule, f.baseline_hits[i] / n, paper_zero ? "0.00" : "", "top-1 recovery by this rule");
    }
  }
  for (const auto& p : verify::properties()) {
    const auto r = verify::check_property(p.name, 10000, seed);
    add("property:" + p.name, r.passed ? 1.0 : 0.0, "holds", p.statement);
  }
  return out;
}

/// The sweep's options from a sensitivity spec (top-level "profile", "delays_ms", "seeds",
/// "min_hits", "steps", after the quick overrides).
testbed::SensitivityOptions sensitivity_options(const Spec& spec, const std::string& path) {
  testbed::SensitivityOptions o;
  const auto& j = spec.raw;
  try {
    o.profile = j.value("profile", o.profile);
    o.delays_ms = j.value("delays_ms", std::vector<double>{});
    o.seeds = j.value("seeds", o.seeds);
    o.min_hits = j.value("min_hits", o.min_hits);
    o.steps = j.value("steps", o.steps);
  } catch (const nlohmann::json::exception&) {
    throw formats::FormatError(path, 0, "profile must be a string, delays_ms a list of numbers, seeds/min_hits/steps integers");
  }
  if (!sim::find_profile(o.profile)) throw formats::FormatError(path, 0, "profile " + o.profile + ": unknown");
  if (o.delays_ms.empty() || !std::is_sorted(o.delays_ms.begin(), o.delays_ms.end()) || o.delays_ms.front() <= 0)
    throw formats::FormatError(path, 0, "delays_ms must be a non-empty ascending list of positive delays");
  if (o.seeds < 1 || o.min_hits < 1 || o.min_hits > o.seeds || o.steps < 4)
    throw formats::FormatError(path, 0, "need seeds >= 1, 1 <= min_hits <= seeds and steps >= 4");
  return o;
}

testbed::SensitivitySetting sensitivity_setting(const Row& row, const std::string& path) {
  testbed::SensitivitySetting s;
  const auto& p = row.params;
  try {
    s.scenario = p.value("scenario", s.scenario);
    s.backward_scale = p.value("backward_scale", s.backward_scale);
    s.jitter_sigma = p.value("jitter_sigma", s.jitter_sigma);
    s.ranks = p.value("ranks", s.ranks);
    if (p.contains("comm_gib_s")) s.comm_gib_s = p["comm_gib_s"].get<double>();
    const std::string overlap = p.value("overlap", std::string("bucketed"));
    const auto m = sim::sync_mode_from_string(overlap);
    if (!m) throw formats::FormatError(path, 0, "row " + row.id + ": overlap is " + overlap + ", expected single or bucketed");
    s.sync_mode = *m;
  } catch (const nlohmann::json::exception&) {
    throw formats::FormatError(path, 0, "row " + row.id + ": scenario/overlap strings, backward_scale/jitter_sigma numbers, ranks an integer");
  }
  return s;
}

/// One CSV line per setting: the thresholds and, per grid delay, how many seeds routed it.
std::vector<ordered_json> sensitivity_rows(const Spec& spec, const std::string& commit) {
  const auto opt = sensitivity_options(spec, spec.name);
  std::vector<ordered_json> out;
  auto counts = [](const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : ";") + std::to_string(x);
    return s;
  };
  std::string grid;
  for (double d : opt.delays_ms) grid += (grid.empty() ? "" : ";") + ordered_json(d).dump();
  std::size_t k = 0;
  for (const auto& row : spec.rows) {
    const auto s = sensitivity_setting(row, spec.name);
    std::fprintf(stderr, "\r[%s] setting %zu/%zu (%s)   ", spec.name.c_str(), ++k, spec.rows.size(), row.id.c_str());
    testbed::SensitivityResult r;
    try {
      r = testbed::sensitivity(opt, s);
    } catch (const std::invalid_argument& e) {
      throw formats::FormatError(spec.name, 0, "row " + row.id + ": " + e.what());
    }
    ordered_json o;
    o["experiment"] = spec.name;
    o["row"] = row.id;
    o["scenario"] = s.scenario;
    o["profile"] = opt.profile;
    o["backward_scale"] = s.backward_scale;
    o["jitter_sigma"] = s.jitter_sigma;
    o["ranks"] = s.ranks;
    o["overlap"] = std::string(sim::to_string(s.sync_mode));
    o["comm_gib_s"] = s.comm_gib_s ? *s.comm_gib_s : sim::find_profile(opt.profile)->comm.gib_per_s;
    o["threshold_ms"] = r.threshold_top1_ms ? ordered_json(*r.threshold_top1_ms) : ordered_json(nullptr);
    o["threshold_top2_ms"] = r.threshold_top2_ms ? ordered_json(*r.threshold_top2_ms) : ordered_json(nullptr);
    o["backward_advance_ms"] = r.backward_advance_ms;
    o["median_step_ms"] = r.median_step_ms;
    o["threshold_over_backward"] =
        r.threshold_top1_ms && r.backward_advance_ms > 0 ? ordered_json(*r.threshold_top1_ms / r.backward_advance_ms) : ordered_json(nullptr);
    o["threshold_over_step"] =
        r.threshold_top1_ms && r.median_step_ms > 0 ? ordered_json(*r.threshold_top1_ms / r.median_step_ms) : ordered_json(nullptr);
    // The prediction (docs/testbed.md): from the healthy window, and from the faulty window at the
    // measured threshold (the largest grid delay when none was reached), where the competitor is
    // what the injected rank's own stage became.
    auto on_grid = [&](double d) {
      for (double g : opt.delays_ms)
        if (g >= d) return ordered_json(g);
      return ordered_json(nullptr);
    };
    std::size_t at = opt.delays_ms.size() - 1;
    if (r.threshold_top1_ms)
      at = static_cast<std::size_t>(std::find(opt.delays_ms.begin(), opt.delays_ms.end(), *r.threshold_top1_ms) - opt.delays_ms.begin());
    const double pred_h = testbed::predicted_threshold_ms(r.competitor_healthy_ms, r.target_base_ms, r.healthy_total_ms, r.eta_a);
    const double rest_f = r.total_faulty_ms[at] - r.target_faulty_ms[at] + r.target_base_ms;
    const double pred_f = testbed::predicted_threshold_ms(r.competitor_faulty_ms[at], r.target_base_ms, rest_f, r.eta_a);
    o["competitor"] = r.competitor;
    o["eta_a"] = r.eta_a;
    o["target_base_ms"] = r.target_base_ms;
    o["healthy_total_ms"] = r.healthy_total_ms;
    o["competitor_healthy_ms"] = r.competitor_healthy_ms;
    o["prediction_at_ms"] = opt.delays_ms[at];
    o["competitor_faulty_ms"] = r.competitor_faulty_ms[at];
    o["exposed_fraction"] = (r.target_faulty_ms[at] - r.target_base_ms) / opt.delays_ms[at];
    o["predicted_ms"] = pred_h;
    o["predicted_grid_ms"] = on_grid(pred_h);
    o["predicted_faulty_ms"] = pred_f;
    o["predicted_faulty_grid_ms"] = on_grid(pred_f);
    o["residual_ms"] = r.threshold_top1_ms ? ordered_json(*r.threshold_top1_ms - pred_h) : ordered_json(nullptr);
    o["residual_faulty_ms"] = r.threshold_top1_ms ? ordered_json(*r.threshold_top1_ms - pred_f) : ordered_json(nullptr);
    o["delays_ms"] = grid;
    o["top1_by_delay"] = counts(r.top1);
    o["ties_by_delay"] = counts(r.ties);
    o["top2_by_delay"] = counts(r.top2);
    o["misroutes_by_delay"] = counts(r.misroutes);
    o["seeds"] = opt.seeds;
    o["min_hits"] = opt.min_hits;
    o["steps"] = opt.steps;
    o["commit"] = commit;
    out.push_back(std::move(o));
  }
  std::fprintf(stderr, "\n");
  return out;
}

std::string csv_cell(const ordered_json& v) {
  if (v.is_null()) return "";
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  }
  return v.dump();
}

void write_csv(const std::string& path, const std::vector<ordered_json>& rows) {
  std::vector<std::string> cols;
  std::set<std::string> seen;
  for (const auto& r : rows)
    for (const auto& [k, v] : r.items())
      if (seen.insert(k).second) cols.push_back(k);
  std::string out;
  for (std::size_t i = 0; i < cols.size(); ++i) out += (i ? "," : "") + cols[i];
  out += "\n";
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < cols.size(); ++i) out += (i ? "," : "") + (r.contains(cols[i]) ? csv_cell(r[cols[i]]) : "");
    out += "\n";
  }
  formats::write_file_atomic(path, out);
}

}  // namespace

namespace {

/// The spec's own fields: name, title, kind, per_window, sham, row_timeout_s.
Spec spec_header(const ordered_json& j, const std::string& path) {
  Spec s;
  s.raw = j;
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string())
    throw formats::FormatError(path, 0, "spec needs a \"name\" string");
  s.name = j["name"];
  s.title = j.value("title", s.name);
  s.kind = j.value("kind", "runs");
  if (s.kind != "runs" && s.kind != "overhead" && s.kind != "fixtures" && s.kind != "sensitivity" && s.kind != "torch" &&
      s.kind != "script")
    throw formats::FormatError(path, 0,
                               "\"kind\" is " + s.kind + ", expected runs, overhead, fixtures, sensitivity, torch or script");
  s.per_window = j.value("per_window", false);
  if (j.contains("sham") && !j["sham"].is_boolean()) throw formats::FormatError(path, 0, "\"sham\" must be true or false");
  s.sham = j.value("sham", false);
  if (s.sham && s.kind != "runs" && s.kind != "torch")
    throw formats::FormatError(path, 0, "\"sham\" applies to runs and torch specs, not " + s.kind);
  if (j.contains("row_timeout_s")) {
    const auto& t = j["row_timeout_s"];
    if (!t.is_number_integer() || t.get<std::int64_t>() < 10 || t.get<std::int64_t>() > 86400)
      throw formats::FormatError(path, 0, "\"row_timeout_s\" is " + t.dump() + ", expected an integer in [10, 86400]");
    s.row_timeout_s = t.get<int>();
  }
  return s;
}

/// A sweep: a base, a matrix (its product), more matrices over the same base ("matrices": each
/// straggler kind its own strengths, appended) and rows of their own.
struct Sweep {
  ordered_json base = ordered_json::object(), matrix = ordered_json::object(), matrices = ordered_json::array(),
               rows = ordered_json::array();
};

Sweep sweep_of(const ordered_json& j) {
  Sweep w;
  w.base = j.value("base", ordered_json::object());
  w.matrix = j.value("matrix", ordered_json::object());
  w.matrices = j.value("matrices", ordered_json::array());
  w.rows = j.value("rows", ordered_json::array());
  return w;
}

/// The sweep's parameter sets: the matrix's product, each of "matrices"' products, then the rows.
std::vector<ordered_json> expand_sweep(const Sweep& w, const std::string& path, const std::string& whose) {
  std::vector<ordered_json> params = w.matrix.empty() ? std::vector<ordered_json>{} : expand_matrix(w.base, w.matrix, path);
  for (const auto& m : w.matrices) {
    if (!m.is_object() || m.empty())
      throw formats::FormatError(path, 0, "every entry of " + whose + "\"matrices\" must be a non-empty object");
    for (auto& p : expand_matrix(w.base, m, path)) params.push_back(std::move(p));
  }
  for (const auto& r : w.rows) {
    ordered_json p = w.base;
    for (const auto& [k, v] : r.items()) p[k] = v;
    params.push_back(std::move(p));
  }
  return params;
}

/// --set KEY=VALUE: into the base (JSON, else a plain string such as cuda), replacing a swept
/// option too; recorded under the spec's "overrides".
void apply_overrides(Sweep& w, Spec& s, const std::vector<std::string>& overrides, const std::string& path) {
  for (const auto& kv : overrides) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw formats::FormatError(path, 0, "--set " + kv + ": expected KEY=VALUE");
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    try {
      w.base[key] = ordered_json::parse(value);
    } catch (const nlohmann::json::parse_error&) {
      w.base[key] = value;
    }
    w.matrix.erase(key);
    s.raw["overrides"][key] = w.base[key];
  }
}

/// A measurement with a launcher of its own (namespace hosts, a probe binary): the script
/// measures into the experiment's directory, then makes its table and plots. --set applies to
/// rows; the driver says it does not reach a script.
void script_spec(Spec& s, const ordered_json& j, bool quick, const std::string& path) {
  auto strings = [&](const ordered_json& v, const char* what) {
    if (!v.is_array() || v.empty() || !std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_string(); }))
      throw formats::FormatError(path, 0, std::string("a script spec needs \"") + what + "\": a non-empty list of strings");
    return v.get<std::vector<std::string>>();
  };
  if (!j.contains("script") || !j["script"].is_string()) throw formats::FormatError(path, 0, "a script spec needs a \"script\" path");
  s.script = j["script"];
  s.script_args = strings(quick && j.contains("quick") && j["quick"].contains("args") ? j["quick"]["args"] : j.value("args", ordered_json()),
                          "args");
  s.report_args = strings(j.value("report_args", ordered_json()), "report_args");
}

void sensitivity_spec(Spec& s, const ordered_json& j, bool quick, const Sweep& w, const std::string& path) {
  if (quick && j.contains("quick"))
    for (const auto& [k, v] : j["quick"].items()) s.raw[k] = v;
  if (w.matrix.empty()) throw formats::FormatError(path, 0, "a sensitivity spec needs a \"matrix\"");
  for (const auto& p : expand_matrix(w.base, w.matrix, path)) {
    Row row;
    row.params = p;
    row.id = row_id(p, w.base);
    row.ranks = p.value("ranks", 8);
    s.rows.push_back(std::move(row));
  }
  sensitivity_options(s, path);  // validates now, before anything runs
}

/// Rows of a runs or torch spec, each id once.
class RowAdder {
public:
  RowAdder(Spec& s, const std::string& path) : s_(s), path_(path) {}

  void add(const ordered_json& p, const ordered_json& from, const std::string& tool, const std::string& prefix = "") {
    Row row;
    row.params = p;
    row.tool = tool;
    if (!p.contains("ranks") || !p["ranks"].is_number_integer() || p["ranks"].get<int>() < 1)
      throw formats::FormatError(path_, 0, "every row needs an integer \"ranks\" >= 1");
    row.ranks = p["ranks"];
    row.args = to_args(p);
    if (tool == "sim") row.args.insert(row.args.begin(), {"--ranks", std::to_string(row.ranks)});
    row.id = (tool == "sim" ? "sim-" : "") + prefix + row_id(p, from);
    if (!ids_.insert(row.id).second) throw formats::FormatError(path_, 0, "duplicate row " + row.id);
    s_.rows.push_back(std::move(row));
  }

  /// The sham arm: each row with a fault again with delay 0 (same seed, hence the same hidden
  /// target and cost draws, same settings). Where the spec sweeps the delay, each delay gets a sham
  /// of its own ("sham-for_delay_ms-D__..."), so that every fault row has its own twin and the
  /// pairs of a sweep are independent (issue 42); where every row of a sham has the same delay it
  /// keeps the plain id. A straggler's sham is the same run with no straggler (and no scenario): rows
  /// that differ only in the straggler's kind or strength share one.
  void add_shams(const std::vector<ordered_json>& rows, const ordered_json& from, const std::string& tool) {
    std::vector<std::pair<ordered_json, std::string>> shams;  // (sham, the fault row's delay or "")
    std::map<std::string, std::set<std::string>> delays_per_sham;
    for (const auto& p : rows) {
      const bool straggler = p.contains("straggler");
      if (!straggler && (p.value("scenario", std::string("none")) == "none" || p.contains("link_rate"))) continue;
      if (!straggler && p.contains("delay_ms") && p["delay_ms"].is_number() && p["delay_ms"].get<double>() == 0) continue;
      ordered_json sham = p;
      sham.erase("mitigate");  // nothing to mitigate without the fault: the row's plain sham
      std::string delay;
      if (straggler) {
        sham.erase("straggler");
        sham.erase("straggler_strength");
        sham["scenario"] = "none";
      } else {
        if (p.contains("delay_ms")) delay = arg_value(p["delay_ms"]);
        sham["delay_ms"] = 0;
      }
      sham["_arm"] = "sham";
      delays_per_sham[row_id(sham, from)].insert(delay);
      shams.emplace_back(std::move(sham), std::move(delay));
    }
    const std::string tool_prefix = tool == "sim" ? "sim-" : "";
    for (const auto& [sham, delay] : shams) {
      const std::string id = row_id(sham, from);
      const std::string prefix = delays_per_sham[id].size() > 1 && !delay.empty() ? "sham-for_delay_ms-" + delay + "__" : "sham-";
      if (ids_.count(tool_prefix + prefix + id) || ids_.count(tool_prefix + id)) continue;
      add(sham, from, tool, prefix);
    }
  }

private:
  Spec& s_;
  const std::string& path_;
  std::set<std::string> ids_;
};

}  // namespace

Spec load_spec(const std::string& path, bool quick, const std::vector<std::string>& overrides) {
  const ordered_json j = parse_json_file(path);
  Spec s = spec_header(j, path);
  Sweep w = sweep_of(j);
  if (quick && j.contains("quick")) {
    const auto& q = j["quick"];
    if (q.contains("base"))
      for (const auto& [k, v] : q["base"].items()) w.base[k] = v;
    if (q.contains("matrix")) w.matrix = q["matrix"];
    w.matrices = q.value("matrices", ordered_json::array());
    w.rows = q.value("rows", ordered_json::array());
  }
  if (!w.matrices.is_array()) throw formats::FormatError(path, 0, "\"matrices\" must be a list of matrix objects");
  apply_overrides(w, s, overrides, path);
  if (s.kind == "fixtures") return s;
  if (s.kind == "script") {
    script_spec(s, j, quick, path);
    return s;
  }
  if (s.kind == "sensitivity") {
    sensitivity_spec(s, j, quick, w, path);
    return s;
  }
  RowAdder rows(s, path);
  const auto params = expand_sweep(w, path, "");
  for (const auto& p : params) rows.add(p, w.base, "run");
  if (s.sham) rows.add_shams(params, w.base, "run");
  // "sim": the same sweep shape on model-driven ranks (`sf-testbed sim --json`, no MPI), for
  // rank counts no machine here can launch; its own base, matrix and rows; "quick" may replace it.
  ordered_json sim = j.value("sim", ordered_json());
  if (quick && j.contains("quick") && j["quick"].contains("sim")) sim = j["quick"]["sim"];
  if (!sim.is_null()) {
    if (s.kind != "runs" || !sim.is_object())
      throw formats::FormatError(path, 0, "\"sim\" must be an object of a \"runs\" spec");
    Sweep sw = sweep_of(sim);
    const auto sp = expand_sweep(sw, path, "the sim's ");
    for (const auto& p : sp) rows.add(p, sw.base, "sim");
    if (s.sham) rows.add_shams(sp, sw.base, "sim");
  }
  return s;
}

std::vector<std::string> list_specs(const std::string& dir) {
  std::vector<std::string> names;
  if (!fs::is_directory(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
/// Seconds before a row (or a script experiment) is killed: --row-timeout, else the spec's, else
/// kDefaultRowTimeoutS.
int row_timeout(const DriverOptions& opt, const Spec& spec) {
  return opt.row_timeout_s > 0 ? opt.row_timeout_s : spec.row_timeout_s > 0 ? spec.row_timeout_s : kDefaultRowTimeoutS;
}
}  // namespace

namespace {

/// The specs named (or every spec for "all"); false after saying why on stderr.
bool load_specs(const DriverOptions& opt, std::vector<Spec>& specs) {
  std::vector<std::string> names = opt.names;
  if (names.size() == 1 && names[0] == "all") names = list_specs(opt.specs_dir);
  if (names.empty()) {
    std::fprintf(stderr, "sf-testbed experiment: no experiment specs in %s\n", opt.specs_dir.c_str());
    return false;
  }
  try {
    for (const auto& n : names) specs.push_back(load_spec(opt.specs_dir + "/" + n + ".json", opt.quick, opt.overrides));
  } catch (const formats::FormatError& e) {
    std::fprintf(stderr, "sf-testbed experiment: %s\n", e.what());
    return false;
  }
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// A script experiment: the spec's script measures into `dir`, then makes its table and plots.
/// {sf}: this binary; {build}: its directory (the probes CTest builds); {out}: the experiment's
/// directory. A relative script path is relative to the project root. Returns failures (0 or 1).
int run_script(const DriverOptions& opt, const Spec& spec, const std::string& dir, std::chrono::steady_clock::time_point t0) {
  const fs::path root = fs::absolute(opt.specs_dir).parent_path().parent_path();
  fs::path script = spec.script;
  if (script.is_relative()) script = root / script;
  auto expand = [&](std::vector<std::string> args) {
    for (auto& a : args)
      for (const auto& [key, value] : {std::pair<std::string, std::string>{"{sf}", opt.self},
                                       {"{build}", fs::path(opt.self).parent_path().string()},
                                       {"{out}", dir}})
        for (auto at = a.find(key); at != std::string::npos; at = a.find(key, at + value.size())) a.replace(at, key.size(), value);
    args.insert(args.begin(), {opt.python, script.string()});
    return args;
  };
  const int timeout_s = row_timeout(opt, spec);
  if (opt.force) {  // the script keeps finished rows: --force starts it afresh
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  if (!opt.overrides.empty())
    std::fprintf(stderr, "[%s] --set does not reach a script experiment (its options are the spec's \"args\")\n", spec.name.c_str());
  std::fprintf(stderr, "[%s] %s (log: %s/log.txt)\n", spec.name.c_str(), script.string().c_str(), dir.c_str());
  int rc = spawn(expand(spec.script_args), dir + "/log.txt", timeout_s, [] {});
  if (rc == 0) rc = spawn(expand(spec.report_args), dir + "/report.log", 600, [] {});
  const double elapsed = seconds_since(t0);
  if (rc != 0) {
    std::fprintf(stderr, "[%s] %s (%s), see %s/log.txt and report.log\n", spec.name.c_str(),
                 rc == -1 ? ("killed at the timeout of " + std::to_string(timeout_s) + " s").c_str() : ("exit " + std::to_string(rc)).c_str(),
                 hms(elapsed).c_str(), dir.c_str());
    return 1;
  }
  std::fprintf(stderr, "[%s] done in %s: %s/{rows.csv,table.md,manifest.json}\n", spec.name.c_str(), hms(elapsed).c_str(), dir.c_str());
  return 0;
}

/// The command of one row: `run` under mpirun, `sim --json`, or a torch spec's trainer launching
/// its own ranks; "{row_dir}" in a spec value names a file inside the row's directory.
std::vector<std::string> row_command(const DriverOptions& opt, const Spec& spec, const Row& row, const std::string& rdir) {
  std::vector<std::string> cmd{opt.mpirun, "-np", std::to_string(row.ranks), opt.self, "run", "--quiet", "--out", rdir};
  if (row.tool == "sim") cmd = {opt.self, "sim", "--json"};
  if (spec.kind == "torch") {
    // A relative trainer path is relative to the project root (specs live in ROOT/experiments/specs).
    fs::path trainer = spec.raw.value("trainer", "examples/torch_ddp/train.py");
    if (trainer.is_relative()) trainer = fs::absolute(opt.specs_dir).parent_path().parent_path() / trainer;
    cmd = {opt.python, trainer.string(), "--nproc-per-node", std::to_string(row.ranks), "--quiet", "--out", rdir};
  }
  for (std::string a : row.args) {
    if (const auto at = a.find("{row_dir}"); at != std::string::npos) a.replace(at, 9, rdir);
    cmd.push_back(std::move(a));
  }
  return cmd;
}

/// Runs the spec's rows not done yet (all with --force), each in rows/ID under the row timeout,
/// and summarizes every row's result into csv_rows; a row that left no result is in `failed`.
void run_rows(const DriverOptions& opt, const Spec& spec, const std::string& dir, std::chrono::steady_clock::time_point t0,
              std::vector<ordered_json>& csv_rows, std::vector<std::string>& failed) {
  const bool tty = isatty(2);
  const std::size_t n = spec.kind == "sensitivity" ? 0 : spec.rows.size();
  const int row_timeout_s = row_timeout(opt, spec);
  std::size_t done_now = 0;
  double spent = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Row& row = spec.rows[i];
    const std::string rdir = dir + "/rows/" + row.id;
    const bool sim_row = row.tool == "sim";
    const std::string result = rdir + (sim_row ? "/sim.json" : spec.kind == "overhead" ? "/overhead.json" : "/run.json");
    if (opt.force || !fs::exists(result)) {
      fs::remove_all(rdir);
      fs::create_directories(rdir);
      const auto r0 = std::chrono::steady_clock::now();
      auto tick = [&] {
        const double per = done_now ? spent / static_cast<double>(done_now) : 0.0;
        const std::string eta = done_now ? hms(per * static_cast<double>(n - i)) : "?";
        std::fprintf(stderr, "%s[%s] row %zu/%zu  elapsed %s  eta %s  (%s)%s", tty ? "\r" : "", spec.name.c_str(), i + 1, n,
                     hms(seconds_since(t0)).c_str(), eta.c_str(), row.id.c_str(), tty ? "   " : "\n");
      };
      tick();
      const int rc = spawn(row_command(opt, spec, row, rdir), rdir + "/log.txt", row_timeout_s,
                           tty ? std::function<void()>(tick) : [] {}, sim_row ? result : std::string());
      if (sim_row && rc != 0) fs::remove(result);  // a sim that failed leaves no half line behind
      spent += seconds_since(r0);
      ++done_now;
      // A row whose check failed still has its result: it is data, not a crash.
      if (!fs::exists(result)) {
        const std::string why = rc == -1 ? "killed at the row timeout of " + std::to_string(row_timeout_s) +
                                               " s: --row-timeout, or the spec's \"row_timeout_s\""
                                         : "exit " + std::to_string(rc);
        failed.push_back(row.id + " (" + why + ", see " + rdir + "/log.txt)");
        continue;
      }
    } else if (tty) {
      std::fprintf(stderr, "\r[%s] row %zu/%zu  elapsed %s  (done earlier: %s)   ", spec.name.c_str(), i + 1, n,
                   hms(seconds_since(t0)).c_str(), row.id.c_str());
    }
    try {
      const auto j = parse_json_file(result);
      for (auto& r : row.tool == "sim"          ? summarize_sim(j, row, spec)
                     : spec.kind == "overhead" ? summarize_overhead(j, row, spec)
                                               : summarize_run(j, row, spec))
        csv_rows.push_back(std::move(r));
    } catch (const std::exception& e) {
      failed.push_back(row.id + " (" + e.what() + ")");
    }
  }
  if (tty && n) std::fprintf(stderr, "\n");
}

constexpr const char* kRowArchive = "rows.tar.xz";

/// experiments/rowstore.py (beside the report script) packs rows/ into rows.tar.xz or unpacks it;
/// "" or what went wrong, naming its log.
std::string rowstore(const DriverOptions& opt, const std::string& verb, const std::string& dir) {
  const std::string script = (fs::path(opt.report_script).parent_path() / "rowstore.py").string();
  const std::string log = dir + "/.rowstore.log";
  if (const int rc = spawn({opt.python, script, verb, dir}, log, 1800, [] {}); rc != 0)
    return "rowstore.py " + verb + " " + dir + " failed (" + (rc == -1 ? std::string("killed at 1800 s") : "exit " + std::to_string(rc)) +
           "), see " + log;
  std::error_code ec;
  fs::remove(log, ec);
  return "";
}

void write_manifest(const DriverOptions& opt, const Spec& spec, const std::string& dir, std::size_t rows,
                    const std::vector<std::string>& failed, double elapsed) {
  ordered_json manifest;
  manifest["experiment"] = spec.name;
  manifest["title"] = spec.title;
  manifest["command"] = opt.argv;
  manifest["commit"] = opt.commit;
  manifest["date"] = testbed::utc_now();
  manifest["machine"] = testbed::machine_json();
  manifest["quick"] = opt.quick;
  manifest["rows"] = rows;
  manifest["rows_failed"] = failed;
  manifest["elapsed_s"] = elapsed;
  manifest["spec"] = spec.raw;
  formats::write_file_atomic(dir + "/manifest.json", manifest.dump(2) + "\n");
}

/// One spec: its rows (or fixtures, sensitivity settings, script), rows.csv, manifest.json, then
/// the tables and plots from the CSV (matplotlib, Debian's python3; none without a row). Returns
/// its failures, or -1 for bad input (exit 2).
int run_spec(const DriverOptions& opt, const Spec& spec) {
  const std::string dir = opt.out_dir + "/" + spec.name + (opt.tag.empty() ? "" : "-" + opt.tag) + (opt.quick ? "-quick" : "");
  // A packed experiment resumes from its archive: rows/ comes back before the rows run (--force
  // runs every row again and packs anew).
  if (spec.kind != "script" && !opt.force && fs::exists(dir + "/" + kRowArchive) && !fs::exists(dir + "/rows"))
    if (const auto why = rowstore(opt, "unpack", dir); !why.empty()) {
      std::fprintf(stderr, "[%s] %s\n", spec.name.c_str(), why.c_str());
      return 1;
    }
  fs::create_directories(spec.kind == "script" ? dir : dir + "/rows");
  const auto t0 = std::chrono::steady_clock::now();
  if (spec.kind == "script") return run_script(opt, spec, dir, t0);
  std::vector<ordered_json> csv_rows;
  std::vector<std::string> failed;
  if (spec.kind == "fixtures") {
    const auto seed = spec.raw.value("seed", 1);
    const int windows = opt.quick ? 200 : spec.raw.value("windows", 20000);
    std::fprintf(stderr, "[%s] computing the §6.1 fixtures and properties in-process\n", spec.name.c_str());
    csv_rows = fixtures_rows(spec, static_cast<std::uint64_t>(seed), windows, opt.commit);
  }
  if (spec.kind == "sensitivity") {
    std::fprintf(stderr, "[%s] %zu settings through the timeline model in-process\n", spec.name.c_str(), spec.rows.size());
    try {
      csv_rows = sensitivity_rows(spec, opt.commit);
    } catch (const formats::FormatError& e) {
      std::fprintf(stderr, "sf-testbed experiment: %s\n", e.what());
      return -1;
    }
  }
  run_rows(opt, spec, dir, t0, csv_rows, failed);
  write_csv(dir + "/rows.csv", csv_rows);
  const double elapsed = seconds_since(t0);
  write_manifest(opt, spec, dir, spec.kind == "sensitivity" ? csv_rows.size() : spec.rows.size(), failed, elapsed);
  for (const auto& f : failed) std::fprintf(stderr, "[%s] row failed: %s\n", spec.name.c_str(), f.c_str());
  int failures = static_cast<int>(failed.size());
  if (csv_rows.empty()) {
    std::fprintf(stderr, "[%s] no row finished: no table or plot (rows.csv and manifest.json say so)\n", spec.name.c_str());
    return failures + 1;
  }
  const int report_rc = spawn({opt.python, opt.report_script, dir}, dir + "/report.log", 600, [] {});
  if (report_rc != 0) {
    std::fprintf(stderr, "[%s] report failed (exit %d), see %s/report.log\n", spec.name.c_str(), report_rc, dir.c_str());
    ++failures;
  }
  // The tree keeps a run's per-row files as one archive (docs/experiments.md, "What the tree
  // keeps"), whether or not the report could read them; --quick and --keep-rows leave rows/ as it is.
  bool pack = false;
  if (!opt.quick && !opt.keep_rows && fs::is_directory(dir + "/rows"))
    for (const auto& f : fs::recursive_directory_iterator(dir + "/rows")) pack = pack || f.is_regular_file();
  if (pack)
    if (const auto why = rowstore(opt, "pack", dir); !why.empty()) {
      std::fprintf(stderr, "[%s] %s\n", spec.name.c_str(), why.c_str());
      return failures + 1;
    }
  if (report_rc == 0)
    std::fprintf(stderr, "[%s] done in %s: %s/{rows.csv,table.md,manifest.json%s}\n", spec.name.c_str(),
                 hms(elapsed).c_str(), dir.c_str(), pack ? ",rows.tar.xz" : "");
  return failures;
}

}  // namespace

int run(const DriverOptions& opt) {
  std::vector<Spec> specs;
  if (!load_specs(opt, specs)) return 2;
  install_row_cleanup();
  // mpirun as root on an oversubscribed 2-core machine (TOOLCHAIN.md); shared memory only.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  setenv("OMPI_MCA_pml", "ob1", 0);
  setenv("OMPI_MCA_btl", "self,vader", 0);
  setenv("OMPI_MCA_mtl", "^ofi,psm,psm2", 0);
  int failures = 0;
  for (const auto& spec : specs) {
    const int f = run_spec(opt, spec);
    if (f < 0) return 2;
    failures += f;
  }
  if (!opt.quick && opt.tag.empty()) {
    const int rc = spawn({opt.python, opt.report_script, "--index", opt.out_dir}, opt.out_dir + "/.index.log", 120, [] {});
    if (rc != 0) ++failures;
  }
  return failures ? 1 : 0;
}

}  // namespace sf::experiments
