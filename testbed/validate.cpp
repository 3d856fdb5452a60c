// `sf-testbed validate`: FALCON's validation passes (§5, "multi-level mitigation" starts with
// them). A point-to-point pass times every directed link of the ranks' ring — 2 rounds for an even
// ring, 3 for an odd one, so no rank is in two transfers at once — and names links slower than a
// threshold × the median of their peers: links of the same class (within a host, between hosts:
// shared memory and a NIC are not peers) that leave other hosts. A compute pass times a calibrated GEMM on each rank, one rank at a
// time (ranks may share cores), and names ranks slower than threshold × the median of the other ranks: Eigen on the
// rank's core, or with --device cuda a cuBLAS GEMM on the rank's GPU timed by cudaEvents.
#include "detail.h"

#include "sf/check/check.h"
#include "sf/recorder/mpi_transport.h"

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace sf::testbed {

using nlohmann::ordered_json;

namespace {

constexpr int kTagData = 101, kTagAck = 102;
constexpr int kMaxRounds = 3;

struct Link {
  int from = -1, to = -1;
  double seconds = 0;
  bool inter = false;  ///< between two hosts (else within one)
  double ratio = 0;    ///< seconds / median of the class
  bool slow = false;
};

/// The round in which ring edge (i, i+1 mod n) is measured: edges alternate, and an odd ring's
/// closing edge gets a third round (every rank is in at most one edge per round).
int round_of(int i, int n) { return (n % 2 == 1 && i == n - 1) ? 2 : i % 2; }

/// One directed link: `from` sends `bytes` to `to`, which acknowledges each message; the
/// sender's fastest of `reps` round trips (after a warm-up). The fastest, because contention on
/// a shared machine only ever slows a try down, while a degraded link is slow in every try.
double transfer(MPI_Comm comm, int rank, int from, int to, std::vector<char>& buf, int reps) {
  const int n = static_cast<int>(buf.size());
  char ack = 0;
  double best = 0;
  for (int k = 0; k < reps + 1; ++k) {  // k = 0: warm-up (connection set-up, first touch)
    if (rank == from) {
      const double t0 = MPI_Wtime();
      SF_MPI_CHECK(MPI_Send(buf.data(), n, MPI_BYTE, to, kTagData, comm));
      SF_MPI_CHECK(MPI_Recv(&ack, 1, MPI_BYTE, to, kTagAck, comm, MPI_STATUS_IGNORE));
      const double t = MPI_Wtime() - t0;
      if (k == 1 || (k > 1 && t < best)) best = t;
    } else if (rank == to) {
      SF_MPI_CHECK(MPI_Recv(buf.data(), n, MPI_BYTE, from, kTagData, comm, MPI_STATUS_IGNORE));
      SF_MPI_CHECK(MPI_Send(&ack, 1, MPI_BYTE, from, kTagAck, comm));
    }
  }
  return best;
}

/// A barrier that sleeps while it waits. Open MPI's blocking calls poll, so ranks waiting for
/// their turn would take the CPU from the pair being measured whenever ranks share cores (test
/// hosts on one machine, an oversubscribed node); this one polls every 200 µs and sleeps between.
void quiet_barrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  SF_MPI_CHECK(MPI_Ibarrier(comm, &req));
  int done = 0;
  for (;;) {
    SF_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// The engine's median (frontier::median_inplace), of a copy; 0 for none.
double median_of(std::vector<double> v) { return v.empty() ? 0 : frontier::median_inplace(v); }

/// Seconds of one n³ single-precision GEMM on this rank: the fastest of `reps` timed products
/// after one warm-up (contention only slows a try), `repeat` products per timed one (the injected
/// slowdown).
double gemm_seconds(int n, int reps, int repeat) {
  const Eigen::MatrixXf a = Eigen::MatrixXf::Constant(n, n, 0.5f), b = Eigen::MatrixXf::Constant(n, n, 0.25f);
  Eigen::MatrixXf c(n, n);
  c.noalias() = a * b;
  std::vector<double> t;
  for (int k = 0; k < reps; ++k) {
    const double t0 = MPI_Wtime();
    for (int j = 0; j < repeat; ++j) c.noalias() = a * b;
    t.push_back(MPI_Wtime() - t0);
  }
  volatile float sink = c(0, 0);  // keep the products
  (void)sink;
  return *std::min_element(t.begin(), t.end());
}

std::vector<Link> classify_links(const std::vector<double>& all, std::size_t stride, const std::vector<formats::RankInfo>& ids,
                                 double threshold) {
  std::vector<Link> links;
  const auto size = ids.size();
  for (std::size_t r = 0; r < size; ++r)
    for (int k = 0; k < kMaxRounds; ++k) {
      const double to = all[r * stride + 2 * static_cast<std::size_t>(k)];
      if (to < 0) continue;
      Link l;
      l.from = static_cast<int>(r);
      l.to = static_cast<int>(to);
      l.seconds = all[r * stride + 2 * static_cast<std::size_t>(k) + 1];
      l.inter = ids[static_cast<std::size_t>(l.from)].node_rank != ids[static_cast<std::size_t>(l.to)].node_rank;
      links.push_back(l);
    }
  std::sort(links.begin(), links.end(), [](const Link& x, const Link& y) {
    return std::make_pair(x.from, x.to) < std::make_pair(y.from, y.to);
  });
  // A link's peers are the links of its class that leave other hosts: with few hosts, a degraded
  // host's own links would otherwise pull the median towards themselves (two hosts: half of the
  // inter-host links are its). One host only: the class median.
  auto host_of = [&](int r) { return ids[static_cast<std::size_t>(r)].node_rank; };
  for (auto& l : links) {
    std::vector<double> peers, cls;
    for (const auto& m : links) {
      if (m.inter != l.inter) continue;
      cls.push_back(m.seconds);
      if (host_of(m.from) != host_of(l.from)) peers.push_back(m.seconds);
    }
    const double ref = median_of(peers.empty() ? cls : peers);
    if (ref > 0) {
      l.ratio = l.seconds / ref;
      l.slow = l.ratio > threshold;
    }
  }
  return links;
}

/// Ranks whose GEMM is slower than threshold x the median of the other ranks'. Each rank against
/// the median of its peers, not of all: with two ranks the median of all is the mean of the slow
/// rank and the other, so a 4x rank would read 1.6x and never be named.
std::vector<int> slow_ranks(const std::vector<double>& gemm_s, double threshold, std::vector<double>* peer_median = nullptr) {
  std::vector<int> out;
  const auto size = gemm_s.size();
  if (peer_median) peer_median->assign(size, 0.0);
  for (std::size_t r = 0; r < size; ++r) {
    std::vector<double> peers;
    for (std::size_t q = 0; q < size; ++q)
      if (q != r) peers.push_back(gemm_s[q]);
    const double ref = median_of(peers.empty() ? gemm_s : peers);
    if (peer_median) (*peer_median)[r] = ref;
    if (ref > 0 && gemm_s[r] > threshold * ref) out.push_back(static_cast<int>(r));
  }
  return out;
}

struct Result {
  std::vector<formats::RankInfo> ids;
  std::vector<Link> links;
  std::vector<double> gemm_s;  // per rank
  double gemm_median = 0;
  std::vector<double> gemm_peer_median;  // per rank: the median of the other ranks' times
  std::vector<int> slow_ranks;
  std::vector<int> slow_links;  // indices into links
  int confirmed_links = 0;      // ring edges and ranks measured again before the verdict
  int confirmed_ranks = 0;
};

/// One rank's side of the passes: its links' fastest transfers (to, seconds per round where it
/// sent; -1 where it did not) and its fastest GEMM (-1 for good once one failed).
struct Pass {
  const ValidateConfig& cfg;
  MPI_Comm comm;
  int rank = 0, size = 1, local_rank = 0;
  int repeat = 1;  ///< products per timed GEMM: the injected --compute-slowdown on this rank
  std::array<double, 2 * kMaxRounds> mine{};
  double gemm = 0;

  Pass(const ValidateConfig& c, MPI_Comm m, int r, int n) : cfg(c), comm(m), rank(r), size(n) {
    mine.fill(-1);
    for (const auto& [q, f] : cfg.compute_slowdown)
      if (q == rank) repeat = std::max(1, static_cast<int>(std::lround(f)));
  }

  /// Ring edge (i, i+1 mod size) measured both ways, one after the other (links are not
  /// symmetric: egress shaping); each rank keeps the transfer it sent, the fastest so far.
  void measure_edge(int i, std::vector<char>& buf) {
    const int a = i, b = (i + 1) % size;
    if (rank != a && rank != b) return;
    const double ab = transfer(comm, rank, a, b, buf, cfg.reps);
    const double ba = transfer(comm, rank, b, a, buf, cfg.reps);
    const double t = rank == a ? ab : ba;
    double& best = mine[2 * static_cast<std::size_t>(round_of(i, size)) + 1];
    mine[2 * static_cast<std::size_t>(round_of(i, size))] = rank == a ? b : a;
    if (best < 0 || t < best) best = t;
  }

  /// One timed GEMM on this rank, kept when it is the fastest so far. On cuda a rank whose GEMM
  /// fails says why on its stderr and reports -1: every rank still meets every barrier, and rank
  /// 0 names the ranks in one line (exit 2), never a hang or a crash.
  void time_gemm(bool first) {
    if (gemm < 0) return;
    double t = -1;
    if (cfg.device == "cuda") {
      try {
        t = sim::cuda_gemm_seconds(local_rank, cfg.gemm_n, cfg.gemm_reps, repeat);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "sf-testbed validate: rank %d: cuBLAS GEMM failed: %s\n", rank, e.what());
      }
    } else {
      t = gemm_seconds(cfg.gemm_n, cfg.gemm_reps, repeat);
    }
    if (t < 0) gemm = -1;
    else if (first || t < gemm) gemm = t;
  }

  /// Sweeps over the whole ring: a link's time is its fastest over all sweeps, so its tries are
  /// spread over seconds — a burst of contention on a shared machine spoils a sweep, not a link.
  /// One link at a time unless asked otherwise: ranks that share cores (test hosts, an
  /// oversubscribed node) would otherwise measure each other.
  void p2p() {
    if (!cfg.p2p || size < 2) return;
    std::vector<char> buf(cfg.bytes, 1);
    const int edges = size == 2 ? 1 : size;
    for (int sweep = 0; sweep < cfg.sweeps; ++sweep)
      for (int round = 0; round < kMaxRounds; ++round) {
        quiet_barrier(comm);
        for (int i = 0; i < edges; ++i) {
          if (round_of(i, size) != round) continue;
          if (!cfg.parallel) quiet_barrier(comm);
          measure_edge(i, buf);
        }
      }
  }

  /// One rank at a time, every sweep.
  void compute() {
    if (!cfg.compute) return;
    for (int sweep = 0; sweep < cfg.sweeps; ++sweep)
      for (int r = 0; r < size; ++r) {
        quiet_barrier(comm);
        if (r == rank) time_gemm(sweep == 0);
      }
  }

  /// Rank 0: every rank's links (stride mine.size()) and GEMM times.
  void gather(std::vector<double>& all, std::vector<double>& gemm_s) {
    SF_MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
                            MPI_DOUBLE, 0, comm));
    SF_MPI_CHECK(MPI_Gather(&gemm, 1, MPI_DOUBLE, gemm_s.data(), 1, MPI_DOUBLE, 0, comm));
  }
};

/// Who is where: the transport resolves node rank and host name as the recorder reports them
/// (rank 0 holds every rank's; the others their own local rank only).
std::vector<formats::RankInfo> identities(MPI_Comm comm, int size, int& my_local_rank) {
  const auto id = recorder::make_mpi_transport(comm)->identity();
  my_local_rank = id.local_rank;
  std::array<char, 64> host{};
  std::snprintf(host.data(), host.size(), "%s", id.hostname.c_str());
  std::vector<int> nodes(static_cast<std::size_t>(size)), locals(static_cast<std::size_t>(size));
  std::vector<char> hosts(static_cast<std::size_t>(size) * host.size());
  SF_MPI_CHECK(MPI_Gather(&id.node_rank, 1, MPI_INT, nodes.data(), 1, MPI_INT, 0, comm));
  SF_MPI_CHECK(MPI_Gather(&id.local_rank, 1, MPI_INT, locals.data(), 1, MPI_INT, 0, comm));
  SF_MPI_CHECK(MPI_Gather(host.data(), static_cast<int>(host.size()), MPI_CHAR, hosts.data(), static_cast<int>(host.size()),
                          MPI_CHAR, 0, comm));
  std::vector<formats::RankInfo> ids;
  for (int r = 0; r < size; ++r)
    ids.push_back({r, locals[static_cast<std::size_t>(r)], nodes[static_cast<std::size_t>(r)],
                   std::string(hosts.data() + static_cast<std::size_t>(r) * host.size())});
  return ids;
}

/// What rank 0 has measured again before calling it slow: [links n, ring edges..., ranks n,
/// ranks...], broadcast to every rank. Each link (its ring edge) and rank past the threshold.
std::vector<int> to_confirm(const Pass& p, const std::vector<double>& all, const Result& res) {
  std::vector<int> again;
  if (p.rank == 0) {
    std::vector<int> edges, ranks;
    for (const auto& l : classify_links(all, p.mine.size(), res.ids, p.cfg.threshold))
      if (l.slow) {
        const int e = l.to == (l.from + 1) % p.size ? l.from : l.to;  // the ring edge (e, e + 1) it belongs to
        if (std::find(edges.begin(), edges.end(), e) == edges.end()) edges.push_back(e);
      }
    if (p.cfg.compute)
      for (int r : slow_ranks(res.gemm_s, p.cfg.threshold)) ranks.push_back(r);
    again.push_back(static_cast<int>(edges.size()));
    again.insert(again.end(), edges.begin(), edges.end());
    again.push_back(static_cast<int>(ranks.size()));
    again.insert(again.end(), ranks.begin(), ranks.end());
  }
  int n_again = static_cast<int>(again.size());
  SF_MPI_CHECK(MPI_Bcast(&n_again, 1, MPI_INT, 0, p.comm));
  again.resize(static_cast<std::size_t>(n_again));
  SF_MPI_CHECK(MPI_Bcast(again.data(), n_again, MPI_INT, 0, p.comm));
  return again;
}

/// Confirmation: what reads slow is measured again, alone, before it is called slow. A shared
/// machine slows a link or a rank now and then (a 1 ms shared-memory link read 9.5x its peers
/// once, beside a busy build): each link and rank past the threshold gets cfg.sweeps more tries,
/// one at a time, and keeps its fastest.
void confirm(Pass& p, std::vector<double>& all, Result& res) {
  const auto again = to_confirm(p, all, res);
  const int n_edges = again[0];
  const int n_ranks = again[static_cast<std::size_t>(n_edges) + 1];
  res.confirmed_links = n_edges;
  res.confirmed_ranks = n_ranks;
  if (n_edges + n_ranks == 0) return;
  std::vector<char> buf(p.cfg.bytes, 1);
  for (int sweep = 0; sweep < p.cfg.sweeps; ++sweep) {
    for (int k = 0; k < n_edges; ++k) {
      quiet_barrier(p.comm);
      p.measure_edge(again[static_cast<std::size_t>(k) + 1], buf);
    }
    for (int k = 0; k < n_ranks; ++k) {
      quiet_barrier(p.comm);
      if (again[static_cast<std::size_t>(n_edges) + 2 + k] == p.rank) p.time_gemm(false);
    }
  }
  quiet_barrier(p.comm);
  p.gather(all, res.gemm_s);
}

/// Where the slow links point: hosts every one of whose outgoing (incoming) inter-host links is
/// slow, and the sentence that says so.
struct Attribution {
  std::set<std::string> hosts;
  std::vector<std::string> egress, ingress;
  std::string text;
};

Attribution attribute(const Result& res) {
  Attribution a;
  std::map<std::string, std::array<int, 4>> per_host;  // out, out slow, in, in slow
  for (const auto& l : res.links) {
    if (!l.inter) continue;
    auto& f = per_host[res.ids[static_cast<std::size_t>(l.from)].hostname];
    auto& t = per_host[res.ids[static_cast<std::size_t>(l.to)].hostname];
    ++f[0];
    f[1] += l.slow;
    ++t[2];
    t[3] += l.slow;
  }
  for (const auto& [h, c] : per_host) {
    if (c[0] > 0 && c[1] == c[0]) a.egress.push_back(h);
    if (c[2] > 0 && c[3] == c[2]) a.ingress.push_back(h);
  }
  for (const auto& id : res.ids) a.hosts.insert(id.hostname);
  if (res.slow_links.empty()) return a;
  if (a.hosts.size() == 2 && !a.egress.empty() && !a.ingress.empty())
    a.text = "slow links leave " + a.egress.front() + " for " + a.ingress.front() +
             "; with two hosts the sender's egress and the receiver's ingress cannot be told apart";
  else if (a.egress.size() == 1)
    a.text = "every link leaving " + a.egress.front() + " is slow: " + a.egress.front() + "'s link is degraded";
  else if (a.ingress.size() == 1)
    a.text = "every link entering " + a.ingress.front() + " is slow: " + a.ingress.front() + "'s link is degraded";
  else
    a.text = "slow links do not share one host";
  return a;
}

/// The hosts whose egress is degraded, as the report names them (none unless one host, or two).
std::vector<std::string> egress_named(const Attribution& a) {
  return a.egress.size() == 1 || a.hosts.size() == 2 ? a.egress : std::vector<std::string>{};
}

std::string validate_text(const ValidateConfig& cfg, const Result& res, const Attribution& a, bool pass) {
  using frontier::strprintf;
  const auto size = static_cast<int>(res.ids.size());
  auto who = [&](int r) { return res.ids[static_cast<std::size_t>(r)].hostname; };
  std::string text;
  text += strprintf("# sf-testbed validate  commit %s  %s  host %s\n", cfg.commit.c_str(), utc_now().c_str(), host_name().c_str());
  text += strprintf("# ranks %d on %zu host(s); slow: > %.3g x the median of its peers (links: same class, leaving other hosts; ranks: the other ranks)\n",
                    size, a.hosts.size(), cfg.threshold);
  if (cfg.p2p) {
    text += strprintf("# p2p: ring of directed links, %d round(s)%s; each the fastest of %d x %d acknowledged %zu-byte messages\n#\n",
                      size < 2 ? 0 : size % 2 ? 3 : 2,
                      cfg.parallel ? ", a round's links at once" : ", one link at a time", cfg.sweeps, cfg.reps, cfg.bytes);
    text += strprintf("# %5s %5s %-18s %-18s %-6s %10s %9s %s\n", "from", "to", "from host", "to host", "class", "MB/s", "x peers",
                      "verdict");
    for (const auto& l : res.links)
      text += strprintf("  %5d %5d %-18s %-18s %-6s %10.1f %9.2f %s\n", l.from, l.to, who(l.from).c_str(), who(l.to).c_str(),
                        l.inter ? "inter" : "intra", static_cast<double>(cfg.bytes) / l.seconds / 1e6, l.ratio,
                        l.slow ? "SLOW" : "ok");
    if (!a.text.empty()) text += strprintf("# %s\n", a.text.c_str());
    if (a.hosts.size() == 1)
      text += "# one host: its links are shared memory, measured under the host's own load (its other ranks and "
              "processes): a slow one says the host was busy, not that a wire is degraded\n";
  }
  if (cfg.compute) {
    text += strprintf("#\n# compute: %d^3 single-precision GEMM (%s), fastest of %d x %d, one rank at a time\n", cfg.gemm_n,
                      cfg.device == "cuda" ? "cuBLAS, cudaEvent-timed" : "Eigen", cfg.sweeps, cfg.gemm_reps);
    text += strprintf("# %5s %-18s %10s %9s %s\n", "rank", "host", "ms", "x peers", "verdict");
    for (int r = 0; r < size; ++r) {
      const double t = res.gemm_s[static_cast<std::size_t>(r)];
      const double ref = res.gemm_peer_median[static_cast<std::size_t>(r)];
      const bool slow = std::find(res.slow_ranks.begin(), res.slow_ranks.end(), r) != res.slow_ranks.end();
      text += strprintf("  %5d %-18s %10.3f %9.2f %s\n", r, who(r).c_str(), t * 1e3, ref > 0 ? t / ref : 0.0,
                        slow ? "SLOW" : "ok");
    }
  }
  if (res.confirmed_links + res.confirmed_ranks > 0)
    text += strprintf("# confirmed: %d link pair(s) and %d rank(s) that read slow were measured again (%d more sweep(s), "
                      "the fastest kept) before the verdict\n",
                      res.confirmed_links, res.confirmed_ranks, cfg.sweeps);
  text += strprintf("# result: %s (%zu slow link(s), %zu slow rank(s))\n", pass ? "PASS" : "FAIL", res.slow_links.size(),
                    res.slow_ranks.size());
  return text;
}

ordered_json validate_json(const ValidateConfig& cfg, const Result& res, const Attribution& a, bool pass) {
  auto who = [&](int r) { return res.ids[static_cast<std::size_t>(r)].hostname; };
  ordered_json j = provenance_json("sf.validate/1", cfg.argv, cfg.commit);
  j["ranks"] = res.ids.size();
  j["hosts"] = ordered_json(std::vector<std::string>(a.hosts.begin(), a.hosts.end()));
  j["threshold"] = cfg.threshold;
  j["p2p"] = {{"bytes", cfg.bytes}, {"reps", cfg.reps}, {"sweeps", cfg.sweeps}, {"parallel", cfg.parallel}};
  auto& links = j["links"] = ordered_json::array();
  for (const auto& l : res.links)
    links.push_back({{"from", l.from}, {"to", l.to}, {"from_host", who(l.from)}, {"to_host", who(l.to)},
                     {"class", l.inter ? "inter" : "intra"}, {"seconds", l.seconds},
                     {"mb_per_s", static_cast<double>(cfg.bytes) / l.seconds / 1e6}, {"ratio", l.ratio},
                     {"slow", l.slow}});
  j["confirmed"] = {{"link_pairs", res.confirmed_links}, {"ranks", res.confirmed_ranks}};
  j["slow_links"] = ordered_json::array();
  for (int i : res.slow_links)
    j["slow_links"].push_back({res.links[static_cast<std::size_t>(i)].from, res.links[static_cast<std::size_t>(i)].to});
  j["egress_degraded_hosts"] = ordered_json(egress_named(a));
  j["attribution"] = a.text;
  j["compute"] = {{"device", cfg.device}, {"gemm_n", cfg.gemm_n}, {"reps", cfg.gemm_reps}, {"seconds", res.gemm_s},
                  {"median_s", res.gemm_median}, {"peer_median_s", res.gemm_peer_median}};
  j["slow_ranks"] = res.slow_ranks;
  j["pass"] = pass;
  return j;
}

/// Rank 0, every measurement in: the ranks whose GEMM failed (exit 2), else the classes,
/// medians and verdicts into `report`.
int verdicts(const ValidateConfig& cfg, const std::vector<double>& all, std::size_t stride, Result& res,
             detail::ValidateReport& report) {
  report.root = true;
  std::vector<int> failed;
  for (std::size_t r = 0; r < res.gemm_s.size(); ++r)
    if (res.gemm_s[r] < 0) failed.push_back(static_cast<int>(r));
  if (!failed.empty()) {
    std::fprintf(stderr, "sf-testbed validate: the %s GEMM failed on rank(s) %s (each said why above); no compute verdict\n",
                 cfg.device.c_str(), frontier::format_rank_ranges(failed).c_str());
    return 2;
  }
  res.links = classify_links(all, stride, res.ids, cfg.threshold);
  for (std::size_t i = 0; i < res.links.size(); ++i)
    if (res.links[i].slow) res.slow_links.push_back(static_cast<int>(i));
  if (cfg.compute) {
    res.gemm_median = median_of(res.gemm_s);
    res.slow_ranks = slow_ranks(res.gemm_s, cfg.threshold, &res.gemm_peer_median);
  }
  const Attribution a = attribute(res);
  const bool pass = res.slow_links.empty() && res.slow_ranks.empty();
  report.text = validate_text(cfg, res, a, pass);
  report.json = validate_json(cfg, res, a, pass);
  report.pass = pass;
  report.attribution = a.text;
  report.egress = egress_named(a);
  return 0;
}

int validate_passes(const ValidateConfig& cfg, MPI_Comm world, detail::ValidateReport& report) {
  int rank = 0, size = 1;
  SF_MPI_CHECK(MPI_Comm_rank(world, &rank));
  SF_MPI_CHECK(MPI_Comm_size(world, &size));
  for (const auto& [r, f] : cfg.compute_slowdown)
    if (r >= size) {
      if (rank == 0)
        std::fprintf(stderr, "sf-testbed validate: --compute-slowdown rank %d outside 0..%d\n", r, size - 1);
      return 2;
    }
  MPI_Comm comm = MPI_COMM_NULL;
  SF_MPI_CHECK(MPI_Comm_dup(world, &comm));
  const recorder::CommOwner owner(comm);
  Pass p(cfg, comm, rank, size);
  Result res;
  res.ids = identities(comm, size, p.local_rank);
  p.p2p();
  quiet_barrier(comm);  // the last link's pair is still measuring
  p.compute();
  quiet_barrier(comm);  // the last rank is still computing
  std::vector<double> all(static_cast<std::size_t>(size) * p.mine.size());
  res.gemm_s.resize(static_cast<std::size_t>(size));
  p.gather(all, res.gemm_s);
  confirm(p, all, res);
  if (rank != 0) return 0;
  return verdicts(cfg, all, p.mine.size(), res, report);
}

}  // namespace

namespace detail {
int validate_world(const ValidateConfig& cfg, MPI_Comm world, ValidateReport& report) {
  return validate_passes(cfg, world, report);
}
}  // namespace detail

int run_validate(const ValidateConfig& cfg) {
  return detail::with_mpi("validate", MPI_THREAD_FUNNELED, [&] {
    detail::ValidateReport report;
    int rc = detail::validate_world(cfg, MPI_COMM_WORLD, report);
    if (rc == 0 && report.root) {
      if (!cfg.quiet) std::fputs(report.text.c_str(), stdout);
      if (!cfg.out.empty()) formats::write_file_atomic(cfg.out, report.json.dump(2) + "\n");
      rc = report.pass ? 0 : 1;  // FAIL is exit 1, with or without --check (issue 40)
    }
    return rc;
  });
}

}  // namespace sf::testbed
