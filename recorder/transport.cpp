// The in-process loopback transport (tests, single-process use).
#include "sf/recorder/recorder.h"

#include "sf/formats/formats.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace sf::recorder {

// ---- loopback ---------------------------------------------------------------------------------

class LoopbackHub {
public:
  explicit LoopbackHub(int size) : size_(size) {}
  int size() const { return size_; }
  std::mutex mutex;
  std::map<int, std::vector<Contribution>> inbox;
  std::set<int> abandoned;
  std::int64_t late = 0;

private:
  int size_;
};

std::shared_ptr<LoopbackHub> make_loopback_hub(int size) { return std::make_shared<LoopbackHub>(size); }

namespace {

class LoopbackTransport final : public Transport {
public:
  LoopbackTransport(std::shared_ptr<LoopbackHub> hub, int rank, std::string host)
      : hub_(std::move(hub)), rank_(rank), host_(std::move(host)) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  formats::RankInfo identity() const override { return {rank_, rank_, 0, host_}; }
  void send(int window, std::vector<std::byte> payload) override {
    std::lock_guard lock(hub_->mutex);
    if (hub_->abandoned.count(window)) {
      ++hub_->late;
      return;
    }
    hub_->inbox[window].push_back({rank_, std::move(payload), {}});
  }
  std::vector<Contribution> receive(int window, std::size_t) override {
    std::lock_guard lock(hub_->mutex);
    auto it = hub_->inbox.find(window);
    if (it == hub_->inbox.end()) return {};
    auto out = std::move(it->second);
    hub_->inbox.erase(it);
    return out;
  }
  void abandon(int window) override {
    std::lock_guard lock(hub_->mutex);
    hub_->abandoned.insert(window);
  }
  void progress() override {}
  void drain(double) override {}
  std::int64_t late_discarded() const override {
    std::lock_guard lock(hub_->mutex);
    return hub_->late;
  }

private:
  std::shared_ptr<LoopbackHub> hub_;
  int rank_;
  std::string host_;
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport(std::shared_ptr<LoopbackHub> hub, int rank, std::string hostname) {
  return std::make_unique<LoopbackTransport>(std::move(hub), rank, std::move(hostname));
}

}  // namespace sf::recorder
