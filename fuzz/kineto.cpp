// libFuzzer harness: the Kineto (PyTorch profiler) trace importer (`import kineto`) over one
// trace, plain JSON or gzip'd, then what `score` does with the file the import writes.
#include "harness.h"

#include <cstddef>
#include <cstdint>

namespace {

/// A stage map that gives annotations and operators stages of their own (and one new stage), so
/// the map's claims meet the built-in ones on every input.
const sf::formats::KinetoStageMap& fuzz_map() {
  static const auto map = sf::formats::parse_kineto_stage_map(
      R"({"stages":[{"stage":"comm.extra","after":"model.fwd_loss_cpu_wall","match":["## *dist* ##","c10d::*"]},)"
      R"({"stage":"data.next_wait","match":["## wait*"],"thread":"any"}]})",
      "fuzz-map");
  return map;
}

void import_and_score(std::string_view bytes, int world_size, int rank = -1, bool with_map = false) {
  sf::formats::KinetoOptions opt;
  opt.world_size = world_size;
  opt.rank = rank;
  if (with_map) opt.stage_map = fuzz_map();
  opt.limits = sf::fuzz::fuzz_limits();
  sf::formats::KinetoImport imp;
  try {
    // A name with a rank, so traces without distributedInfo (the older form) get one too.
    imp = sf::formats::import_kineto_buffers({{"fuzz_rank1.json", bytes}}, opt);
  } catch (const sf::formats::FormatError& e) {
    sf::fuzz::require_one_line(e.what());
    return;
  }
  // What the import promises on every input it accepts: stages within the wall, sync waits
  // within their stage.
  const auto& m = imp.window.matrix;
  for (int t = 0; t < m.steps(); ++t)
    for (int c = 0; c < m.ranks(); ++c) {
      if (!m.present(t, c)) continue;
      double sum = 0;
      for (int s = 0; s < m.schema().explicit_count(); ++s) {
        sum += m.d(t, c, s);
        const double w = m.has_sync_wait() ? m.sync_wait(t, c, s) : 0.0;
        if (w > m.d(t, c, s)) {
          std::fprintf(stderr, "fuzz: sync_wait %g above its stage %g\n", w, m.d(t, c, s));
          std::abort();
        }
      }
      if (sum > m.wall(t, c) * (1 + 1e-9)) {
        std::fprintf(stderr, "fuzz: stages %g above the wall %g\n", sum, m.wall(t, c));
        std::abort();
      }
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
  import_and_score(bytes, 1, 0, true);  // --rank 0 --world-size 1 and a --stage-map
  return 0;
}
