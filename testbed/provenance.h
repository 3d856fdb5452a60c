// sf::testbed, provenance — the fields every result file starts with (schema, command, commit,
// date, host), the machine a figure was measured on, and the hypervisor's steal.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace sf::testbed {

// ---- provenance ---------------------------------------------------------------------------------

/// Now, as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_now();
/// This machine's host name.
std::string host_name();
/// The machine a figure was measured on: hostname, cpus, cpu_model, memory_gib.
nlohmann::ordered_json machine_json();
/// The fields every result file starts with: schema, command, commit, date, host.
nlohmann::ordered_json provenance_json(std::string_view schema, const std::vector<std::string>& argv,
                                       const std::string& commit);

/// Share of this VM's CPU time the hypervisor took (the steal column of /proc/stat) between
/// construction and fraction(); 0 where /proc/stat is not readable.
class StealMeter {
public:
  StealMeter();
  double fraction() const;

private:
  double steal_ = 0, total_ = 0;
};

}  // namespace sf::testbed
