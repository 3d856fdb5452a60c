// Shared by the libFuzzer harnesses (fuzz/README.md): what every harness asserts about an
// answer. Private to fuzz/.
#pragma once

#include "sf/formats/formats.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace sf::fuzz {

/// Aborts (a finding) when a packet holds a non-finite number: JSON would print it as null, and
/// the project's rule is never inf/nan in an answer.
inline void require_finite(const nlohmann::ordered_json& j, const std::string& where) {
  if (j.is_number_float()) {
    if (!std::isfinite(j.get<double>())) {
      std::fprintf(stderr, "fuzz: non-finite number at %s\n", where.c_str());
      std::abort();
    }
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) require_finite(it.value(), where + "." + it.key());
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) require_finite(j[i], where + "[" + std::to_string(i) + "]");
  }
}

/// A bad-input message is one line.
inline void require_one_line(const char* what) {
  if (std::string(what).find('\n') != std::string::npos) {
    std::fprintf(stderr, "fuzz: message spans lines: %s\n", what);
    std::abort();
  }
}

/// Limits small enough that one input never takes more than a few milliseconds or megabytes:
/// the harness explores the readers, not the engine's throughput.
inline formats::ReadLimits fuzz_limits() {
  formats::ReadLimits l;
  l.max_file_bytes = 1 << 20;
  l.max_stages = 64;
  l.max_world_size = 256;
  l.max_window_steps = 4096;
  l.max_values = 1 << 16;
  return l;
}

/// What `sf-testbed score` does after reading: score, print and serialise every window, and
/// read back what --dump would write. Bad input must come back as std::invalid_argument (engine),
/// one line; anything else escapes and is a finding.
inline void score_windows(const std::vector<formats::Window>& windows) {
  for (const auto& w : windows) {
    frontier::Evidence e;
    try {
      e = frontier::evaluate(w.matrix, {}, w.telemetry);
    } catch (const std::invalid_argument& err) {
      require_one_line(err.what());
      continue;
    }
    const auto j = formats::evidence_to_json(e, w.ranks);
    require_finite(j, "packet");
    (void)j.dump();  // throws on invalid UTF-8: a finding
    (void)formats::evidence_table(e, "fuzz");
    std::ostringstream out;
    formats::write_jsonl(out, w);  // what --dump writes must read back
    try {
      (void)formats::parse_stage_text(out.str(), "fuzz-roundtrip", formats::MatrixFormat::jsonl,
                                      {std::nullopt, 0, 0, 1, fuzz_limits()});
    } catch (const formats::FormatError& err) {
      std::fprintf(stderr, "fuzz: the reader rejects what write_jsonl wrote: %s\n", err.what());
      std::abort();
    }
  }
}

/// What `sf-testbed score` does with a file: read, then score_windows. Bad input must come back
/// as FormatError (reader), one line.
inline void score_text(std::string_view text, formats::MatrixFormat format) {
  std::vector<formats::Window> windows;
  try {
    windows = formats::parse_stage_text(text, "fuzz", format, {std::nullopt, 0, 0, 1, fuzz_limits()});
  } catch (const formats::FormatError& e) {
    require_one_line(e.what());
    return;
  }
  score_windows(windows);
}

}  // namespace sf::fuzz
