// libFuzzer harness: the Kineto (PyTorch profiler) trace importer (`import kineto`) over one
// trace, plain JSON or gzip'd, then what `score` does with the file the import writes.
#include "harness.h"

#include <cstddef>
#include <cstdint>

namespace {

void import_and_score(std::string_view bytes, int world_size) {
  sf::formats::KinetoOptions opt;
  opt.world_size = world_size;
  opt.limits = sf::fuzz::fuzz_limits();
  sf::formats::KinetoImport imp;
  try {
    // A name with a rank, so traces without distributedInfo (the older form) get one too.
    imp = sf::formats::import_kineto_buffers({{"fuzz_rank1.json", bytes}}, opt);
  } catch (const sf::formats::FormatError& e) {
    sf::fuzz::require_one_line(e.what());
    return;
  }
  // What import writes, score must read: write_jsonl, read back, score (score_windows also
  // reads back its own dump).
  std::ostringstream out;
  sf::formats::write_jsonl(out, imp.window);
  std::vector<sf::formats::Window> windows;
  try {
    windows = sf::formats::parse_stage_text(out.str(), "fuzz-import", sf::formats::MatrixFormat::jsonl,
                                            {std::nullopt, 0, 0, 1, sf::fuzz::fuzz_limits()});
  } catch (const sf::formats::FormatError& e) {
    std::fprintf(stderr, "fuzz: score rejects what import kineto wrote: %s\n", e.what());
    std::abort();
  }
  sf::fuzz::score_windows(windows);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  import_and_score(bytes, 0);  // the world size from distributedInfo
  import_and_score(bytes, 3);  // --world-size 3: the older form, and the check against distributedInfo
  return 0;
}
