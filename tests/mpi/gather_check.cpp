// The node gather against the flat one on the same contributions (issue 32). Every rank records
// synthetic steps; each window's payload travels both routes at once (a tee over a node transport
// and a flat one, on communicators of their own). Rank 0's recorder assembles the node route's
// windows as `run` does (its sink, on the telemetry thread) and writes OUT/node/window_NNN.json;
// the flat route's contributions are assembled with recorder::assemble_window into
// OUT/flat/window_NNN.json. Each packet's gather fields go beside it (window_NNN.gather.json), so
// the packets themselves can be compared byte for byte (check_gather.py).
//
//   gather_check OUT [--steps N] [--window W] [--deadline S] [--die-rank R --die-after-window K]
//                    [--late-rank R --late-s X]
//
// --late-rank: that rank sleeps X s after its last step, before the safe point that sends its last
// window (a starved rank whose last window comes after the rest of its node's, past its relay's
// wait).
// --die-rank: that rank SIGKILLs itself once it has sent window K (a relay dying mid-run; launch
// with --mca orte_enable_recovery 1 so the other ranks go on). The flat route is then not
// compared (its windows miss one rank, the node route's the relay's whole node), and the
// survivors leave without MPI_Finalize (see leave_without_finalize).
#include "sf/formats/formats.h"
#include "sf/frontier/frontier.h"
#include "sf/recorder/mpi_transport.h"
#include "sf/recorder/recorder.h"

#include <mpi.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rec = sf::recorder;
using nlohmann::ordered_json;

namespace {

/// Sends every payload both ways; the recorder's receives come from the node route, the flat
/// route's are kept for the second assembly.
class Tee final : public rec::Transport {
public:
  Tee(std::unique_ptr<rec::Transport> node, std::unique_ptr<rec::Transport> flat)
      : node_(std::move(node)), flat_(std::move(flat)) {}
  int rank() const override { return node_->rank(); }
  int size() const override { return node_->size(); }
  sf::formats::RankInfo identity() const override { return node_->identity(); }
  void send(int window, std::vector<std::byte> payload) override {
    flat_->send(window, payload);
    node_->send(window, std::move(payload));
  }
  std::vector<rec::Contribution> receive(int window, std::size_t max_bytes) override {
    poll_flat(window, max_bytes);
    return node_->receive(window, max_bytes);
  }
  void abandon(int window) override { node_->abandon(window); }
  void progress() override {
    flat_->progress();
    node_->progress();
  }
  void drain(double deadline_s) override {
    flat_->drain(deadline_s);
    node_->drain(deadline_s);
  }
  std::int64_t late_discarded() const override { return node_->late_discarded(); }
  void set_check(rec::ContributionCheck check) override { node_->set_check(std::move(check)); }
  void take_gather_stats(int window, sf::formats::GatherStats& out) override { node_->take_gather_stats(window, out); }
  std::vector<std::string> explain_missing(const std::vector<int>& missing) const override {
    return node_->explain_missing(missing);
  }

  /// Root: the flat route's contributions of `window` received so far.
  void poll_flat(int window, std::size_t max_bytes) {
    auto& got = flat_got_[window];
    if (got.empty()) got.resize(static_cast<std::size_t>(size()));
    for (auto& c : flat_->receive(window, max_bytes))
      if (c.rank >= 0 && c.rank < size() && !got[static_cast<std::size_t>(c.rank)]) got[static_cast<std::size_t>(c.rank)] = std::move(c);
  }
  bool flat_complete(int window) const {
    const auto it = flat_got_.find(window);
    if (it == flat_got_.end()) return false;
    for (const auto& c : it->second)
      if (!c) return false;
    return true;
  }
  std::vector<std::optional<rec::Contribution>> take_flat(int window, sf::formats::GatherStats& stats) {
    flat_->take_gather_stats(window, stats);
    return std::move(flat_got_[window]);
  }

private:
  std::unique_ptr<rec::Transport> node_, flat_;
  std::map<int, std::vector<std::optional<rec::Contribution>>> flat_got_;
};

void sleep_ms(double ms) {
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(std::fmod(ms, 1000.0) * 1e6)};
  nanosleep(&ts, nullptr);
}

void write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text << "\n";
  if (!f) {
    std::fprintf(stderr, "gather_check: cannot write %s\n", p.c_str());
    std::exit(2);
  }
}

/// The window's packet as `run` writes it (evidence + identities) without its gather fields,
/// and those fields apart.
void write_packet(const std::filesystem::path& dir, int index, const sf::formats::Window& w) {
  const auto e = sf::frontier::evaluate(w.matrix, sf::frontier::LabelConfig{}, w.telemetry);
  char name[32];
  std::snprintf(name, sizeof name, "window_%03d", index);
  write(dir / (std::string(name) + ".json"), sf::formats::evidence_to_json(e, w.ranks).dump());
  const ordered_json g = {{"mode", w.gather.mode}, {"nodes", w.gather.nodes}, {"messages", w.gather.messages},
                          {"bytes", w.gather.bytes}};
  write(dir / (std::string(name) + ".gather.json"), g.dump());
}

/// After a rank was killed: Open MPI 4.1's MPI_Finalize fences with every process of the job,
/// the dead one included, and can wait for it until the launcher is stopped (seen in CI and
/// across namespace hosts: every rank in ompi_mpi_finalize, every file written). The survivors
/// wait for rank 0 to have written its files, then leave without it; the launcher reports the
/// missing finalize and the check that follows reads the files.
[[noreturn]] void leave_without_finalize(int rank, int size, int dead_rank) {
  constexpr int kDoneTag = 7007;
  if (rank == 0) {
    for (int r = 1; r < size; ++r)
      if (r != dead_rank) MPI_Send(nullptr, 0, MPI_BYTE, r, kDoneTag, MPI_COMM_WORLD);
  } else {
    MPI_Recv(nullptr, 0, MPI_BYTE, 0, kDoneTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(0);
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gather_check OUT [--steps N] [--window W] [--deadline S] [--die-rank R --die-after-window K] "
                         "[--late-rank R --late-s X]\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  int steps = 24, window = 6, die_rank = -1, die_after = -1, late_rank = -1;
  double deadline = 20, late_s = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--steps") steps = std::atoi(v);
    else if (k == "--window") window = std::atoi(v);
    else if (k == "--deadline") deadline = std::atof(v);
    else if (k == "--die-rank") die_rank = std::atoi(v);
    else if (k == "--die-after-window") die_after = std::atoi(v);
    else if (k == "--late-rank") late_rank = std::atoi(v);
    else if (k == "--late-s") late_s = std::atof(v);
    else {
      std::fprintf(stderr, "gather_check: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Tee tee(rec::make_mpi_transport(MPI_COMM_WORLD, {rec::GatherMode::node, 0.5 * deadline}),
          rec::make_mpi_transport(MPI_COMM_WORLD, {rec::GatherMode::flat, 0.5 * deadline}));
  rec::RecorderConfig cfg;
  cfg.window_steps = window;
  cfg.gather_deadline_s = deadline;
  if (rank == 0) {
    std::filesystem::create_directories(out / "node");
    std::filesystem::create_directories(out / "flat");
  }
  std::vector<int> windows;
  rec::Recorder r(cfg, tee, nullptr, [&](sf::formats::Window&& w, int index) {
    write_packet(out / "node", index, w);
    windows.push_back(index);
  });
  MPI_Barrier(MPI_COMM_WORLD);
  const int S = static_cast<int>(cfg.stages.size());
  for (int t = 0; t < steps; ++t) {
    r.begin_step(t);
    for (int s = 0; s < S; ++s) {
      r.begin_stage(s);
      sleep_ms(0.5 + 0.1 * ((rank * 7 + s * 3 + t) % 5));  // rank- and step-dependent, deterministic shape
      r.end_stage(s);
    }
    r.end_step();
    if (rank == late_rank && t == steps - 1) sleep_ms(late_s * 1e3);  // its last window leaves late
    r.safe_point();
    if (rank == die_rank && r.windows_closed() > die_after) {
      r.safe_point();  // the closed window's bundle on its way, if the node was in
      std::raise(SIGKILL);
    }
  }
  r.finish();
  if (rank == 0) {
    // The flat route's stragglers: up to the deadline for the windows it does not hold whole.
    const auto until = rec::now_ns() + static_cast<std::int64_t>(deadline * 1e9);
    const std::size_t max_bytes = rec::payload_bytes(cfg, window);
    for (int w : windows)
      while (!tee.flat_complete(w) && rec::now_ns() < until) {
        tee.progress();
        tee.poll_flat(w, max_bytes);
        sleep_ms(1);
      }
    for (int w : windows) {
      sf::formats::GatherStats stats;
      auto got = tee.take_flat(w, stats);
      if (got.empty()) got.resize(static_cast<std::size_t>(size));
      auto fw = rec::assemble_window(cfg, size, w, std::move(got));
      fw.gather = stats;
      write_packet(out / "flat", w, fw);
    }
    std::printf("gather_check: %zu windows of %d ranks written to %s\n", windows.size(), size, out.c_str());
  }
  if (die_rank >= 0) leave_without_finalize(rank, size, die_rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rc = 2;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gather_check: %s\n", e.what());
  }
  MPI_Finalize();
  return rc;
}
