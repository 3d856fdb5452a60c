// --stage-map: event-name patterns mapped to stages, new stages placed in the schema
// (docs/kineto.md, "Stage map").
#include "kineto_internal.h"
#include "strict_json.h"

#include <fnmatch.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace sf::formats {

namespace {

using nlohmann::json;

constexpr std::size_t kMaxStageRules = 1024;  // rule indices are int16 per interned name

std::string text_field(const json& j, const char* key, const std::string& file, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw FormatError(file, 0, where + " has no \"" + key + "\"; expected a string");
  if (!it->is_string() || it->get_ref<const std::string&>().empty())
    throw FormatError(file, 0, where + " \"" + key + "\" is not a non-empty string; expected a stage name");
  if (!frontier::printable_utf8(it->get_ref<const std::string&>()))
    throw FormatError(file, 0, where + " \"" + key + "\" is not printable UTF-8 text");
  return it->get<std::string>();
}

KinetoStageRule parse_rule(const json& r, const std::string& file, const std::string& where) {
  if (!r.is_object()) throw FormatError(file, 0, where + " is not an object; expected {\"stage\": ..., \"match\": [...]}");
  for (auto it = r.begin(); it != r.end(); ++it)
    if (it.key() != "stage" && it.key() != "match" && it.key() != "thread" && it.key() != "after")
      throw FormatError(file, 0, where + " has the unknown key " + detail::quoted_key(it.key()) +
                                     "; expected stage, match, thread, after");
  KinetoStageRule rule;
  rule.stage = text_field(r, "stage", file, where);
  if (rule.stage == frontier::kResidualStage)
    throw FormatError(file, 0, where + " maps to " + rule.stage + ", the residual: it is what no stage explains; expected another stage");
  const auto m = r.find("match");
  if (m == r.end() || !m->is_array() || m->empty())
    throw FormatError(file, 0, where + " has no \"match\" list; expected a non-empty array of name patterns");
  for (const auto& p : *m) {
    if (!p.is_string() || p.get_ref<const std::string&>().empty())
      throw FormatError(file, 0, where + " \"match\" holds " + (p.is_string() ? "an empty string" : p.type_name()) +
                                     "; expected name patterns (fnmatch: * ? [...])");
    // fnmatch reads an unterminated '[' as a literal and the pattern then matches almost nothing:
    // a typo, refused where it stands (issue 40).
    const auto& pat = p.get_ref<const std::string&>();
    for (std::size_t i = 0; i < pat.size(); ++i) {
      if (pat[i] == '\\') {
        ++i;
        continue;
      }
      if (pat[i] != '[') continue;
      std::size_t j = i + 1;
      if (j < pat.size() && (pat[j] == '!' || pat[j] == '^')) ++j;
      if (j < pat.size() && pat[j] == ']') ++j;  // a leading ']' is a member
      while (j < pat.size() && pat[j] != ']') ++j;
      if (j >= pat.size())
        throw FormatError(file, 0, where + " \"match\" pattern " + p.dump() + " has a '[' with no closing ']'; expected a "
                                       "bracket set [...] (fnmatch), or \\[ for a literal bracket");
      i = j;
    }
    rule.match.push_back(pat);
  }
  if (const auto t = r.find("thread"); t != r.end()) {
    if (!t->is_string() || (*t != "main" && *t != "any"))
      throw FormatError(file, 0, where + " \"thread\" is " + t->dump() + "; expected \"main\" or \"any\"");
    rule.any_thread = *t == "any";
  }
  if (r.contains("after")) rule.after = text_field(r, "after", file, where);
  return rule;
}

}  // namespace

KinetoStageMap parse_kineto_stage_map(std::string_view text, const std::string& name) {
  if (text.size() > kMaxConfigBytes)
    throw FormatError(name, 0, "stage map is " + std::to_string(text.size()) + " bytes, above " + std::to_string(kMaxConfigBytes));
  detail::StrictJsonParser parser;
  json j;
  if (!parser.parse(text, j)) throw FormatError(name, 0, parser.problem().describe() + "; expected a stage map (docs/kineto.md)");
  if (!j.is_object() || !j.contains("stages"))
    throw FormatError(name, 0, "not an object with \"stages\"; expected {\"stages\": [{\"stage\": ..., \"match\": [...]}]}");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "stages") throw FormatError(name, 0, "unknown key " + detail::quoted_key(it.key()) + "; expected only \"stages\"");
  const json& stages = j["stages"];
  if (!stages.is_array() || stages.empty()) throw FormatError(name, 0, "\"stages\" is not a non-empty array; expected stage rules");
  KinetoStageMap map;
  const auto defaults = frontier::StageSchema::default_schema().explicit_names();
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string where = "stages[" + std::to_string(i) + "]";
    KinetoStageRule rule = parse_rule(stages[i], name, where);
    const bool builtin = std::find(defaults.begin(), defaults.end(), rule.stage) != defaults.end();
    if (builtin && !rule.after.empty())
      throw FormatError(name, 0, where + " places " + rule.stage + ", a default stage, \"after\" another; expected \"after\" on new stages only");
    for (const auto& earlier : map.rules)
      if (earlier.stage == rule.stage && !rule.after.empty() && earlier.after != rule.after)
        throw FormatError(name, 0, where + " places " + rule.stage + " after " + rule.after + " but an earlier rule places it after " +
                                       (earlier.after.empty() ? "the last stage" : earlier.after) + "; expected one place per stage");
    map.rules.push_back(std::move(rule));
  }
  if (map.rules.size() > kMaxStageRules)
    throw FormatError(name, 0, std::to_string(map.rules.size()) + " stage rules, above " + std::to_string(kMaxStageRules) +
                                   "; expected fewer rules (patterns can share one)");
  try {
    (void)kineto::make_layout(map);  // every "after" names a stage: refused here, where the file is named
  } catch (const std::invalid_argument& e) {
    throw FormatError(name, 0, e.what());
  }
  return map;
}

KinetoStageMap read_kineto_stage_map(const std::string& path) {
  return parse_kineto_stage_map(detail::read_capped(path, kMaxConfigBytes, "stage map"), path);
}

namespace kineto {

StageLayout make_layout(const KinetoStageMap& map) {
  StageLayout l;
  l.stages = frontier::StageSchema::default_schema().explicit_names();
  for (const auto& r : map.rules) {
    if (std::find(l.stages.begin(), l.stages.end(), r.stage) != l.stages.end()) continue;
    auto at = l.stages.end();
    if (!r.after.empty()) {
      at = std::find(l.stages.begin(), l.stages.end(), r.after);
      if (at == l.stages.end())
        throw std::invalid_argument("stage " + r.stage + " is placed after " + r.after +
                                    ", which is neither a default stage nor one the map adds before it; expected a stage name");
      ++at;
    }
    l.stages.insert(at, r.stage);
  }
  auto index = [&](std::string_view s) {
    return static_cast<int>(std::find(l.stages.begin(), l.stages.end(), s) - l.stages.begin());
  };
  const auto defaults = frontier::StageSchema::default_schema().explicit_names();
  l.data = index(defaults[0]);
  l.fwd = index(defaults[1]);
  l.bwd = index(defaults[2]);
  l.cb = index(defaults[3]);
  l.opt = index(defaults[4]);
  for (const auto& r : map.rules) l.rules.push_back({index(r.stage), r.match, r.any_thread});
  return l;
}

std::int16_t StageLayout::rule_of(const std::string& name) const {
  for (std::size_t i = 0; i < rules.size(); ++i)
    for (const auto& p : rules[i].patterns)
      if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return static_cast<std::int16_t>(i);
  return kNoRule;
}

}  // namespace kineto

}  // namespace sf::formats
