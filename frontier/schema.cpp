#include "sf/frontier/frontier.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <unordered_set>

namespace sf::frontier {

std::vector<std::string> default_explicit_stages() {
  return {"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "callbacks.cpu_wall",
          "optim.step_cpu_wall"};
}

StageSchema::StageSchema(std::vector<std::string> explicit_stages, bool with_residual, int accumulation)
    : names_(std::move(explicit_stages)),
      explicit_count_(static_cast<int>(names_.size())),
      has_residual_(with_residual),
      accumulation_(accumulation) {
  if (accumulation < 1) throw std::invalid_argument("accumulation factor must be >= 1");
  if (names_.empty()) throw std::invalid_argument("stage list is empty: expected at least one explicit stage");
  std::unordered_set<std::string> seen;
  for (const auto& n : names_) {
    if (n.empty()) throw std::invalid_argument("stage name is empty");
    if (!printable_utf8(n))
      throw std::invalid_argument("a stage name is not printable UTF-8 text; expected UTF-8 without control characters");
    if (n == kResidualStage)
      throw std::invalid_argument(std::string(kResidualStage) + " is the residual stage; it is computed from wall, not read");
    if (!seen.insert(n).second) throw std::invalid_argument("duplicate stage name '" + n + "'");
  }
  if (has_residual_) names_.emplace_back(kResidualStage);

  for (const auto& n : names_) {
    const auto sep = n.find(kMicrostepSeparator);
    if (sep != std::string::npos) expanded_ = true;
    std::string group = sep == std::string::npos ? n : n.substr(0, sep);
    int g = -1;
    for (int i = 0; i < static_cast<int>(groups_.size()); ++i)
      if (groups_[i] == group) g = i;
    if (g < 0) {
      g = static_cast<int>(groups_.size());
      groups_.push_back(std::move(group));
    }
    group_of_.push_back(g);
  }

  // FNV-1a 64 over the ordered names, newline-separated: the order is part of the identity.
  std::uint64_t h = 1469598103934665603ULL;
  for (const auto& n : names_) {
    for (unsigned char c : n) h = (h ^ c) * 1099511628211ULL;
    h = (h ^ static_cast<unsigned char>('\n')) * 1099511628211ULL;
  }
  hash_ = h;
}

StageSchema StageSchema::default_schema() { return StageSchema(default_explicit_stages(), true, 1); }

std::vector<std::string> StageSchema::explicit_names() const {
  return {names_.begin(), names_.begin() + explicit_count_};
}

std::optional<int> StageSchema::index_of(std::string_view name) const {
  for (int s = 0; s < size(); ++s)
    if (names_[s] == name) return s;
  return std::nullopt;
}

std::optional<int> StageSchema::group_index(std::string_view group) const {
  for (int g = 0; g < group_count(); ++g)
    if (groups_[g] == group) return g;
  return std::nullopt;
}

std::string StageSchema::group_problem(std::string_view group, std::string_view prefix, std::string_view where) const {
  return group_problem_in(groups_, group, prefix, where);
}

std::string group_problem_in(const std::vector<std::string>& groups, std::string_view group, std::string_view prefix,
                             std::string_view where) {
  if (std::find(groups.begin(), groups.end(), group) != groups.end()) return "";
  std::string out = std::string(prefix) + "not a stage group of " + std::string(where) + "; expected one of ";
  for (std::size_t g = 0; g < groups.size(); ++g) out += (g ? ", " : "") + groups[g];
  return out;
}

std::string StageSchema::order_hash_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash_));
  return buf;
}

}  // namespace sf::frontier
