// libFuzzer harness: the sf.stages/1 JSON Lines reader and everything score does after it.
#include "harness.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sf::fuzz::score_text(std::string_view(reinterpret_cast<const char*>(data), size), sf::formats::MatrixFormat::jsonl);
  return 0;
}
