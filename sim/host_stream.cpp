// The host-stream model of a device (CPU builds, CI): one worker thread per rank executes the
// queued items in order, sleeping (not spinning) through "device" time.
#include "sf/sim/sim.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace sf::sim {

namespace {

class HostStream final : public Device, public recorder::EventTimer {
public:
  HostStream(std::size_t grad_floats, std::int64_t spin_ns, int pairs)
      : spin_ns_(spin_ns), grads_(grad_floats, 1.0f), stamps_(static_cast<std::size_t>(pairs) * 2) {
    for (int i = pairs - 1; i >= 0; --i) free_.push_back(i);
    worker_ = std::thread([this] { loop(); });
  }
  ~HostStream() override {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  std::string name() const override { return "host-stream"; }
  void compute(double seconds) override { push({Item::work, static_cast<std::int64_t>(seconds * 1e9), nullptr, {}}); }
  void spin(double seconds) override { compute(seconds); }
  void synchronize() override {
    std::unique_lock lock(m_);
    idle_cv_.wait(lock, [&] { return q_.empty() && !busy_; });
  }
  recorder::EventTimer& events() override { return *this; }
  void when_reached(std::function<void()> fn) override { push({Item::callback, 0, nullptr, std::move(fn)}); }
  float* host_grads() override { return grads_.data(); }
  std::size_t grad_floats() const override { return grads_.size(); }

  // EventTimer: pairs of stamps written by the worker when it reaches them.
  int acquire() override {
    if (free_.empty()) return -1;
    const int p = free_.back();
    free_.pop_back();
    stamps_[2 * p].store(0);
    stamps_[2 * p + 1].store(0);
    return p;
  }
  void record_begin(int p) override { push({Item::event, 0, &stamps_[2 * p], {}}); }
  void record_end(int p) override { push({Item::event, 0, &stamps_[2 * p + 1], {}}); }
  std::optional<double> query(int p) override {
    const std::int64_t b = stamps_[2 * p].load(std::memory_order_acquire);
    const std::int64_t e = stamps_[2 * p + 1].load(std::memory_order_acquire);
    if (b == 0 || e == 0) return std::nullopt;
    return static_cast<double>(e - b) * 1e-9;
  }
  void release(int p) override { free_.push_back(p); }

private:
  struct Item {
    enum Kind { work, event, callback } kind;
    std::int64_t ns;
    std::atomic<std::int64_t>* stamp;
    std::function<void()> fn;
  };

  void push(Item item) {
    {
      std::lock_guard lock(m_);
      q_.push_back(item);
    }
    cv_.notify_one();
  }

  void loop() {
    std::int64_t free_at = 0;  // when the "device" finishes its last item
    for (;;) {
      Item item;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
        if (stop_ && q_.empty()) return;
        item = std::move(q_.front());
        q_.pop_front();
        busy_ = true;
      }
      const std::int64_t now = inject::monotonic_ns();
      if (item.kind == Item::work) {
        free_at = std::max(now, free_at) + item.ns;
        inject::precise_sleep_until(free_at, spin_ns_);
      } else if (item.kind == Item::event) {
        item.stamp->store(std::max(now, free_at), std::memory_order_release);
      } else {
        item.fn();  // everything queued before it has finished
      }
      {
        std::lock_guard lock(m_);
        busy_ = false;
        if (q_.empty()) idle_cv_.notify_all();
      }
    }
  }

  std::int64_t spin_ns_;
  std::vector<float> grads_;
  std::vector<std::atomic<std::int64_t>> stamps_;
  std::vector<int> free_;
  std::mutex m_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Item> q_;
  bool busy_ = false, stop_ = false;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Device> make_host_stream_device(std::size_t grad_floats, std::int64_t spin_ns, int event_pairs) {
  return std::make_unique<HostStream>(grad_floats, spin_ns, event_pairs);
}

}  // namespace sf::sim
