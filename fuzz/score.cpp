// libFuzzer harness: `sf-testbed score` end to end (testbed::score_file) on one input file, the
// paths the reader harnesses do not reach: the streamed read against the whole read (their
// packets and tables must be byte-identical, or both refuse the input with the same line),
// --window splits, and --detect with --trace over the file's windows as one run. The format
// follows the content (a line starting with '{' is JSON Lines, anything else CSV), so the seeds
// are the project's example and test files as they are.
#include "harness.h"

#include "sf/testbed/testbed.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace {

/// The input as a regular file (the streamed reader maps files; a memfd is one), closed on exit.
class MemFile {
public:
  explicit MemFile(std::string_view bytes) : fd_(memfd_create("fuzz-score", 0)) {
    if (fd_ < 0) std::abort();
    for (std::size_t done = 0; done < bytes.size();) {
      const auto n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

private:
  int fd_;
  std::string path_;
};

/// The output of one call, or its one-line refusal.
struct Outcome {
  std::optional<sf::testbed::ScoredFile> scored;
  std::string error;
};

Outcome score(sf::testbed::ScoreFileOptions o) {
  Outcome out;
  try {
    out.scored = sf::testbed::score_file(o);
  } catch (const sf::testbed::InputError& e) {
    sf::fuzz::require_one_line(e.what());
    out.error = e.what();
    return out;
  }
  // Every line score prints with --json is a packet without inf or nan; so is the trace.
  std::size_t at = 0;
  const auto& p = out.scored->packets;
  while (at < p.size()) {
    const auto end = p.find('\n', at);
    sf::fuzz::require_finite(nlohmann::ordered_json::parse(p.substr(at, end - at)), "packet");
    at = end == std::string::npos ? p.size() : end + 1;
  }
  if (out.scored->trace) {
    sf::fuzz::require_finite(*out.scored->trace, "trace");
    (void)out.scored->trace->dump();  // throws on invalid UTF-8: a finding
  }
  return out;
}

/// The streamed read gives what the whole read gives (docs/formats.md, "Streaming").
void require_same(const Outcome& streamed, const Outcome& whole, const char* what) {
  const bool same = streamed.scored && whole.scored
                        ? streamed.scored->packets == whole.scored->packets && streamed.scored->tables == whole.scored->tables
                        : !streamed.scored && !whole.scored && streamed.error == whole.error;
  if (!same) {
    std::fprintf(stderr, "fuzz: %s: the streamed read differs from the whole read\nstreamed: %s\nwhole:    %s\n", what,
                 streamed.scored ? streamed.scored->packets.c_str() : streamed.error.c_str(),
                 whole.scored ? whole.scored->packets.c_str() : whole.error.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const MemFile file(bytes);
  const auto first = bytes.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
  sf::testbed::ScoreFileOptions o;
  o.file = file.path();
  o.read.format = first != std::string_view::npos && bytes[first] == '{' ? sf::formats::MatrixFormat::jsonl
                                                                          : sf::formats::MatrixFormat::csv;
  o.read.limits = sf::fuzz::fuzz_limits();
  // A few hundred steps at most: --window 1 over a 4096-step span is 4096 packets, seconds per
  // input under ASan, and no path that a shorter span does not reach.
  o.read.limits.max_window_steps = 256;

  auto whole = o;
  whole.whole = true;
  require_same(score(o), score(whole), "one window per header");

  // --window: a split size from the input's length, so every size is reached.
  o.read.window_steps = whole.read.window_steps = 1 + static_cast<int>(size % 5);
  require_same(score(o), score(whole), "--window");

  // --detect and --trace over the file's windows as one run (always a whole read).
  o.detect = sf::detect::DetectConfig{};
  o.trace = sf::testbed::TraceOptions{"unused.json", 64, 8};
  (void)score(o);
  o.read.window_steps = 0;
  (void)score(o);
  return 0;
}
