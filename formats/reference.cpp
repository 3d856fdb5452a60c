// References for the diagnosis (docs/diagnosis.md): a healthy run's dump, scored here, or one of
// its evidence packets, whose per-step means and spreads are all a reference needs.
#include "sf/formats/formats.h"

#include "open_error.h"
#include "strict_json.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

namespace sf::formats {

using nlohmann::json;

namespace {

/// The packet's stage map `key` as one value per group, in `groups` order.
std::vector<double> per_group(const json& p, const char* key, const std::vector<std::string>& groups, const std::string& name,
                              bool required) {
  std::vector<double> out(groups.size(), 0.0);
  const json* obj = &p;
  for (const char* part = key;;) {
    const char* dot = std::strchr(part, '.');
    const std::string k = dot ? std::string(part, dot) : std::string(part);
    if (!obj->is_object() || !obj->contains(k)) {
      if (!required) return out;
      throw FormatError(name, 0, std::string("evidence packet has no \"") + key + "\"; expected an sf.evidence packet");
    }
    obj = &(*obj)[k];
    if (!dot) break;
    part = dot + 1;
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto it = obj->find(groups[g]);
    if (it == obj->end() || !it->is_number() || !(it->get<double>() >= 0) || !(it->get<double>() <= frontier::kMaxWindowSeconds))
      throw FormatError(name, 0, std::string("evidence packet's \"") + key + "\" has no seconds >= 0 for stage " + groups[g]);
    out[g] = it->get<double>();
  }
  return out;
}

double number(const json& p, const char* key, const std::string& name, double lo, double hi) {
  const auto it = p.find(key);
  if (it == p.end() || !it->is_number() || !(it->get<double>() >= lo) || !(it->get<double>() <= hi))
    throw FormatError(name, 0, std::string("evidence packet's \"") + key + "\" is missing or out of range; expected a number in [" +
                                   json(lo).dump() + ", " + json(hi).dump() + "]");
  return it->get<double>();
}

}  // namespace

frontier::Reference reference_from_packet(const json& p, const std::string& name) {
  // A reference file (sf.reference/1) names itself and holds the packet it was made from.
  if (p.is_object() && p.contains("schema") && p["schema"] == kReferenceSchema) {
    if (!p.contains("name") || !p["name"].is_string() || !frontier::printable_utf8(p["name"].get<std::string>()))
      throw FormatError(name, 0, "reference file has no \"name\" (printable text)");
    if (!p.contains("evidence")) throw FormatError(name, 0, "reference file has no \"evidence\" packet");
    auto r = reference_from_packet(p["evidence"], name);
    r.name = p["name"].get<std::string>();
    return r;
  }
  if (!p.is_object() || !p.contains("schema") || !p["schema"].is_string())
    throw FormatError(name, 0, "not an evidence packet (no \"schema\"); expected an sf.evidence packet or a stage-matrix dump");
  const std::string schema = p["schema"].get<std::string>();
  const bool v3 = schema == frontier::Evidence::kSchema;
  if (!v3 && schema != "sf.evidence/2")
    throw FormatError(name, 0, "packet schema \"" + schema + "\"; expected " + std::string(frontier::Evidence::kSchema) +
                                   " or sf.evidence/2");
  frontier::Reference r;
  r.name = name;
  if (!p.contains("stages") || !p["stages"].is_array())
    throw FormatError(name, 0, "evidence packet has no \"stages\" list");
  for (const auto& g : p["stages"]) {
    if (!g.is_string()) throw FormatError(name, 0, "evidence packet's \"stages\" must be names");
    r.groups.push_back(g.get<std::string>());
  }
  if (!p.contains("window") || !p["window"].is_object()) throw FormatError(name, 0, "evidence packet has no \"window\"");
  r.steps = static_cast<int>(number(p["window"], "steps", name, 0, 1e9));
  r.world_size = static_cast<int>(number(p["window"], "world_size", name, 1, kWorldSizeCeiling));
  const auto adv = per_group(p, "advances_s", r.groups, name, true);
  const double exposed = number(p, "exposed_makespan_s", name, 0, frontier::kMaxWindowSeconds);
  r.advance_mean_s.resize(adv.size());
  for (std::size_t g = 0; g < adv.size(); ++g) r.advance_mean_s[g] = r.steps > 0 ? adv[g] / r.steps : 0.0;
  r.exposed_mean_s = r.steps > 0 ? exposed / r.steps : 0.0;
  r.advance_sd_s = per_group(p, "step_spread.advance_sd_s", r.groups, name, v3);
  if (v3) r.exposed_sd_s = number(p["step_spread"], "exposed_sd_s", name, 0, frontier::kMaxWindowSeconds);
  if (p.contains("cohort") && p["cohort"].is_object()) {
    r.rank_excess.assign(r.groups.size(), {});
    r.cohort_own_median_s.assign(r.groups.size(), 0.0);
    for (std::size_t g = 0; g < r.groups.size(); ++g) {
      const auto it = p["cohort"].find(r.groups[g]);
      if (it == p["cohort"].end() || !it->is_object()) continue;
      if (it->contains("own_median_s") && (*it)["own_median_s"].is_number())
        r.cohort_own_median_s[g] = (*it)["own_median_s"].get<double>();
      if (it->contains("ranks") && (*it)["ranks"].is_array())
        for (const auto& x : (*it)["ranks"])
          if (x.is_object() && x.contains("rank") && x["rank"].is_number_integer() && x.contains("own_mean_s") &&
              x["own_mean_s"].is_number())
            r.rank_excess[g].push_back({x["rank"].get<int>(), x["own_mean_s"].get<double>(), 0.0});
    }
  }
  return r;
}

nlohmann::ordered_json reference_to_json(const frontier::Evidence& e, const std::string& name) {
  nlohmann::ordered_json j;
  j["schema"] = kReferenceSchema;
  j["name"] = name;
  j["evidence"] = evidence_to_json(e);
  return j;
}

frontier::Reference read_reference(const std::string& path, const frontier::LabelConfig& cfg) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw FormatError(path, 0, "the reference " + detail::open_error(path) + "; expected a healthy run's dump or packet");
  std::string first;
  std::getline(in, first);
  // A packet is one JSON object with "schema": "sf.evidence/..." on its first line; a dump's
  // first line is an sf.stages/1 header (or a CSV header).
  if (first.find("\"sf.evidence/") != std::string::npos || first.find("\"sf.reference/") != std::string::npos) {
    json p;
    if (detail::StrictJsonParser parser; !parser.parse(first, p))
      throw FormatError(path, 1, "not a valid evidence packet (JSON) on its first line");
    return reference_from_packet(p, path);
  }
  auto windows = read_stage_file(path);
  if (windows.empty()) throw FormatError(path, 0, "the reference holds no window");
  // Several windows of one run (a dump of `run --window`) are one reference: score each and pool
  // them as the steps they are (means weighted by steps; spreads pooled within windows).
  if (windows.size() == 1) return frontier::make_reference(frontier::evaluate(windows[0].matrix, cfg, windows[0].telemetry), path);
  std::vector<frontier::Evidence> parts;
  for (const auto& w : windows) parts.push_back(frontier::evaluate(w.matrix, cfg, w.telemetry));
  frontier::Reference r = frontier::make_reference(parts.front(), path);
  for (std::size_t i = 1; i < parts.size(); ++i)
    if (parts[i].schema.groups() != r.groups)
      throw FormatError(path, windows[i].header_line, "the reference's windows have different stages");
  const auto G = r.groups.size();
  std::vector<double> adv(G, 0.0), ss(G, 0.0);
  double exposed = 0, exposed_ss = 0;
  int steps = 0;
  for (const auto& e : parts) {
    steps += e.steps;
    exposed += e.exposed_makespan_s;
    exposed_ss += e.exposed_sd_s * e.exposed_sd_s * std::max(0, e.steps - 1);
    for (std::size_t g = 0; g < G; ++g) {
      adv[g] += e.advances_s[g];
      ss[g] += e.advance_sd_s[g] * e.advance_sd_s[g] * std::max(0, e.steps - 1);
    }
  }
  r.steps = steps;
  const int dof = std::max(1, steps - static_cast<int>(parts.size()));
  for (std::size_t g = 0; g < G; ++g) {
    r.advance_mean_s[g] = steps > 0 ? adv[g] / steps : 0.0;
    r.advance_sd_s[g] = std::sqrt(ss[g] / dof);
  }
  r.exposed_mean_s = steps > 0 ? exposed / steps : 0.0;
  r.exposed_sd_s = std::sqrt(exposed_ss / dof);
  return r;
}

}  // namespace sf::formats
