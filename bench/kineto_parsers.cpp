// The two parsers the Kineto import could use, on the same trace (docs/kineto.md, "Reading"):
// nlohmann's SAX interface (what formats/kineto_parse.cpp runs, here with a handler that does
// nothing, its floor) and simdjson's On-Demand API reading every event's name, ph, cat, ts,
// dur, pid and tid (the fields the import reads). Both over the decompressed text held whole,
// so the figures compare parsers, not I/O; zlib's inflate of the same file is timed alone.
//
//   kineto_parsers TRACE.json.gz   prints CPU seconds (this process) per phase and the text size
#include <nlohmann/json.hpp>
#include <simdjson.h>
#include <zlib.h>

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string inflate_file(const char* path) {
  gzFile f = gzopen(path, "rb");
  if (!f) return {};
  gzbuffer(f, 1 << 18);
  std::string out;
  std::vector<char> block(1 << 20);
  int n = 0;
  while ((n = gzread(f, block.data(), static_cast<unsigned>(block.size()))) > 0) out.append(block.data(), static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

/// nlohmann's SAX floor: every callback returns at once.
struct NoOp {
  using json = nlohmann::json;
  std::size_t keys = 0;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(std::string&) { return ++keys, true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }
};

/// simdjson On-Demand: the fields the import reads, from every event.
std::size_t simdjson_events(const std::string& text) {
  simdjson::ondemand::parser parser;
  const simdjson::padded_string padded(text);
  auto doc = parser.iterate(padded);
  std::size_t events = 0;
  for (auto field : doc.get_object()) {
    std::string_view key;
    if (field.unescaped_key().get(key) || key != "traceEvents") continue;
    for (auto ev : field.value().get_array()) {
      ++events;
      for (auto f : ev.get_object()) {
        std::string_view k;
        if (f.unescaped_key().get(k)) return 0;
        double d = 0;
        std::string_view s;
        if (k == "ts" || k == "dur") {
          if (f.value().get_double().get(d)) return 0;
        } else if (k == "name" || k == "ph" || k == "cat") {
          if (f.value().get_string().get(s)) return 0;
        } else if (k == "pid" || k == "tid") {
          auto v = f.value();
          if (v.get_string().get(s)) {
            std::int64_t i = 0;
            if (v.get_int64().get(i)) i = 0;
          }
        }
      }
    }
  }
  return events;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kineto_parsers TRACE.json.gz\n");
    return 2;
  }
  double t0 = cpu_seconds();
  const std::string text = inflate_file(argv[1]);
  const double inflate_s = cpu_seconds() - t0;
  if (text.empty()) {
    std::fprintf(stderr, "kineto_parsers: cannot read %s\n", argv[1]);
    return 2;
  }
  NoOp noop;
  t0 = cpu_seconds();
  const bool ok = nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &noop);
  const double nlohmann_s = cpu_seconds() - t0;
  t0 = cpu_seconds();
  const std::size_t events = simdjson_events(text);
  const double simdjson_s = cpu_seconds() - t0;
  std::printf("{\"text_bytes\": %zu, \"inflate_s\": %.4f, \"nlohmann_sax_noop_s\": %.4f, \"nlohmann_ok\": %s, "
              "\"simdjson_ondemand_s\": %.4f, \"simdjson_events\": %zu}\n",
              text.size(), inflate_s, nlohmann_s, ok ? "true" : "false", simdjson_s, events);
  return ok && events > 0 ? 0 : 1;
}
