// Provenance: what every result file says about where, when and from what it was made.
#include "sf/testbed/testbed.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>
#include <unistd.h>

namespace sf::testbed {

namespace {

/// Steal and total jiffies of the "cpu" line of /proc/stat ({0, 0} where unreadable).
std::pair<double, double> steal_jiffies() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return {0, 0};
  unsigned long long v[8] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                            &v[6], &v[7]);
  std::fclose(f);
  if (n < 8) return {0, 0};
  double total = 0;
  for (auto x : v) total += static_cast<double>(x);
  return {static_cast<double>(v[7]), total};
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char h[256] = {};
  if (gethostname(h, sizeof h - 1) != 0) return "unknown";
  return h;
}

nlohmann::ordered_json machine_json() {
  return {{"hostname", host_name()},
          {"cpus", std::thread::hardware_concurrency()},
          {"cpu_model", cpu_model()},
          {"memory_gib", static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE)) /
                             (1 << 30)}};
}

nlohmann::ordered_json provenance_json(std::string_view schema, const std::vector<std::string>& argv,
                                       const std::string& commit) {
  nlohmann::ordered_json j;
  j["schema"] = schema;
  j["command"] = argv;
  j["commit"] = commit;
  j["date"] = utc_now();
  j["host"] = host_name();
  return j;
}

StealMeter::StealMeter() { std::tie(steal_, total_) = steal_jiffies(); }

double StealMeter::fraction() const {
  const auto [steal, total] = steal_jiffies();
  return total > total_ ? (steal - steal_) / (total - total_) : 0.0;
}

}  // namespace sf::testbed
