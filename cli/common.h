// Shared pieces of the sf-testbed subcommands: labeler options and exit handling.
#pragma once

#include "formats/formats.h"
#include "frontier/frontier.h"

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

}  // namespace sf::cli
