#include "sf/formats/formats.h"

#include "open_error.h"
#include "strict_json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sf::formats {

using nlohmann::json;
using nlohmann::ordered_json;
using frontier::BaselineRule;
using frontier::Evidence;
using frontier::LabelConfig;

namespace {

ordered_json per_group(const Evidence& e, const std::vector<double>& v) {
  ordered_json o = ordered_json::object();
  for (int g = 0; g < static_cast<int>(v.size()); ++g) o[e.group_name(g)] = v[g];
  return o;
}

/// Inclusive [first, last] rank ranges: a packet's size follows the gaps, not the world (16 M
/// ranks with two records present is one range).
ordered_json rank_ranges(const std::vector<frontier::RankRange>& ranges) {
  ordered_json a = ordered_json::array();
  for (const auto& r : ranges) a.push_back({r.first, r.last});
  return a;
}

ordered_json names(const Evidence& e, const std::vector<int>& groups) {
  ordered_json a = ordered_json::array();
  for (int g : groups) a.push_back(e.group_name(g));
  return a;
}

ordered_json group_or_null(const Evidence& e, int g) { return g >= 0 ? ordered_json(e.group_name(g)) : ordered_json(nullptr); }

/// A number, or null where the engine keeps −1 for "unknown".
ordered_json known(double x) { return x >= 0 ? ordered_json(x) : ordered_json(nullptr); }

ordered_json culprits_json(const Evidence& e) {
  ordered_json a = ordered_json::array();
  for (const auto& c : e.diagnosis.culprits) {
    ordered_json by = ordered_json::object();
    for (int g = 0; g < static_cast<int>(c.by_group_s.size()); ++g) by[e.group_name(g)] = c.by_group_s[g];
    a.push_back({{"rank", c.rank},
                 {"stage", group_or_null(e, c.group)},
                 {"excess_s", c.excess_s},
                 {"floor_s", c.floor_s},
                 {"arrival_s", c.arrival_s},
                 {"cpu_wait_s", c.cpu_wait_s},
                 {"by_stage_s", by}});
  }
  return a;
}

ordered_json standing_json(const frontier::Standing& st) {
  ordered_json ranks = ordered_json::array();
  for (const auto& x : st.ranks)
    ranks.push_back({{"rank", x.rank}, {"mean_s", x.mean_s}, {"sd_s", known(x.sd_s)}, {"steps", x.steps}});
  return {{"median_s", st.median_s}, {"spread_s", st.spread_s}, {"complete", st.complete}, {"waits_off", st.waits_off},
          {"ranks", ranks}};
}

ordered_json deltas_json(const std::vector<frontier::Differential::RankDelta>& v) {
  ordered_json a = ordered_json::array();
  for (const auto& x : v) a.push_back({{"rank", x.rank}, {"delta_s", x.delta_s}, {"floor_s", x.floor_s}});
  return a;
}

ordered_json diagnosis_json(const Evidence& e, const std::vector<RankInfo>& ranks) {
  const auto& d = e.diagnosis;
  ordered_json j = {{"stage", group_or_null(e, d.group)},
                    {"rank", d.rank >= 0 && d.group >= 0 ? ordered_json(d.rank) : ordered_json(nullptr)},
                    {"basis", frontier::to_string(d.basis)},
                    {"rank_basis", d.rank_basis},
                    {"excess_s", d.excess_s},
                    {"share_of_step", d.share_of_step},
                    {"noise_floor_s", d.noise_floor_s},
                    {"surfaces_in", group_or_null(e, d.surfaces_group)},
                    {"reference", d.reference.empty() ? ordered_json(nullptr) : ordered_json(d.reference)},
                    {"coverage", d.coverage},
                    {"confidence", d.confidence},
                    {"common", d.common},
                    {"culprits", culprits_json(e)},
                    {"line", diagnosis_line(e, ranks)}};
  if (!ranks.empty() && d.rank >= 0)
    for (const auto& r : ranks)
      if (r.rank == d.rank) j["host"] = {{"hostname", r.hostname}, {"node_rank", r.node_rank}};
  return j;
}

ordered_json differential_json(const Evidence& e) {
  if (!e.differential) return nullptr;
  const auto& d = *e.differential;
  ordered_json deltas = ordered_json::object();
  for (int g = 0; g < static_cast<int>(d.rank_deltas.size()); ++g) deltas[e.group_name(g)] = deltas_json(d.rank_deltas[g]);
  return {{"reference", d.reference},
          {"reference_steps", d.reference_steps},
          {"reference_step_s", d.reference_step_s},
          {"delta_advance_s", per_group(e, d.delta_advance_s)},
          {"delta_exposed_s", d.delta_exposed_s},
          {"noise_floor_s", per_group(e, d.noise_floor_s)},
          {"exposed_noise_floor_s", d.exposed_noise_floor_s},
          {"needed_reference_steps", d.needed_reference_steps},
          {"cohort_delta_s", per_group(e, d.cohort_delta_s)},
          {"rank_deltas_s", deltas},
          {"arrival_deltas_s", deltas_json(d.arrival_deltas)},
          {"cpu_wait_deltas_s", deltas_json(d.cpu_wait_deltas)},
          {"erratic_log_variance_ratio", deltas_json(d.erratic)}};
}

/// The what-if's collective costs: stage -> seconds or null; null when the what-if has none.
ordered_json collective_json(const Evidence& e, const std::vector<std::optional<double>>& c) {
  if (c.empty()) return nullptr;
  ordered_json o = ordered_json::object();
  for (int g = 0; g < static_cast<int>(c.size()); ++g)
    o[e.group_name(g)] = c[static_cast<std::size_t>(g)] ? ordered_json(*c[static_cast<std::size_t>(g)]) : ordered_json(nullptr);
  return o;
}

ordered_json whatif_json(const Evidence& e, const std::vector<RankInfo>& ranks) {
  const auto& w = e.whatif;
  ordered_json fixes = ordered_json::array();
  for (const auto& f : w.fixes)
    fixes.push_back({{"rank", f.rank},
                     {"stage", group_or_null(e, f.group)},
                     {"healed_s", f.healed_s},
                     {"gain_s", f.gain_s},
                     {"gain_share", w.actual_s > 0 ? f.gain_s / w.actual_s : 0.0},
                     {"excluded_s", f.excluded_s},
                     {"rebalance_share", f.rebalance_share},
                     {"rebalanced_s", f.rebalanced_s}});
  return {{"available", w.available},
          {"why_not", w.available ? ordered_json(nullptr) : ordered_json(w.why_not)},
          {"steps", w.steps},
          {"actual_s", w.actual_s},
          {"ideal_s", w.ideal_s},
          {"slowdown", w.slowdown},
          {"wasted", w.wasted},
          {"floor_s", w.floor_s},
          {"fixes", fixes},
          {"all_healed_s", w.all_healed_s},
          {"collective_s", collective_json(e, w.collective_s)},
          {"gains", w.gains()},
          {"line", whatif_line(e, ranks)}};
}

}  // namespace

ordered_json config_to_json(const LabelConfig& c) {
  ordered_json j;
  j["max_closure_residual_share"] = c.max_closure_residual_share;
  j["max_overlap_error_share"] = c.max_overlap_error_share;
  j["max_missing_ranks"] = c.max_missing_ranks;
  j["min_event_ready_ratio"] = c.min_event_ready_ratio;
  j["min_event_samples"] = c.min_event_samples;
  j["gamma_a"] = c.gamma_a;
  j["gamma_g"] = c.gamma_g;
  j["eta_a"] = c.eta_a;
  j["eta_g"] = c.eta_g;
  j["eta_q"] = c.eta_q;
  j["gamma_elig"] = c.gamma_elig;
  j["gamma_switch"] = c.gamma_switch;
  j["tau_c"] = c.tau_c;
  j["share_floor_s"] = c.share_floor_s;
  j["gamma_event"] = c.gamma_event;
  j["event_low_ratio"] = c.event_low_ratio;
  j["gain_baseline"] = frontier::to_string(c.gain_baseline);
  j["reference_s"] = c.reference_s;
  j["wait_model"] = c.wait_model;
  j["event_scope_limited"] = c.event_scope_limited;
  j["ambiguity_residual_leaders"] = c.ambiguity_residual_leaders;
  j["co_critical_needs_two_stages"] = c.co_critical_needs_two_stages;
  j["require_wall"] = c.require_wall;
  j["forward_group"] = c.forward_group;
  j["tie_abs_s"] = c.account.tie_abs_s;
  j["tie_rel"] = c.account.tie_rel;
  j["diagnosis_z"] = c.diagnosis.z;
  j["diagnosis_min_effect"] = c.diagnosis.min_effect;
  j["diagnosis_drift"] = c.diagnosis.drift;
  j["diagnosis_cohort_min_effect"] = c.diagnosis.cohort_min_effect;
  j["diagnosis_cohort_min_s"] = c.diagnosis.cohort_min_s;
  return j;
}

void apply_config_json(const json& j, LabelConfig& c, const std::string& file) {
  if (!j.is_object()) throw FormatError(file, 0, "labeler config must be a JSON object");
  for (const auto& item : j.items()) {
    // Named, not structured, bindings: lambdas may capture them in every compiler (clang 14 too).
    const std::string& key = item.key();
    const json& v = item.value();
    auto num = [&](double& dst, double lo, double hi) {
      if (!v.is_number()) throw FormatError(file, 0, "config \"" + key + "\" must be a number");
      const double x = v.get<double>();
      if (!(x >= lo && x <= hi))
        throw FormatError(file, 0, "config \"" + key + "\" is " + v.dump() + ", expected a number in [" + json(lo).dump() +
                                       ", " + json(hi).dump() + "]");
      dst = x;
    };
    auto share = [&](double& dst) { num(dst, 0.0, 1.0); };
    auto seconds = [&](double& dst) { num(dst, 0.0, frontier::kMaxWindowSeconds); };
    auto integer = [&](int& dst) {
      constexpr int kMax = std::numeric_limits<int>::max();
      auto out_of_range = [&] {
        return FormatError(file, 0, "config \"" + key + "\" is " + v.dump() + ", expected an integer in [0, " +
                                        std::to_string(kMax) + "]");
      };
      if (v.is_number_float()) {
        // A value written as a float (1e3, 5.0) is that integer when it is one exactly and in range.
        // (parse_config_text already stores exact integer literals as integers; this is for a
        // caller's own JSON.)
        const double x = v.get<double>();
        if (x != std::floor(x))
          throw FormatError(file, 0, "config \"" + key + "\" is " + v.dump() + ", not a whole number; expected an integer");
        if (!(x >= 0 && x <= kMax)) throw out_of_range();
        dst = static_cast<int>(x);
        return;
      }
      if (!v.is_number_integer()) throw FormatError(file, 0, "config \"" + key + "\" must be an integer");
      if (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(kMax)
                                 : (v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > kMax))
        throw out_of_range();
      dst = static_cast<int>(v.get<std::int64_t>());
    };
    auto flag = [&](bool& dst) {
      if (!v.is_boolean()) throw FormatError(file, 0, "config \"" + key + "\" must be true or false");
      dst = v.get<bool>();
    };
    auto name = [&](std::string& dst) {
      if (!v.is_string() || !frontier::printable_utf8(v.get<std::string>()))
        throw FormatError(file, 0, "config \"" + key + "\" must be a stage name (printable text)");
      dst = v.get<std::string>();
    };
    if (key == "max_closure_residual_share") share(c.max_closure_residual_share);
    else if (key == "max_overlap_error_share") share(c.max_overlap_error_share);
    else if (key == "max_missing_ranks") integer(c.max_missing_ranks);
    else if (key == "min_event_ready_ratio") share(c.min_event_ready_ratio);
    else if (key == "min_event_samples") integer(c.min_event_samples);
    else if (key == "gamma_a") share(c.gamma_a);
    else if (key == "gamma_g") share(c.gamma_g);
    else if (key == "eta_a") share(c.eta_a);
    else if (key == "eta_g") share(c.eta_g);
    else if (key == "eta_q") share(c.eta_q);
    else if (key == "gamma_elig") share(c.gamma_elig);
    else if (key == "gamma_switch") share(c.gamma_switch);
    else if (key == "tau_c") num(c.tau_c, 0.01, 1.0);
    else if (key == "share_floor_s") seconds(c.share_floor_s);
    else if (key == "gamma_event") num(c.gamma_event, 0.0, 1e6);
    else if (key == "event_low_ratio") num(c.event_low_ratio, 0.0, 1e6);
    else if (key == "tie_abs_s") seconds(c.account.tie_abs_s);
    else if (key == "tie_rel") share(c.account.tie_rel);
    else if (key == "diagnosis_z") num(c.diagnosis.z, 0.0, 1e6);
    else if (key == "diagnosis_min_effect") share(c.diagnosis.min_effect);
    else if (key == "diagnosis_drift") share(c.diagnosis.drift);
    else if (key == "diagnosis_cohort_min_effect") share(c.diagnosis.cohort_min_effect);
    else if (key == "diagnosis_cohort_min_s") seconds(c.diagnosis.cohort_min_s);
    else if (key == "gain_baseline") {
      const auto b = v.is_string() ? frontier::gain_baseline_from_string(v.get<std::string>()) : std::nullopt;
      if (!b) throw FormatError(file, 0, "config \"gain_baseline\" must be rank_median, cohort_median or reference");
      c.gain_baseline = *b;
    } else if (key == "reference_s") {
      if (!v.is_array()) throw FormatError(file, 0, "config \"reference_s\" must be an array of seconds per stage group");
      std::vector<double> ref;
      for (const auto& x : v) {
        const std::string entry = "config \"reference_s\" entry " + std::to_string(ref.size());
        if (!x.is_number()) throw FormatError(file, 0, entry + " is " + x.dump() + ", expected a number of seconds");
        if (x.get<double>() < 0) throw FormatError(file, 0, entry + " is " + x.dump() + ", expected seconds >= 0");
        if (x.get<double>() > frontier::kMaxWindowSeconds)
          throw FormatError(file, 0, entry + " is " + x.dump() + ", above the largest window time; expected seconds <= " +
                                         json(frontier::kMaxWindowSeconds).dump());
        ref.push_back(x.get<double>() + 0.0);
      }
      c.reference_s = std::move(ref);
    } else if (key == "wait_model") {
      if (!v.is_array()) throw FormatError(file, 0, "config \"wait_model\" must be an array of stage names");
      std::vector<std::string> names;
      for (const auto& x : v) {
        if (!x.is_string() || !frontier::printable_utf8(x.get<std::string>()))
          throw FormatError(file, 0, "config \"wait_model\" entries must be stage names (printable text)");
        names.push_back(x.get<std::string>());
      }
      c.wait_model = std::move(names);
    } else if (key == "event_scope_limited") {
      flag(c.event_scope_limited);
    } else if (key == "ambiguity_residual_leaders") {
      flag(c.ambiguity_residual_leaders);
    } else if (key == "co_critical_needs_two_stages") {
      flag(c.co_critical_needs_two_stages);
    } else if (key == "require_wall") {
      flag(c.require_wall);
    } else if (key == "forward_group") {
      name(c.forward_group);
    } else {
      throw FormatError(file, 0, "unknown config key " + detail::quoted_key(key) + "; expected one of the keys in docs/labeler.md");
    }
  }
}

LabelConfig parse_config_text(std::string_view text, const std::string& name, LabelConfig base) {
  if (text.size() > kMaxConfigBytes)
    throw FormatError(name, 0, "config is " + std::to_string(text.size()) + " bytes; expected a JSON object of gates (at most " +
                                   std::to_string(kMaxConfigBytes) + " bytes)");
  json j;
  if (detail::StrictJsonParser parser; !parser.parse(text, j)) {
    const auto& p = parser.problem();
    if (p.kind == detail::JsonProblem::syntax)
      throw FormatError(name, 0, "not valid JSON at byte " + std::to_string(p.byte) + "; expected a JSON object of gates");
    // 1e309 (past the double range), -1e-400 (a negative below any gate's range), a key twice.
    throw FormatError(name, 0, p.describe() + "; expected a JSON object of gates, each key once, with finite numbers >= 0");
  }
  apply_config_json(j, base, name);
  return base;
}

LabelConfig read_config_file(const std::string& path, LabelConfig base) {
  return parse_config_text(detail::read_capped(path, kMaxConfigBytes, "config file"), path, std::move(base));
}

ordered_json evidence_to_json(const Evidence& e, const std::vector<RankInfo>& ranks) {
  ordered_json j;
  j["schema"] = Evidence::kSchema;
  j["stages"] = e.schema.groups();
  j["ordered_stages"] = e.schema.names();
  j["stage_order_hash"] = e.schema.order_hash_hex();
  j["accumulation"] = e.schema.accumulation();
  j["window"] = {{"first_step", e.first_step}, {"last_step", e.last_step}, {"steps", e.steps},
                 {"world_size", e.world_size}, {"missing_steps", e.missing_steps}};
  if (!ranks.empty()) {
    auto& arr = j["ranks"] = ordered_json::array();
    for (const auto& r : ranks)
      arr.push_back({{"rank", r.rank}, {"local_rank", r.local_rank}, {"node_rank", r.node_rank}, {"hostname", r.hostname}});
  }
  j["diagnosis"] = diagnosis_json(e, ranks);
  j["differential"] = differential_json(e);
  j["whatif"] = whatif_json(e, ranks);
  j["exposed_makespan_s"] = e.exposed_makespan_s;
  j["per_stage_max_s"] = e.per_stage_max_s;
  j["per_stage_avg_s"] = e.per_stage_avg_s;
  j["median_step_s"] = e.median_step_s;
  if (!e.medians_exact) j["medians_exact"] = false;  // binned past RunConfig::exact_median_steps
  j["advances_s"] = per_group(e, e.advances_s);
  j["shares"] = e.shares_valid ? per_group(e, e.shares) : ordered_json(nullptr);
  j["static_gain"] = per_group(e, e.static_gain);
  ordered_json robust = ordered_json::object();
  for (int g = 0; g < static_cast<int>(e.advance_robust_sd_s.size()); ++g) robust[e.group_name(g)] = known(e.advance_robust_sd_s[g]);
  j["step_spread"] = {{"advance_sd_s", per_group(e, e.advance_sd_s)},
                      {"exposed_sd_s", e.exposed_sd_s},
                      {"advance_robust_sd_s", robust},
                      {"exposed_robust_sd_s", known(e.exposed_robust_sd_s)}};
  j["gain_baseline"] = frontier::to_string(e.gain_baseline);
  j["routing_set"] = names(e, e.routing_set);
  j["routing_set_size"] = e.routing_set.size();
  j["co_critical_stages"] = names(e, e.co_critical_stages);
  auto& labels = j["labels"] = ordered_json::array();
  for (auto l : e.labels) labels.push_back(frontier::to_string(l));
  auto& leaders = j["leaders"] = ordered_json::object();
  for (int g = 0; g < static_cast<int>(e.leaders.size()); ++g) {
    auto& arr = leaders[e.group_name(g)] = ordered_json::array();
    for (const auto& c : e.leaders[g]) arr.push_back({{"rank", c.rank}, {"advance_s", c.advance_s}, {"steps_led", c.steps_led}});
  }
  // A named rank's host, when the ranks' identities are known: on a cluster the host (its NIC,
  // its GPUs) is what an operator drains, not the rank number.
  const auto host_of = [&](int rank) {
    for (const auto& r : ranks)
      if (r.rank == rank) return ordered_json{{"hostname", r.hostname}, {"node_rank", r.node_rank}};
    return ordered_json(nullptr);
  };
  j["suspect"] = {{"stage", e.suspect.group >= 0 ? ordered_json(e.group_name(e.suspect.group)) : ordered_json(nullptr)},
                  {"rank", e.suspect.rank >= 0 ? ordered_json(e.suspect.rank) : ordered_json(nullptr)},
                  {"basis", e.suspect.basis},
                  {"confidence", e.suspect.confidence}};
  if (!ranks.empty()) j["suspect"]["host"] = host_of(e.suspect.rank);
  auto& sus = j["stage_suspects"] = ordered_json::object();
  for (const auto& x : e.stage_suspects) {
    auto& s = sus[e.group_name(x.group)] = {{"rank", x.rank >= 0 ? ordered_json(x.rank) : ordered_json(nullptr)},
                                            {"basis", x.basis},
                                            {"confidence", x.confidence}};
    if (!ranks.empty()) s["host"] = host_of(x.rank);
  }
  auto& lag = j["lag"] = ordered_json::object();
  for (int g = 0; g < e.schema.group_count(); ++g)
    lag[e.group_name(g)] = {{"lag_mean_s", e.lag_mean_s[g]},
                            {"lag_increment_mean_s", e.lag_increment_mean_s[g]},
                            {"lag_increment_sd_s", g < static_cast<int>(e.lag_increment_sd_s.size()) ? e.lag_increment_sd_s[g] : 0.0},
                            {"gap_mean_s", e.gap_mean_s[g]},
                            {"confident_leaders", e.confident_leaders[g]},
                            {"leader_switches", e.leader_switches[g]}};
  j["wait_stages"] = names(e, e.wait_groups);
  auto& cohort = j["cohort"] = ordered_json::object();
  for (int g = 0; g < static_cast<int>(e.rank_excess.size()); ++g) {
    auto& c = cohort[e.group_name(g)] = {{"own_median_s", e.cohort_own_median_s[g]},
                                         {"own_spread_s", e.cohort_own_spread_s[g]},
                                         {"ranks", ordered_json::array()}};
    for (const auto& x : e.rank_excess[g])
      c["ranks"].push_back({{"rank", x.rank}, {"own_mean_s", x.own_mean_s}, {"excess_s", x.excess_s}});
  }
  if (!e.standing.empty()) {
    auto& st = j["standing"] = {{"stages", ordered_json::object()}};
    const int G = static_cast<int>(e.standing.size()) - 1;
    for (int g = 0; g < G; ++g) st["stages"][e.group_name(g)] = standing_json(e.standing[g]);
    st["step"] = standing_json(e.standing[G]);
    st["cpu_wait"] = e.cpu_wait.ranks.empty() ? ordered_json(nullptr) : standing_json(e.cpu_wait);
  } else {
    j["standing"] = nullptr;
  }
  auto& base = j["baselines"] = ordered_json::object();
  for (auto rule : frontier::kBaselineRules) {
    const auto& rs = e.baselines[rule];
    base[std::string(frontier::to_string(rule))] = {
        {"ranked", names(e, rs.order)}, {"candidates", names(e, rs.candidates)}, {"score_s", per_group(e, rs.score)}};
  }
  j["events"] = {{"sampled", e.events.sampled},
                 {"ready", e.events.ready},
                 {"missing", e.events.missing},
                 {"ready_ratio", e.events.ready_ratio},
                 {"max_rank", e.events.max_rank >= 0 ? ordered_json(e.events.max_rank) : ordered_json(nullptr)},
                 {"max_rank_median_s", e.events.max_rank_median_s},
                 {"cohort_median_s", e.events.cohort_median_s}};
  j["telemetry"] = {{"closure_residual_share", e.has_wall ? ordered_json(e.closure_residual_share) : ordered_json(nullptr)},
                    {"overlap_error_share", e.has_wall ? ordered_json(e.overlap_error_share) : ordered_json(nullptr)},
                    {"missing_ranks", rank_ranges(e.missing_ranks)},
                    {"missing_rank_count", e.missing_rank_count},
                    {"missing_records", e.missing_records},
                    {"gather_ok", e.gather_ok},
                    {"dropped_records", e.dropped_records},
                    {"duplicate_records", e.duplicate_records}};
  j["downgrade_reasons"] = e.downgrade_reasons;
  j["config"] = config_to_json(e.config);
  return j;
}

ordered_json diagnosis_to_json(const Evidence& e, const std::vector<RankInfo>& ranks) { return diagnosis_json(e, ranks); }

void write_file_atomic(const std::string& path, std::string_view content) {
  // A path that names something other than a regular file (/dev/null, a FIFO, a terminal) is
  // written in place: renaming a temporary file onto it would replace the device (as root, it
  // would replace /dev/null with a regular file).
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw std::runtime_error("cannot write " + path + ": it is a directory");
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    const bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size() && std::fflush(f) == 0;
    const int err = errno;
    std::fclose(f);
    if (!ok) throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
    return;
  }
  // The temporary is created beside the target with an unpredictable name and O_EXCL (mkstemp):
  // a name another user guessed, or a symlink planted under it, is never opened, so nothing else
  // is truncated or overwritten on the way (issue 40, S2).
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw std::runtime_error("cannot create a temporary file beside " + path + ": " + std::strerror(errno));
  ::fchmod(fd, 0644);  // mkstemp's 0600 would follow the file through the rename
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    const int e = errno;
    ::close(fd);
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot open " + tmp + ": " + std::strerror(e));
  }
  const bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size() && std::fflush(f) == 0 &&
                  ::fsync(::fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e2 = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(e2));
  }
}

}  // namespace sf::formats
