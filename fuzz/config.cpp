// libFuzzer harness: the labeler configuration reader (score/run --config), then the packet's
// config field built from what it accepted.
#include "harness.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sf::frontier::LabelConfig c;
  try {
    c = sf::formats::parse_config_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const sf::formats::FormatError& e) {
    sf::fuzz::require_one_line(e.what());
    return 0;
  }
  const auto j = sf::formats::config_to_json(c);
  sf::fuzz::require_finite(j, "config");
  (void)j.dump();
  // Accepted gates must drive the labeler without error on a real window.
  static const auto windows = [] {
    return sf::formats::parse_stage_text(
        "step,rank,a,b\n0,0,1,2\n0,1,2,1\n1,0,1,3\n1,1,3,1\n", "fuzz", sf::formats::MatrixFormat::csv, {});
  }();
  try {
    const auto e = sf::frontier::evaluate(windows[0].matrix, c, windows[0].telemetry);
    sf::fuzz::require_finite(sf::formats::evidence_to_json(e), "packet");
  } catch (const std::invalid_argument& err) {
    sf::fuzz::require_one_line(err.what());
  }
  return 0;
}
