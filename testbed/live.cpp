// run --live: rank 0's compact view at each gathered window (the recorder's safe point): step
// rate, progress with ETA, the window's top stages with shares, its diagnosis (the answer the run
// ends with, for this window), change points so far and the diagnosis of the last one, opened when
// it was confirmed.
// Redrawn in place on a terminal; plain appended lines otherwise.
#include "detail.h"

#include <algorithm>
#include <cstdio>

namespace sf::testbed::detail {

std::string live_view(const LiveState& s, const frontier::Evidence& e, bool tty) {
  std::string line;
  const double rate = s.elapsed_s > 0 ? static_cast<double>(s.done) / s.elapsed_s : 0;
  const double eta = rate > 0 ? static_cast<double>(s.total - s.done) / rate : 0;
  std::string top;
  for (std::size_t i = 0; i < e.share_order.size() && i < 3; ++i) {
    const int g = e.share_order[i];
    line = frontier::strprintf("%s%s %.0f%%", i ? ", " : "", e.group_name(g).c_str(), e.shares[g] * 100);
    top += line;
  }
  const std::string diagnosis = formats::diagnosis_line(e);
  std::string cps;
  for (const auto& c : s.changes) cps += (cps.empty() ? "" : ", ") + std::to_string(c.step) + (c.direction() > 0 ? " (slower)" : " (recovery)");
  if (!s.detecting) cps = "(off: --detect)";
  else if (cps.empty()) cps = "none";
  if (!tty) {
    line = frontier::strprintf(
                  "live: window %d steps %lld-%lld | %lld/%lld steps (%.0f%%) %.2f steps/s ETA %.0f s | %.1f ms/step | top: %s | "
                  "diagnosis: %s | change points: %s\n",
                  s.window, static_cast<long long>(e.first_step), static_cast<long long>(e.last_step),
                  static_cast<long long>(s.done), static_cast<long long>(s.total), 100.0 * static_cast<double>(s.done) / static_cast<double>(std::max<std::int64_t>(1, s.total)),
                  rate, eta, e.median_step_s * 1e3, top.c_str(), diagnosis.c_str(), cps.c_str());
    return line;
  }
  std::string out = "\033[H\033[J";  // home, clear: redraw in place
  line = frontier::strprintf("sf-testbed run --live   scenario %s   ranks %d\n", s.scenario.c_str(), s.ranks);
  out += line;
  const int width = 40;
  const int filled = static_cast<int>(width * static_cast<double>(s.done) / static_cast<double>(std::max<std::int64_t>(1, s.total)));
  line = frontier::strprintf("progress [%s%s] %lld/%lld steps  ETA %.0f s\n", std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), static_cast<long long>(s.done), static_cast<long long>(s.total), eta);
  out += line;
  line = frontier::strprintf("rate     %.2f steps/s   median step %.1f ms   window %d (steps %lld-%lld)\n", rate,
                e.median_step_s * 1e3, s.window, static_cast<long long>(e.first_step), static_cast<long long>(e.last_step));
  out += line;
  out += "top      " + top + "\n";
  out += "diagnosis " + diagnosis + "\n";
  out += "changes  " + cps + "\n";
  if (!s.last_change.empty()) out += "last     " + s.last_change + "\n";
  return out;
}

}  // namespace sf::testbed::detail
