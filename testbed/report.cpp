// The reporters' common part: the defaults of Reporter and the multiplex (Reporters).
#include "sf/testbed/report.h"

namespace sf::testbed {

std::string Reporter::window(const ReportedWindow&) { return ""; }
std::string Reporter::finish(const ReportedEnd&) { return ""; }
std::string Reporter::said() const { return ""; }

void Reporters::add(std::unique_ptr<Reporter> r) { list_.push_back({std::move(r), false}); }

template <typename Call>
std::string Reporters::tell(Call call) {
  std::string first;
  for (auto& e : list_) {
    if (e.failed) continue;
    if (auto why = call(*e.reporter); !why.empty()) {
      e.failed = true;
      if (first.empty()) first = std::move(why);
    }
  }
  return first;
}

std::string Reporters::window(const ReportedWindow& w) {
  return tell([&](Reporter& r) { return r.window(w); });
}

std::string Reporters::finish(const ReportedEnd& end) {
  return tell([&](Reporter& r) { return r.finish(end); });
}

std::vector<std::string> Reporters::said() const {
  std::vector<std::string> lines;
  for (const auto& e : list_)
    if (!e.failed)
      if (auto line = e.reporter->said(); !line.empty()) lines.push_back(std::move(line));
  return lines;
}

}  // namespace sf::testbed
