// Shared pieces of the sf-testbed subcommands: labeler options and exit handling.
#pragma once

#include "sf/formats/formats.h"
#include "sf/frontier/frontier.h"
#include "sf/inject/inject.h"

#include <CLI/CLI.hpp>

#include <cctype>
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

/// The fault options `run` and `sim` share, bound to either's config (RunConfig and ModelConfig
/// name these fields alike); delay_ms stays negative unless given (the scenario's default).
template <typename Config>
void add_fault_options(CLI::App* sub, Config& cfg, double& delay_ms) {
  std::map<std::string, std::string> names;
  for (const auto& s : inject::catalogue()) names[s.name] = s.name;
  sub->add_option("--scenario", cfg.scenario, "fault scenario (see sf-testbed scenarios)")->transform(choice(names));
  sub->add_option("--delay-ms", delay_ms, "injected delay (default: the scenario's)")->check(CLI::Range(0.0, 600000.0));
  sub->add_option("--target-rank", cfg.target_ranks, "affected rank(s) (default: drawn from --seed, hidden until the verdict)")
      ->delimiter(',')->check(CLI::NonNegativeNumber);
  sub->add_option("--onset", cfg.onset, "first faulty step")->check(CLI::NonNegativeNumber);
  sub->add_option("--offset", cfg.offset, "first healthy step after the onset")->check(CLI::PositiveNumber);
  sub->add_option("--every", cfg.every, "periodic spikes: fault every K-th step from the onset")->check(CLI::PositiveNumber);
}

/// Before MPI_Init only the launcher's environment knows the rank: errors are printed once.
bool is_first_process();

/// Ends a subcommand callback with a non-zero exit code (CLI11 prints nothing for it).
[[noreturn]] inline void exit_with(int code) { throw CLI::RuntimeError(code); }

/// The project's git commit baked in at build time.
const char* git_commit();

void setup_score(CLI::App& app);
void setup_verify(CLI::App& app);
void setup_scenarios(CLI::App& app);
void setup_run(CLI::App& app);
void setup_sim(CLI::App& app);
void setup_experiment(CLI::App& app);
void setup_validate(CLI::App& app);

}  // namespace sf::cli
