// Stragglers nobody injected into a stage (issue 38): the testbed slows a target rank's whole
// process from outside and leaves its stages alone, as a busy machine or a misbehaving neighbour
// would. cpu_share pins the rank's threads to one core beside busy processes; pause has a
// supervisor process stop and continue it (SIGSTOP/SIGCONT) in bursts; cgroup puts it in a cgroup
// of its own with a CPU quota. Each is undone at the fault's offset, at the end, and on
// destruction; helpers die with the rank (PR_SET_PDEATHSIG) and a paused rank is always continued.
#include "detail.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sf::testbed::detail {

namespace {

using inject::StragglerKind;

/// Every thread of this process (its tasks in /proc).
std::vector<pid_t> own_threads() {
  std::vector<pid_t> out;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    closedir(d);
  }
  return out;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

bool write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  return static_cast<bool>(f);
}

/// A forked child that does only async-signal-safe work and dies with its parent.
pid_t fork_child() {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);  // the parent died before prctl took effect
  }
  return pid;
}

void sleep_ns(long long ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000LL), static_cast<long>(ns % 1000000000LL)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

/// The pause supervisor (a child process): stops its parent for stop_ns of every period_ns, after
/// an initial phase, until SIGTERM; always leaves it running.
[[noreturn]] void pause_supervisor(long long stop_ns, long long period_ns, long long phase_ns) {
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, nullptr);
  const pid_t parent = getppid();
  sleep_ns(phase_ns);
  while (!g_stop && getppid() == parent) {
    kill(parent, SIGSTOP);
    sleep_ns(stop_ns);
    kill(parent, SIGCONT);
    if (g_stop) break;
    sleep_ns(period_ns - stop_ns);
  }
  kill(parent, SIGCONT);
  _exit(0);
}

/// The cgroup directories this machine offers for a CPU quota: cgroup v1's cpu controller, or
/// a cgroup v2 hierarchy with the cpu controller.
struct CgroupRoot {
  std::string dir;
  bool v2 = false;
};
std::optional<CgroupRoot> cgroup_root() {
  struct stat st {};
  if (stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", &st) == 0) return CgroupRoot{"/sys/fs/cgroup/cpu", false};
  std::ifstream c("/sys/fs/cgroup/cgroup.controllers");
  std::string line;
  if (c && std::getline(c, line) && (" " + line + " ").find(" cpu ") != std::string::npos) return CgroupRoot{"/sys/fs/cgroup", true};
  return std::nullopt;
}

/// This process's cgroup path under the cpu controller (v1) or the unified hierarchy (v2).
std::string current_cgroup(bool v2) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    // id:controllers:path
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (v2 ? ctl.empty() : (("," + ctl + ",").find(",cpu,") != std::string::npos)) return path;
  }
  return "/";
}

}  // namespace

Straggler::Straggler(const inject::FaultPlan& plan, int rank)
    : plan_(plan), target_(plan.straggler != StragglerKind::none && plan.targets(rank)), rank_(rank) {}

Straggler::~Straggler() { stop(); }

std::string Straggler::probe() {
  if (!target_ || plan_.straggler != StragglerKind::cgroup) return "";
  const auto root = cgroup_root();
  if (!root) return "no cgroup cpu controller on this machine (neither /sys/fs/cgroup/cpu nor a v2 hierarchy with cpu)";
  const std::string dir = root->dir + "/sf-straggler-probe-" + std::to_string(getpid());
  if (mkdir(dir.c_str(), 0755) != 0) return errno_text(("cannot create a cgroup under " + root->dir).c_str());
  const bool ok = root->v2 ? write_text(dir + "/cpu.max", "50000 100000") : write_text(dir + "/cpu.cfs_quota_us", "50000");
  rmdir(dir.c_str());
  if (!ok) return "cannot set a CPU quota on a cgroup under " + root->dir;
  return "";
}

void Straggler::at_step(std::int64_t step) {
  if (!target_) return;
  const bool want = step >= plan_.onset && step < plan_.offset;
  if (want && !on_) start();
  if (!want && on_) stop();
}

void Straggler::start() {
  on_ = true;
  switch (plan_.straggler) {
    case StragglerKind::cpu_share: start_cpu_share(); break;
    case StragglerKind::pause: start_pause(); break;
    case StragglerKind::cgroup: start_cgroup(); break;
    case StragglerKind::none: break;
  }
}

void Straggler::start_cpu_share() {
  // One core: the one this thread runs on now; every thread of the rank goes there, and the busy
  // processes with it. The scheduler shares the core between them; the other ranks keep theirs.
  const int cpu = std::max(0, sched_getcpu());
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  CPU_ZERO(&saved_mask_);
  if (sched_getaffinity(0, sizeof saved_mask_, &saved_mask_) != 0) failures_ += errno_text("sched_getaffinity") + "; ";
  for (pid_t tid : own_threads())
    if (sched_setaffinity(tid, sizeof one, &one) != 0) failures_ += errno_text("sched_setaffinity") + "; ";
  pinned_ = true;
  const int hogs = static_cast<int>(plan_.strength);
  for (int i = 0; i < hogs; ++i) {
    const pid_t pid = fork_child();
    if (pid == 0) {
      sched_setaffinity(0, sizeof one, &one);
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
    if (pid < 0) failures_ += errno_text("fork") + "; ";
    else children_.push_back(pid);
  }
}

void Straggler::start_pause() {
  const long long period = 100'000'000LL;
  const auto stop = static_cast<long long>(plan_.strength * static_cast<double>(period));
  // A phase drawn from the rank, so that pauses do not line up with step boundaries.
  const long long phase = (static_cast<long long>(rank_) * 37'000'000LL + 13'000'000LL) % period;
  const pid_t pid = fork_child();
  if (pid == 0) pause_supervisor(stop, period, phase);
  if (pid < 0) failures_ += errno_text("fork") + "; ";
  else children_.push_back(pid);
}

void Straggler::start_cgroup() {
  const auto root = cgroup_root();
  if (!root) {
    failures_ += "no cgroup cpu controller; ";
    return;
  }
  cgroup_v2_ = root->v2;
  sweep_stale_straggler_cgroups(root->dir);
  cgroup_home_ = root->dir + current_cgroup(root->v2);
  cgroup_dir_ = root->dir + "/sf-straggler-" + std::to_string(getpid());
  if (mkdir(cgroup_dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    failures_ += errno_text("mkdir cgroup") + "; ";
    cgroup_dir_.clear();
    return;
  }
  const long long period = 100000;
  const auto quota = static_cast<long long>(plan_.strength * static_cast<double>(period));
  const bool quota_ok = root->v2 ? write_text(cgroup_dir_ + "/cpu.max", std::to_string(quota) + " " + std::to_string(period))
                                 : write_text(cgroup_dir_ + "/cpu.cfs_period_us", std::to_string(period)) &&
                                       write_text(cgroup_dir_ + "/cpu.cfs_quota_us", std::to_string(quota));
  if (!quota_ok) failures_ += "cannot write the cgroup's CPU quota; ";
  if (!write_text(cgroup_dir_ + "/cgroup.procs", std::to_string(getpid()))) failures_ += "cannot move the rank into its cgroup; ";
}

void Straggler::stop() {
  if (!on_) return;
  on_ = false;
  for (pid_t pid : children_) {
    kill(pid, plan_.straggler == StragglerKind::pause ? SIGTERM : SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  children_.clear();
  if (plan_.straggler == StragglerKind::pause) kill(getpid(), SIGCONT);  // never left stopped
  if (pinned_) {
    for (pid_t tid : own_threads()) sched_setaffinity(tid, sizeof saved_mask_, &saved_mask_);
    pinned_ = false;
  }
  if (!cgroup_dir_.empty()) {
    write_text(cgroup_home_ + "/cgroup.procs", std::to_string(getpid()));
    rmdir(cgroup_dir_.c_str());
    cgroup_dir_.clear();
  }
}

void Straggler::finish() { stop(); }

}  // namespace sf::testbed::detail
