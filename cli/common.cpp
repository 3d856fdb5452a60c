#include "common.h"

#include "sf/testbed/testbed.h"
#include "sf_build_info.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace sf::cli {

const char* git_commit() { return SF_GIT_COMMIT; }

namespace {

/// Edit distance (insertions, deletions, substitutions; a swap of neighbours counts one).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

/// The candidate nearest to `word` when it is near enough to be a typo of it (distance at most a
/// third of its length, and at least 1), else "".
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(1, word.size() / 3) + 1;
  for (const auto& c : candidates)
    if (const auto dist = edit_distance(word, c); dist < best_d) {
      best_d = dist;
      best = c;
    }
  return best;
}

}  // namespace

std::string failure_line(const CLI::App* app, const CLI::Error& e) {
  const CLI::App* sub = nullptr;
  for (const auto* s : app->get_subcommands()) sub = s;  // the subcommand being parsed, if any
  const std::string who = sub ? "sf-testbed " + sub->get_name() : std::string("sf-testbed");
  std::string what = e.what();
  // (CLI11 names a subcommand's ExtrasError after the subcommand, so the type is what tells.)
  const bool required_subcommand = !sub && what.rfind("A subcommand is required", 0) == 0;
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr || required_subcommand) {
    if (required_subcommand) {
      // `sf-testbed scroe`: the word that is not a subcommand is in the app's leftovers.
      std::string left;
      for (const auto& r : app->remaining())
        if (!r.empty() && r[0] != '-') {
          left = r;
          break;
        }
      if (left.empty()) return who + ": " + what + "; see " + who + " --help";
      what = "The following argument was not expected: " + left;
    }
    // "The following argument(s) was/were not expected: A B": name the first, and a near miss.
    const auto colon = what.find(": ");
    std::vector<std::string> extras;
    std::string word;
    for (char c : what.substr(colon == std::string::npos ? 0 : colon + 2) + " ")
      if (c == ' ') {
        if (!word.empty()) extras.push_back(word);
        word.clear();
      } else {
        word += c;
      }
    std::vector<std::string> names;
    if (sub) {
      for (const auto* opt : sub->get_options())
        for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
    } else {
      for (const auto* s : app->get_subcommands({})) names.push_back(s->get_name());
    }
    for (const auto& x : extras) {
      const bool option = x.rfind("--", 0) == 0;
      if (sub && !option) continue;  // a value left over after a mistyped option
      const std::string key = option ? x.substr(0, x.find('=')) : x;
      const std::string near = nearest(key, names);
      what = (option ? "unknown option " : sub ? "unexpected argument " : "unknown subcommand ") + key +
             (near.empty() ? std::string() : " (did you mean " + near + "?)");
      break;
    }
  }
  return who + ": " + what + "; see " + who + " --help";
}

bool is_first_process() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!r) r = std::getenv("PMI_RANK");
  return r == nullptr || std::string(r) == "0";
}

void add_label_options(CLI::App* sub, LabelOptions& o) {
  const std::string g = "Labeler gates (defaults: paper Table 13)";
  sub->add_option("--config", o.config_file, "JSON file of labeler gates (keys in docs/labeler.md)")
      ->check(CLI::ExistingFile)->group(g);
  sub->add_option("--tau-c", o.tau_c, "routing-set cumulative share tau_C")->check(CLI::Range(0.01, 1.0))->group(g);
  sub->add_option("--gamma-a", o.gamma_a, "frontier-share dominance gamma_A")->check(CLI::Range(0.0, 1.0))->group(g);
  sub->add_option("--gamma-g", o.gamma_g, "static-gain threshold gamma_G")->check(CLI::Range(0.0, 1.0))->group(g);
  sub->add_option("--eta-a", o.eta_a, "share tie tolerance eta_A")->check(CLI::Range(0.0, 1.0))->group(g);
  sub->add_option("--eta-g", o.eta_g, "gain tie tolerance eta_G")->check(CLI::Range(0.0, 1.0))->group(g);
  sub->add_option("--max-closure-residual", o.closure, "closure residual share gate")->check(CLI::Range(0.0, 1.0))->group(g);
  sub->add_option("--max-overlap-error", o.overlap, "overlap error share gate")->check(CLI::Range(0.0, 1.0))->group(g);
  sub->add_option("--max-missing-ranks", o.missing_ranks, "missing-rank gate")->check(whole_from<int>(0))->group(g);
  sub->add_option("--min-event-ready", o.event_ready, "event-ready ratio gate")->check(CLI::Range(0.0, 1.0))->group(g);
  sub->add_option("--min-event-samples", o.event_samples, "minimum ready event samples")->check(whole_from<int>(0))->group(g);
  const std::map<std::string, frontier::GainBaseline> baselines{{"rank_median", frontier::GainBaseline::rank_median},
                                                                {"cohort_median", frontier::GainBaseline::cohort_median},
                                                                {"reference", frontier::GainBaseline::reference}};
  sub->add_option("--gain-baseline", o.gain_baseline, "clipped baseline for the direct-exposure gain")
      ->transform(choice(baselines))->group(g);
  sub->add_option("--gain-reference", o.reference_s, "no-stall reference seconds per stage group (with --gain-baseline reference)")
      ->delimiter(',')->group(g);
  sub->add_option("--wait-model", o.wait_model, "stage groups whose sync-wait model the caller asserts (W_s = 1)")
      ->delimiter(',')->group(g);
}

void add_limit_options(CLI::App* sub, formats::ReadLimits& l, bool stages) {
  const std::string g = "Input limits (checked before allocating; raise for bigger inputs)";
  sub->add_option("--max-file-size", l.max_file_bytes, "largest file in bytes")
      ->default_val(l.max_file_bytes)->check(whole_from<std::int64_t>(1))->group(g);
  if (!stages)
    sub->add_option("--max-events", l.max_events, "most timed events one trace keeps (32 bytes each)")
        ->default_val(l.max_events)->check(whole_from<std::int64_t>(1))->group(g);
  if (stages)
    sub->add_option("--max-line-bytes", l.max_line_bytes,
                     "longest line (a JSONL record or header, a CSV row), checked as bytes arrive")
        ->default_val(l.max_line_bytes)->check(whole_from<std::int64_t>(1))->group(g);
  if (stages)
    sub->add_option("--max-stages", l.max_stages, "most explicit stages in a header")
        ->default_val(l.max_stages)->check(whole_in(1, 1 << 20))->group(g);
  sub->add_option("--max-world-size", l.max_world_size, "most ranks in a window")
      ->default_val(l.max_world_size)->check(whole_in(1, formats::kWorldSizeCeiling))->group(g);
  sub->add_option("--max-window-steps", l.max_window_steps, "most steps one file window spans (score: before --window splits it)")
      ->default_val(l.max_window_steps)->check(whole_from<int>(1))->group(g);
  sub->add_option("--max-values", l.max_values, "most steps x ranks x stages in one file window, and (stages + 1)^2 for the labeler's stage table")
      ->default_val(l.max_values)->check(whole_from<std::int64_t>(1))->group(g);
}

void add_step_options(CLI::App* sub, StepOptions& o, bool model) {
  const std::string g = "Step shape (defaults: the --profile's)";
  std::map<std::string, std::string> profiles;
  std::string list;
  for (const auto& p : sim::cost_profiles()) {
    profiles[p.name] = p.name;
    list += (list.empty() ? "" : ", ") + p.name;
  }
  sub->add_option("--profile", o.profile, "named cost profile (" + list + "; origins in docs/testbed.md)")
      ->transform(choice(profiles))->group(g);
  const std::map<std::string, std::string> modes{{"single", "single"}, {"bucketed", "bucketed"}};
  sub->add_option("--sync-mode", o.sync_mode,
                  "gradient sync: bucketed (DDP: buckets overlap backward) or single (one collective after backward)")
      ->transform(choice(modes))->group(g);
  sub->add_option("--cost-scale", o.cost_scale, "multiply every stage cost of the profile")->check(CLI::Range(0.01, 100.0))->group(g);
  sub->add_option("--backward-scale", o.backward_scale, "multiply backward compute and launch costs")
      ->check(CLI::Range(0.01, 100.0))->group(g);
  sub->add_option("--jitter", o.jitter, "lognormal sigma of every cost, per rank and step (seed-controlled)")
      ->check(CLI::Range(0.0, 1.0))->group(g);
  const std::map<std::string, std::string> het{{"none", "none"}, {"lognormal", "lognormal"}, {"two-tier", "two-tier"}};
  sub->add_option("--heterogeneity", o.heterogeneity, "per-rank cost factor: none, lognormal (sigma --rank-sigma), "
                                                      "two-tier (half the ranks 1 + --rank-sigma slower)")
      ->transform(choice(het))->group(g);
  sub->add_option("--rank-sigma", o.rank_sigma, "strength of --heterogeneity")->check(CLI::Range(0.0, 2.0))->group(g);
  sub->add_option("--grad-mib", o.grad_mib, "gradient MiB reduced per step")->check(CLI::Range(1.0 / 1024, 4096.0))->group(g);
  sub->add_option("--model-mib", o.model_mib, "model size whose DDP bucket layout is imitated (MiB)")
      ->check(CLI::Range(1.0 / 1024, 1e6))->group(g);
  sub->add_option("--bucket-mib", o.bucket_mib, "DDP bucket cap in model MiB (torch: 25)")->check(CLI::Range(1.0 / 1024, 1e6))->group(g);
  sub->add_option("--first-bucket-mib", o.first_bucket_mib, "DDP first bucket cap in model MiB (torch: 1)")
      ->check(CLI::Range(1.0 / 1024, 1e6))->group(g);
  if (model) {
    sub->add_option("--comm-latency-us", o.comm_latency_us, "model transport: latency per ring hop (us)")
        ->check(CLI::Range(0.0, 1e6))->group(g);
    sub->add_option("--comm-gib-s", o.comm_gib_s, "model transport: bandwidth (GiB/s)")->check(CLI::Range(1e-6, 1e6))->group(g);
  }
}

namespace {

std::string fmt_num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

CLI::Validator number_in(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string range = std::string(lo_open ? "(" : "[") + fmt_num(lo) + ", " + fmt_num(hi) + (hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        const char* b = in.c_str();
        char* e = nullptr;
        errno = 0;
        const double v = std::strtod(b, &e);
        if (in.empty() || e == b || *e != '\0' || errno == ERANGE || !std::isfinite(v))
          return "'" + in + "' is not a number; expected a number in " + range;
        if ((lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi)) return in + " is not in " + range;
        return "";
      },
      "NUMBER in " + range);
}

CLI::Validator whole_in(long long lo, long long hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        const char* b = in.c_str();
        char* e = nullptr;
        errno = 0;
        const long long v = std::strtoll(b, &e, 10);
        if (in.empty() || e == b || *e != '\0' || errno == ERANGE)
          return "'" + in + "' is not a whole number; expected a whole number in " + range;
        if (v < lo || v > hi) return in + " is not in " + range;
        return "";
      },
      "INT in " + range);
}

CLI::Validator seed_value() {
  const std::string range = "[0, " + std::to_string(std::numeric_limits<std::uint64_t>::max()) + "]";
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        // Digits only: strtoull (under CLI11's unsigned conversion) takes "-1" as 2^64 - 1.
        std::uint64_t v = 0;
        const auto r = std::from_chars(in.data(), in.data() + in.size(), v);
        if (in.empty() || r.ec != std::errc() || r.ptr != in.data() + in.size())
          return "'" + in + "' is not a seed; expected a whole number in " + range;
        return "";
      },
      "UINT in " + range);
}

void refuse_non_finite(CLI::App& app) {
  const CLI::Validator finite(
      [](std::string& in) -> std::string {
        const char* b = in.c_str();
        char* e = nullptr;
        const double v = std::strtod(b, &e);
        // Only a number that parses whole is judged here: anything else is CLI11's to refuse.
        if (in.empty() || e == b || *e != '\0' || std::isfinite(v)) return "";
        return "'" + in + "' is not a finite number; expected a number";
      },
      "");
  for (CLI::Option* opt : app.get_options())
    if (opt->get_type_name().rfind("FLOAT", 0) == 0) opt->check(finite);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_non_finite(*sub);
}

CLI::Validator not_empty(const std::string& what) {
  return CLI::Validator(
      [=](std::string& in) -> std::string { return in.empty() ? "an empty name; expected " + what : ""; }, "NONEMPTY");
}

std::string writable_file_error(const std::string& option, const std::string& path) {
  // Create (and remove) a file beside it: the directory exists and can be written to. mkstemp's
  // unpredictable name and O_EXCL never open a file or symlink someone else put there (issue 40).
  std::string probe = path + ".probe.XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    return option + " " + path + ": cannot create a file there (" + why + "); expected a path in a writable directory";
  }
  ::close(fd);
  std::remove(probe.c_str());
  return "";
}

std::string same_file_error(const std::string& option, const std::string& out, const std::vector<std::string>& inputs) {
  struct stat o{};
  if (out.empty() || ::stat(out.c_str(), &o) != 0) return "";  // not there yet: it cannot be an input
  for (const auto& in : inputs) {
    struct stat i{};
    if (!in.empty() && ::stat(in.c_str(), &i) == 0 && i.st_dev == o.st_dev && i.st_ino == o.st_ino && S_ISREG(o.st_mode))
      return option + " " + out + " is the input " + in + " (the output would replace it); expected another path";
  }
  return "";
}

void add_detect_options(CLI::App* sub, DetectOptions& o, bool stability_window) {
  const std::string g = "Watching over time (docs/detect.md)";
  sub->add_flag("--detect", o.on, "change points of the exposed step time (BOCPD + FALCON verification), periodicity, culprit stability")
      ->group(g);
  sub->add_option("--detect-hazard", o.cfg.hazard, "BOCPD constant hazard (1/expected run length)")
      ->check(number_in(0, 0.5, true, false))->group(g);
  sub->add_option("--detect-threshold", o.cfg.threshold, "posterior mass of short run lengths that makes a candidate")
      ->check(number_in(0, 1, true, true))->group(g);
  sub->add_option("--detect-min-gap", o.cfg.min_gap, "FALCON verification: steps after the previous change")
      ->check(whole_in(3, 1000000))->group(g);
  sub->add_option("--detect-min-change", o.cfg.min_rel_change, "FALCON verification: relative change of the medians")
      ->check(number_in(0, 1, false, true))->group(g);
  sub->add_option("--detect-max-run", o.cfg.max_run_length, "run lengths kept (memory, work per step)")
      ->check(whole_in(16, 100000))->group(g);
  sub->add_flag_callback("--detect-stages", [&o] { o.on = o.cfg.per_stage = true; },
                         "also one detector per stage group's advance a[t,g], naming the stages that moved (implies --detect)")
      ->group(g);
  sub->add_option("--detect-stage-floor", o.cfg.stage_floor,
                  "--detect-stages: a stage's change is relative to max(m_l, m_r, this fraction of F's level)")
      ->check(number_in(0, 1, false, false))->group(g);
  if (stability_window)
    sub->add_option("--stability-window", o.stability_window, "steps per culprit-stability window")
        ->check(whole_in(2, 10000000))->group(g);
  sub->add_option("--stability-stage", o.stability_stage,
                  "the stage group culprit stability follows (default: the stage of the periodic spikes, else the one that "
                  "moved at the largest slowdown, else the one with the most credit to one rank)")
      ->check(not_empty("a stage group name"))->group(g);
}

void add_trace_options(CLI::App* sub, TraceCliOptions& o) {
  const std::string g = "Watching over time (docs/detect.md)";
  sub->add_option("--trace", o.file, "write a Chrome trace-event JSON timeline (Perfetto, chrome://tracing)")
      ->check(not_empty("a file to write the trace to"))->group(g);
  sub->add_option("--trace-steps", o.max_steps,
                  "steps in the trace: up to half around change points and truth transitions, the rest the last steps")
      ->check(whole_in(1, 1000000))->group(g);
  sub->add_option("--trace-ranks", o.max_ranks, "ranks in the trace (0..N-1 plus the injected targets, and up to N leaders)")
      ->check(whole_in(1, 100000))->group(g);
}

frontier::LabelConfig make_label_config(const LabelOptions& o) {
  frontier::LabelConfig c;
  if (!o.config_file.empty()) c = formats::read_config_file(o.config_file, c);
  if (o.tau_c) c.tau_c = *o.tau_c;
  if (o.gamma_a) c.gamma_a = *o.gamma_a;
  if (o.gamma_g) c.gamma_g = *o.gamma_g;
  if (o.eta_a) c.eta_a = *o.eta_a;
  if (o.eta_g) c.eta_g = *o.eta_g;
  if (o.closure) c.max_closure_residual_share = *o.closure;
  if (o.overlap) c.max_overlap_error_share = *o.overlap;
  if (o.missing_ranks) c.max_missing_ranks = *o.missing_ranks;
  if (o.event_ready) c.min_event_ready_ratio = *o.event_ready;
  if (o.event_samples) c.min_event_samples = *o.event_samples;
  if (o.gain_baseline) c.gain_baseline = *o.gain_baseline;
  if (!o.reference_s.empty()) c.reference_s = o.reference_s;
  if (!o.wait_model.empty()) c.wait_model = o.wait_model;
  return c;
}


}  // namespace sf::cli
