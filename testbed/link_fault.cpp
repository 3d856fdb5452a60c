// The link_slow fault: a real rate limit on the target host's link, applied with `tc … tbf` from
// the fault's onset to its offset by one rank on that host (local rank 0), removed at the offset,
// at the end of the run and when the run unwinds. The link is the one SF_LINK_DEV names —
// scripts/testhosts.sh sets it to the test host's veth; on a real machine a user must name a
// link they may throttle (docs/cluster.md), so nothing is ever shaped without being asked.
#include "detail.h"

#include "sf/check/check.h"
#include "sf/recorder/mpi_transport.h"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace sf::testbed::detail {

namespace {

/// Runs `tc ARGS…` without a shell; "" on success, else one line saying what failed.
std::string run_tc(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s{"tc"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, "tc", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  std::string cmd;
  for (const auto& a : argv_s) cmd += (cmd.empty() ? "" : " ") + a;
  if (err != 0) return "cannot start `" + cmd + "`: " + std::strerror(err);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return "`" + cmd + "`: waitpid: " + std::strerror(errno);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "`" + cmd + "` failed (exit " + std::to_string(WEXITSTATUS(status)) + ")";
  return "";
}

}  // namespace

LinkFault::LinkFault(const inject::FaultPlan& plan, bool shaper) : plan_(plan), shaper_(shaper) {
  if (const char* d = std::getenv("SF_LINK_DEV"); d && *d) dev_ = d;
}

LinkFault::~LinkFault() {
  if (on_) run_tc({"qdisc", "del", "dev", dev_, "root"});
}

std::string LinkFault::probe() const {
  if (!shaper_) return "";
  if (dev_.empty())
    return "link_slow needs a link it may throttle: SF_LINK_DEV is not set (scripts/testhosts.sh sets it; docs/cluster.md)";
  return run_tc({"qdisc", "show", "dev", dev_});
}

void LinkFault::at_step(std::int64_t step) {
  if (!shaper_) return;
  const bool want = plan_.active(plan_.ranks.empty() ? -1 : plan_.ranks.front(), step);
  if (want == on_) return;
  std::string err;
  if (want) {
    // Burst: 10 ms at the rate (at least 16 KiB, the qdisc's floor for a 1500-byte MTU);
    // queue: up to 400 ms of packets before the bucket drops (TCP then paces itself).
    const double bytes_per_s = plan_.rate_mbit * 1e6 / 8;
    const long burst = std::max(16384L, static_cast<long>(bytes_per_s * 0.010));
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.0fkbit", plan_.rate_mbit * 1000);
    err = run_tc({"qdisc", "replace", "dev", dev_, "root", "tbf", "rate", rate, "burst", std::to_string(burst), "latency",
                  "400ms"});
  } else {
    err = run_tc({"qdisc", "del", "dev", dev_, "root"});
  }
  if (err.empty()) {
    on_ = want;
    (want ? applied_at_ : removed_at_) = step;
  } else {
    failures_ += err + "; ";
    std::fprintf(stderr, "sf-testbed run: link_slow on %s at step %lld: %s\n", plan_.host.c_str(), static_cast<long long>(step),
                 err.c_str());
  }
}

void LinkFault::finish() {
  if (on_ && run_tc({"qdisc", "del", "dev", dev_, "root"}).empty()) on_ = false;
}

std::string resolve_link_plan(inject::FaultPlan& plan, const RunConfig& cfg, MPI_Comm world, int rank, int size,
                              bool& shaper) {
  shaper = false;
  // Every rank's host and node rank, as the recorder will report them.
  const auto id = recorder::make_mpi_transport(world)->identity();
  std::array<char, 64> host{};
  std::snprintf(host.data(), host.size(), "%s", id.hostname.c_str());
  std::vector<int> nodes(static_cast<std::size_t>(size)), locals(static_cast<std::size_t>(size));
  std::vector<char> hosts(static_cast<std::size_t>(size) * host.size());
  SF_MPI_CHECK(MPI_Allgather(&id.node_rank, 1, MPI_INT, nodes.data(), 1, MPI_INT, world));
  SF_MPI_CHECK(MPI_Allgather(&id.local_rank, 1, MPI_INT, locals.data(), 1, MPI_INT, world));
  SF_MPI_CHECK(MPI_Allgather(host.data(), static_cast<int>(host.size()), MPI_CHAR, hosts.data(), static_cast<int>(host.size()),
                             MPI_CHAR, world));
  const int node_count = *std::max_element(nodes.begin(), nodes.end()) + 1;
  if (node_count < 2) return "link_slow needs ranks on at least two hosts (a link between them); all ranks share one host";
  // The hidden target: the host of the drawn (or given) rank.
  const int target_rank = cfg.fault.target_ranks.empty() ? inject::draw_targets(cfg.seed, size, 1).front() : cfg.fault.target_ranks.front();
  const int node = nodes[static_cast<std::size_t>(target_rank)];
  plan.ranks.clear();
  for (int r = 0; r < size; ++r)
    if (nodes[static_cast<std::size_t>(r)] == node) plan.ranks.push_back(r);
  plan.host = std::string(hosts.data() + static_cast<std::size_t>(target_rank) * host.size());
  plan.rate_mbit = cfg.link_rate_mbit;
  plan.delay_ms = 0;
  shaper = nodes[static_cast<std::size_t>(rank)] == node && locals[static_cast<std::size_t>(rank)] == 0;
  return "";
}

}  // namespace sf::testbed::detail
