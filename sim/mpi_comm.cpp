// Gradient synchronisation over MPI on the host gradient buffer (the CPU builds' backend).
//
// Bucketed (DDP) sync runs on a comm thread per rank: a bucket whose gradients are ready (the
// device reached the callback queued behind its backward compute) is handed to the thread, which
// starts its MPI_Iallreduce at once and keeps every started bucket progressing with MPI_Testsome
// until it completes, while the host thread goes on with backward. Host thread and comm thread
// never call MPI at the same time (the host makes no MPI call between starting the first bucket
// and wait_buckets() returning), so MPI_THREAD_SERIALIZED suffices.
#include "sf/sim/mpi_backends.h"

#include "sf/check/check.h"
#include "sf/recorder/mpi_transport.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace sf::sim {

namespace {

class MpiComm final : public Comm {
public:
  explicit MpiComm(MPI_Comm parent) {
    MPI_Comm c = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_dup(parent, &c));
    comm_ = recorder::CommOwner(c);
    // Errors come back to the checks below (call, file and line in one line) instead of
    // aborting inside the library with its own message.
    SF_MPI_CHECK(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN));
    SF_MPI_CHECK(MPI_Comm_size(comm_.get(), &size_));
  }
  ~MpiComm() override {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  std::string name() const override { return "mpi"; }
  int size() const override { return size_; }
  void allreduce(Device& d) override {
    d.grads_to_host();
    SF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, d.host_grads(), static_cast<int>(d.grad_floats()), MPI_FLOAT, MPI_SUM,
                               comm_.get()));
    d.grads_from_host();
  }
  void allgather(Device& d) override {
    const int n = static_cast<int>(d.grad_floats()) / size_;
    shard_.assign(static_cast<std::size_t>(n), 1.0f);
    SF_MPI_CHECK(MPI_Allgather(shard_.data(), n, MPI_FLOAT, d.host_grads(), n, MPI_FLOAT, comm_.get()));
    d.grads_from_host();
  }
  void reduce_scatter(Device& d) override {
    const int n = static_cast<int>(d.grad_floats()) / size_;
    shard_.resize(static_cast<std::size_t>(n));
    d.grads_to_host();
    SF_MPI_CHECK(MPI_Reduce_scatter_block(d.host_grads(), shard_.data(), n, MPI_FLOAT, MPI_SUM, comm_.get()));
  }
  void barrier() override { SF_MPI_CHECK(MPI_Barrier(comm_.get())); }

  void start_bucket(Device& d, std::size_t offset, std::size_t count, BucketOp op, double entry_delay_s) override {
    if (offset + count > d.grad_floats()) throw std::invalid_argument("bucket outside the gradient buffer");
    if (op == BucketOp::reduce_scatter && count % static_cast<std::size_t>(size_) != 0)
      throw std::invalid_argument("reduce-scatter bucket not a multiple of the world size");
    {
      std::lock_guard lock(m_);
      if (!worker_.joinable()) {
        bucket_shard_.resize(d.grad_floats() / static_cast<std::size_t>(size_) + 1);
        worker_ = std::thread([this] { loop(); });
      }
      ++started_;
    }
    // Handed over once the device has produced the bucket (everything queued before it is done).
    d.when_reached([this, &d, offset, count, op, entry_delay_s] {
      {
        std::lock_guard lock(m_);
        ready_.push_back({&d, offset, count, op, entry_delay_s});
      }
      cv_.notify_all();
    });
  }

  // The rank's wait at the step's collectives, from its arrival: from the entry of its last bucket
  // (its own work done, an injected late entry included in that work) to the completion of every
  // bucket. A rank the others wait for arrives last and waits least; time with a bucket in flight
  // while the rank still computes later buckets is its own work, not a wait.
  double wait_buckets(Device&) override {
    std::unique_lock lock(m_);
    done_cv_.wait(lock, [&] { return completed_ == started_ || !error_.empty(); });
    if (!error_.empty()) throw std::runtime_error(error_);
    const double wait = started_ > 0 ? static_cast<double>(std::max<std::int64_t>(0, all_done_ns_ - last_entry_ns_)) * 1e-9 : 0.0;
    started_ = completed_ = 0;
    return wait;
  }

private:
  struct Bucket {
    Device* device;
    std::size_t offset, count;
    BucketOp op;
    double entry_delay_s;
  };

  /// The comm thread: starts ready buckets, progresses the started ones, notes when the last one
  /// entered and when every one was done.
  void loop() {
    std::vector<Bucket> active;
    std::vector<MPI_Request> reqs;
    std::vector<int> done_idx;
    std::int64_t last_progress = 0;
    for (;;) {
      std::deque<Bucket> take;
      {
        std::unique_lock lock(m_);
        if (active.empty()) cv_.wait(lock, [&] { return stop_ || !ready_.empty(); });
        if (stop_ && active.empty() && ready_.empty()) return;
        take.swap(ready_);
      }
      try {
        for (const auto& b : take) {
          // A late entry (injected): this rank's collective, and the buckets queued behind it,
          // start late; the time before the entry is not time inside the collective.
          if (b.entry_delay_s > 0) inject::host_delay(b.entry_delay_s, 0);
          b.device->bucket_to_host(b.offset, b.count);
          float* g = b.device->host_grads() + b.offset;
          MPI_Request r = MPI_REQUEST_NULL;
          if (b.op == BucketOp::allreduce) {
            SF_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, g, static_cast<int>(b.count), MPI_FLOAT, MPI_SUM, comm_.get(), &r));
          } else {
            const std::size_t n = b.count / static_cast<std::size_t>(size_);
            SF_MPI_CHECK(MPI_Ireduce_scatter_block(g, bucket_shard_.data() + b.offset / static_cast<std::size_t>(size_),
                                                   static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_.get(), &r));
          }
          const std::int64_t now = inject::monotonic_ns();
          last_progress = now;
          {
            std::lock_guard lock(m_);
            last_entry_ns_ = now;
          }
          active.push_back(b);
          reqs.push_back(r);
        }
        if (active.empty()) continue;
        int outcount = 0;
        done_idx.resize(reqs.size());
        SF_MPI_CHECK(MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &outcount, done_idx.data(), MPI_STATUSES_IGNORE));
        const std::int64_t now = inject::monotonic_ns();
        if (outcount <= 0) {
          // Libraries progress non-blocking collectives inside MPI calls: poll. Yield while
          // progress is recent (peers are about to arrive), sleep briefly once the wait is long
          // (a late peer) so waiting ranks do not take the cores from the ones still working.
          if (now - last_progress < 2'000'000) std::this_thread::yield();
          else inject::host_delay(200e-6, 0);
          continue;
        }
        last_progress = now;
        for (int k = 0; k < outcount; ++k) {
          const auto& b = active[static_cast<std::size_t>(done_idx[static_cast<std::size_t>(k)])];
          b.device->bucket_from_host(b.offset, b.count);
        }
        std::size_t w = 0;
        for (std::size_t i = 0; i < reqs.size(); ++i)
          if (reqs[i] != MPI_REQUEST_NULL) {
            reqs[w] = reqs[i];
            active[w] = active[i];
            ++w;
          }
        reqs.resize(w);
        active.resize(w);
        {
          std::lock_guard lock(m_);
          completed_ += outcount;
          if (completed_ == started_) all_done_ns_ = now;
        }
        done_cv_.notify_all();
      } catch (const std::exception& e) {
        std::lock_guard lock(m_);
        error_ = e.what();
        done_cv_.notify_all();
        return;
      }
    }
  }

  recorder::CommOwner comm_;
  int size_ = 1;
  std::vector<float> shard_;         // host thread: sharded all-gather / reduce-scatter
  std::vector<float> bucket_shard_;  // comm thread: bucketed reduce-scatter output
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::deque<Bucket> ready_;
  int started_ = 0, completed_ = 0;
  std::int64_t last_entry_ns_ = 0, all_done_ns_ = 0;  // this step's last bucket entry, every bucket done
  std::string error_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm parent) { return std::make_unique<MpiComm>(parent); }

}  // namespace sf::sim
