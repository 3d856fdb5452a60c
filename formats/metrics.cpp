// Prometheus text exposition (format 0.0.4) of the latest window: what node_exporter's textfile
// collector scrapes, the convention DCGM, XPUTimer and NCCL Inspector users already run. One
// file, rewritten atomically at each window (docs/formats.md, "Metrics").
#include "sf/formats/formats.h"

#include <cmath>
#include <string>

namespace sf::formats {

namespace {

/// A label value as the exposition format quotes it: backslash, double quote and newline escaped.
std::string quoted(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out + "\"";
}

/// A sample value: finite numbers as the shortest text that round-trips; the format's NaN
/// otherwise (never written here: every value below is finite).
std::string number(double v) {
  if (!std::isfinite(v)) return "NaN";
  return frontier::strprintf("%.17g", v);
}

struct Writer {
  std::string out;
  std::string base_labels;  // source="run", ...
  void family(const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const char* name, const std::string& labels, double v) {
    std::string all = base_labels;
    if (!labels.empty()) all += (all.empty() ? "" : ",") + labels;
    out += std::string(name) + (all.empty() ? "" : "{" + all + "}") + " " + number(v) + "\n";
  }
  /// A family with one unlabelled sample.
  void single(const char* name, const char* type, const char* help, double v) {
    family(name, type, help);
    sample(name, "", v);
  }
};

}  // namespace

std::string metrics_text(const frontier::Evidence& e, const MetricsState& s) {
  Writer w;
  w.base_labels = "source=" + quoted(s.source);
  const int G = e.schema.group_count();
  const double steps = e.steps > 0 ? e.steps : 1;

  w.single("sf_windows_total", "counter", "Windows scored since the start.", static_cast<double>(s.windows));
  w.single("sf_steps_total", "counter", "Steps scored since the start.", static_cast<double>(s.steps));
  w.single("sf_window_last_step", "gauge", "Last step id of the latest window.", static_cast<double>(e.last_step));
  w.single("sf_world_size", "gauge", "Ranks of the job.", e.world_size);

  w.family("sf_step_exposed_seconds", "gauge", "Exposed step time F[t,S] of the latest window: its mean and median per step.");
  w.sample("sf_step_exposed_seconds", "stat=\"mean\"", e.steps > 0 ? e.exposed_makespan_s / e.steps : 0.0);
  w.sample("sf_step_exposed_seconds", "stat=\"median\"", e.median_step_s);

  w.family("sf_stage_advance_seconds", "gauge",
           "Exposed advance per step of each stage in the latest window (frontier accounting; the stages sum to the exposed step).");
  for (int g = 0; g < G; ++g) w.sample("sf_stage_advance_seconds", "stage=" + quoted(e.group_name(g)), e.advances_s[g] / steps);
  w.family("sf_stage_share", "gauge", "Share of the exposed makespan of each stage in the latest window (0 below the share floor).");
  for (int g = 0; g < G; ++g)
    w.sample("sf_stage_share", "stage=" + quoted(e.group_name(g)), e.shares_valid ? e.shares[g] : 0.0);

  // The diagnosis: one info sample naming what it names (stage and rank "none" when nothing
  // passed the floor), and its numbers.
  const auto& d = e.diagnosis;
  const std::string stage = d.group >= 0 ? e.group_name(d.group) : "none";
  const std::string rank = d.group >= 0 && d.rank >= 0 ? std::to_string(d.rank) : "none";
  w.family("sf_diagnosis_info", "gauge",
           "What went wrong in the latest window (docs/diagnosis.md): 1, with the stage, rank and basis as labels.");
  w.sample("sf_diagnosis_info",
           "stage=" + quoted(stage) + ",rank=" + quoted(rank) + ",basis=" + quoted(std::string(frontier::to_string(d.basis))) +
               ",surfaces_in=" + quoted(d.surfaces_group >= 0 ? e.group_name(d.surfaces_group) : "none"),
           1);
  w.family("sf_diagnosis_excess_seconds", "gauge", "The diagnosed excess per step (0 when nothing passed the noise floor).");
  w.sample("sf_diagnosis_excess_seconds", "stage=" + quoted(stage) + ",rank=" + quoted(rank), d.significant() ? d.excess_s : 0.0);
  w.single("sf_diagnosis_noise_floor_seconds", "gauge", "The noise floor the excess had to pass.", d.noise_floor_s);
  w.single("sf_diagnosis_confidence", "gauge", "The diagnosis' confidence in [0, 1].", d.confidence);
  if (e.differential) {
    w.family("sf_stage_delta_seconds", "gauge", "Change of each stage's exposed advance per step against the reference.");
    for (int g = 0; g < G; ++g)
      w.sample("sf_stage_delta_seconds", "stage=" + quoted(e.group_name(g)), e.differential->delta_advance_s[g]);
  }

  // The what-if (docs/diagnosis.md, "What fixing it would buy"): present only where it could be
  // replayed, so an absent series means "unknown", never "nothing to gain".
  if (const auto& wi = e.whatif; wi.available) {
    w.family("sf_whatif_step_seconds", "gauge",
             "The exposed step per step of the latest window as it is (actual), with every culprit fixed (healed) and as if no "
             "rank straggled (ideal: every rank at the cohort's median arrival).");
    w.sample("sf_whatif_step_seconds", "case=\"actual\"", wi.actual_s);
    w.sample("sf_whatif_step_seconds", "case=\"healed\"", wi.all_healed_s);
    w.sample("sf_whatif_step_seconds", "case=\"ideal\"", wi.ideal_s);
    w.family("sf_whatif_gain_seconds", "gauge", "What fixing each culprit of the latest window would give per step.");
    for (const auto& f : wi.fixes)
      w.sample("sf_whatif_gain_seconds",
               "stage=" + quoted(f.group >= 0 ? e.group_name(f.group) : "none") + ",rank=" + quoted(std::to_string(f.rank)), f.gain_s);
    w.single("sf_whatif_slowdown", "gauge", "S = actual / ideal step (the what-if analysis of arXiv 2505.05713).", wi.slowdown);
    w.single("sf_whatif_gains", "gauge", "1 when fixing the culprits would gain more than the step's noise floor.",
             wi.gains() ? 1 : 0);
  }

  w.family("sf_label", "gauge", "1 for each Table 12 label the latest window carries, 0 for the others.");
  for (int l = 0; l < frontier::kLabelCount; ++l) {
    const auto label = static_cast<frontier::Label>(l);
    w.sample("sf_label", "label=" + quoted(std::string(frontier::to_string(label))), e.has(label) ? 1 : 0);
  }

  if (s.change_points >= 0) {
    w.single("sf_change_points_total", "counter", "Change points of the exposed step confirmed since the start (--detect).",
             static_cast<double>(s.change_points));
  }

  w.single("sf_telemetry_gather_ok", "gauge", "1 when every rank's contribution to the latest window arrived.",
           e.gather_ok ? 1 : 0);
  w.single("sf_telemetry_gather_failures_total", "counter", "Windows whose gather failed since the start.",
           static_cast<double>(s.gather_failures));
  w.single("sf_telemetry_missing_ranks", "gauge", "Ranks absent from at least one step of the latest window.",
           static_cast<double>(e.missing_rank_count));
  w.single("sf_telemetry_dropped_records", "gauge", "Records the recorders dropped in the latest window (ring overflow).",
           static_cast<double>(e.dropped_records));
  w.single("sf_telemetry_closure_residual_share", "gauge", "Share of the recorded step time no stage covers (0 without walls).",
           e.has_wall ? e.closure_residual_share : 0.0);
  w.single("sf_telemetry_limited", "gauge", "1 when a telemetry gate capped the latest window's labels.",
           e.has(frontier::Label::telemetry_limited) ? 1 : 0);
  return w.out;
}

}  // namespace sf::formats
