// The window gather over MPI: non-blocking point-to-point to rank 0, flat or through one relay
// per node, on duplicated communicators whose errors are returned, never fatal (docs/design.md,
// Changes 4 and 15).
#include "sf/recorder/mpi_transport.h"

#include "sf/check/check.h"
#include "sf/formats/formats.h"

#include "sf/frontier/frontier.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
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

// A relay's bundle: one message per node and window, of the contributions it has so far.
// [u32 kBundleMagic][u32 entries] then per entry [i32 rank][u32 refused bytes][u32 payload
// bytes][refused text][payload]. The payloads travel verbatim: the root checks them again.
constexpr std::uint32_t kBundleMagic = 0x31424653;  // "SFB1"

template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

/// Reads a T at `off` of `b`, advancing it; false when `b` is too short.
template <typename T>
bool get(const std::vector<std::byte>& b, std::size_t& off, T& v) {
  if (off > b.size() || b.size() - off < sizeof(T)) return false;
  std::memcpy(&v, b.data() + off, sizeof(T));
  off += sizeof(T);
  return true;
}

/// The bundle's entries, or nullopt when it is malformed (the root then counts it and its ranks
/// stay missing).
std::optional<std::vector<Contribution>> unbundle(const std::vector<std::byte>& b, int world) {
  std::size_t off = 0;
  std::uint32_t magic = 0, n = 0;
  if (!get(b, off, magic) || magic != kBundleMagic || !get(b, off, n)) return std::nullopt;
  std::vector<Contribution> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    std::int32_t rank = 0;
    std::uint32_t nref = 0, nbytes = 0;
    if (!get(b, off, rank) || !get(b, off, nref) || !get(b, off, nbytes)) return std::nullopt;
    if (rank < 0 || rank >= world || b.size() - off < std::size_t{nref} + nbytes) return std::nullopt;
    Contribution c;
    c.rank = rank;
    c.refused.assign(reinterpret_cast<const char*>(b.data() + off), nref);
    off += nref;
    c.bytes.assign(b.begin() + static_cast<std::ptrdiff_t>(off), b.begin() + static_cast<std::ptrdiff_t>(off + nbytes));
    off += nbytes;
    out.push_back(std::move(c));
  }
  if (off != b.size()) return std::nullopt;
  return out;
}

/// The relay of a node whose ranks (ascending) are `members`: its smallest rank other than 0,
/// or −1 for a node that holds rank 0 alone. Rank 0 is the root, never a relay: its fan-in is
/// then one message per node, its own node's included.
int relay_of(const std::vector<int>& members) {
  for (int r : members)
    if (r != 0) return r;
  return -1;
}

class MpiTransport final : public Transport {
public:
  MpiTransport(MPI_Comm parent, GatherOptions opt) : comm_(dup(parent)), relay_comm_(dup(parent)), opt_(opt) {
    // Duplicate communicators: telemetry traffic can never match the trainer's messages, and a
    // relay's bundles never match the contributions it receives. Errors are returned, not fatal:
    // a bad contribution must never take training down. Set-up failures throw
    // (sf::check::CallError); failures while gathering degrade the window.
    SF_MPI_CHECK(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN));
    SF_MPI_CHECK(MPI_Comm_set_errhandler(relay_comm_.get(), MPI_ERRORS_RETURN));
    SF_MPI_CHECK(MPI_Comm_rank(comm_.get(), &rank_));
    SF_MPI_CHECK(MPI_Comm_size(comm_.get(), &size_));
    MPI_Comm node_raw = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_split_type(comm_.get(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_raw));
    const Comm node(node_raw);
    int local = 0, node_size = 1;
    SF_MPI_CHECK(MPI_Comm_rank(node.get(), &local));
    SF_MPI_CHECK(MPI_Comm_size(node.get(), &node_size));
    MPI_Comm leaders_raw = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_split(comm_.get(), local == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders_raw));
    const Comm leaders(leaders_raw);
    int node_rank = 0;
    if (leaders_raw != MPI_COMM_NULL) SF_MPI_CHECK(MPI_Comm_rank(leaders.get(), &node_rank));
    SF_MPI_CHECK(MPI_Bcast(&node_rank, 1, MPI_INT, 0, node.get()));
    id_ = {rank_, local, node_rank, host_name()};
    // The node's ranks, ascending (the split's key is the global rank), and where each sends.
    std::vector<int> members(static_cast<std::size_t>(node_size));
    SF_MPI_CHECK(MPI_Allgather(&rank_, 1, MPI_INT, members.data(), 1, MPI_INT, node.get()));
    if (opt_.mode == GatherMode::node) {
      relay_ = relay_of(members);
      if (relay_ == rank_) expected_ = static_cast<int>(std::count_if(members.begin(), members.end(), [](int r) { return r != 0; }));
    }
    // The root learns every rank's node, to count nodes and to name a node whose relay is silent.
    std::vector<int> node_of(rank_ == 0 ? static_cast<std::size_t>(size_) : 0);
    SF_MPI_CHECK(MPI_Gather(&node_rank, 1, MPI_INT, node_of.data(), 1, MPI_INT, 0, comm_.get()));
    if (rank_ == 0) {
      int nodes = 0;
      for (int n : node_of) nodes = std::max(nodes, n + 1);
      node_ranks_.resize(static_cast<std::size_t>(nodes));
      for (int r = 0; r < size_; ++r) node_ranks_[static_cast<std::size_t>(node_of[static_cast<std::size_t>(r)])].push_back(r);
      node_of_ = std::move(node_of);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  formats::RankInfo identity() const override { return id_; }
  void set_check(ContributionCheck check) override { check_ = std::move(check); }

  void send(int window, std::vector<std::byte> payload) override {
    if (rank_ == 0) {
      own_.push_back({window, std::move(payload)});
      return;
    }
    if (relay_ == rank_) {  // a relay's own contribution goes into its node's bundle
      accept(tag_of(window), Contribution{rank_, std::move(payload), {}});
      return;
    }
    isend(std::move(payload), relay_ >= 0 ? relay_ : 0, tag_of(window), comm_.get());
  }

  std::vector<Contribution> receive(int window, std::size_t) override {
    std::vector<Contribution> out;
    for (auto it = own_.begin(); it != own_.end();)
      if (it->first == window) {
        out.push_back({0, std::move(it->second), {}});
        it = own_.erase(it);
      } else {
        ++it;
      }
    // Matched probes give the exact size of whatever arrived, so an oversized or inconsistent
    // contribution is received whole and judged by the assembler, never truncated.
    const int tag = tag_of(window);
    auto& st = stats_[window];
    while (auto c = take(comm_.get(), tag)) {
      ++st.messages;
      st.bytes += static_cast<std::int64_t>(c->bytes.size());
      out.push_back(std::move(*c));
    }
    while (auto b = take(relay_comm_.get(), tag)) {
      ++st.messages;
      st.bytes += static_cast<std::int64_t>(b->bytes.size());
      if (auto entries = unbundle(b->bytes, size_)) {
        for (auto& c : *entries) out.push_back(std::move(c));
      } else {
        ++malformed_;
      }
    }
    return out;
  }

  void abandon(int window) override {
    abandoned_.insert(tag_of(window));
    std::erase_if(own_, [&](const auto& o) { return o.first == window; });
  }

  void take_gather_stats(int window, formats::GatherStats& out) override {
    const auto it = stats_.find(window);
    out.mode = gather_mode_name(opt_.mode);
    out.nodes = static_cast<int>(node_ranks_.size());
    out.messages = it == stats_.end() ? 0 : it->second.messages;
    out.bytes = it == stats_.end() ? 0 : it->second.bytes;
    if (it != stats_.end()) stats_.erase(it);
  }

  std::vector<std::string> explain_missing(const std::vector<int>& missing) const override {
    std::vector<std::string> out;
    if (opt_.mode != GatherMode::node || rank_ != 0) return out;
    std::vector<int> count(node_ranks_.size(), 0);
    for (int r : missing)
      if (r > 0 && r < size_) ++count[static_cast<std::size_t>(node_of_[static_cast<std::size_t>(r)])];
    for (std::size_t n = 0; n < node_ranks_.size(); ++n) {
      const auto& ranks = node_ranks_[n];
      const int relay = relay_of(ranks);
      const int relayed = static_cast<int>(ranks.size()) - (ranks.front() == 0 ? 1 : 0);
      if (relay < 0 || count[n] < relayed) continue;
      std::vector<int> of(ranks.begin() + (ranks.front() == 0 ? 1 : 0), ranks.end());
      out.push_back("node " + std::to_string(n) + " (ranks " + frontier::format_rank_ranges(of) + "): nothing from its relay, rank " +
                    std::to_string(relay));
    }
    return out;
  }

  void progress() override {
    std::erase_if(sends_, [](auto& s) {
      int done = 0;
      if (MPI_Test(&s->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return true;  // failed: given up
      return done != 0;
    });
    for (int tag : abandoned_) {
      while (take(comm_.get(), tag)) ++late_;
      while (take(relay_comm_.get(), tag)) ++late_;
    }
    if (relay_ == rank_) relay(false);
  }

  void drain(double deadline_s) override {
    const std::int64_t deadline = now_ns() + static_cast<std::int64_t>(deadline_s * 1e9);
    for (;;) {
      progress();
      // A relay stays while a window it holds is not forwarded or still owes it a member: at the
      // end of a run too, a starved rank reaches its last window after the rest of its node.
      const bool relaying = std::any_of(held_.begin(), held_.end(), [&](const auto& h) {
        return !h.second.forwarded || h.second.seen < expected_;
      });
      if ((sends_.empty() && !relaying) || now_ns() >= deadline) break;
      usleep(200);
    }
    if (relay_ == rank_) relay(true);  // whatever is still held goes now
    const std::int64_t last = now_ns() + static_cast<std::int64_t>(deadline_s * 1e9);
    while (!sends_.empty() && now_ns() < last) {
      progress();
      usleep(200);
    }
  }

  std::int64_t late_discarded() const override { return late_; }

private:
  struct Send {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<std::byte> buf;
  };
  /// A relay's window (by tag): the contributions not yet forwarded.
  struct Held {
    std::vector<Contribution> entries;
    int seen = 0;                // contributions taken for this window, forwarded or not
    std::int64_t first_ns = 0;   // when the first one arrived
    bool forwarded = false;      // a bundle of this window has gone to the root
  };

  void isend(std::vector<std::byte> buf, int dest, int tag, MPI_Comm comm) {
    auto s = std::make_unique<Send>();
    s->buf = std::move(buf);
    // A failed send is not retried: the root names the ranks it carried as missing.
    if (MPI_Isend(s->buf.data(), static_cast<int>(s->buf.size()), MPI_BYTE, dest, tag, comm, &s->req) == MPI_SUCCESS)
      sends_.push_back(std::move(s));
  }

  /// A relay takes one contribution: checked here, so a corrupt or foreign one travels on as
  /// its reason only.
  void accept(int tag, Contribution c) {
    auto& h = held_[tag];
    if (h.seen == 0) h.first_ns = now_ns();
    ++h.seen;
    if (check_) {
      if (auto why = check_(c); !why.empty()) {
        c.refused = why + " (refused by the node relay, rank " + std::to_string(rank_) + ")";
        c.bytes.clear();
      }
    }
    h.entries.push_back(std::move(c));
  }

  /// Relay: takes what its node sent and forwards each window once all of the node is in or
  /// relay_wait_s after its first contribution (later ones follow in a bundle of their own).
  void relay(bool flush) {
    MPI_Status st;
    while (auto c = take(comm_.get(), MPI_ANY_TAG, &st)) accept(st.MPI_TAG, std::move(*c));
    const std::int64_t now = now_ns();
    const auto wait = static_cast<std::int64_t>(opt_.relay_wait_s * 1e9);
    for (auto it = held_.begin(); it != held_.end();) {
      Held& h = it->second;
      const bool complete = h.seen >= expected_;
      if (!h.entries.empty() && (complete || flush || h.forwarded || now - h.first_ns >= wait)) {
        std::vector<std::byte> b;
        put(b, kBundleMagic);
        put(b, static_cast<std::uint32_t>(h.entries.size()));
        for (const auto& e : h.entries) {
          put(b, static_cast<std::int32_t>(e.rank));
          put(b, static_cast<std::uint32_t>(e.refused.size()));
          put(b, static_cast<std::uint32_t>(e.bytes.size()));
          const auto* t = reinterpret_cast<const std::byte*>(e.refused.data());
          b.insert(b.end(), t, t + e.refused.size());
          b.insert(b.end(), e.bytes.begin(), e.bytes.end());
        }
        h.entries.clear();
        h.forwarded = true;
        isend(std::move(b), 0, it->first, relay_comm_.get());
      }
      // Forgotten once the whole node is through, or long after (a member that never came).
      if (h.forwarded && h.entries.empty() && (complete || now - h.first_ns >= 8 * wait))
        it = held_.erase(it);
      else
        ++it;
    }
  }

  /// Receives one message with `tag` (or MPI_ANY_TAG) from any rank if one has arrived
  /// (non-blocking probe). A receive that fails yields an empty contribution, which the
  /// assembler names as corrupt.
  std::optional<Contribution> take(MPI_Comm comm, int tag, MPI_Status* status = nullptr) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, tag, comm, &flag, &msg, &st) != MPI_SUCCESS || !flag) return std::nullopt;
    int count = 0;
    if (MPI_Get_count(&st, MPI_BYTE, &count) != MPI_SUCCESS || count == MPI_UNDEFINED) count = 0;
    Contribution c{st.MPI_SOURCE, std::vector<std::byte>(static_cast<std::size_t>(std::max(count, 0))), {}};
    if (MPI_Mrecv(c.bytes.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS) c.bytes.clear();
    if (status) *status = st;
    return c;
  }

  struct Counts {
    int messages = 0;
    std::int64_t bytes = 0;
  };

  Comm comm_, relay_comm_;
  GatherOptions opt_;
  int rank_ = 0, size_ = 1;
  int relay_ = -1;      // where this rank's contributions go (−1: rank 0 directly; flat: always)
  int expected_ = 0;    // a relay: the contributions of its node per window (rank 0 excluded)
  formats::RankInfo id_;
  ContributionCheck check_;
  std::vector<std::pair<int, std::vector<std::byte>>> own_;
  std::vector<std::unique_ptr<Send>> sends_;
  std::map<int, Held> held_;                   // a relay's windows, by tag
  std::set<int> abandoned_;
  std::int64_t late_ = 0, malformed_ = 0;
  std::map<int, Counts> stats_;                // root: per window
  std::vector<int> node_of_;                   // root: each rank's node
  std::vector<std::vector<int>> node_ranks_;   // root: each node's ranks, ascending
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(MPI_Comm parent, GatherOptions options) {
  return std::make_unique<MpiTransport>(parent, options);
}

}  // namespace sf::recorder
