// The window gather over MPI: non-blocking point-to-point to rank 0 on a duplicated
// communicator whose errors are returned, never fatal (docs/design.md, Change 4).
#include "sf/recorder/mpi_transport.h"

#include "sf/check/check.h"
#include "sf/formats/formats.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <unistd.h>

namespace sf::recorder {

void free_comm(MPI_Comm comm) noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm != MPI_COMM_NULL) SF_MPI_CHECK_NOEXCEPT(MPI_Comm_free(&comm));
}

namespace {

using Comm = CommOwner;

int tag_of(int window) { return 1 + window % 30000; }

Comm dup(MPI_Comm parent) {
  MPI_Comm c = MPI_COMM_NULL;
  SF_MPI_CHECK(MPI_Comm_dup(parent, &c));
  return Comm(c);
}

/// This rank's host: SF_HOSTNAME when set (test hosts, containers), else MPI's processor name.
std::string host_name() {
  if (const char* h = std::getenv("SF_HOSTNAME"); h && *h) return h;
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  SF_MPI_CHECK(MPI_Get_processor_name(name, &len));
  return std::string(name, static_cast<std::size_t>(std::max(len, 0)));
}

class MpiTransport final : public Transport {
public:
  explicit MpiTransport(MPI_Comm parent) : comm_(dup(parent)) {
    // A duplicate communicator: telemetry traffic can never match the trainer's messages. Its
    // errors are returned, not fatal: a bad contribution must never take training down. Set-up
    // failures throw (sf::check::CallError); failures while gathering degrade the window.
    SF_MPI_CHECK(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN));
    SF_MPI_CHECK(MPI_Comm_rank(comm_.get(), &rank_));
    SF_MPI_CHECK(MPI_Comm_size(comm_.get(), &size_));
    MPI_Comm node_raw = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_split_type(comm_.get(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_raw));
    const Comm node(node_raw);
    int local = 0;
    SF_MPI_CHECK(MPI_Comm_rank(node.get(), &local));
    MPI_Comm leaders_raw = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_split(comm_.get(), local == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders_raw));
    const Comm leaders(leaders_raw);
    int node_rank = 0;
    if (leaders_raw != MPI_COMM_NULL) SF_MPI_CHECK(MPI_Comm_rank(leaders.get(), &node_rank));
    SF_MPI_CHECK(MPI_Bcast(&node_rank, 1, MPI_INT, 0, node.get()));
    id_ = {rank_, local, node_rank, host_name()};
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
    // A failed send is not retried: the root names this rank as missing for the window.
    if (MPI_Isend(s->buf.data(), static_cast<int>(s->buf.size()), MPI_BYTE, 0, tag_of(window), comm_.get(), &s->req) ==
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
      if (MPI_Test(&s->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return true;  // failed: given up
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

  /// Receives one message with `tag` from any rank if one has arrived (non-blocking probe). A
  /// receive that fails yields an empty contribution, which the assembler names as corrupt.
  std::optional<Contribution> take(int tag) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, tag, comm_.get(), &flag, &msg, &st) != MPI_SUCCESS || !flag) return std::nullopt;
    int count = 0;
    if (MPI_Get_count(&st, MPI_BYTE, &count) != MPI_SUCCESS || count == MPI_UNDEFINED) count = 0;
    Contribution c{st.MPI_SOURCE, std::vector<std::byte>(static_cast<std::size_t>(std::max(count, 0)))};
    if (MPI_Mrecv(c.bytes.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS) c.bytes.clear();
    return c;
  }

  Comm comm_;
  int rank_ = 0, size_ = 1;
  formats::RankInfo id_;
  std::vector<std::pair<int, std::vector<std::byte>>> own_;
  std::vector<std::unique_ptr<Send>> sends_;
  std::set<int> abandoned_;
  std::int64_t late_ = 0;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(MPI_Comm parent) { return std::make_unique<MpiTransport>(parent); }

}  // namespace sf::recorder
