// References for the diagnosis (docs/diagnosis.md): a healthy run's dump, scored here, or one of
// its evidence packets, whose per-step means and spreads are all a reference needs.
#include "sf/formats/formats.h"

#include "open_error.h"
#include "stage_text.h"
#include "strict_json.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

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

/// A seconds value or null (unknown: −1); anything else is refused.
double known_seconds(const json& obj, const char* key, const std::string& name) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return -1.0;
  if (!it->is_number() || !(it->get<double>() >= 0) || !(it->get<double>() <= frontier::kMaxWindowSeconds))
    throw FormatError(name, 0, std::string("evidence packet's \"") + key + "\" is not seconds >= 0 or null");
  return it->get<double>();
}

std::vector<double> robust_per_group(const json& obj, const char* key, const std::vector<std::string>& groups,
                                     const std::string& name) {
  std::vector<double> out(groups.size(), -1.0);
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_object()) return out;
  for (std::size_t g = 0; g < groups.size(); ++g) out[g] = known_seconds(*it, groups[g].c_str(), name);
  return out;
}

frontier::Standing one_standing(const json& j, const std::string& name) {
  frontier::Standing st;
  if (!j.is_object()) throw FormatError(name, 0, "evidence packet's \"standing\" entry is not an object");
  const double lim = frontier::kMaxWindowSeconds;
  st.median_s = number(j, "median_s", name, -lim, lim);
  st.spread_s = number(j, "spread_s", name, 0, lim);
  st.complete = j.contains("complete") && j["complete"].is_boolean() && j["complete"].get<bool>();
  st.waits_off = j.contains("waits_off") && j["waits_off"].is_boolean() && j["waits_off"].get<bool>();
  if (!j.contains("ranks") || !j["ranks"].is_array()) throw FormatError(name, 0, "evidence packet's standing has no \"ranks\" list");
  for (const auto& x : j["ranks"]) {
    if (!x.is_object() || !x.contains("rank") || !x["rank"].is_number_integer())
      throw FormatError(name, 0, "evidence packet's standing lists a rank without an integer \"rank\"");
    frontier::RankStanding rs;
    rs.rank = x["rank"].get<int>();
    rs.mean_s = number(x, "mean_s", name, -lim, lim);
    rs.sd_s = known_seconds(x, "sd_s", name);
    rs.steps = static_cast<int>(number(x, "steps", name, 0, 1e9));
    st.ranks.push_back(rs);
  }
  return st;
}

/// The packet's standings (per group, then the whole step), or none when it has none.
std::vector<frontier::Standing> standing_from(const json& p, const std::vector<std::string>& groups, const std::string& name) {
  std::vector<frontier::Standing> out;
  const auto it = p.find("standing");
  if (it == p.end() || it->is_null()) return out;
  if (!it->is_object() || !it->contains("stages") || !(*it)["stages"].is_object() || !it->contains("step"))
    throw FormatError(name, 0, "evidence packet's \"standing\" has no \"stages\" and \"step\"");
  for (const auto& g : groups) {
    const auto s = (*it)["stages"].find(g);
    if (s == (*it)["stages"].end()) throw FormatError(name, 0, "evidence packet's standing has no stage " + g);
    out.push_back(one_standing(*s, name));
  }
  out.push_back(one_standing((*it)["step"], name));
  return out;
}

/// The packet's `whatif.collective_s` (sf.evidence/6): per group, seconds or unknown; empty where
/// the packet has none (null: its what-if was not available; an earlier schema).
std::vector<std::optional<double>> collective_from(const json& p, const std::vector<std::string>& groups,
                                                   const std::string& name) {
  const auto w = p.find("whatif");
  if (w == p.end() || !w->is_object()) return {};
  const auto c = w->find("collective_s");
  if (c == w->end() || c->is_null()) return {};
  if (!c->is_object())
    throw FormatError(name, 0, "evidence packet's \"whatif.collective_s\" is not an object; expected stage -> seconds or null");
  std::vector<std::optional<double>> out(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto it = c->find(groups[g]);
    if (it == c->end() || it->is_null()) continue;
    if (!it->is_number() || !(it->get<double>() >= 0) || !(it->get<double>() <= frontier::kMaxWindowSeconds))
      throw FormatError(name, 0, "evidence packet's \"whatif.collective_s\" for stage " + groups[g] +
                                     " is not seconds >= 0 or null");
    out[g] = it->get<double>();
  }
  return out;
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
  // /5 adds the what-if, of which a reference reads only the collectives' costs (/6): a /5 packet
  // is a /4 one here.
  const bool v6 = schema == frontier::Evidence::kSchema;
  const bool v4 = v6 || schema == "sf.evidence/5" || schema == "sf.evidence/4";
  const bool v3 = v4 || schema == "sf.evidence/3";
  if (!v3 && schema != "sf.evidence/2")
    throw FormatError(name, 0, "packet schema \"" + schema + "\"; expected " + std::string(frontier::Evidence::kSchema) +
                                   ", sf.evidence/5, sf.evidence/4, sf.evidence/3 or sf.evidence/2");
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
  if (v4) {
    r.advance_robust_sd_s = robust_per_group(p["step_spread"], "advance_robust_sd_s", r.groups, name);
    r.exposed_robust_sd_s = known_seconds(p["step_spread"], "exposed_robust_sd_s", name);
    r.standing = standing_from(p, r.groups, name);
    if (const auto st = p.find("standing"); st != p.end() && st->is_object() && st->contains("cpu_wait") &&
                                             !(*st)["cpu_wait"].is_null())
      r.cpu_wait = one_standing((*st)["cpu_wait"], name);
  }
  if (v6) r.collective_s = collective_from(p, r.groups, name);
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

namespace {

/// One standing list of several windows of one run as one: per rank, the mean over its steps in
/// all of them and the SD of those steps (within-window spread plus the spread of the windows'
/// means).
template <typename Pick>
frontier::Standing pool_one(Pick pick, const std::vector<frontier::Evidence>& parts) {
  struct Acc { double n = 0, sum = 0, ss = 0; };  // steps, Σ x, Σ (n_i − 1) s_i² + n_i m_i²
  std::map<int, Acc> acc;
  double median = 0, spread = 0, weight = 0;
  bool complete = true, waits_off = true;
  for (const auto& e : parts) {
    const frontier::Standing& st = pick(e);
    complete = complete && st.complete;
    waits_off = waits_off && st.waits_off;
    median += st.median_s * e.steps;
    spread += st.spread_s * e.steps;
    weight += e.steps;
    for (const auto& x : st.ranks) {
      Acc& a = acc[x.rank];
      a.n += x.steps;
      a.sum += x.mean_s * x.steps;
      a.ss += std::max(0.0, x.sd_s) * std::max(0.0, x.sd_s) * std::max(0, x.steps - 1) + x.steps * x.mean_s * x.mean_s;
    }
  }
  frontier::Standing st;
  st.median_s = weight > 0 ? median / weight : 0.0;
  st.spread_s = weight > 0 ? spread / weight : 0.0;
  st.complete = complete;
  st.waits_off = waits_off;
  for (const auto& [rank, a] : acc) {
    frontier::RankStanding rs{rank, a.n > 0 ? a.sum / a.n : 0.0, -1.0, static_cast<int>(a.n)};
    if (a.n >= 2) rs.sd_s = std::sqrt(std::max(0.0, (a.ss - a.n * rs.mean_s * rs.mean_s) / (a.n - 1)));
    st.ranks.push_back(rs);
  }
  std::stable_sort(st.ranks.begin(), st.ranks.end(), [](const auto& a, const auto& b) { return a.mean_s > b.mean_s; });
  return st;
}

std::vector<frontier::Standing> pool_standing(const std::vector<frontier::Evidence>& parts) {
  std::vector<frontier::Standing> out;
  const std::size_t K = parts.front().standing.size();
  for (const auto& e : parts)
    if (e.standing.empty() || e.standing.size() != K) return out;
  for (std::size_t k = 0; k < K; ++k)
    out.push_back(pool_one([k](const frontier::Evidence& e) -> const frontier::Standing& { return e.standing[k]; }, parts));
  return out;
}

/// The windows' collective costs as one: per group, their means weighted by steps, over the
/// windows that know one there.
std::vector<std::optional<double>> pool_collective(const std::vector<frontier::Evidence>& parts) {
  std::vector<double> sum;
  std::vector<int> steps;
  for (const auto& e : parts) {
    const auto& c = e.whatif.collective_s;
    sum.resize(std::max(sum.size(), c.size()), 0.0);
    steps.resize(sum.size(), 0);
    for (std::size_t g = 0; g < c.size(); ++g)
      if (c[g]) {
        sum[g] += *c[g] * e.steps;
        steps[g] += e.steps;
      }
  }
  std::vector<std::optional<double>> out(sum.size());
  for (std::size_t g = 0; g < sum.size(); ++g)
    if (steps[g] > 0) out[g] = sum[g] / steps[g];
  return out;
}

}  // namespace

frontier::Reference read_reference(const std::string& path, const frontier::LabelConfig& cfg) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw FormatError(path, 0, "the reference " + detail::open_error(path) + "; expected a healthy run's dump or packet");
  // The first line says which kind of file it is; read no more of it than a line may hold
  // (ReadLimits::max_line_bytes: --reference /dev/zero is refused, not read forever).
  const std::int64_t max_line = ReadLimits{}.max_line_bytes;
  std::string first;
  for (char c; first.size() <= static_cast<std::size_t>(max_line) && in.get(c) && c != '\n';) first.push_back(c);
  if (first.size() > static_cast<std::size_t>(max_line)) throw detail::line_too_long(path, 1, max_line);
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
  // Pooled windows have no quartiles of their own: their SDs (pooled above) are the spreads.
  r.advance_robust_sd_s.clear();
  r.exposed_robust_sd_s = -1;
  r.standing = pool_standing(parts);
  r.cpu_wait = pool_one([&](const frontier::Evidence& e) -> const frontier::Standing& { return e.cpu_wait; }, parts);
  r.collective_s = pool_collective(parts);
  return r;
}

}  // namespace sf::formats
