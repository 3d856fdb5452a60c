// --metrics FILE as a reporter: the latest window in Prometheus text (formats::metrics_text),
// rewritten atomically after each window, so a scraper never reads half a file.
#include "sf/testbed/report.h"

#include <exception>

namespace sf::testbed {

namespace {

class MetricsReporter final : public Reporter {
public:
  explicit MetricsReporter(std::string file) : file_(std::move(file)) {}
  std::string window(const ReportedWindow& w) override {
    try {
      formats::write_file_atomic(file_, formats::metrics_text(w.evidence, w.counts));
    } catch (const std::exception& e) {
      return std::string("--metrics ") + e.what();
    }
    return "";
  }

private:
  std::string file_;
};

}  // namespace

std::unique_ptr<Reporter> metrics_reporter(std::string file) { return std::make_unique<MetricsReporter>(std::move(file)); }

}  // namespace sf::testbed
