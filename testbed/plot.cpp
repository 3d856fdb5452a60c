// --plot: a picture of a run, drawn by python/sf_torch/plot.py (matplotlib, the project's plotting
// dependency) from the run's evidence packets. Spawned without a shell; its one line of failure
// becomes the caller's.
#include "sf/testbed/testbed.h"

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace sf::testbed {

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

std::string plot_file_problem(const std::string& file) {
  if (file.empty()) return "";
  if (!file.ends_with(".png") && !file.ends_with(".svg"))
    return "--plot " + file + ": expected a file name ending in .png or .svg";
  return "";
}

std::string plot_packets(const std::vector<std::string>& packet_files, const std::string& out) {
  const std::string python = env_or("SF_PYTHON", "/usr/bin/python3");
  const std::string script = env_or("SF_PLOT_SCRIPT", SF_PLOT_SCRIPT);
  if (::access(script.c_str(), R_OK) != 0)
    return "--plot " + out + ": the plotting script " + script + " is not readable (set SF_PLOT_SCRIPT to python/sf_torch/plot.py)";
  std::vector<std::string> args{python, script, out};
  args.insert(args.end(), packet_files.begin(), packet_files.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::array<int, 2> err{-1, -1};
  if (::pipe2(err.data(), O_CLOEXEC) != 0) return "--plot " + out + ": " + std::strerror(errno);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, python.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(err[1]);
  if (rc != 0) {
    ::close(err[0]);
    return "--plot " + out + ": cannot start " + python + ": " + std::strerror(rc) +
           " (expected Debian's python3 with python3-matplotlib, or SF_PYTHON)";
  }
  std::string said;
  std::array<char, 4096> buf{};
  for (ssize_t n; (n = ::read(err[0], buf.data(), buf.size())) > 0 || (n < 0 && errno == EINTR);)
    if (n > 0 && said.size() < 65536) said.append(buf.data(), static_cast<std::size_t>(n));
  ::close(err[0]);
  int status = -1;
  pid_t waited = -1;
  while ((waited = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (waited < 0) return "--plot " + out + ": cannot wait for " + python + ": " + std::strerror(errno);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  // The script's own line (the last one it wrote), else what ended it.
  while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
  if (const auto nl = said.rfind('\n'); nl != std::string::npos) said = said.substr(nl + 1);
  if (said.starts_with("plot.py: ")) said = said.substr(9);
  if (said.empty())
    said = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status)) : "killed by signal " + std::to_string(WTERMSIG(status));
  return "--plot " + out + ": " + said;
}

std::string plot_packets_text(const std::string& packets, const std::string& out) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec) dir = "/tmp";  // TMPDIR names no directory: the system's
  std::string path = (dir / "sf-plot-XXXXXX.jsonl").string();
  const int fd = ::mkstemps(path.data(), 6);
  if (fd < 0) return "--plot " + out + ": cannot make a temporary file: " + std::strerror(errno);
  std::size_t done = 0;
  while (done < packets.size()) {
    const ssize_t n = ::write(fd, packets.data() + done, packets.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return "--plot " + out + ": cannot write " + path + ": " + std::strerror(e);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const std::string why = plot_packets({path}, out);
  ::unlink(path.c_str());
  return why;
}

namespace {

class PlotReporter final : public Reporter {
public:
  PlotReporter(std::string file, std::string what) : file_(std::move(file)), what_(std::move(what)) {}
  std::string finish(const ReportedEnd& end) override {
    const std::string why = !end.packet_files.empty() ? plot_packets(end.packet_files, file_)
                            : !end.packets.empty()    ? plot_packets_text(end.packets, file_)
                            : end.packet_dir.empty()  ? "--plot " + file_ + ": no window packet to draw"
                                                      : "--plot " + file_ + ": no window packet was written to " + end.packet_dir;
    if (why.empty()) said_ = "plot: " + file_ + " (" + what_ + ")";
    return why;
  }
  std::string said() const override { return said_; }

private:
  std::string file_, what_, said_;
};

}  // namespace

std::unique_ptr<Reporter> plot_reporter(std::string file, std::string what) {
  return std::make_unique<PlotReporter>(std::move(file), std::move(what));
}

}  // namespace sf::testbed
