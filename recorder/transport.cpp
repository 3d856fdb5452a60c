#include "recorder/recorder.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unistd.h>

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
    hub_->inbox[window].push_back({rank_, std::move(payload)});
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

// ---- MPI --------------------------------------------------------------------------------------

int tag_of(int window) { return 1 + window % 30000; }

class MpiTransport final : public Transport {
public:
  explicit MpiTransport(MPI_Comm parent) {
    // A duplicate communicator: telemetry traffic can never match the trainer's messages. Its
    // errors are returned, not fatal: a bad contribution must never take training down.
    MPI_Comm_dup(parent, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm node;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    int local = 0;
    MPI_Comm_rank(node, &local);
    MPI_Comm leaders;
    MPI_Comm_split(comm_, local == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders);
    int node_rank = 0;
    if (leaders != MPI_COMM_NULL) {
      MPI_Comm_rank(leaders, &node_rank);
      MPI_Comm_free(&leaders);
    }
    MPI_Bcast(&node_rank, 1, MPI_INT, 0, node);
    MPI_Comm_free(&node);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    id_ = {rank_, local, node_rank, host};
  }

  ~MpiTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  formats::RankInfo identity() const override { return id_; }

  void send(int window, std::vector<std::byte> payload) override {
    if (rank_ == 0) {
      own_.push_back({window, std::move(payload)});
      return;
    }
    auto s = std::make_unique<Send>();
    s->buf = std::move(payload);
    if (MPI_Isend(s->buf.data(), static_cast<int>(s->buf.size()), MPI_BYTE, 0, tag_of(window), comm_, &s->req) ==
        MPI_SUCCESS)
      sends_.push_back(std::move(s));
  }

  std::vector<Contribution> receive(int window, std::size_t) override {
    std::vector<Contribution> out;
    for (auto it = own_.begin(); it != own_.end();)
      if (it->first == window) {
        out.push_back({0, std::move(it->second)});
        it = own_.erase(it);
      } else {
        ++it;
      }
    // Matched probes give the exact size of whatever arrived, so an oversized or inconsistent
    // contribution is received whole and judged by the assembler, never truncated.
    while (auto c = take(tag_of(window))) out.push_back(std::move(*c));
    return out;
  }

  void abandon(int window) override {
    abandoned_.insert(tag_of(window));
    std::erase_if(own_, [&](const auto& o) { return o.first == window; });
  }

  void progress() override {
    std::erase_if(sends_, [](auto& s) {
      int done = 0;
      if (MPI_Test(&s->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return true;
      return done != 0;
    });
    for (int tag : abandoned_)
      while (take(tag)) ++late_;
  }

  void drain(double deadline_s) override {
    const std::int64_t deadline = now_ns() + static_cast<std::int64_t>(deadline_s * 1e9);
    for (;;) {
      progress();
      if (sends_.empty() || now_ns() >= deadline) break;
      usleep(200);
    }
  }

  std::int64_t late_discarded() const override { return late_; }

private:
  struct Send {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<std::byte> buf;
  };

  /// Receives one message with `tag` from any rank if one has arrived (non-blocking probe).
  std::optional<Contribution> take(int tag) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, tag, comm_, &flag, &msg, &st) != MPI_SUCCESS || !flag) return std::nullopt;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    Contribution c{st.MPI_SOURCE, std::vector<std::byte>(static_cast<std::size_t>(std::max(count, 0)))};
    if (MPI_Mrecv(c.bytes.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS) c.bytes.clear();
    return c;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  formats::RankInfo id_;
  std::vector<std::pair<int, std::vector<std::byte>>> own_;
  std::vector<std::unique_ptr<Send>> sends_;
  std::set<int> abandoned_;
  std::int64_t late_ = 0;
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport(std::shared_ptr<LoopbackHub> hub, int rank, std::string hostname) {
  return std::make_unique<LoopbackTransport>(std::move(hub), rank, std::move(hostname));
}

std::unique_ptr<Transport> make_mpi_transport(MPI_Comm parent) { return std::make_unique<MpiTransport>(parent); }

}  // namespace sf::recorder
