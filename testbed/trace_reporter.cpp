// --trace FILE as a reporter: the watch's Chrome trace-event JSON (docs/detect.md, "Timelines"),
// written once the run ended and its change points are final.
#include "sf/testbed/report.h"

#include <exception>

namespace sf::testbed {

namespace {

class TraceReporter final : public Reporter {
public:
  explicit TraceReporter(std::string file) : file_(std::move(file)) {}
  std::string finish(const ReportedEnd& end) override {
    if (end.trace == nullptr) return "";
    try {
      formats::write_file_atomic(file_, end.trace->dump() + "\n");
    } catch (const std::exception& e) {
      return std::string("--trace ") + e.what();
    }
    said_ = trace_written_line(file_, *end.trace);
    return "";
  }
  std::string said() const override { return said_; }

private:
  std::string file_, said_;
};

}  // namespace

std::unique_ptr<Reporter> trace_reporter(std::string file) { return std::make_unique<TraceReporter>(std::move(file)); }

}  // namespace sf::testbed
