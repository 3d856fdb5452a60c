// Window handling: the run-level window made of the recorder's consecutive windows.
#include "detail.h"

#include <algorithm>
#include <cmath>

namespace sf::testbed::detail {

/// Concatenates consecutive windows into one run-level window (all measured steps).
formats::Window concat(const std::vector<formats::Window>& windows) {
  formats::Window out;
  if (windows.empty()) return out;
  const auto& first = windows.front().matrix;
  // Steps run from the first window's first to the latest last step; a window of no steps adds
  // none (and `first_step() - 1` would overflow at the lowest step id).
  std::int64_t last = first.first_step();
  for (const auto& w : windows)
    if (w.matrix.steps() > 0) last = std::max(last, w.matrix.first_step() + (w.matrix.steps() - 1));
  // The rank layout: dense when every window is, else the union of the windows' rank ids.
  const int world = first.world_size();
  bool dense = true;
  for (const auto& w : windows) dense = dense && !w.matrix.sparse();
  const int steps = first.steps() > 0 || last > first.first_step() ? static_cast<int>(last - first.first_step() + 1) : 0;
  if (dense) {
    out.matrix = frontier::StageMatrix(first.schema(), world, first.first_step(), steps);
  } else {
    std::vector<int> ids;
    for (const auto& w : windows)
      for (int c = 0; c < w.matrix.ranks(); ++c) ids.push_back(w.matrix.rank_id(c));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    out.matrix = frontier::StageMatrix(first.schema(), world, std::move(ids), first.first_step(), steps);
  }
  out.ranks = windows.front().ranks;
  std::vector<std::string> roles = first.roles();
  const int k = first.schema().explicit_count();
  std::vector<double> d(k);
  for (const auto& w : windows) {
    const auto& m = w.matrix;
    if (roles.empty() && !m.roles().empty()) roles = m.roles();
    out.telemetry.gather_ok = out.telemetry.gather_ok && w.telemetry.gather_ok;
    out.telemetry.dropped_records += w.telemetry.dropped_records;
    for (const auto& r : w.telemetry.reasons) out.telemetry.reasons.push_back(r);
    for (int t = 0; t < m.steps(); ++t)
      for (int r = 0; r < m.ranks(); ++r) {
        if (!m.present(t, r)) continue;
        const int tt = static_cast<int>(m.step_id(t) - first.first_step());
        const int c = out.matrix.column_of(m.rank_id(r));
        for (int s = 0; s < k; ++s) d[s] = m.d(t, r, s);
        out.matrix.set_record(tt, c, d, m.schema().has_residual() ? std::optional<double>(m.wall(t, r)) : std::nullopt);
        if (m.fwd_event_state(t, r) != frontier::EventState::unsampled)
          out.matrix.set_fwd_event(tt, c, m.fwd_event_state(t, r), m.fwd_event_s(t, r));
        if (m.has_sync_wait())
          for (int s = 0; s < k; ++s)
            if (const double v = m.sync_wait(t, r, s); !std::isnan(v)) out.matrix.set_sync_wait(tt, c, s, v);
        if (const double v = m.cpu_wait(t, r); !std::isnan(v)) out.matrix.set_cpu_wait(tt, c, v);
      }
  }
  if (!roles.empty()) out.matrix.set_roles(roles);
  return out;
}

}  // namespace sf::testbed::detail
