// FALCON's ACF period rule, the diagnosis window opened at a change, and culprit stability.
#include "sf/detect/detect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <unordered_map>

namespace sf::detect {

// ---- periodicity --------------------------------------------------------------------------------

double acf(const std::vector<double>& x, int lag) {
  // NaN entries are steps not observed: they count in no sum (and keep every lag a lag in steps).
  const std::size_t n = x.size();
  if (lag < 0 || static_cast<std::size_t>(lag) >= n) return 0;
  double mu = 0;
  std::size_t m = 0;
  for (double v : x)
    if (!std::isnan(v)) mu += v, ++m;
  if (m == 0) return 0;
  mu /= static_cast<double>(m);
  double den = 0, num = 0;
  for (double v : x)
    if (!std::isnan(v)) den += (v - mu) * (v - mu);
  for (std::size_t t = 0; t + static_cast<std::size_t>(lag) < n; ++t)
    if (!std::isnan(x[t]) && !std::isnan(x[t + lag])) num += (x[t] - mu) * (x[t + lag] - mu);
  return den > 0 ? num / den : 0;
}

namespace {

double median_of(std::vector<double>& v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

Periodicity periodicity(const std::vector<double>& x, std::int64_t first_step, const DetectConfig& cfg) {
  Periodicity out;
  const int n = static_cast<int>(x.size());
  if (n == 0) return out;
  // Residuals from a running median (half-width median_halfwidth): a level held longer than the
  // half-width, detected or not, is followed by a centred median and leaves no step in the
  // residuals, while spikes and bursts that fill less than half of any window stay. (Removing
  // segment means between kept change points let an undetected small shift pass for a period of
  // 2-4 steps.)
  const int h = cfg.median_halfwidth;
  std::vector<double> res(x.size(), NAN), buf;
  for (int t = 0; t < n; ++t) {
    if (std::isnan(x[t])) continue;
    buf.clear();
    for (int u = std::max(0, t - h); u <= std::min(n - 1, t + h); ++u)
      if (!std::isnan(x[u])) buf.push_back(x[u]);
    res[t] = x[t] - median_of(buf);
  }
  // A spike stands above the robust spread of the residuals (1.4826 · MAD, the noise).
  buf.clear();
  for (double r : res)
    if (!std::isnan(r)) buf.push_back(std::abs(r));
  const double sigma = 1.4826 * median_of(buf);
  const double thr = std::max(cfg.spike_z * sigma, 1e-9);
  auto spike = [&](int t) { return t >= 0 && t < n && !std::isnan(res[t]) && res[t] > thr; };

  const int kmax = std::min(cfg.max_period, n / 3);
  std::vector<double> a(static_cast<std::size_t>(std::max(kmax, 1)) + 2, 0.0);
  for (int k = 1; k <= kmax + 1 && k < n; ++k) a[k] = acf(res, k);
  for (int k = 2; k <= kmax; ++k) {
    if (!(a[k] >= cfg.acf_min && a[k] >= a[k - 1] && a[k] >= a[k + 1])) continue;
    // FALCON's lag, then what a person means by "periodic": the residue class mod k with the
    // largest mean residual holds spikes over the baseline, at least min_repeats of them, at half
    // or more of its steps from the first spike to the last.
    std::vector<double> fold(static_cast<std::size_t>(k), 0.0);
    std::vector<int> cnt(static_cast<std::size_t>(k), 0);
    for (int t = 0; t < n; ++t)
      if (!std::isnan(res[t])) fold[t % k] += res[t], ++cnt[t % k];
    int best = -1;
    for (int c = 0; c < k; ++c)
      if (cnt[c] > 0 && (best < 0 || fold[c] / cnt[c] > fold[best] / cnt[best])) best = c;
    if (best < 0) continue;
    // A spike of the period is a burst shorter than the period: baseline between two of them.
    auto burst_of = [&](int t, int& lo, int& hi) {
      lo = hi = t;
      while (spike(lo - 1) && t - (lo - 1) < k) --lo;
      while (spike(hi + 1) && hi + 1 - lo < k) ++hi;
      return hi - lo + 1 < k && !spike(lo - 1) && !spike(hi + 1);
    };
    int first = -1, last = -1, spikes = 0, lo = 0, hi = 0;
    for (int t = best; t < n; t += k)
      if (spike(t) && burst_of(t, lo, hi)) {
        if (first < 0) first = t;
        last = t;
        ++spikes;
      }
    int positions = 0;
    for (int t = first; first >= 0 && t <= last; t += k) positions += std::isnan(res[t]) ? 0 : 1;
    if (spikes < cfg.min_repeats || 2 * spikes < positions) continue;
    out.period = k;
    out.acf = a[k];
    out.repeats = spikes;
    // Each spike of the class with the consecutive spikes around it is one burst; the phase is
    // the first step of the first burst (not the first step of the residue class).
    std::vector<double> lengths;
    for (int t = first; t <= last; t += k) {
      if (!spike(t) || !burst_of(t, lo, hi)) continue;
      if (out.phase < 0) out.phase = first_step + lo;
      lengths.push_back(hi - lo + 1);
      for (int u = lo; u <= hi; ++u) out.spike_steps.push_back(first_step + u);
    }
    out.burst = static_cast<int>(median_of(lengths));
    return out;
  }
  return out;
}

// ---- diagnosis ----------------------------------------------------------------------------------

frontier::StageMatrix slice(const frontier::StageMatrix& m, std::int64_t first_step, std::int64_t last_step) {
  first_step = std::max(first_step, m.first_step());
  last_step = std::min(last_step, m.first_step() + (m.steps() - 1));
  const int n = static_cast<int>(std::max<std::int64_t>(0, last_step - first_step + 1));
  frontier::StageMatrix out = frontier::StageMatrix::same_layout(m, first_step, n);
  const int k = m.schema().explicit_count();
  std::vector<double> d(static_cast<std::size_t>(k));
  const int off = static_cast<int>(first_step - m.first_step());
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < m.ranks(); ++r) {
      const int tt = t + off;
      if (!m.present(tt, r)) continue;
      for (int s = 0; s < k; ++s) d[s] = m.d(tt, r, s);
      const double w = m.wall(tt, r);
      out.set_record(t, r, d, m.schema().has_residual() ? std::optional<double>(w) : std::nullopt);
      if (m.has_fwd_events() && m.fwd_event_state(tt, r) != frontier::EventState::unsampled)
        out.set_fwd_event(t, r, m.fwd_event_state(tt, r), m.fwd_event_s(tt, r));
      if (m.has_sync_wait())
        for (int s = 0; s < k; ++s)
          if (const double v = m.sync_wait(tt, r, s); !std::isnan(v)) out.set_sync_wait(t, r, s, v);
      if (const double v = m.cpu_wait(tt, r); !std::isnan(v)) out.set_cpu_wait(t, r, v);
    }
  return out;
}

std::vector<ChangeDiagnosis> diagnose(const frontier::StageMatrix& m, const std::vector<ChangePoint>& changes,
                                      const frontier::LabelConfig& cfg) {
  std::vector<ChangeDiagnosis> out;
  const std::int64_t first = m.first_step(), last = m.first_step() + (m.steps() - 1);
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const auto& c = changes[i];
    if (c.step <= first || c.step > last) continue;
    ChangeDiagnosis d;
    d.change = c;
    d.before_first = i > 0 ? std::max(first, changes[i - 1].step) : first;
    d.before_last = c.step - 1;
    d.after_first = c.step;
    d.after_last = i + 1 < changes.size() ? std::min(last, changes[i + 1].step - 1) : last;
    d.before = frontier::evaluate(slice(m, d.before_first, d.before_last), cfg);
    d.after = frontier::evaluate(slice(m, d.after_first, d.after_last), cfg);
    const std::size_t g = d.after.shares.size();
    d.share_delta.assign(g, 0.0);
    double best = 0;
    for (std::size_t j = 0; j < g && j < d.before.shares.size(); ++j) {
      d.share_delta[j] = d.after.shares[j] - d.before.shares[j];
      const double moved = c.direction() > 0 ? d.share_delta[j] : -d.share_delta[j];
      if (moved > best) best = moved, d.moved_group = static_cast<int>(j);
    }
    out.push_back(std::move(d));
  }
  return out;
}

// ---- culprit stability --------------------------------------------------------------------------

std::string_view to_string(Stability s) {
  switch (s) {
    case Stability::none: return "none";
    case Stability::chronic: return "chronic";
    case Stability::intermittent: return "intermittent";
    case Stability::one_off: return "one-off";
  }
  return "none";
}

int dominant_group(const frontier::StageMatrix& m, const frontier::Accounting& acc) {
  const auto& schema = m.schema();
  const int groups = schema.group_count();
  std::vector<std::map<int, double>> credit(static_cast<std::size_t>(groups));
  for (int t = 0; t < acc.steps; ++t) {
    if (!acc.scored[t]) continue;
    std::vector<int> top(static_cast<std::size_t>(groups), -1);
    std::vector<double> adv(static_cast<std::size_t>(groups), 0.0);
    for (int s = 0; s < schema.size(); ++s) {
      const int g = schema.group_of(s);
      adv[g] += acc.advance(t, s);
      if (top[g] < 0 || acc.advance(t, s) > acc.advance(t, top[g])) top[g] = s;
    }
    for (int g = 0; g < groups; ++g)
      if (adv[g] > 0 && acc.leader(t, top[g]) >= 0) credit[g][acc.leader(t, top[g])] += adv[g];
  }
  int best = -1;
  double most = 0;
  for (int g = 0; g < groups; ++g)
    for (const auto& [r, c] : credit[g])
      if (c > most) most = c, best = g;
  return best;
}

namespace {

template <typename Tally>
const std::vector<std::pair<double, double>>& it_margins(const Tally& win, int rank) {
  static const std::vector<std::pair<double, double>> none;
  const auto it = win.margin.find(rank);
  return it == win.margin.end() ? none : it->second;
}

}  // namespace

struct StabilityTracker::State {
  /// A rank's lead in one window or over the run.
  struct Tally {
    /// Hashed, not ordered: in a healthy window the leader is any of the world's ranks from step
    /// to step, and a tree walk over a thousand ranks per group per step was a tenth of what
    /// --detect added to sim. Nothing reads them in their order (finish() sorts).
    std::unordered_map<int, RankLead> ranks;
    /// per rank: (gap / F[t,S], advance credited) at the steps it led (windows only)
    std::unordered_map<int, std::vector<std::pair<double, double>>> margin;
    int advanced = 0;
    double advance = 0;
    /// The lead of rank r. Under a fault the leader is mostly the same rank from step to step, so
    /// the last one looked up is remembered (an unordered_map's elements never move).
    RankLead& lead(int r) {
      if (r != lead_rank_ || lead_ == nullptr) {
        lead_ = &ranks[r];
        lead_rank_ = r;
      }
      return *lead_;
    }
    std::vector<std::pair<double, double>>& margins(int r) {
      if (r != margin_rank_ || margin_ == nullptr) {
        margin_ = &margin[r];
        margin_rank_ = r;
      }
      return *margin_;
    }
    void finish(std::vector<RankLead>& out, std::size_t keep) const {
      out.clear();
      for (const auto& [r, l] : ranks) {
        RankLead x = l;
        x.step_fraction = advanced ? static_cast<double>(x.steps_led) / advanced : 0;
        x.credit_fraction = advance > 0 ? x.credit_s / advance : 0;
        out.push_back(x);
      }
      std::sort(out.begin(), out.end(), [](const RankLead& a, const RankLead& b) {
        return a.credit_s != b.credit_s ? a.credit_s > b.credit_s : a.rank < b.rank;
      });
      if (out.size() > keep) out.resize(keep);
    }

   private:
    RankLead* lead_ = nullptr;
    std::vector<std::pair<double, double>>* margin_ = nullptr;
    int lead_rank_ = -1, margin_rank_ = -1;
  };
  /// A rank that was a window's culprit in some group: its episodes so far.
  struct Culprit {
    int windows_led = 0, episodes = 0, advanced = 0;
    int steps_led = 0;  ///< steps it led by a clear margin (>= min_margin of F[t,S]) in the windows it led
    std::int64_t ep_first = -1, ep_last = -1;
    int last_window = -2;  ///< index of the last window it led
  };
  frontier::StageSchema schema;
  StabilityConfig cfg;
  std::vector<std::vector<int>> stages;  ///< per group
  std::vector<Tally> run, win;           ///< per group
  std::vector<std::map<int, Culprit>> culprits;
  /// A kept window, compact (it is kept for up to max_windows_kept windows): per group its
  /// culprit, advancing steps and top kept_ranks leads (rank, steps led, step and credit fraction).
  struct Lead {
    int rank, steps_led;
    float step_fraction, credit_fraction;
  };
  struct Kept {
    std::int64_t first, last;
    std::vector<int> culprit, advanced, nleads;  ///< per group
    std::vector<Lead> leads;                      ///< per group, kept_ranks slots
  };
  std::deque<Kept> windows;
  int windows_total = 0;
  bool open = false;
  std::int64_t first = 0, last = -1;
};

StabilityTracker::StabilityTracker(const frontier::StageSchema& schema, StabilityConfig cfg) : s_(std::make_unique<State>()) {
  s_->schema = schema;
  s_->cfg = cfg;
  const int g = schema.group_count();
  s_->stages.resize(static_cast<std::size_t>(g));
  for (int s = 0; s < schema.size(); ++s) s_->stages[schema.group_of(s)].push_back(s);
  s_->run.resize(static_cast<std::size_t>(g));
  s_->win.resize(static_cast<std::size_t>(g));
  s_->culprits.resize(static_cast<std::size_t>(g));
}
StabilityTracker::~StabilityTracker() = default;
StabilityTracker::StabilityTracker(StabilityTracker&&) noexcept = default;
StabilityTracker& StabilityTracker::operator=(StabilityTracker&&) noexcept = default;

bool StabilityTracker::window_open() const { return s_->open; }

void StabilityTracker::begin_window(std::int64_t first_step) {
  end_window();
  auto& st = *s_;
  st.open = true;
  st.first = first_step;
  st.last = first_step;  // until a later step is added (first_step - 1 would overflow at INT64_MIN)
  for (auto& w : st.win) w = {};
}

void StabilityTracker::add_step(const frontier::StageMatrix& m, const frontier::Accounting& acc, int t) {
  auto& st = *s_;
  if (!st.open) begin_window(m.step_id(t));
  st.last = m.step_id(t);
  if (!acc.scored[t]) return;
  for (std::size_t g = 0; g < st.stages.size(); ++g) {
    double a = 0;
    int top = -1;
    for (int s : st.stages[g]) {
      a += acc.advance(t, s);
      if (top < 0 || acc.advance(t, s) > acc.advance(t, top)) top = s;
    }
    if (!(a > 0)) continue;
    for (State::Tally* tl : {&st.win[g], &st.run[g]}) {
      ++tl->advanced;
      tl->advance += a;
    }
    // Accounting names columns; the tallies hold rank ids (they differ when m is sparse).
    const int column = acc.leader(t, top);
    const int leader = column >= 0 ? m.rank_id(column) : column;
    if (leader >= 0) {
      for (State::Tally* tl : {&st.win[g], &st.run[g]}) {
        auto& l = tl->lead(leader);
        l.rank = leader;
        ++l.steps_led;
        l.credit_s += a;
      }
      st.win[g].margins(leader).emplace_back(acc.exposed(t) > 0 ? acc.gap(t, top) / acc.exposed(t) : 0.0, a);
    } else if (leader == frontier::Accounting::kTie) {
      const auto ties = acc.tie_ranks(t, top);
      for (int c : ties)
        for (State::Tally* tl : {&st.win[g], &st.run[g]}) {
          const int r = m.rank_id(c);
          auto& l = tl->lead(r);
          l.rank = r;
          l.credit_s += a / static_cast<double>(ties.size());
        }
    }
  }
}

void StabilityTracker::end_window() {
  auto& st = *s_;
  if (!st.open) return;
  st.open = false;
  const int index = st.windows_total++;
  const std::size_t G = st.stages.size(), K = static_cast<std::size_t>(std::max(0, st.cfg.kept_ranks));
  State::Kept kept{st.first, st.last, std::vector<int>(G, -1), std::vector<int>(G, 0), std::vector<int>(G, 0),
                   std::vector<State::Lead>(G * K)};
  for (std::size_t g = 0; g < G; ++g) {
    const auto& win = st.win[g];
    kept.advanced[g] = win.advanced;
    std::vector<RankLead> all;
    win.finish(all, std::numeric_limits<std::size_t>::max());
    int culprit = -1;
    if (!all.empty() && all.front().credit_fraction >= st.cfg.culprit_credit) {
      // ... and by a clear margin: at the steps it led, weighted by the advance credited there, its
      // median lead over the runner-up is at least min_margin of the step's exposed time (chance
      // leadership among healthy ranks is not). Weighted: a periodic culprit's credit comes from
      // its spikes, where it leads by far, not from the quiet steps it happens to lead by a hair.
      const auto it = win.margin.find(all.front().rank);
      if (it != win.margin.end() && !it->second.empty()) {
        auto margins = it->second;
        std::sort(margins.begin(), margins.end());
        double total = 0, run = 0;
        for (const auto& [m, w] : margins) total += w;
        double median = margins.back().first;
        for (const auto& [m, w] : margins)
          if ((run += w) >= total / 2) {
            median = m;
            break;
          }
        if (median >= st.cfg.min_margin) culprit = all.front().rank;
      }
    }
    kept.culprit[g] = culprit;
    if (culprit >= 0) {
      auto& c = st.culprits[g][culprit];
      ++c.windows_led;
      if (c.last_window != index - 1) {
        ++c.episodes;
        c.ep_first = st.first;
      }
      c.ep_last = st.last;
      c.last_window = index;
      c.advanced += win.advanced;
      // Steps it leads by a clear margin: a periodic culprit also leads quiet steps by a hair,
      // which makes it neither chronic nor a culprit there.
      for (const auto& [m, w] : it_margins(win, culprit))
        if (m >= st.cfg.min_margin) ++c.steps_led;
    }
    for (std::size_t i = 0; i < all.size() && i < K; ++i) {
      kept.leads[g * K + i] = {all[i].rank, all[i].steps_led, static_cast<float>(all[i].step_fraction),
                               static_cast<float>(all[i].credit_fraction)};
      ++kept.nleads[g];
    }
  }
  st.windows.push_back(std::move(kept));
  while (static_cast<int>(st.windows.size()) > st.cfg.max_windows_kept) st.windows.pop_front();
}

std::size_t StabilityTracker::state_size() const {
  const auto& st = *s_;
  std::size_t n = 0;
  for (const auto& w : st.windows) n += 2 + w.culprit.size() + w.advanced.size() + w.nleads.size() + 4 * w.leads.size();
  for (std::size_t g = 0; g < st.run.size(); ++g) {
    n += 5 * (st.run[g].ranks.size() + st.win[g].ranks.size()) + 7 * st.culprits[g].size();
    for (const auto& [r, v] : st.win[g].margin) n += 2 * v.size();
  }
  return n;
}

int StabilityTracker::dominant_group() const {
  int best = -1;
  double most = 0;
  for (std::size_t g = 0; g < s_->run.size(); ++g)
    for (const auto& [r, l] : s_->run[g].ranks)
      if (l.steps_led > 0 && l.credit_s > most) most = l.credit_s, best = static_cast<int>(g);
  return best;
}

CulpritStability StabilityTracker::result(int group, std::size_t last_windows) const {
  const auto& st = *s_;
  CulpritStability out;
  out.windows_total = st.windows_total;
  if (group < 0 || group >= static_cast<int>(st.stages.size())) {
    // No group to follow (dominant_group() found no step led by one rank): say so, not nothing.
    out.stability = Stability::none;
    out.evidence = "no stage was led by one rank at any step in " + std::to_string(st.windows_total) +
                   " windows (every advance was a tie, or none was scored)";
    return out;
  }
  out.group = group;
  out.group_name = st.schema.groups()[group];
  const auto K = static_cast<std::size_t>(std::max(0, st.cfg.kept_ranks));
  for (std::size_t i = st.windows.size() - std::min(last_windows, st.windows.size()); i < st.windows.size(); ++i) {
    const auto& w = st.windows[i];
    WindowLead wl;
    wl.first_step = w.first;
    wl.last_step = w.last;
    wl.advanced_steps = w.advanced[group];
    wl.culprit = w.culprit[group];
    for (int j = 0; j < w.nleads[group]; ++j) {
      const auto& l = w.leads[static_cast<std::size_t>(group) * K + static_cast<std::size_t>(j)];
      RankLead r;
      r.rank = l.rank;
      r.steps_led = l.steps_led;
      r.step_fraction = l.step_fraction;
      r.credit_fraction = l.credit_fraction;
      wl.ranks.push_back(r);
    }
    out.windows.push_back(std::move(wl));
  }
  st.run[group].finish(out.overall, std::numeric_limits<std::size_t>::max());
  std::string buf;
  const auto& culprits = st.culprits[group];
  if (culprits.empty()) {
    out.stability = Stability::none;
    buf = frontier::strprintf("no rank holds >= %.0f%% of %s's advance in any of %d windows", st.cfg.culprit_credit * 100,
                  out.group_name.c_str(), out.windows_total);
    out.evidence = buf;
    return out;
  }
  auto credit_of = [&](int r) {
    const auto it = st.run[group].ranks.find(r);
    return it == st.run[group].ranks.end() ? 0.0 : it->second.credit_s;
  };
  const State::Culprit* best = nullptr;
  for (const auto& [r, c] : culprits)
    if (!best || c.windows_led > out.windows_led || (c.windows_led == out.windows_led && credit_of(r) > credit_of(out.culprit)))
      out.culprit = r, out.windows_led = c.windows_led, best = &c;
  out.episodes = best->episodes;
  out.ongoing = best->last_window == st.windows_total - 1;
  out.persistence = static_cast<double>(out.windows_led) / static_cast<double>(out.windows_total);
  out.step_fraction_in_led = best->advanced ? static_cast<double>(best->steps_led) / best->advanced : 0;
  if (out.step_fraction_in_led < st.cfg.steady_step_fraction || out.episodes >= 2) out.stability = Stability::intermittent;
  else if (out.ongoing) out.stability = Stability::chronic;
  else out.stability = Stability::one_off;
  buf = frontier::strprintf(
                "rank %d leads %s in %d of %d windows, %d episode%s (last: steps %lld..%lld, %s), clearly leading %.0f%% of the "
                "group's advancing steps in those windows",
                out.culprit, out.group_name.c_str(), out.windows_led, out.windows_total, out.episodes,
                out.episodes == 1 ? "" : "s", static_cast<long long>(best->ep_first), static_cast<long long>(best->ep_last),
                out.ongoing ? "ongoing" : "ended", out.step_fraction_in_led * 100);
  out.evidence = buf;
  return out;
}

CulpritStability culprit_stability(const frontier::StageMatrix& m, const frontier::Accounting& acc, int group,
                                   const StabilityConfig& cfg, const std::vector<std::int64_t>& window_bounds) {
  if (group < 0 || group >= m.schema().group_count() || acc.steps == 0) return {};
  StabilityTracker tracker(m.schema(), cfg);
  // Window boundaries as step offsets.
  std::vector<int> starts;
  if (!window_bounds.empty()) {
    for (auto b : window_bounds)
      if (b - m.first_step() >= 0 && b - m.first_step() < acc.steps) starts.push_back(static_cast<int>(b - m.first_step()));
    if (starts.empty() || starts.front() != 0) starts.insert(starts.begin(), 0);
  } else {
    const int w = std::max(1, cfg.window_steps);
    for (int t = 0; t < acc.steps; t += w) starts.push_back(t);
  }
  starts.push_back(acc.steps);
  for (std::size_t wi = 0; wi + 1 < starts.size(); ++wi) {
    tracker.begin_window(m.step_id(starts[wi]));
    for (int t = starts[wi]; t < starts[wi + 1]; ++t) tracker.add_step(m, acc, t);
    tracker.end_window();
  }
  return tracker.result(group);
}

}  // namespace sf::detect
