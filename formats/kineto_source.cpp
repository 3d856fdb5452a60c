// A trace's bytes as a stream of JSON text: read in blocks from a file or a buffer, inflated
// block by block when they are gzip, every limit checked on the bytes as they come, so neither a
// large trace nor a gzip bomb is ever held whole (docs/kineto.md, "Reading").
#include "kineto_internal.h"
#include "open_error.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <memory>

namespace sf::formats::kineto {

namespace {

constexpr std::size_t kBlock = std::size_t{1} << 18;  // raw bytes per read, text bytes per inflate

std::string size_limit(std::uint64_t bytes, std::uint64_t limit, const char* what) {
  return std::string(what) + " is above the limit of " + std::to_string(limit) + " bytes (stopped at " + std::to_string(bytes) +
         " bytes); expected a smaller trace (raise the limit with --max-file-size)";
}

class FileSource final : public ByteSource {
public:
  FileSource(const std::string& path, std::uint64_t limit) : path_(path), limit_(limit), block_(kBlock) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) throw FormatError(path, 0, "is a directory; expected a trace file");
      if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > limit)
        throw FormatError(path, 0,
                          "trace file is " + std::to_string(st.st_size) + " bytes, above the limit of " + std::to_string(limit) +
                              " bytes; expected a smaller trace (raise the limit with --max-file-size)");
    }
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) throw FormatError(path, 0, "the trace " + detail::open_error(path) + "; expected a PyTorch profiler trace (.json or .json.gz)");
  }
  ~FileSource() override { std::fclose(f_); }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  std::string_view next() override {
    const std::size_t n = std::fread(block_.data(), 1, block_.size(), f_);
    if (n == 0 && std::ferror(f_)) throw FormatError(path_, 0, "read failed");
    read_ += n;
    if (read_ > limit_) throw FormatError(path_, 0, size_limit(read_, limit_, "trace file"));
    return {block_.data(), n};
  }

private:
  std::string path_;
  std::uint64_t limit_;
  std::uint64_t read_ = 0;
  std::vector<char> block_;
  std::FILE* f_ = nullptr;
};

class BufferSource final : public ByteSource {
public:
  explicit BufferSource(std::string_view bytes) : bytes_(bytes) {}
  std::string_view next() override {
    const std::string_view out = bytes_;
    bytes_ = {};
    return out;
  }

private:
  std::string_view bytes_;
};

}  // namespace

std::unique_ptr<ByteSource> file_source(const std::string& path, std::uint64_t limit) {
  return std::make_unique<FileSource>(path, limit);
}

std::unique_ptr<ByteSource> buffer_source(std::string_view bytes, const std::string& name, std::uint64_t limit) {
  if (bytes.size() > limit)
    throw FormatError(name, 0,
                      "trace is " + std::to_string(bytes.size()) + " bytes, above the limit of " + std::to_string(limit) +
                          " bytes; expected a smaller trace (raise the limit with --max-file-size)");
  return std::make_unique<BufferSource>(bytes);
}

struct TraceText::Inflater {
  z_stream zs{};
  bool open = false;
  ~Inflater() {
    if (open) inflateEnd(&zs);
  }
};

TraceText::TraceText(ByteSource& src, std::string name, std::uint64_t limit)
    : src_(src), name_(std::move(name)), limit_(limit) {}

TraceText::~TraceText() { delete z_; }

std::string_view TraceText::raw() {
  if (in_.empty()) in_ = src_.next();
  return in_;
}

TraceText::int_type TraceText::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  base_ += static_cast<std::uint64_t>(egptr() - eback());
  setg(nullptr, nullptr, nullptr);
  if (base_ + 1 - value_at_ > kMaxValueGap)
    throw FormatError(name_, 0,
                      std::to_string(base_ + 1 - value_at_) + " bytes from byte " + std::to_string(value_at_) +
                          " without a JSON value ending (blanks, brackets or commas only, or one string that long), above " +
                          std::to_string(kMaxValueGap >> 20) + " MiB; expected a Chrome trace (a gzip bomb of blanks?)");
  if (!started_) {
    started_ = true;
    // The gzip magic decides, whatever the name says. A first block of one byte cannot hold it.
    const std::string_view first = raw();
    gzip_ = first.size() >= 2 && static_cast<unsigned char>(first[0]) == 0x1f && static_cast<unsigned char>(first[1]) == 0x8b;
  }
  const bool more = gzip_ ? fill_gzip() : fill_plain();
  return more ? traits_type::to_int_type(*gptr()) : traits_type::eof();
}

bool TraceText::fill_plain() {
  const std::string_view block = raw();
  in_ = {};
  if (block.empty()) return false;
  if (base_ + block.size() > limit_) throw FormatError(name_, 0, size_limit(base_ + block.size(), limit_, "the trace"));
  // The parser only reads: the block is handed over as it is, never copied.
  char* p = const_cast<char*>(block.data());
  setg(p, p, p + block.size());
  return true;
}

/// One or more gzip members, as gzip and zcat accept: a truncated stream, a missing or wrong
/// CRC/length trailer and bytes after the last member are errors (gzread takes the first two
/// for a clean end of file). The text's size is checked on every block as it is inflated, so a
/// bomb is refused within one block of the limit and never held.
bool TraceText::fill_gzip() {
  auto corrupt = [&](const std::string& why) {
    return FormatError(name_, 0, "corrupt gzip data (" + why + "); expected a complete .json.gz trace");
  };
  if (!z_) {
    z_ = new Inflater;
    if (inflateInit2(&z_->zs, 16 + MAX_WBITS) != Z_OK) throw FormatError(name_, 0, "cannot start zlib");
    z_->open = true;
    out_.resize(kBlock);
  }
  if (ended_) return false;
  z_stream& zs = z_->zs;
  for (;;) {
    const std::string_view in = raw();
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out_.data());
    zs.avail_out = static_cast<uInt>(out_.size());
    const int ret = inflate(&zs, Z_NO_FLUSH);
    in_ = in.substr(in.size() - zs.avail_in);
    const std::size_t produced = out_.size() - zs.avail_out;
    if (base_ + produced > limit_) throw FormatError(name_, 0, size_limit(base_ + produced, limit_, "the decompressed trace"));
    if (ret == Z_STREAM_END) {
      // Another member, junk, or the end.
      const std::string_view rest = raw();
      if (rest.empty()) {
        ended_ = true;
      } else if (rest.size() >= 2 && static_cast<unsigned char>(rest[0]) == 0x1f && static_cast<unsigned char>(rest[1]) == 0x8b) {
        inflateReset(&zs);
      } else {
        std::uint64_t left = rest.size();
        in_ = {};
        for (std::string_view more = src_.next(); !more.empty(); more = src_.next()) left += more.size();
        throw corrupt(std::to_string(left) + " bytes after the end of the gzip stream");
      }
    } else if (ret == Z_OK || ret == Z_BUF_ERROR) {
      if (produced == 0 && in.empty()) throw corrupt("the stream ends early: a truncated file, or one without its CRC and length trailer");
    } else {
      throw corrupt(zs.msg ? zs.msg : "zlib error " + std::to_string(ret));
    }
    if (produced > 0) {
      setg(out_.data(), out_.data(), out_.data() + produced);
      return true;
    }
    if (ended_) return false;
  }
}

}  // namespace sf::formats::kineto
