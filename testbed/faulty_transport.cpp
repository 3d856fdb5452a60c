// Telemetry faults injected on purpose: the recorder's side breaks, training must not notice.
#include "detail.h"

namespace sf::testbed::detail {

namespace {

class FaultyTransport final : public recorder::Transport {
public:
  FaultyTransport(std::unique_ptr<recorder::Transport> inner, inject::TelemetryFault fault, double late_s)
      : inner_(std::move(inner)), fault_(fault), late_ns_(static_cast<std::int64_t>(late_s * 1e9)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  formats::RankInfo identity() const override { return inner_->identity(); }
  void send(int window, std::vector<std::byte> payload) override {
    if (fault_ == inject::TelemetryFault::corrupt && payload.size() > 16) {
      for (std::size_t i = payload.size() / 2; i < payload.size() / 2 + 8 && i < payload.size(); ++i)
        payload[i] = ~payload[i];
    }
    if (fault_ == inject::TelemetryFault::late) {
      held_.push_back({window, inject::monotonic_ns() + late_ns_, progressed_ + kLateSteps, std::move(payload)});
      return;
    }
    inner_->send(window, std::move(payload));
  }
  std::vector<recorder::Contribution> receive(int window, std::size_t max_bytes) override {
    return inner_->receive(window, max_bytes);
  }
  void abandon(int window) override { inner_->abandon(window); }
  void progress() override {
    const std::int64_t now = inject::monotonic_ns();
    ++progressed_;
    std::erase_if(held_, [&](Held& h) {
      if (now < h.release_ns || progressed_ < h.release_progress) return false;
      inner_->send(h.window, std::move(h.payload));
      return true;
    });
    inner_->progress();
  }
  void drain(double deadline_s) override {
    // A late contribution stays late at the end of the run too: payloads whose release time
    // has come go out (the root has given up on their windows and discards them); the rest
    // would reach the root only after its gather deadline, so they are never sent. Flushing
    // them here once delivered the last window in time and it came back gather_ok=true.
    progress();
    held_.clear();
    inner_->drain(deadline_s);
  }
  std::int64_t late_discarded() const override { return inner_->late_discarded(); }
  void set_check(recorder::ContributionCheck check) override { inner_->set_check(std::move(check)); }
  void take_gather_stats(int window, formats::GatherStats& out) override { inner_->take_gather_stats(window, out); }
  std::vector<std::string> explain_missing(const std::vector<int>& missing) const override {
    return inner_->explain_missing(missing);
  }

private:
  /// Late past the root's wait, which is at least recorder::kGatherPaceSteps of the run's steps
  /// (one progress per safe point, once a step): twice that many of this rank's.
  static constexpr std::int64_t kLateSteps = 2 * recorder::kGatherPaceSteps;
  struct Held {
    int window;
    std::int64_t release_ns;
    std::int64_t release_progress;  // progress() calls
    std::vector<std::byte> payload;
  };
  std::unique_ptr<recorder::Transport> inner_;
  inject::TelemetryFault fault_;
  std::int64_t late_ns_;
  std::int64_t progressed_ = 0;
  std::vector<Held> held_;
};

}  // namespace

std::unique_ptr<recorder::Transport> make_faulty_transport(std::unique_ptr<recorder::Transport> inner,
                                                           inject::TelemetryFault fault, double late_s) {
  return std::make_unique<FaultyTransport>(std::move(inner), fault, late_s);
}

}  // namespace sf::testbed::detail
