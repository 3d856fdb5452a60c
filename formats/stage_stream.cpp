// The streaming reader (docs/formats.md, "Streaming"): a stage-matrix file handed to a StepSink
// one step at a time, in memory that does not grow with the file. It accepts exactly what
// read_stage_file accepts, through the same line parsers (stage_text.h), and lays each window out
// as emit_windows does; whatever it cannot stream so, it hands back (StreamStatus::whole).
//
// A window is read in one pass when its rank layout can be guessed before its records (the world
// a JSONL header declares, or the rank on a CSV file's last line, every rank present: what
// write_csv and `run --dump` write); the pass checks the guess, and where the records say
// otherwise (absent ranks, a larger rank) the window's records are read a second time with the
// layout the first pass found.
#include "sf/formats/formats.h"

#include "stage_text.h"
#include "step_span.h"
#include "strict_json.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cfloat>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sf::formats {

namespace {

using frontier::EventState;
using frontier::StageMatrix;
using frontier::StageSchema;
using nlohmann::json;

/// Bytes read at a time: the read buffer is the reader's largest allocation (a line longer than
/// it grows it).
constexpr std::size_t kChunkBytes = std::size_t{1} << 22;
/// FileLines' first read at most: enough for any header, small beside the body.
constexpr std::size_t kFirstChunkBytes = std::size_t{1} << 16;
/// A guessed dense step may hold this many values at most (world × (stages + 3)); a larger world
/// is read in two passes, so a sparse file's step holds only the ranks with records.
constexpr std::uint64_t kMaxGuessValues = std::uint64_t{1} << 23;
/// A window whose recorded step time passes this is left to the whole read: near the
/// kMaxWindowSeconds limit, summation order decides at which record the reader refuses it.
constexpr double kSafeWindowSeconds = frontier::kMaxWindowSeconds / 16;

/// The file cannot be streamed as read_stage_file reads it: caught at the top, StreamStatus::whole.
struct ReadWhole {
  std::string why;
};
/// Why a file with a line past --max-line-bytes goes to the whole read (which refuses it, naming
/// the line).
constexpr const char* kLinePastLimit = "a line past --max-line-bytes";

using detail::Bytes;
using detail::UninitAllocator;

/// Lines of a file read through a buffer of at most kChunkBytes (a longer line grows it),
/// numbered from 1 as the whole-file readers number them. CSV: split at "\n", "\r\n" or a lone
/// "\r", blank lines skipped (CsvLines). JSONL: split at '\n', every line returned as it is.
class FileLines {
public:
  // The buffer starts at kFirstChunkBytes (or the file's size) and doubles while reads fill it,
  // up to kChunkBytes: a CSV file's header, all a CSV read takes from here, costs one small read
  // (a first read of a whole chunk copied and paged in 4 MiB of the body that CsvSource reads
  // again), and a JSON Lines body still reads in whole chunks after a few.
  FileLines(int fd, std::uint64_t size, bool csv, std::int64_t max_line)
      : fd_(fd), size_(size), csv_(csv), max_line_(static_cast<std::size_t>(std::max<std::int64_t>(max_line, 1))),
        buf_(static_cast<std::size_t>(std::clamp<std::uint64_t>(size + 1, 64, kFirstChunkBytes))) {}

  /// The next line starts at byte `offset` of the file and is line number line_no + 1.
  void seek(std::uint64_t offset, std::int64_t line_no) {
    pos_ = end_ = 0;
    file_off_ = read_off_ = next_off_ = offset;
    line_no_ = line_no;
    eof_ = offset >= size_;
    cr_ = false;
  }

  bool next(std::string_view& line) {
    for (;;) {
      if (pos_ >= end_ && !fill()) return false;
      const char* b = buf_.data() + pos_;
      const char* e = buf_.data() + end_;
      const char* t = nullptr;  // the line's terminator
      if (!cr_) {
        t = static_cast<const char*>(std::memchr(b, '\n', static_cast<std::size_t>(e - b)));
      } else {
        for (const char* q = b; q < e; ++q)
          if (*q == '\n' || *q == '\r') {
            t = q;
            break;
          }
      }
      // The line, or the '\n' after its '\r', may go on past the buffer: read more and look again.
      if ((!t || (*t == '\r' && t + 1 == e)) && fill()) continue;
      const std::size_t len = static_cast<std::size_t>((t ? t : e) - b);
      line = std::string_view(b, len);
      std::size_t used = len + (t ? 1 : 0);
      if (t && *t == '\r' && t + 1 < e && t[1] == '\n') ++used;
      line_off_ = file_off_ + pos_;
      pos_ += used;
      next_off_ = file_off_ + pos_;
      ++line_no_;
      if (!csv_ || !detail::trim(line).empty()) return true;
    }
  }

  std::int64_t line_no() const { return line_no_; }
  /// The first byte of the last line returned, and the byte after its terminator.
  std::uint64_t line_offset() const { return line_off_; }
  std::uint64_t next_offset() const { return next_off_; }

private:
  /// Reads more after [pos_, end_), which moves to the front; false when the file has no more.
  bool fill() {
    if (eof_) return false;
    if (pos_ > 0) {
      std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
      file_off_ += pos_;
      end_ -= pos_;
      pos_ = 0;
    }
    // A line past --max-line-bytes: the whole read refuses it with its line number (a pass of
    // memchr over the mapped file; nothing of the line's size is allocated).
    if (end_ > max_line_) throw ReadWhole{kLinePastLimit};
    // Full (a line longer than the buffer), or smaller than a chunk and filled by the last read:
    // twice the size.
    if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
    else if (filled_ && buf_.size() < kChunkBytes) buf_.resize(std::min(buf_.size() * 2, kChunkBytes));
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf_.size() - end_, size_ - read_off_));
    ssize_t n;
    do n = ::pread(fd_, buf_.data() + end_, want, static_cast<off_t>(read_off_));
    while (n < 0 && errno == EINTR);
    if (n < 0) throw ReadWhole{"read failed"};
    if (n == 0) {  // shorter than it was: the whole read sees what is there now
      eof_ = true;
      return false;
    }
    if (csv_ && !cr_) cr_ = std::memchr(buf_.data() + end_, '\r', static_cast<std::size_t>(n)) != nullptr;
    end_ += static_cast<std::size_t>(n);
    filled_ = end_ == buf_.size();
    read_off_ += static_cast<std::uint64_t>(n);
    eof_ = read_off_ >= size_;
    return true;
  }

  int fd_;
  std::uint64_t size_;
  bool csv_;
  std::size_t max_line_;
  Bytes buf_;
  std::size_t pos_ = 0, end_ = 0;
  std::uint64_t file_off_ = 0;  // file offset of buf_[0]
  std::uint64_t read_off_ = 0;  // next offset to read
  bool eof_ = false;
  bool filled_ = false;  // the last read filled the buffer
  bool cr_ = false;  // a '\r' was read since the last seek: split the slow way
  std::int64_t line_no_ = 0;
  std::uint64_t line_off_ = 0, next_off_ = 0;
};

/// One record as a source hands it over; d holds the explicit stages, sync (when has_sync)
/// the sync waits (NaN: null), both in the source's storage until its next next().
struct Rec {
  std::int64_t step = 0, line = 0;
  int rank = 0;
  bool has_wall = false;
  double wall = 0;
  EventState event = EventState::unsampled;
  double event_s = 0;
  bool has_sync = false;
  double cpu_wait = std::numeric_limits<double>::quiet_NaN();
  const double* d = nullptr;
  const double* sync = nullptr;
};

/// A file window's header facts (CSV: the header line and the options).
struct FileWindow {
  std::vector<std::string> stages;
  int accumulation = 1;
  int world = 0;  // 0: CSV without --world-size, max(rank) + 1
  std::vector<std::string> roles;
  std::optional<std::int64_t> span_first, span_steps;
  frontier::TelemetryInput telemetry;
  std::vector<RankInfo> ranks;
  std::int64_t header_line = 0;
  std::uint64_t body_offset = 0;  // where its records start
  std::int64_t body_line = 0;     // the line before them
};

/// The rank layout of a window: the world and, when sparse, the ranks with records.
struct Layout {
  int world = 0;
  std::vector<int> ids;  // empty: dense
  bool operator==(const Layout&) const = default;
};

/// What one pass over a window's records saw.
struct Seen {
  std::int64_t records = 0, min_step = 0, max_step = 0;
  int max_rank = -1;
  bool has_wall = false;  // the first record's
  std::vector<std::uint64_t> rank_bits;
  bool fed = false;       // every step went to the sink with the pass's layout

  void add_rank(int r) {
    const auto w = static_cast<std::size_t>(r) >> 6;
    if (w >= rank_bits.size()) rank_bits.resize(std::max(w + 1, rank_bits.size() * 2), 0);
    rank_bits[w] |= std::uint64_t{1} << (r & 63);
    max_rank = std::max(max_rank, r);
  }
  /// The layout emit_windows gives these records in a world of `world` ranks.
  Layout layout(int world) const {
    Layout out{world, {}};
    for (std::size_t w = 0; w < rank_bits.size(); ++w)
      for (std::uint64_t b = rank_bits[w]; b; b &= b - 1) out.ids.push_back(static_cast<int>(w * 64 + __builtin_ctzll(b)));
    if (out.ids.empty()) out.ids.push_back(0);  // a declared window without records keeps one column
    if (static_cast<int>(out.ids.size()) >= world) out.ids.clear();
    return out;
  }
};

/// Hands steps to the sink, cut into windows of `chunk` steps from the window's first step (as
/// emit_windows cuts them), with a step without records where a window's first or last step
/// has none, so each window spans what the whole read's does.
class Feeder {
public:
  Feeder(StepSink& sink, const WindowHead& head, std::uint64_t chunk) : sink_(sink), head_(head), chunk_(chunk) {}

  void start(std::int64_t first) {
    first_ = first;
    open(0);
  }
  void step(const StageMatrix& one) {
    const std::int64_t id = one.first_step();
    const std::uint64_t c = chunk_ ? offset(id) / chunk_ : 0;
    while (cur_ < c) {
      close(chunk_first_ + static_cast<std::int64_t>(chunk_ - 1));
      open(cur_ + 1);
    }
    if (!fed_ && id > chunk_first_) empty(chunk_first_);
    call([&] { sink_.add_step(one); });
    fed_ = true;
    last_fed_ = id;
  }
  void finish(std::int64_t last) {
    const std::uint64_t c = chunk_ ? offset(last) / chunk_ : 0;
    while (cur_ < c) {
      close(chunk_first_ + static_cast<std::int64_t>(chunk_ - 1));
      open(cur_ + 1);
    }
    close(last);
  }

private:
  std::uint64_t offset(std::int64_t id) const { return static_cast<std::uint64_t>(id) - static_cast<std::uint64_t>(first_); }
  template <typename F>
  static void call(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      throw ReadWhole{std::string("the sink refused a step: ") + e.what()};
    }
  }
  void open(std::uint64_t c) {
    cur_ = c;
    chunk_first_ = static_cast<std::int64_t>(static_cast<std::uint64_t>(first_) + c * std::max<std::uint64_t>(chunk_, 1));
    fed_ = false;
    call([&] { sink_.begin_window(head_); });
  }
  void close(std::int64_t last) {
    if (!fed_) empty(chunk_first_);
    if (last_fed_ < last) empty(last);
    call([&] { sink_.end_window(); });
  }
  void empty(std::int64_t id) {
    if (empty_.steps() == 0) empty_ = StageMatrix::same_layout(head_.layout, id, 1);
    empty_.renumber(id);
    call([&] { sink_.add_step(empty_); });
    fed_ = true;
    last_fed_ = id;
  }

  StepSink& sink_;
  const WindowHead& head_;
  std::uint64_t chunk_;
  std::int64_t first_ = 0, chunk_first_ = 0, last_fed_ = 0;
  std::uint64_t cur_ = 0;
  bool fed_ = false;
  StageMatrix empty_;
};

/// One step being gathered: its records by column, then sent as a one-step matrix.
class StepBuffer {
public:
  void layout(const StageMatrix& layout) {
    one_ = StageMatrix::same_layout(layout, 0, 1);
    R_ = one_.ranks();
    k_ = one_.schema().explicit_count();
    wall_ = one_.schema().has_residual();
    cols_.assign(static_cast<std::size_t>(R_) * k_, 0.0);
    walls_.assign(R_, 0.0);
    present_.assign(R_, 0);
    event_.assign(R_, EventState::unsampled);
    event_s_.assign(R_, 0.0);
    cpu_wait_.assign(R_, std::numeric_limits<double>::quiet_NaN());
    sync_.assign(static_cast<std::size_t>(R_) * k_, 0.0);
    has_sync_.assign(R_, 0);
    count_ = 0;
    side_ = false;
  }
  /// The rank's column (StageMatrix::column_of), inline for a dense layout: a call per record.
  int column_of(int rank) const {
    if (one_.rank_ids().empty()) return rank >= 0 && rank < R_ ? rank : -1;
    return one_.column_of(rank);
  }
  /// The rank ids with a record in the open step.
  void present_ranks(std::vector<int>& out) const {
    out.clear();
    for (int c = 0; c < R_; ++c)
      if (present_[c]) out.push_back(one_.rank_id(c));
  }
  /// False when the column already has a record this step (a duplicate).
  bool put(int c, const Rec& rec) {
    if (present_[c]) return false;
    if (count_ == 0) row_ = one_.begin_step(0);  // the step's values go straight into the row
    present_[c] = 1;
    ++count_;
    for (int s = 0; s < k_; ++s) row_[s][c] = rec.d[s];
    walls_[c] = rec.wall;
    event_[c] = rec.event;
    event_s_[c] = rec.event_s;
    cpu_wait_[c] = rec.cpu_wait;
    has_sync_[c] = rec.has_sync;
    if (rec.has_sync)
      for (int s = 0; s < k_; ++s) sync_[static_cast<std::size_t>(s) * R_ + c] = rec.sync[s];
    side_ = side_ || rec.has_sync || rec.event != EventState::unsampled || !std::isnan(rec.cpu_wait);
    return true;
  }
  /// The step as a one-step matrix with id `step`; the buffer is empty again.
  const StageMatrix& take(std::int64_t step) {
    if (count_ == R_ && !side_) {
      // Every rank present: the row put() wrote, committed (the values and checks of set_record).
      one_.renumber(step);
      one_.commit_step(0, wall_ ? walls_.data() : nullptr);
    } else {
      // Ranks missing or side evidence: record by record, from the values put() wrote.
      for (int s = 0; s < k_; ++s) std::copy_n(row_[s], R_, cols_.data() + static_cast<std::size_t>(s) * R_);
      one_.reset(step);
      std::vector<double>& d = scratch_;
      d.resize(k_);
      for (int c = 0; c < R_; ++c) {
        if (!present_[c]) continue;
        for (int s = 0; s < k_; ++s) d[s] = cols_[static_cast<std::size_t>(s) * R_ + c];
        one_.set_record(0, c, d, wall_ ? std::optional<double>(walls_[c]) : std::nullopt);
        if (event_[c] != EventState::unsampled) one_.set_fwd_event(0, c, event_[c], event_s_[c]);
        if (!std::isnan(cpu_wait_[c])) one_.set_cpu_wait(0, c, cpu_wait_[c]);
        if (has_sync_[c])
          for (int s = 0; s < k_; ++s) {
            const double v = sync_[static_cast<std::size_t>(s) * R_ + c];
            if (!std::isnan(v)) one_.set_sync_wait(0, c, s, v);
          }
      }
    }
    std::fill(present_.begin(), present_.end(), std::uint8_t{0});
    count_ = 0;
    side_ = false;
    return one_;
  }

private:
  StageMatrix one_;
  int R_ = 0, k_ = 0;
  bool wall_ = false;
  std::vector<double*> row_;  // the open step's columns in one_ (begin_step at its first record)
  std::vector<double> cols_, walls_, event_s_, cpu_wait_, sync_, scratch_;
  std::vector<std::uint8_t> present_, has_sync_;
  std::vector<EventState> event_;
  int count_ = 0;
  bool side_ = false;
};

/// Reads one file window's records from a source in one pass: checks what emit_windows would
/// refuse (anything but one line's error: ReadWhole), notes what the layout needs, and when
/// given a layout sends the steps to the sink.
class WindowPass {
public:
  WindowPass(const ReadOptions& opt, StepSink& sink, const FileWindow& fw)
      : opt_(opt), sink_(sink), fw_(fw) {}

  /// layout: the steps' rank layout to send them with, or null to only look. seen.fed tells
  /// whether every step went to the sink so; finish() then closes the window there.
  template <typename Source>
  void run(Source& src, const Layout* layout, Seen& seen) {
    seen = Seen{};
    feeder_.reset();
    Rec rec;
    const std::size_t k = fw_.stages.size();
    bool feeding = layout != nullptr;
    bool open = false;
    std::int64_t cur = 0;
    double total = 0;
    std::vector<int> step_ranks;  // the open step's ranks, when not feeding (duplicates)
    auto close_step = [&] {
      if (feeding) {
        const StageMatrix* one = nullptr;
        try {
          one = &buf_.take(cur);
        } catch (const std::invalid_argument& e) {
          throw ReadWhole{e.what()};
        }
        feeder_->step(*one);
      } else {
        std::sort(step_ranks.begin(), step_ranks.end());
        if (std::adjacent_find(step_ranks.begin(), step_ranks.end()) != step_ranks.end())
          throw ReadWhole{"a duplicate (step, rank) record"};
        step_ranks.clear();
      }
    };
    while (src.next(rec)) {
      // What emit_windows and StageMatrix would refuse once the window is read: the whole read
      // words it (after any line's error, which it meets first).
      if (seen.records == 0) seen.has_wall = rec.has_wall;
      else if (rec.has_wall != seen.has_wall) throw ReadWhole{"\"wall\" on some records only"};
      if (fw_.span_first && (rec.step < *fw_.span_first ||
                             static_cast<std::uint64_t>(rec.step) - static_cast<std::uint64_t>(*fw_.span_first) >=
                                 static_cast<std::uint64_t>(*fw_.span_steps)))
        throw ReadWhole{"a step outside the declared window"};
      double sum = 0;
      for (std::size_t s = 0; s < k; ++s) sum += rec.d[s];
      if (!(sum <= frontier::kMaxWindowSeconds) || (rec.has_wall && !(rec.wall <= frontier::kMaxWindowSeconds)))
        throw ReadWhole{"a record past the window limit"};
      total += rec.has_wall ? std::max(sum, rec.wall) : sum;
      if (!(total <= kSafeWindowSeconds)) throw ReadWhole{"a window near its limit of recorded time"};
      if (rec.event == EventState::ready && !(rec.event_s <= FLT_MAX)) throw ReadWhole{"a forward event time past FLT_MAX"};
      if (!std::isnan(rec.cpu_wait) && !(rec.cpu_wait <= FLT_MAX)) throw ReadWhole{"a CPU wait past FLT_MAX"};
      if (rec.has_sync)
        for (std::size_t s = 0; s < k; ++s)
          if (rec.sync[s] > FLT_MAX) throw ReadWhole{"a sync wait past FLT_MAX"};
      if (open && rec.step < cur) throw ReadWhole{"steps out of order at line " + std::to_string(rec.line)};

      if (feeding && seen.records == 0) start(*layout, seen.has_wall, fw_.span_first ? *fw_.span_first : rec.step);
      if (!open || rec.step != cur) {
        if (open) close_step();
        open = true;
        cur = rec.step;
      }
      if (feeding) {
        const int c = buf_.column_of(rec.rank);
        if (c >= 0) {
          if (!buf_.put(c, rec)) throw ReadWhole{"a duplicate (step, rank) record"};
        } else {
          // The guess was wrong (a rank outside it): only look from here on.
          feeding = false;
          buf_.present_ranks(step_ranks);
        }
      }
      if (!feeding) step_ranks.push_back(rec.rank);
      if (seen.records == 0 || rec.step < seen.min_step) seen.min_step = rec.step;
      if (seen.records == 0 || rec.step > seen.max_step) seen.max_step = rec.step;
      ++seen.records;
      seen.add_rank(rec.rank);
    }
    if (open) close_step();
    // A declared window without records: its steps are all missing.
    if (layout && seen.records == 0 && fw_.span_first) start(*layout, false, *fw_.span_first);
    seen.fed = feeding && feeder_.has_value();
  }

  /// Ends the window the last run() fed (seen.fed).
  void finish(const Seen& seen) {
    feeder_->finish(fw_.span_first ? *fw_.span_first + (*fw_.span_steps - 1) : seen.max_step);
  }

private:
  void start(const Layout& layout, bool has_wall, std::int64_t first) {
    try {
      const StageSchema schema(fw_.stages, has_wall, fw_.accumulation);
      head_.layout = layout.ids.empty() ? StageMatrix(schema, layout.world, 0, 0)
                                        : StageMatrix(schema, layout.world, layout.ids, 0, 0);
      if (!fw_.roles.empty()) head_.layout.set_roles(fw_.roles);
    } catch (const std::invalid_argument& e) {
      throw ReadWhole{std::string("bad header: ") + e.what()};
    }
    head_.telemetry = fw_.telemetry;
    head_.ranks = fw_.ranks;
    head_.header_line = fw_.header_line;
    buf_.layout(head_.layout);
    feeder_.emplace(sink_, head_, static_cast<std::uint64_t>(std::max(opt_.window_steps, 0)));
    feeder_->start(first);
  }

  const ReadOptions& opt_;
  StepSink& sink_;
  const FileWindow& fw_;
  WindowHead head_;
  StepBuffer buf_;
  std::optional<Feeder> feeder_;
};

/// After a pass: what emit_windows would refuse for the window as a whole.
void check_window(const FileWindow& fw, const Seen& seen, const Layout& layout, const ReadOptions& opt) {
  std::uint64_t total = 0;
  if (fw.span_first) total = static_cast<std::uint64_t>(*fw.span_steps);
  else if (seen.records > 0) total = detail::span_of(seen.min_step, seen.max_step);
  if (total == 0) throw ReadWhole{"a window without records"};
  if (total > static_cast<std::uint64_t>(opt.limits.max_window_steps)) throw ReadWhole{"a window past --max-window-steps"};
  const int columns = layout.ids.empty() ? layout.world : static_cast<int>(layout.ids.size());
  const int stages = static_cast<int>(fw.stages.size()) + (seen.records > 0 && seen.has_wall ? 1 : 0);
  if (!detail::values_fit(total, columns, stages, opt.limits)) throw ReadWhole{"a window past --max-values"};
}

/// The layout to try before the records are read: dense over `world` ranks, unless that step
/// would be large (a large world is often sparse).
std::optional<Layout> guess_layout(int world, std::size_t stages) {
  if (world < 1 || static_cast<std::uint64_t>(world) * (stages + 3) > kMaxGuessValues) return std::nullopt;
  return Layout{world, {}};
}

/// A dense step of this many values (world × (stages + 3)) is allocated on a guess without
/// looking; a larger one only when the window's first step has every rank (first_step_is_dense).
constexpr std::uint64_t kUnprobedGuessValues = std::uint64_t{1} << 16;

/// Whether the records of a window's first step name every rank of `world`. Read from a source
/// of its own, and given up at any error (the pass that follows words it), so a sparse window
/// in a large world never gets a world-sized step: its memory follows the records present.
template <typename MakeSource>
bool first_step_is_dense(int world, MakeSource& make_source) {
  try {
    auto src = make_source();
    Rec rec;
    std::vector<std::uint64_t> bits((static_cast<std::size_t>(world) + 63) / 64, 0);
    int count = 0;
    std::optional<std::int64_t> first;
    while (src->next(rec)) {
      if (first && rec.step != *first) return false;
      first = rec.step;
      if (rec.rank < 0 || rec.rank >= world) return false;
      auto& w = bits[static_cast<std::size_t>(rec.rank) / 64];
      const std::uint64_t bit = std::uint64_t{1} << (rec.rank % 64);
      if (!(w & bit)) {
        w |= bit;
        if (++count == world) return true;
      }
    }
  } catch (...) {  // NOLINT: any error is the pass's to word
  }
  return false;
}

/// Reads one window's records with a pass: once with the guessed layout, again with the one it
/// found when the guess was wrong. make_source() gives a source over the window's records.
template <typename MakeSource>
void stream_window(FileLines& lines, const ReadOptions& opt, StepSink& sink, const FileWindow& fw,
                   std::optional<Layout> guess, MakeSource make_source) {
  WindowPass pass(opt, sink, fw);
  Seen seen;
  // With --window the sink has finished windows before the guess is known right: look first.
  if (opt.window_steps > 0) guess.reset();
  if (guess && guess->ids.empty() &&
      static_cast<std::uint64_t>(guess->world) * (fw.stages.size() + 4) > kUnprobedGuessValues) {
    if (!first_step_is_dense(guess->world, make_source)) guess.reset();
    lines.seek(fw.body_offset, fw.body_line);
  }
  {
    auto src = make_source();
    pass.run(*src, guess ? &*guess : nullptr, seen);
  }
  const int world = fw.world > 0 ? fw.world : seen.max_rank + 1;
  if (world < 1) throw ReadWhole{"no records"};
  const Layout layout = seen.layout(world);
  check_window(fw, seen, layout, opt);
  if (seen.fed && guess && *guess == layout) {
    pass.finish(seen);
    return;
  }
  lines.seek(fw.body_offset, fw.body_line);
  auto src = make_source();
  Seen again;
  pass.run(*src, &layout, again);
  if (!again.fed || again.records != seen.records) throw ReadWhole{"the second pass differs"};
  pass.finish(again);
}

// --- CSV ---


/// Whether this process may run on two processors or more (its affinity mask: taskset, a
/// cpuset): the read-ahead threads help only then; on one they take turns with the scoring
/// thread and add only switches and cache misses.
bool two_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return std::thread::hardware_concurrency() >= 2;
  return CPU_COUNT(&set) >= 2;
}

/// A CSV body read through a mapping of the file, for the reader on one processor: no copy of
/// the file's bytes into a buffer (the kernel's copy was an eighth of `score`'s CPU on a 100 MB
/// file). A file cut short while it is read makes a mapping's reads past its new end fault with
/// SIGBUS, where pread sees a short read: while a body is mapped, a SIGBUS handler puts zeros
/// under the mapping from the faulting page on, notes it, and returns (a fault elsewhere gets the
/// action there was before). The reader checks cut() after each line it read from the mapping
/// and, when set, reads again from that line's start with pread, which sees the file as it now
/// is; so it does at a zero byte in a line (a file cut inside a page reads as zeros to the page's
/// end, without a fault). Pages behind the reader are let go as it goes (memory stays bounded). One mapping
/// at a time in the process: open() fails for a second, whose reader then uses pread.
class MappedBody {
public:
  MappedBody() = default;
  MappedBody(const MappedBody&) = delete;
  MappedBody& operator=(const MappedBody&) = delete;
  ~MappedBody() { close(); }

  /// Maps bytes [0, size) of fd; false (nothing mapped) where that cannot be done.
  bool open(int fd, std::uint64_t size) {
    if (size == 0 || size > static_cast<std::uint64_t>(PTRDIFF_MAX)) return false;
    bool expected = false;
    if (!in_use().compare_exchange_strong(expected, true)) return false;
    void* m = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      in_use() = false;
      return false;
    }
    struct sigaction act {};
    act.sa_sigaction = on_sigbus;
    act.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&act.sa_mask);
    page_ = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    base_ = static_cast<const char*>(m);
    size_ = static_cast<std::size_t>(size);
    released_ = 0;
    fault_ = 0;
    lo_.store(base_);
    hi_.store(base_ + size_);
    if (::sigaction(SIGBUS, &act, &previous_) != 0) {
      lo_.store(nullptr);
      hi_.store(nullptr);
      ::munmap(m, size_);
      base_ = nullptr;
      in_use() = false;
      return false;
    }
    ::madvise(m, size_, MADV_SEQUENTIAL);
    return true;
  }
  void close() {
    if (!base_) return;
    ::sigaction(SIGBUS, &previous_, nullptr);
    lo_.store(nullptr);
    hi_.store(nullptr);
    ::munmap(const_cast<char*>(base_), size_);
    base_ = nullptr;
    in_use() = false;
  }
  bool mapped() const { return base_ != nullptr; }
  const char* data() const { return base_; }
  /// A read of the mapping found the file cut short under it (the bytes read since the last
  /// look may be zeros that were never the file's).
  bool cut() const { return fault_ != 0; }
  /// The pages wholly before offset `upto` are not read again: let them go.
  void release_before(std::size_t upto) {
    if (upto < released_ + kReleaseBytes) return;  // (asked at every record: no division before it is due)
    const std::size_t end = upto / page_ * page_;
    if (end < released_ + kReleaseBytes) return;
    ::madvise(const_cast<char*>(base_) + released_, end - released_, MADV_DONTNEED);
    released_ = end;
  }

private:
  static constexpr std::size_t kReleaseBytes = std::size_t{1} << 21;

  static std::atomic<bool>& in_use() {
    static std::atomic<bool> flag{false};
    return flag;
  }
  static void on_sigbus(int sig, siginfo_t* info, void*) {
    const char* at = static_cast<const char*>(info->si_addr);
    const char* lo = lo_.load();
    if (lo && at >= lo && at < hi_.load()) {
      // Zeros from the faulting page to the mapping's end: one fault, however far the file was cut.
      const auto page = reinterpret_cast<std::uintptr_t>(at) & ~(static_cast<std::uintptr_t>(page_) - 1);
      const auto rest = reinterpret_cast<std::uintptr_t>(hi_.load()) - page;
      if (::mmap(reinterpret_cast<void*>(page), rest, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
        fault_ = 1;
        return;
      }
    }
    // Not the mapping's: the action there was before, on the fault again when this returns.
    ::sigaction(sig, &previous_, nullptr);
  }

  const char* base_ = nullptr;
  std::size_t size_ = 0, released_ = 0;
  // (Static: the handler reads them. One mapping at a time: in_use().)
  static inline std::atomic<const char*> lo_{nullptr}, hi_{nullptr};
  static inline std::size_t page_ = 4096;
  static inline volatile std::sig_atomic_t fault_ = 0;
  static inline struct sigaction previous_ {};
};

/// A block of whole lines of a CSV body with its plain rows parsed: the work a second core does
/// ahead of the one that checks and scores (CsvSource). Other lines are left as text for
/// parse_csv_row, which words their errors with their line numbers.
struct CsvBlock {
  Bytes text;
  std::int64_t lines = 0;  // lines in the block, blank ones too
  struct Entry {
    std::int64_t rel_line;  // 1-based within the block
    std::int64_t step, rank;
    std::uint32_t begin, len;  // the line in text
    bool plain;
  };
  std::vector<Entry> entries;  // the non-blank lines, in order
  std::vector<double, UninitAllocator<double>> vals;  // lay.values per plain entry, in order, wall last (lay.order)
  bool last = false;           // the body's end
  std::string failed;          // a read error
};

/// Cuts the body of a CSV file (from an offset) into blocks of whole lines and parses their
/// plain rows as parse_csv_row's first branch does.
class CsvBlockReader {
public:
  CsvBlockReader(int fd, std::uint64_t size, std::uint64_t offset, const detail::CsvHeader& h, const ReadOptions& opt)
      : fd_(fd), size_(size), off_(offset), h_(h), world_max_(std::min(opt.limits.max_world_size, kWorldSizeCeiling)),
        world_size_(opt.world_size), max_line_(static_cast<std::size_t>(std::max<std::int64_t>(opt.limits.max_line_bytes, 1))) {}

  /// Cuts the next block into b (its text only: parse() reads its rows); false once the last
  /// block was cut. Blocks must be cut in order; they may be parsed in any order, at once.
  bool cut(CsvBlock& b) {
    if (done_) return false;
    b.entries.clear();
    b.vals.clear();
    b.lines = 0;
    b.failed.clear();
    // Bytes up to the last '\n' read make the block (a "\r\n" is never cut); the rest waits.
    b.text.swap(carry_);
    carry_.clear();
    // Room for the carry and a block, kept: the buffers pass between the blocks and the carry,
    // and one sized to the last carry would be allocated (and paged in) anew at most cuts.
    if (b.text.capacity() < b.text.size() + kBlockBytes) b.text.reserve(std::max(b.text.size(), kCarryRoom) + kBlockBytes);
    std::size_t cut = std::string::npos;
    for (;;) {
      const std::size_t have = b.text.size();
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kBlockBytes, size_ - off_));
      if (want == 0) break;
      b.text.resize(have + want);
      ssize_t n;
      do n = ::pread(fd_, b.text.data() + have, want, static_cast<off_t>(off_));
      while (n < 0 && errno == EINTR);
      if (n <= 0) {
        b.text.resize(have);
        if (n < 0) b.failed = "read failed";
        size_ = off_;  // shorter than it was: the whole read sees what is there now
        break;
      }
      b.text.resize(have + static_cast<std::size_t>(n));
      off_ += static_cast<std::uint64_t>(n);
      const void* nl = memrchr(b.text.data() + have, '\n', static_cast<std::size_t>(n));
      if (nl) {
        cut = static_cast<std::size_t>(static_cast<const char*>(nl) - b.text.data()) + 1;
        break;
      }
      // No line break yet (the carry holds none either): past --max-line-bytes the whole read
      // refuses the line with its number, without holding it.
      if (b.text.size() > max_line_) {
        b.failed = kLinePastLimit;
        b.last = done_ = true;
        return true;
      }
    }
    if (off_ >= size_ || cut == std::string::npos) {
      b.last = done_ = true;
    } else {
      b.last = false;
      carry_.assign(b.text.begin() + static_cast<std::ptrdiff_t>(cut), b.text.end());
      b.text.resize(cut);
    }
    return true;
  }

  /// Cuts from `offset` on next (a line's start; nothing carried), the body's end as it was.
  void restart_at(std::uint64_t offset) {
    off_ = offset;
    carry_.clear();
    done_ = false;
  }
  /// The longest line the read takes (--max-line-bytes).
  std::size_t max_line() const { return max_line_; }

  /// A line read as parse_csv_row's first branch reads it: true for a plain row (its values in
  /// vals, in file order), false for a line left to parse_csv_row.
  bool plain_row(std::string_view line, std::int64_t& step, std::int64_t& rank, std::span<double> vals) const {
    return h_.sep == ',' && detail::parse_plain_row(line, step, rank, vals, h_.lay.trailing_empty) && rank_fits(rank);
  }
  /// A plain row's rank the reader takes there (others go the general way, which words them).
  bool rank_fits(std::int64_t rank) const { return rank < world_max_ && !(world_size_ > 0 && rank >= world_size_); }

  void parse(CsvBlock& b) const {
    const std::string_view text(b.text.data(), b.text.size());
    const std::size_t nvals = h_.lay.values;
    std::size_t used = 0;  // of b.vals: the plain rows' values, written in place
    auto take = [&](std::string_view line) {
      ++b.lines;
      if (detail::blank_line(line)) return;
      CsvBlock::Entry e{b.lines, 0, 0, static_cast<std::uint32_t>(line.data() - text.data()),
                        static_cast<std::uint32_t>(line.size()), false};
      if (b.vals.size() < used + nvals) b.vals.resize(std::max(2 * b.vals.size(), used + nvals));
      const std::span<double> vals(b.vals.data() + used, nvals);
      e.plain = plain_row(line, e.step, e.rank, vals);
      if (e.plain) {
        h_.lay.order(vals);
        used += nvals;
      }
      b.entries.push_back(e);
    };
    if (text.empty()) return;  // (memchr may not be given the null pointer of an empty block)
    if (!std::memchr(text.data(), '\r', text.size())) {
      // A plain row is read whole in place, its end found in the same registers (the bytes of
      // the block around it readable), where the processor and the file's form allow; every
      // other line is cut at its '\n' and taken as above.
      const detail::PlainLineFn wide = detail::plain_lines_wide_fn(h_);
      for (std::size_t pos = 0; pos < text.size();) {
        std::size_t len = static_cast<std::size_t>(-1);
        if (wide) {
          if (b.vals.size() < used + nvals) b.vals.resize(std::max(2 * b.vals.size(), used + nvals));
          const std::span<double> vals(b.vals.data() + used, nvals);
          CsvBlock::Entry e{b.lines + 1, 0, 0, static_cast<std::uint32_t>(pos), 0, true};
          if (wide(text.data() + pos, text.size() - pos, pos, len, e.step, e.rank, vals) &&
              len <= max_line_ && rank_fits(e.rank)) {
            ++b.lines;
            e.len = static_cast<std::uint32_t>(len);
            h_.lay.order(vals);
            used += nvals;
            b.entries.push_back(e);
            pos += len + 1;
            continue;
          }
        }
        if (len == static_cast<std::size_t>(-1)) {
          const void* nl = std::memchr(text.data() + pos, '\n', text.size() - pos);
          len = (nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - text.data()) : text.size()) - pos;
        }
        if (len > max_line_) {
          b.failed = kLinePastLimit;
          return;
        }
        take(text.substr(pos, len));
        pos += len + 1;
      }
    } else {
      // "\r\n" and lone "\r" line ends: CsvLines' own splitting, its blank lines counted too.
      detail::CsvLines lines(text, 0);
      std::string_view line;
      std::int64_t seen = 0;
      while (lines.next(line)) {
        b.lines += lines.line_no() - seen - 1;  // the blank lines it skipped
        seen = lines.line_no();
        if (line.size() > max_line_) {
          b.failed = kLinePastLimit;
          return;
        }
        take(line);
      }
      b.lines = lines.line_no();
    }
    b.vals.resize(used);
  }

private:
  static constexpr std::size_t kBlockBytes = std::size_t{1} << 19;
  static constexpr std::size_t kCarryRoom = std::size_t{1} << 16;  // a block's room for the line before it

  int fd_;
  std::uint64_t size_, off_;
  const detail::CsvHeader& h_;
  int world_max_, world_size_;
  std::size_t max_line_;
  Bytes carry_;
  bool done_ = false;
};

/// The records of a CSV body, in order, from blocks that two worker threads cut and parse
/// ahead of the thread that checks and scores them (when the process may run on two processors;
/// in line otherwise: two_cpus), a few blocks at most. The records come in file order whichever worker parsed them.
class CsvSource {
public:
  CsvSource(int fd, std::uint64_t size, std::uint64_t offset, std::int64_t line_before, const detail::CsvHeader& h,
            const std::string& file, const ReadOptions& opt)
      : reader_(fd, size, offset, h, opt), h_(h), file_(file), opt_(opt), vals_(h.lay.values), base_(line_before) {
    line_fn_ = detail::plain_lines_wide_fn(h_);
    if (two_cpus()) {
      for (int i = 0; i < 2; ++i) workers_.emplace_back([this] { work(); });
    } else if (map_.open(fd, size)) {
      map_at_ = offset;
      map_end_ = size;
    }
  }
  ~CsvSource() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  CsvSource(const CsvSource&) = delete;
  CsvSource& operator=(const CsvSource&) = delete;

  bool next(Rec& rec) {
    if (map_.mapped() && next_mapped(rec)) return true;
    if (map_.mapped()) return false;
    for (;;) {
      if (!block_ || (in_line_ ? line_at_ >= block_->text.size() : at_ == block_->entries.size())) {
        if (block_) {
          base_ += in_line_ ? lines_ : block_->lines;
          const bool last = block_->last;
          release(std::move(block_));
          if (last) return false;
        }
        block_ = acquire();
        if (!block_->failed.empty()) throw ReadWhole{block_->failed};
        at_ = 0;
        val_ = 0;
        line_at_ = 0;
        lines_ = 0;
        continue;
      }
      std::int64_t line_no, step, rank;
      const double* v;
      if (in_line_) {
        // One core: the block's lines read one at a time as asked for, the values into vals_
        // (no block of parsed rows in between: each row's values are read back from the cache
        // they were just written to).
        const char* const p = block_->text.data() + line_at_;
        std::size_t len;
        const bool plain = take_line(p, block_->text.size() - line_at_, line_at_, len, step, rank);
        if (len > reader_.max_line()) throw ReadWhole{kLinePastLimit};
        line_at_ += len + 1;
        ++lines_;
        line_no = base_ + lines_;
        if (!plain) {
          const std::string_view line(p, len);
          if (detail::blank_line(line)) continue;
          if (!detail::parse_csv_row(line, line_no, h_, file_, opt_, fields_, vals_, step, rank)) continue;
        }
        h_.lay.order(vals_);
        v = vals_.data();
      } else {
        const CsvBlock::Entry& e = block_->entries[at_++];
        line_no = base_ + e.rel_line;
        step = e.step;
        rank = e.rank;
        if (e.plain) {
          v = block_->vals.data() + val_;
          val_ += h_.lay.values;
        } else {
          const std::string_view line(block_->text.data() + e.begin, e.len);
          if (!detail::parse_csv_row(line, line_no, h_, file_, opt_, fields_, vals_, step, rank)) continue;
          h_.lay.order(vals_);
          v = vals_.data();
        }
      }
      emit(rec, step, rank, line_no, v);
      return true;
    }
  }

private:
  static constexpr std::size_t kAhead = 4;  // blocks cut and not yet consumed, at most

  /// A block whose cut found nothing more: the body's end.
  static void mark_end(CsvBlock& b) {
    b.entries.clear();
    b.vals.clear();
    b.lines = 0;
    b.last = true;
  }
  void work() {
    for (;;) {
      std::unique_ptr<CsvBlock> b;
      std::uint64_t seq = 0;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || cut_done_ || cut_seq_ - next_seq_ < kAhead; });
        if (stop_ || cut_done_) return;
        if (!free_.empty()) {
          b = std::move(free_.back());
          free_.pop_back();
        }
        try {
          if (!b) b = std::make_unique<CsvBlock>();
          if (!reader_.cut(*b)) mark_end(*b);
        } catch (const std::exception&) {
          if (!b) b = std::make_unique<CsvBlock>();  // (nothrow in practice: a few bytes)
          mark_end(*b);
          b->failed = "out of memory reading ahead";
        }
        cut_done_ = b->last;
        seq = cut_seq_++;
      }
      try {
        reader_.parse(*b);
      } catch (const std::exception&) {
        mark_end(*b);
        b->failed = "out of memory reading ahead";
      }
      {
        std::lock_guard lock(mu_);
        ready_[seq] = std::move(b);
      }
      cv_.notify_all();
    }
  }
  /// One processor: the line at p (avail bytes there, `before` readable before it), its length
  /// into len; true when it is a plain row read (step, rank, vals_) straight from the mapping (or
  /// the block): whole, its line end found in the same registers (wide), or else field by field
  /// (where the processor lacks the wide parse, or it left the line), when it ends in no '\r' and
  /// fits --max-line-bytes either way. Those are the values
  /// parse_csv_row gives the line (the general path reads a plain row with the same
  /// parse_plain_row_by_field); every other line goes to the caller's copy and general path.
  bool take_line(const char* p, std::size_t avail, std::size_t before, std::size_t& len, std::int64_t& step,
                 std::int64_t& rank) {
    len = kNoEnd;
    if (line_fn_ && line_fn_(p, avail, before, len, step, rank, vals_) && len <= reader_.max_line() &&
        reader_.rank_fits(rank))
      return true;
    if (len == kNoEnd) {
      const void* nl = std::memchr(p, '\n', avail);
      len = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - p) : avail;
    }
    return h_.sep == ',' && len > 0 && len <= reader_.max_line() && p[len - 1] != '\r' &&
           detail::parse_plain_row_by_field(std::string_view(p, len), step, rank, vals_, h_.lay.trailing_empty) &&
           reader_.rank_fits(rank);
  }

  /// One processor, the body mapped: the next record from the mapping (as the in-line path
  /// reads a block's lines), true with rec set or false at the body's end; with the mapping
  /// closed when a line cannot be taken from it (the file cut short under it, a '\r' or a zero
  /// byte, a line past --max-line-bytes): the reader then reads on from that line with pread
  /// (next()), which words or takes it as it always has.
  bool next_mapped(Rec& rec) {
    for (;;) {
      if (map_at_ >= map_end_) return false;
      const char* const p = map_.data() + map_at_;
      std::size_t len;
      std::int64_t step = 0, rank = 0;
      const bool plain = take_line(p, map_end_ - map_at_, map_at_, len, step, rank);
      if (!plain) {
        if (len <= reader_.max_line()) line_copy_.assign(p, len);  // (the general path reads the copy)
        if (map_.cut() || len > reader_.max_line() || std::memchr(line_copy_.data(), '\r', line_copy_.size()) ||
            std::memchr(line_copy_.data(), '\0', line_copy_.size()))
          return leave_map();
      } else if (map_.cut()) {
        return leave_map();
      }
      map_at_ += len + 1;
      const std::int64_t line_no = base_ + ++map_lines_;
      if (!plain) {
        if (detail::blank_line(line_copy_)) continue;
        if (!detail::parse_csv_row(line_copy_, line_no, h_, file_, opt_, fields_, vals_, step, rank)) continue;
      }
      map_.release_before(map_at_);
      h_.lay.order(vals_);
      emit(rec, step, rank, line_no, vals_.data());
      return true;
    }
  }
  /// Closes the mapping; the reader reads on with pread from the line at map_at_.
  bool leave_map() {
    map_.close();
    base_ += map_lines_;
    reader_.restart_at(map_at_);
    return false;
  }

  /// rec from a line's values, after the whole read's widening check at the same line (a step
  /// inside the span seen cannot widen it).
  void emit(Rec& rec, std::int64_t step, std::int64_t rank, std::int64_t line_no, const double* v) {
    if (pw_.noted > 0 && step >= pw_.min_step && step <= pw_.max_step) [[likely]]
      ++pw_.noted;
    else
      detail::note_step(pw_, step, file_, line_no, opt_.limits);
    const bool has_wall = h_.lay.wall_at.has_value();
    rec.step = step;
    rec.rank = static_cast<int>(rank);
    rec.line = line_no;
    rec.d = v;
    rec.has_wall = has_wall;
    rec.wall = has_wall ? v[h_.stages.size()] : 0.0;
  }

  std::unique_ptr<CsvBlock> acquire() {
    if (workers_.empty()) {
      // In line, a block's rows are read as next() asks for them, unless its lines end in
      // "\r\n" or '\r' (CsvLines' splitting, the whole block parsed at once).
      auto b = spare_ ? std::move(spare_) : std::make_unique<CsvBlock>();
      if (!reader_.cut(*b)) mark_end(*b);
      in_line_ = !b->text.empty() && !std::memchr(b->text.data(), '\r', b->text.size());
      if (!in_line_) reader_.parse(*b);
      return b;
    }
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return ready_.count(next_seq_) > 0; });
    auto it = ready_.find(next_seq_);
    auto b = std::move(it->second);
    ready_.erase(it);
    ++next_seq_;
    lock.unlock();
    cv_.notify_all();
    return b;
  }
  void release(std::unique_ptr<CsvBlock> b) {
    if (workers_.empty()) {
      spare_ = std::move(b);
      return;
    }
    std::lock_guard lock(mu_);
    free_.push_back(std::move(b));
  }

  CsvBlockReader reader_;
  const detail::CsvHeader& h_;
  const std::string& file_;
  const ReadOptions& opt_;
  std::vector<double> vals_;
  std::vector<detail::CsvField> fields_;
  detail::PendingWindow pw_;  // note_step's span
  std::int64_t base_;         // the line before the current block
  std::unique_ptr<CsvBlock> block_, spare_;
  std::size_t at_ = 0, val_ = 0;
  static constexpr std::size_t kNoEnd = static_cast<std::size_t>(-1);
  detail::PlainLineFn line_fn_ = nullptr;  // one processor: plain_lines_wide_fn(h_), its plain rows' parser
  MappedBody map_;              // one processor: the body read through a mapping while it can be
  std::uint64_t map_at_ = 0, map_end_ = 0;  // the next line's offset, the body's end
  std::int64_t map_lines_ = 0;  // lines read from the mapping, blank ones too
  std::string line_copy_;       // a line the general path reads, copied out of the mapping
  bool in_line_ = false;      // the current block's lines are read as asked for (one core)
  std::size_t line_at_ = 0;   // in line: where the next line starts in the block's text
  std::int64_t lines_ = 0;    // in line: the block's lines read so far, blank ones too
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, std::unique_ptr<CsvBlock>> ready_;  // parsed blocks by their cut order
  std::vector<std::unique_ptr<CsvBlock>> free_;
  std::uint64_t cut_seq_ = 0, next_seq_ = 0;
  bool cut_done_ = false, stop_ = false;
};

/// The rank on the last non-blank line, when it is a plain row: the world write_csv's order gives.
int last_line_rank(int fd, std::uint64_t size, const detail::CsvHeader& h) {
  const std::uint64_t n = std::min<std::uint64_t>(size, 1 << 16);
  std::string tail(n, '\0');
  if (::pread(fd, tail.data(), n, static_cast<off_t>(size - n)) != static_cast<ssize_t>(n)) return -1;
  std::string_view t(tail);
  while (!t.empty() && (detail::blank(t.back()) || t.back() == '\n' || t.back() == '\r')) t.remove_suffix(1);
  const std::size_t nl = t.find_last_of("\r\n");
  if (nl == std::string_view::npos) return -1;
  std::vector<double> vals(h.lay.values);
  std::int64_t step = 0, rank = 0;
  if (!detail::parse_plain_row(t.substr(nl + 1), step, rank, vals, h.lay.trailing_empty)) return -1;
  return rank < kWorldSizeCeiling ? static_cast<int>(rank) : -1;
}

void stream_csv(int fd, std::uint64_t size, std::uint64_t start, const std::string& file, const ReadOptions& opt,
                StepSink& sink) {
  FileLines lines(fd, size, true, opt.limits.max_line_bytes);
  lines.seek(start, 0);
  const detail::CsvHeader h = detail::read_csv_header(lines, file, opt);
  FileWindow fw;
  fw.stages = h.stages;
  fw.accumulation = opt.accumulation;
  fw.world = opt.world_size;
  fw.header_line = h.line;
  fw.body_offset = lines.next_offset();
  fw.body_line = lines.line_no();
  const int world = opt.world_size > 0 ? opt.world_size : last_line_rank(fd, size, h) + 1;
  stream_window(lines, opt, sink, fw, guess_layout(world, h.stages.size() + 1), [&] {
    return std::make_unique<CsvSource>(fd, size, fw.body_offset, fw.body_line, h, file, opt);
  });
}

// --- JSON Lines ---

/// The records of one window, up to the next header line (kept for the caller) or the end.
class JsonlSource {
public:
  /// The line and object of the header that ends the window (line 0: the file's end).
  struct Stop {
    std::int64_t line = 0;
    json header;
  };
  JsonlSource(FileLines& lines, detail::StrictJsonParser& parser, detail::PendingWindow& pw, const std::string& file,
              const ReadOptions& opt, Stop& stop)
      : lines_(lines), parser_(parser), pw_(pw), file_(file), opt_(opt), stop_(stop) {}

  bool next(Rec& rec) {
    std::string_view line;
    while (lines_.next(line)) {
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      detail::parse_json_line(parser_, line, file_, lines_.line_no(), obj_);
      if (obj_.contains("schema")) {
        stop_.line = lines_.line_no();
        stop_.header = std::move(obj_);
        return false;
      }
      pw_.records.clear();
      pw_.values.clear();
      pw_.sync_values.clear();
      detail::parse_record(obj_, file_, lines_.line_no(), pw_, opt_.limits);
      const auto& p = pw_.records.back();
      rec.step = p.step;
      rec.line = p.line;
      rec.rank = p.rank;
      rec.d = pw_.values.data();
      rec.has_wall = p.has_wall;
      rec.wall = p.has_wall ? p.wall : 0.0;
      rec.event = p.event;
      rec.event_s = p.event_s;
      rec.cpu_wait = p.cpu_wait;
      rec.has_sync = p.sync_offset >= 0;
      rec.sync = rec.has_sync ? pw_.sync_values.data() : nullptr;
      return true;
    }
    stop_.line = 0;
    return false;
  }

private:
  FileLines& lines_;
  detail::StrictJsonParser& parser_;
  detail::PendingWindow& pw_;
  const std::string& file_;
  const ReadOptions& opt_;
  Stop& stop_;
  json obj_;
};

void stream_jsonl(int fd, std::uint64_t size, std::uint64_t start, const std::string& file, const ReadOptions& opt,
                  StepSink& sink) {
  FileLines lines(fd, size, false, opt.limits.max_line_bytes);
  lines.seek(start, 0);
  detail::StrictJsonParser parser;
  JsonlSource::Stop stop;
  // Up to the first header: a record before it is that line's error.
  std::string_view line;
  while (stop.line == 0 && lines.next(line)) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    detail::parse_json_line(parser, line, file, lines.line_no(), stop.header);
    if (!stop.header.contains("schema"))
      throw FormatError(file, lines.line_no(),
                        "record before any header; expected a first line {\"schema\":\"sf.stages/1\",\"stages\":[...],\"world_size\":R}");
    stop.line = lines.line_no();
  }
  if (stop.line == 0) throw ReadWhole{"an empty file"};
  while (stop.line > 0) {
    detail::PendingWindow pw;
    pw.header_line = stop.line;
    detail::parse_header(stop.header, file, stop.line, pw, opt.limits);
    FileWindow fw;
    fw.stages = pw.stages;
    fw.accumulation = pw.accumulation;
    fw.world = pw.world;
    fw.roles = pw.roles;
    fw.span_first = pw.span_first;
    fw.span_steps = pw.span_steps;
    fw.telemetry = pw.telemetry;
    fw.ranks = pw.ranks;
    fw.header_line = stop.line;
    fw.body_offset = lines.next_offset();
    fw.body_line = lines.line_no();
    stream_window(lines, opt, sink, fw, guess_layout(pw.world, pw.stages.size() + 1), [&] {
      pw.noted = 0;
      return std::make_unique<JsonlSource>(lines, parser, pw, file, opt, stop);
    });
  }
}

}  // namespace

StreamStatus stream_stage_file(const std::string& path, const ReadOptions& opt, StepSink& sink, std::string* why) {
  auto whole = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return StreamStatus::whole;
  };
  const auto format = opt.format ? opt.format : format_from_path(path);
  if (!format) return whole("unknown file extension");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return whole("cannot open the file");
  const detail::FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return whole("not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size == 0 || size > static_cast<std::uint64_t>(std::max<std::int64_t>(opt.limits.max_file_bytes, 0)))
    return whole("empty, or above --max-file-size");
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  // A UTF-8 byte order mark is not part of the text (either format); UTF-16 text is converted by
  // the whole read.
  char bom[3] = {};
  const auto got = ::pread(fd, bom, 3, 0);
  if (got >= 2 && ((bom[0] == '\xFF' && bom[1] == '\xFE') || (bom[0] == '\xFE' && bom[1] == '\xFF')))
    return whole("UTF-16 text");
  const std::uint64_t start = got == 3 && std::memcmp(bom, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
  try {
    if (*format == MatrixFormat::csv) stream_csv(fd, size, start, path, opt, sink);
    else stream_jsonl(fd, size, start, path, opt, sink);
  } catch (const ReadWhole& w) {
    return whole(w.why);
  } catch (const FormatError&) {
    throw;
  } catch (const std::exception& e) {
    return whole(e.what());
  }
  return StreamStatus::streamed;
}

}  // namespace sf::formats
