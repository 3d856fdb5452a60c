// Rank 0's windows in bounded memory (issue 16): always-on means weeks, so nothing per window
// may stay resident. Packets, summaries and dump lines go to disk as they are made; the run-level
// evidence is accumulated step by step (StreamingAccumulator: O(R·S); its medians exact up to --exact-median-steps, then binned).
#include "detail.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <set>
#include <sstream>
#include <unistd.h>

namespace sf::testbed::detail {

using nlohmann::ordered_json;

std::int64_t resident_kb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * (::sysconf(_SC_PAGESIZE) / 1024) : 0;
}

/// Steps back from a window's last step whose packets are kept for change points confirmed late.
constexpr std::int64_t kRecentPacketSteps = 64;

namespace {

/// The window's line in the run's table: its steps, median step, top stage and the diagnosis.
std::string window_line(const frontier::Evidence& e, int index) {
  const int top = e.share_order.empty() ? -1 : e.share_order[0];
  const auto& d = e.diagnosis;
  std::string diag = !d.significant() ? std::string("no significant change")
                     : d.common ? "common slowdown: " + e.group_name(d.group) + frontier::strprintf(" %+.1f ms", d.excess_s * 1e3)
                                : (d.rank >= 0 ? "rank " + std::to_string(d.rank) + " " : std::string()) + e.group_name(d.group) +
                                      frontier::strprintf(" %+.1f ms", d.excess_s * 1e3);
  if (d.significant()) {
    diag += frontier::strprintf(" (confidence %.2f", d.confidence);
    if (d.culprits.size() > 1) diag += frontier::strprintf("; %zu culprits", d.culprits.size());
    diag += ")";
    if (e.whatif.gains()) diag += frontier::strprintf("; fixing it: %+.1f ms/step", (e.whatif.all_healed_s - e.whatif.actual_s) * 1e3);
  }
  std::string line = frontier::strprintf("  %5d %7lld..%-7lld %9.1f  %-26s %6s  %s", index,
                                         static_cast<long long>(e.first_step), static_cast<long long>(e.last_step),
                                         e.median_step_s * 1e3, top >= 0 ? e.group_name(top).c_str() : "-",
                                         top >= 0 && e.shares_valid ? frontier::strprintf("%.3f", e.shares[top]).c_str() : "-",
                                         diag.c_str());
  if (!e.gather_ok) line += "  (gather failed)";
  return line;
}

}  // namespace

struct Rank0Windows::Impl {
  Rank0Windows::Observer observer;
  const RunConfig& cfg;
  int expected;
  int count = 0;
  double scoring_s = 0;
  // The gather (windows that came over MPI): messages and bytes rank 0 received, and the
  // latency from rank 0's window close to the window scored and written.
  std::string gather_mode;
  int gather_nodes = 0, gathered = 0;
  std::int64_t gather_messages = 0, gather_bytes = 0;
  double latency_sum_s = 0, latency_max_s = 0;
  std::size_t first_packet = 0;
  std::string error;
  // streamed files
  std::ofstream summaries, dump;
  std::string dump_tmp;
  // The packets of the last windows (JSON, path), so that a change confirmed a window or two after
  // the step it is placed at still goes into the packet that covers that step.
  struct Recent {
    std::int64_t first, last;
    std::string path;
    ordered_json packet;
  };
  std::deque<Recent> recent;
  // run level
  std::optional<frontier::Reference> reference;
  /// e diagnosed against the healthy reference, the road every front-end takes (testbed::judge).
  frontier::Evidence diagnosed(frontier::Evidence e) const {
    return reference ? judge(std::move(e), {.reference = &*reference}).evidence : e;
  }
  std::int64_t steps_scored = 0, gather_failures = 0, change_points = 0;
  Reporters reporters;  // --metrics told each window; --plot and --trace at the end (report_run)
  std::vector<std::string> head_lines;
  std::deque<std::string> tail_lines;
  std::int64_t lines_left_out = 0;
  std::optional<frontier::StreamingAccumulator> acc;
  std::vector<formats::Window> kept;  // rank_median only
  std::vector<formats::RankInfo> ranks;
  std::optional<frontier::StageMatrix> one;
  double wall_sum = 0;
  std::int64_t last_step = -1;
  frontier::TelemetryInput tel;
  std::set<std::string> reasons;
  std::int64_t reasons_dropped = 0;
  // resident memory after each window: first, last, max, and a least-squares slope over the
  // windows past the first quarter (the allocator settles first)
  std::int64_t rss_first = 0, rss_last = 0, rss_max = 0;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int fitted = 0;
  // and the series itself, bounded: every rss_stride-th window, the stride doubled (every other
  // sample dropped) whenever it would pass kRssSamples, so that a reader can fit any stretch of
  // the run (the soak report fits the windows after the what-if's log stopped growing).
  static constexpr std::size_t kRssSamples = 256;
  std::vector<std::pair<int, std::int64_t>> rss_series;
  int rss_stride = 1;

  Impl(const RunConfig& c, int e) : cfg(c), expected(e) {
    if (!cfg.out_dir.empty()) open(summaries, cfg.out_dir + "/windows.jsonl");
    if (!cfg.dump.empty()) {
      dump_tmp = cfg.dump + ".partial." + std::to_string(::getpid());
      open(dump, dump_tmp);
    }
    if (!cfg.metrics_file.empty()) reporters.add(metrics_reporter(cfg.metrics_file));
    if (!cfg.plot.empty()) reporters.add(plot_reporter(cfg.plot, "each rank x stage's change per window, the culprits outlined"));
    if (!cfg.trace.file.empty()) reporters.add(trace_reporter(cfg.trace.file));
  }

  void open(std::ofstream& f, const std::string& path) {
    f.open(path, std::ios::binary | std::ios::trunc);
    if (!f && error.empty()) error = "cannot create " + path;
  }

  void fail(const std::string& what) {
    if (error.empty()) error = what;
  }

  void write(std::ofstream& f, const std::string& text, const std::string& path) {
    if (!f.is_open() || !f) return;
    f << text;
    f.flush();
    if (!f) fail("cannot write " + path);
  }

  /// The window's steps into the run-level accumulator (in step order: windows arrive in order).
  void accumulate(const formats::Window& w) {
    const auto& m = w.matrix;
    if (!acc) {
      acc.emplace(m.schema(), m.ranks(), cfg.label);
      acc->bound_medians(cfg.exact_median_steps);
      one.emplace(m.schema(), m.ranks(), m.first_step(), 1);
    }
    for (int t = 0; t < m.steps(); ++t) {
      if (m.step_id(t) <= last_step) continue;  // never happens with consecutive windows
      copy_step(m, t, *one);
      double mx = 0;
      if (m.schema().has_residual())
        for (int r = 0; r < m.ranks(); ++r)
          if (m.present(t, r)) mx = std::max(mx, m.wall(t, r));
      acc->add_step(*one);
      wall_sum += mx;
      last_step = m.step_id(t);
    }
    tel.gather_ok = tel.gather_ok && w.telemetry.gather_ok;
    tel.dropped_records += w.telemetry.dropped_records;
    tel.duplicate_records += w.telemetry.duplicate_records;
    for (const auto& r : w.telemetry.reasons) {
      // Distinct reasons only, at most 64: a gather that fails every window says so once.
      if (reasons.count(r)) continue;
      if (reasons.size() < 64) {
        reasons.insert(r);
        tel.reasons.push_back(r);
      } else {
        ++reasons_dropped;
      }
    }
  }

  /// Change points go into the packet of the window that holds their step: this one (pj), or
  /// one of the last few (rewritten).
  void place_changes(const std::vector<ConfirmedChange>& changes, nlohmann::ordered_json& pj, std::int64_t first,
                     std::int64_t last) {
    for (const auto& c : changes) {
      if (c.change.step >= first && c.change.step <= last) {
        pj["change_points"].push_back(c.json);
        continue;
      }
      for (auto& r : recent)
        if (c.change.step >= r.first && c.change.step <= r.last) {
          r.packet["change_points"].push_back(c.json);
          try {
            formats::write_file_atomic(r.path, r.packet.dump() + "\n");
          } catch (const std::exception& ex) {
            fail(ex.what());
          }
        }
    }
  }
  /// The first kHeadLines window lines and the last kTailLines (the ones between counted).
  void keep_line(std::string line) {
    if (head_lines.size() < kHeadLines) {
      head_lines.push_back(std::move(line));
      return;
    }
    tail_lines.push_back(std::move(line));
    if (tail_lines.size() > kTailLines) {
      tail_lines.pop_front();
      ++lines_left_out;
    }
  }
  /// --out: the window's packet and its windows.jsonl line. A packet that cannot be written is
  /// named in its summary line (and ends the run with exit 2 once the workload finished); the
  /// window is still scored and counted.
  void write_packet(nlohmann::ordered_json pj, const std::string& packet, int index, std::int64_t first, std::int64_t last) {
    if (cfg.out_dir.empty()) return;
    char name[32];
    std::snprintf(name, sizeof name, "/window_%03d.json", index);
    std::string packet_error;
    try {
      formats::write_file_atomic(cfg.out_dir + name, packet + "\n");
    } catch (const std::exception& ex) {
      packet_error = ex.what();
      fail(packet_error);
    }
    write(summaries, window_summary(pj, index, packet_error).dump() + "\n", cfg.out_dir + "/windows.jsonl");
    if (observer) {
      // A change is confirmed at most a few dozen steps after its step (docs/detect.md).
      recent.push_back({first, last, cfg.out_dir + name, std::move(pj)});
      while (!recent.empty() && recent.front().last < last - kRecentPacketSteps) recent.pop_front();
    }
  }
  /// Telemetry of telemetry: a file a reporter cannot write (--metrics) is said once (finish()),
  /// never fatal to the workload, and not retried every window.
  void report_window(const frontier::Evidence& e) {
    const formats::MetricsState counts{"run", count, steps_scored, cfg.detect ? change_points : -1, gather_failures};
    if (auto why = reporters.window({e, counts}); !why.empty()) fail(why);
  }

  /// How the window reached rank 0: messages, bytes and the latency from its close to now.
  void count_gather(const formats::Window& w, std::int64_t now_ns) {
    if (w.gather.mode.empty()) return;
    gather_mode = w.gather.mode;
    gather_nodes = w.gather.nodes;
    ++gathered;
    gather_messages += w.gather.messages;
    gather_bytes += w.gather.bytes;
    if (w.gather.closed_ns > 0) {
      const double lat = static_cast<double>(now_ns - w.gather.closed_ns) * 1e-9;
      latency_sum_s += lat;
      latency_max_s = std::max(latency_max_s, lat);
    }
  }
  void sample_rss(int index) {
    const std::int64_t kb = resident_kb();
    if (count == 1) rss_first = kb;
    rss_last = kb;
    rss_max = std::max(rss_max, kb);
    if (index % rss_stride == 0) {
      if (rss_series.size() == kRssSamples) {
        rss_stride *= 2;
        std::erase_if(rss_series, [&](const auto& e) { return e.first % rss_stride != 0; });
      }
      if (index % rss_stride == 0) rss_series.emplace_back(index, kb);
    }
    if (index >= expected / 4) {
      const double x = index, y = static_cast<double>(kb);
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
      ++fitted;
    }
  }
};

Rank0Windows::Rank0Windows(const RunConfig& cfg, int expected_windows)
    : impl_(std::make_unique<Impl>(cfg, expected_windows)) {}

Rank0Windows::~Rank0Windows() {
  if (impl_->dump.is_open()) {
    impl_->dump.close();
    std::remove(impl_->dump_tmp.c_str());
  }
}

bool Rank0Windows::keeps_windows() const {
  // rank_median needs whole windows. Without it rank 0 keeps bounded aggregates only (--detect
  // and --trace keep bounded state of their own, testbed::Watch).
  return impl_->cfg.label.gain_baseline == frontier::GainBaseline::rank_median;
}

void Rank0Windows::on_window(Observer f) { impl_->observer = std::move(f); }

const std::vector<formats::Window>& Rank0Windows::kept() const { return impl_->kept; }

void Rank0Windows::add(formats::Window&& win, int index) {
  auto& im = *impl_;
  const std::int64_t t0 = inject::monotonic_ns();
  const auto wp = std::make_shared<const formats::Window>(std::move(win));
  const auto& w = *wp;
  const auto e = im.diagnosed(frontier::evaluate(w.matrix, im.cfg.label, w.telemetry));
  Notes notes;
  if (im.observer) notes = im.observer(wp, e, index);
  auto pj = formats::evidence_to_json(e, w.ranks);
  // The window's culprit stability, as run.json's per-window record (and the class so far).
  if (!notes.stability.is_null()) pj["culprit_stability"] = std::move(notes.stability);
  // How the window reached rank 0 (the only fields a flat and a node gather's packets differ in).
  if (!w.gather.mode.empty())
    pj["gather"] = {{"mode", w.gather.mode}, {"nodes", w.gather.nodes}, {"messages", w.gather.messages}, {"bytes", w.gather.bytes}};
  const std::int64_t first = w.matrix.first_step(), last = w.matrix.first_step() + (w.matrix.steps() - 1);
  im.place_changes(notes.changes, pj, first, last);
  im.keep_line(window_line(e, index));
  const std::string packet = pj.dump();
  if (im.count == 0) {
    im.first_packet = packet.size();
    im.ranks = w.ranks;
  }
  ++im.count;
  im.write_packet(std::move(pj), packet, index, first, last);
  im.steps_scored += e.steps;
  im.gather_failures += e.gather_ok ? 0 : 1;
  im.change_points += static_cast<std::int64_t>(notes.changes.size());
  im.report_window(e);
  if (im.dump.is_open()) {
    std::ostringstream out;
    formats::write_jsonl(out, w);
    im.write(im.dump, out.str(), im.cfg.dump);
  }
  if (keeps_windows()) im.kept.push_back(w);
  else im.accumulate(w);
  const std::int64_t t1 = inject::monotonic_ns();
  im.scoring_s += static_cast<double>(t1 - t0) * 1e-9;
  im.count_gather(w, t1);
  im.sample_rss(index);
}

void Rank0Windows::set_reference(frontier::Reference ref) { impl_->reference = std::move(ref); }

int Rank0Windows::count() const { return impl_->count; }

std::string Rank0Windows::window_lines() const {
  const auto& im = *impl_;
  std::string out = frontier::strprintf("# %5s %16s %9s  %-26s %6s  %s\n", "window", "steps", "median", "top stage", "share",
                                        "diagnosis");
  out += frontier::strprintf("# %5s %16s %9s  %-26s %6s\n", "", "", "step ms", "", "");
  for (const auto& l : im.head_lines) out += l + "\n";
  if (im.lines_left_out > 0) out += "  ... " + std::to_string(im.lines_left_out) + " window(s) left out\n";
  for (const auto& l : im.tail_lines) out += l + "\n";
  return out;
}

frontier::Evidence Rank0Windows::run_evidence(MakespanCheck& makespan, std::vector<formats::RankInfo>& ranks) {
  auto& im = *impl_;
  ranks = im.ranks;
  if (keeps_windows()) {
    const auto all = concat(im.kept);
    auto e = im.diagnosed(frontier::evaluate(all.matrix, im.cfg.label, all.telemetry));
    makespan = makespan_check(e, all.matrix);
    return e;
  }
  auto tel = im.tel;
  if (im.reasons_dropped > 0)
    tel.reasons.push_back(std::to_string(im.reasons_dropped) + " further distinct telemetry reasons not listed");
  auto e = im.diagnosed(im.acc->finish(tel));
  makespan.wall_sum_s = im.wall_sum;
  makespan.gap = e.exposed_makespan_s > 0 ? std::abs(e.exposed_makespan_s - im.wall_sum) / e.exposed_makespan_s : 0.0;
  return e;
}

Reporters& Rank0Windows::reporters() { return impl_->reporters; }

std::string Rank0Windows::finish() {
  auto& im = *impl_;
  if (im.summaries.is_open()) im.summaries.close();
  if (im.dump.is_open()) {
    im.dump.close();
    if (!im.dump) im.fail("cannot write " + im.cfg.dump);
    if (im.error.empty() && std::rename(im.dump_tmp.c_str(), im.cfg.dump.c_str()) != 0)
      im.fail("cannot rename " + im.dump_tmp + " to " + im.cfg.dump);
    if (!im.error.empty()) std::remove(im.dump_tmp.c_str());
  }
  return im.error;
}

ordered_json Rank0Windows::summaries() const {
  ordered_json out = ordered_json::array();
  if (impl_->cfg.out_dir.empty()) return out;
  std::ifstream in(impl_->cfg.out_dir + "/windows.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // A line cut short by a full disk (the write error is already kept for finish()) ends the list.
    auto j = ordered_json::parse(line, nullptr, false);
    if (j.is_discarded()) break;
    out.push_back(std::move(j));
  }
  return out;
}

std::size_t Rank0Windows::first_packet_bytes() const { return impl_->first_packet; }
double Rank0Windows::scoring_s() const { return impl_->scoring_s; }

nlohmann::ordered_json Rank0Windows::gather_json() const {
  const auto& im = *impl_;
  if (im.gathered == 0) return nullptr;
  const double n = im.gathered;
  return {{"mode", im.gather_mode},
          {"nodes", im.gather_nodes},
          {"windows", im.gathered},
          {"rank0_messages_per_window", static_cast<double>(im.gather_messages) / n},
          {"rank0_bytes_per_window", static_cast<double>(im.gather_bytes) / n},
          {"rank0_close_to_scored_mean_s", im.latency_sum_s / n},
          {"rank0_close_to_scored_max_s", im.latency_max_s}};
}

ordered_json Rank0Windows::rss_json() const {
  const auto& im = *impl_;
  double slope = 0;
  const double den = im.fitted * im.sxx - im.sx * im.sx;
  if (im.fitted >= 2 && den > 0) slope = (im.fitted * im.sxy - im.sx * im.sy) / den;
  return {{"first_kb", im.rss_first},
          {"last_kb", im.rss_last},
          {"max_kb", im.rss_max},
          {"growth_kb_per_window", slope},
          {"windows_fitted", im.fitted},
          {"sample_every", im.rss_stride},
          {"per_window_kb", im.rss_series}};
}

}  // namespace sf::testbed::detail

namespace sf::testbed {

using nlohmann::ordered_json;

ordered_json window_summary(const ordered_json& packet, int index, const std::string& packet_error) {
  const auto& diag = packet["diagnosis"];
  ordered_json s = {{"index", index},
                    {"first_step", packet["window"]["first_step"]},
                    {"last_step", packet["window"]["last_step"]},
                    {"shares", packet["shares"]},
                    {"labels", packet["labels"]},
                    {"diagnosis", {{"stage", diag["stage"]}, {"rank", diag["rank"]}, {"basis", diag["basis"]},
                                   {"excess_s", diag["excess_s"]}}},
                    {"routing_set", packet["routing_set"]},
                    {"median_step_s", packet["median_step_s"]},
                    {"gather_ok", packet["telemetry"]["gather_ok"]},
                    {"packet_written", packet_error.empty()}};
  if (packet.contains("whatif") && packet["whatif"].is_object()) {
    const auto& w = packet["whatif"];
    s["whatif"] = {{"available", w["available"]}, {"actual_s", w["actual_s"]}, {"healed_s", w["all_healed_s"]},
                   {"ideal_s", w["ideal_s"]}, {"gains", w["gains"]}};
  }
  if (!packet_error.empty()) s["packet_error"] = packet_error;
  return s;
}

}  // namespace sf::testbed
