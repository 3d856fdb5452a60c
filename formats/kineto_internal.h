// Private to formats/: the parts of the Kineto (PyTorch profiler) import (docs/kineto.md).
//   kineto_source.cpp  the trace's bytes as a stream: plain or gzip'd, inflated as read, limits
//                      checked on the bytes as they come;
//   kineto_parse.cpp   nlohmann's SAX parser over that stream: the head (rank, world size) or
//                      every event, keeping only what the reduction reads;
//   kineto_reduce.cpp  one trace's events to per-step stage durations and side evidence;
//   kineto_stage_map.cpp  --stage-map files;
//   kineto.cpp         the import: where rank and world size come from, the window.
#pragma once

#include "sf/formats/formats.h"

#include <array>
#include <cstdint>
#include <optional>
#include <memory>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace sf::formats::kineto {

/// What a name says about its event (bits).
enum : std::uint32_t {
  kIsData = 1u << 0,        // a data-loading marker (## data_load ## …, DataLoader __next__)
  kIsFwdAnn = 1u << 1,      // ## forward ##
  kIsBwdAnn = 1u << 2,      // ## backward ##
  kIsCbAnn = 1u << 3,       // ## callbacks ##
  kIsOptAnn = 1u << 4,      // ## optimizer ##
  kIsAutograd = 1u << 5,    // autograd::engine::evaluate_function: …, …Backward0, AccumulateGrad (PyTorch 1.9)
  kIsReducer = 1u << 6,     // torch.distributed.ddp.reducer::…
  kIsOptOp = 1u << 7,       // Optimizer.step#… / Optimizer.zero_grad#…
  kIsCollHost = 1u << 8,    // record_param_comms, nccl:*, c10d::* (host side of a collective)
  kIsGloo = 1u << 9,        // gloo:* (a gloo worker inside the collective)
  kIsCollDevice = 1u << 10, // a collective kernel on the device timeline (NCCL, RCCL, …)
  kIsStep = 1u << 11,       // ProfilerStep#N
  kIsAnnotation = 1u << 12, // "## … ##" (a record_function annotation)
  kIsUserAnn = 1u << 13,    // a CPU event of category user_annotation (record_function by the user)
};
inline constexpr std::uint32_t kAnyCollective = kIsCollHost | kIsGloo | kIsCollDevice;

/// One timed event: an X event, or a B/E pair. Times in microseconds, as the trace has them.
struct Ev {
  double ts, end;
  std::int32_t thread;  // interned "pid/tid"
  std::int32_t name;    // interned name
  bool device;          // on a device timeline (kernels, copies, device annotations)
};

/// Where a name goes in a --stage-map (index into StageMap::rules), per interned name.
inline constexpr std::int16_t kNoRule = -1;

/// The stage map in force: the schema's explicit stages (the default five, then the map's new
/// ones where it places them) and its rules, each naming a stage index.
struct StageLayout {
  std::vector<std::string> stages;  // explicit stage names, in schema order
  int data = 0, fwd = 1, bwd = 2, cb = 3, opt = 4;  // the built-in stages' indices
  struct Rule {
    int stage = 0;
    std::vector<std::string> patterns;
    bool any_thread = false;
  };
  std::vector<Rule> rules;
  /// The first rule whose pattern matches the whole name (fnmatch), or kNoRule.
  std::int16_t rule_of(const std::string& name) const;
};
StageLayout make_layout(const KinetoStageMap& map);

/// The trace's facts read before its events (docs/kineto.md, "Rank and world size").
struct TraceHead {
  std::string form;  // "kineto" (an object with traceEvents) or "event array"
  std::optional<std::int64_t> rank, world;
  bool before_events = false;  // rank/world read before traceEvents began (else after, or absent)
};

/// The events of one trace, interned, sorted by start time (parents before children).
struct Trace {
  std::string file;
  TraceHead head;
  std::vector<Ev> events;
  std::vector<std::string> names;
  std::vector<std::uint32_t> bits;   // per interned name
  std::vector<std::int16_t> rules;   // per interned name: its --stage-map rule or kNoRule
  std::vector<std::string> threads;
  std::int64_t timed = 0;            // X events and B/E pairs read, kept or not
};

/// The bytes of a trace: a file or a buffer, read in blocks.
class ByteSource {
public:
  virtual ~ByteSource() = default;
  /// The next block (empty at the end); valid until the next call.
  virtual std::string_view next() = 0;
};

/// A trace's JSON text as a stream: the bytes themselves, or the gzip stream they hold (one or
/// more members, by the magic bytes, whatever the file is named), inflated block by block.
/// Throws FormatError as soon as the text passes `limit` bytes and for corrupt gzip data.
class TraceText : public std::streambuf {
public:
  TraceText(ByteSource& src, std::string name, std::uint64_t limit);
  ~TraceText() override;
  TraceText(const TraceText&) = delete;
  TraceText& operator=(const TraceText&) = delete;
  /// 1-based offset in the text of the next byte the parser reads.
  std::uint64_t position() const { return base_ + static_cast<std::uint64_t>(gptr() - eback()) + 1; }
  /// The parser delivered a value or a key here. nlohmann's lexer keeps every byte it reads
  /// between two values (blanks, brackets, commas: its token_string) and a string whole, so
  /// text that long without one is refused at the next block (kMaxValueGap).
  void value_seen() { value_at_ = position(); }

protected:
  int_type underflow() override;

private:
  bool fill_plain();
  bool fill_gzip();
  std::string_view raw();

  ByteSource& src_;
  std::string name_;
  std::uint64_t limit_;
  std::uint64_t base_ = 0;  // text bytes before the current block
  std::uint64_t value_at_ = 1;  // where the parser last delivered a value
  std::string_view in_;     // raw bytes not yet used
  bool started_ = false, gzip_ = false, ended_ = false;
  struct Inflater;
  Inflater* z_ = nullptr;
  std::vector<char> out_;
};

/// The longest text without a JSON value ending in it (a run of blanks or brackets, one string):
/// what nlohmann's lexer holds at once, so what a gzip bomb of blanks can cost.
inline constexpr std::uint64_t kMaxValueGap = std::uint64_t{32} << 20;

/// A file's bytes, its size checked first and as it is read.
std::unique_ptr<ByteSource> file_source(const std::string& path, std::uint64_t limit);
/// A buffer's bytes (one block).
std::unique_ptr<ByteSource> buffer_source(std::string_view bytes, const std::string& name, std::uint64_t limit);

/// Reads the trace up to the start of its events: rank and world size where they stand before
/// traceEvents (the usual place), the form; cheap (milliseconds), for the checks across files.
TraceHead read_head(ByteSource& src, const std::string& name, std::uint64_t limit);
/// Reads the whole trace in one pass, keeping the CPU-side events and the device-side
/// collectives (docs/kineto.md, "What is kept").
Trace read_trace(ByteSource& src, const std::string& name, std::uint64_t limit, const StageLayout& layout, std::int64_t max_events);

/// One ProfilerStep#N span on the main thread.
struct Step {
  std::int64_t id;
  double ts, end;
};
/// The main thread's steps in time order, refused when they overlap, nest, repeat or are absent.
struct StepSpans {
  int main_thread = -1;
  std::vector<Step> steps;
};
StepSpans find_steps(const Trace& tr);

/// One rank's reduced steps, in time order.
struct RankSteps {
  std::vector<std::int64_t> ids;
  std::vector<std::vector<double>> d;     // seconds per explicit stage
  std::vector<double> wall;               // seconds
  std::vector<std::vector<double>> sync;  // seconds of collective time inside each stage
  std::vector<bool> has_sync;             // per stage: some step has collective time in it
  std::vector<bool> waits;                // per stage (+1: the residual) with any collective overlapping it
};
/// Reduces the trace's steps to stage durations and side evidence, filling info's per-stage
/// counts and rules, its collective source and its unmapped-time summary.
RankSteps reduce(const Trace& tr, const StepSpans& spans, const StageLayout& layout, KinetoTrace& info);

/// Text quoted in a message: printable ASCII kept, other bytes as '?', at most 60 bytes.
std::string shown(std::string_view s);
std::string lower(std::string_view s);
bool starts_with(std::string_view s, std::string_view p);

}  // namespace sf::formats::kineto
