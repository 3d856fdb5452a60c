// Cgroups a killed run left behind (testbed/detail.h, sweep_stale_straggler_cgroups): built
// everywhere, so that the unit tests reach it without MPI.
#include "detail.h"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <string_view>
#include <vector>

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

namespace sf::testbed::detail {

void sweep_stale_straggler_cgroups(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = readdir(d)) {
    const std::string_view name(e->d_name);
    for (const std::string_view prefix : {std::string_view("sf-straggler-probe-"), std::string_view("sf-straggler-")}) {
      if (name.substr(0, prefix.size()) != prefix) continue;
      const std::string_view digits = name.substr(prefix.size());
      pid_t pid = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
      if (ec == std::errc() && end == digits.data() + digits.size() && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
        stale.emplace_back(name);
      break;
    }
  }
  closedir(d);
  for (const auto& name : stale) rmdir((dir + "/" + name).c_str());  // fails, and stays, while it holds a task
}

}  // namespace sf::testbed::detail
