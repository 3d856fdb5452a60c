// Shared pieces of the sf-testbed subcommands: labeler options and exit handling.
#pragma once

#include "sf/detect/detect.h"
#include "sf/formats/formats.h"
#include "sf/frontier/frontier.h"
#include "sf/inject/inject.h"
#include "sf/sim/sim.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <type_traits>
#include <optional>
#include <string>
#include <vector>

namespace sf::cli {

/// Exit codes: 0 success, 1 a check failed (verify, run verdict), 2 bad input.
inline constexpr int kExitFail = 1;
inline constexpr int kExitBadInput = 2;

/// Labeler gates as command-line options; unset flags keep the config file's or the paper's value.
struct LabelOptions {
  std::string config_file;
  std::optional<double> tau_c, gamma_a, gamma_g, eta_a, eta_g, closure, overlap, event_ready;
  std::optional<int> missing_ranks, event_samples;
  std::optional<frontier::GainBaseline> gain_baseline;
  std::vector<double> reference_s;
  std::vector<std::string> wait_model;
};

void add_label_options(CLI::App* sub, LabelOptions& o);
/// Defaults → config file → flags. Throws formats::FormatError on a bad config file.
frontier::LabelConfig make_label_config(const LabelOptions& o);

/// The input limits (docs/formats.md, "Limits") as --max-* options in their own group;
/// `stages`: also --max-stages (score; an import has a fixed stage list).
void add_limit_options(CLI::App* sub, formats::ReadLimits& l, bool stages = true);

/// --detect and its knobs (docs/detect.md); shared by score, sim and run.
struct DetectOptions {
  bool on = false;
  detect::DetectConfig cfg;
  int stability_window = 20;
  std::string stability_stage;
};
void add_detect_options(CLI::App* sub, DetectOptions& o, bool stability_window = true);
/// --trace FILE, --trace-steps, --trace-ranks (Chrome trace-event JSON; docs/detect.md).
struct TraceCliOptions {
  std::string file;
  int max_steps = 500, max_ranks = 64;
};
void add_trace_options(CLI::App* sub, TraceCliOptions& o);

/// A number in a range whose ends are open or closed, said as such: "'abc' is not a number;
/// expected a number in (0, 0.5]" or "0 is not in (0, 0.5]".
CLI::Validator number_in(double lo, double hi, bool lo_open, bool hi_open);
/// A whole number in [lo, hi], with the same kind of message.
CLI::Validator whole_in(long long lo, long long hi);
/// A seed: a whole number in [0, 2^64 - 1], digits only ("-1" is refused, not taken as 2^64 - 1).
CLI::Validator seed_value();
/// A whole number from lo up to the most a T holds (a count, a size, a step, a rank).
template <typename T>
CLI::Validator whole_from(long long lo) {
  return whole_in(lo, static_cast<long long>(std::numeric_limits<T>::max()));
}
/// Refuses "nan" and "inf" for every FLOAT option of app and its subcommands (CLI::Range lets
/// "nan" through: every comparison with it is false), with one line naming the option.
void refuse_non_finite(CLI::App& app);
/// Rejects an empty string ("an empty name; expected WHAT").
CLI::Validator not_empty(const std::string& what);
/// "" when a file can be created at `path` (probed, then removed), else one line naming the option.
std::string writable_file_error(const std::string& option, const std::string& path);
/// "" unless `out` already exists and is the same file as one of `inputs` (device and inode: a
/// link or another spelling of the path is caught too), which writing it would replace.
std::string same_file_error(const std::string& option, const std::string& out, const std::vector<std::string>& inputs);
/// Maps a case-insensitive name to a value; a typo gets one line listing the valid names.
template <typename T>
CLI::Validator choice(const std::map<std::string, T>& m) {
  std::string names;
  for (const auto& kv : m) names += (names.empty() ? "" : ", ") + kv.first;
  return CLI::Validator(
      [m, names](std::string& in) -> std::string {
        std::string key = in;
        for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        const auto it = m.find(key);
        if (it == m.end()) return "'" + in + "' is not one of: " + names;
        if constexpr (std::is_enum_v<T>) in = std::to_string(static_cast<int>(it->second));
        else in = it->second;
        return "";
      },
      "{" + names + "}");
}

/// The fault options `run` and `sim` share, bound to their one inject::FaultSpec; delay_ms stays
/// negative unless given (the scenario's default).
inline void add_fault_options(CLI::App* sub, inject::FaultSpec& fault, double& delay_ms) {
  std::map<std::string, std::string> names;
  for (const auto& s : inject::catalogue()) names[s.name] = s.name;
  sub->add_option("--scenario", fault.scenario, "fault scenario (see sf-testbed scenarios)")->transform(choice(names));
  sub->add_option("--delay-ms", delay_ms, "injected delay (default: the scenario's)")->check(CLI::Range(0.0, inject::kMaxDelayMs));
  sub->add_option("--target-rank", fault.target_ranks, "affected rank(s) (default: drawn from --seed, hidden until the verdict)")
      ->delimiter(',')->check(whole_from<int>(0));
  sub->add_option("--onset", fault.onset, "first faulty step")->check(whole_from<std::int64_t>(0));
  sub->add_option("--offset", fault.offset, "first healthy step after the onset")->check(whole_from<std::int64_t>(1));
  sub->add_option("--every", fault.every, "periodic spikes: fault every K-th step from the onset")->check(whole_from<int>(1));
}

/// The step's shape, shared by `run` and `sim`: a named cost profile, then every option given
/// explicitly on top of it.
struct StepOptions {
  std::string profile = std::string(sim::kDefaultProfile);
  std::string sync_mode, heterogeneity;  // "" = the profile's
  std::optional<double> jitter, rank_sigma, grad_mib, model_mib, bucket_mib, first_bucket_mib;
  std::optional<double> comm_latency_us, comm_gib_s;
  double cost_scale = 1.0, backward_scale = 1.0;
};
/// `model`: also the options of the model's transport (sim only).
void add_step_options(CLI::App* sub, StepOptions& o, bool model);

/// The profile's costs (× cost_scale, backward × backward_scale), layout, variation and
/// transport, then the explicit options, into a config whose fields are named like
/// sim::WorkloadConfig's (sim::ModelConfig names them alike). Returns "" or one line.
template <typename Config>
std::string apply_step_options(const StepOptions& o, Config& cfg, sim::CommModel* comm) {
  const auto* p = sim::find_profile(o.profile);
  if (!p) return "--profile " + o.profile + ": unknown";
  cfg.profile = p->name;
  cfg.costs = p->costs.scaled(o.cost_scale).backward_scaled(o.backward_scale);
  cfg.layout = p->layout;
  cfg.variation = p->variation;
  if (comm) *comm = p->comm;
  if (!o.sync_mode.empty()) cfg.sync_mode = *sim::sync_mode_from_string(o.sync_mode);
  if (!o.heterogeneity.empty()) cfg.variation.heterogeneity = *sim::heterogeneity_from_string(o.heterogeneity);
  if (o.jitter) cfg.variation.jitter_sigma = *o.jitter;
  if (o.rank_sigma) cfg.variation.rank_sigma = *o.rank_sigma;
  if (o.grad_mib) cfg.layout.grad_mib = *o.grad_mib;
  if (o.model_mib) cfg.layout.model_mib = *o.model_mib;
  if (o.bucket_mib) cfg.layout.bucket_cap_mib = *o.bucket_mib;
  if (o.first_bucket_mib) cfg.layout.first_bucket_mib = *o.first_bucket_mib;
  if (comm && o.comm_latency_us) comm->latency_us = *o.comm_latency_us;
  if (comm && o.comm_gib_s) comm->gib_per_s = *o.comm_gib_s;
  if (cfg.variation.heterogeneity != sim::Heterogeneity::none && !o.rank_sigma && cfg.variation.rank_sigma == 0)
    return "--heterogeneity " + o.heterogeneity + " needs --rank-sigma > 0";
  return "";
}

/// Before MPI_Init only the launcher's environment knows the rank: errors are printed once.
bool is_first_process();


/// Ends a subcommand callback with a non-zero exit code (CLI11 prints nothing for it).
[[noreturn]] inline void exit_with(int code) { throw CLI::RuntimeError(code); }

/// The one line a command-line error gets: the subcommand, what was wrong, the nearest valid
/// option or subcommand where a name was mistyped, and the subcommand's own --help.
std::string failure_line(const CLI::App* app, const CLI::Error& e);

/// The project's git commit baked in at build time.
const char* git_commit();

void setup_score(CLI::App& app);
void setup_verify(CLI::App& app);
void setup_scenarios(CLI::App& app);
void setup_run(CLI::App& app);
void setup_sim(CLI::App& app);
void setup_experiment(CLI::App& app);
void setup_import(CLI::App& app);
void setup_validate(CLI::App& app);

}  // namespace sf::cli
