// NCCL comm backend: collectives on the CUDA device's gradient buffer and stream. Every wait
// polls ncclCommGetAsyncError with a deadline, so a failed or stuck peer aborts, never hangs.
#include "cuda_kernels.h"

#include "sf/check/check.h"
#include "sf/recorder/mpi_transport.h"
#include "sf/sim/mpi_backends.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <stdexcept>
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace sf::sim {

namespace {

constexpr double kTimeoutS = 60.0;

std::string version_string(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." + std::to_string(code % 100);
}

/// A communicator that completed its set-up: finalized and destroyed once. An aborted one is
/// released from its owner first (ncclCommAbort frees it).
void close_nccl(ncclComm_t c) noexcept {
  SF_NCCL_CHECK_NOEXCEPT(ncclCommFinalize(c));
  SF_NCCL_CHECK_NOEXCEPT(ncclCommDestroy(c));
}
using NcclOwner = check::Owner<ncclComm_t, close_nccl>;
void destroy_stream(cudaStream_t s) noexcept { SF_CUDA_CHECK_NOEXCEPT(cudaStreamDestroy(s)); }
void destroy_event(cudaEvent_t e) noexcept { SF_CUDA_CHECK_NOEXCEPT(cudaEventDestroy(e)); }
using StreamOwner = check::Owner<cudaStream_t, destroy_stream>;
using EventOwner = check::Owner<cudaEvent_t, destroy_event>;

class NcclComm final : public Comm {
public:
  NcclComm(MPI_Comm parent, Device& device) : device_(device) {
    MPI_Comm c = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_dup(parent, &c));
    mpi_owner_ = recorder::CommOwner(c);
    mpi_ = c;
    SF_MPI_CHECK(MPI_Comm_rank(mpi_, &rank_));
    SF_MPI_CHECK(MPI_Comm_size(mpi_, &size_));
  }

  /// Collective: returns "" on every rank or the same reason on every rank.
  std::string init() {
    std::string why;
    int version = 0;
    SF_NCCL_CHECK(ncclGetVersion(&version));
    // Ranks per GPU on this node decide whether NCCL must share a device between ranks.
    MPI_Comm node_raw = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_split_type(mpi_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_raw));
    const recorder::CommOwner node(node_raw);
    int local_size = 1;
    SF_MPI_CHECK(MPI_Comm_size(node.get(), &local_size));
    int gpus = 0;
    SF_CUDA_CHECK(cudaGetDeviceCount(&gpus));
    const bool shared_gpu = gpus > 0 && local_size > gpus;
    if (shared_gpu) {
      if (version < 23000)
        why = "NCCL " + version_string(version) + " refuses several ranks on one GPU (" + std::to_string(local_size) +
              " ranks, " + std::to_string(gpus) + " GPU(s)); 2.30+ allows it with NCCL_MULTI_RANK_GPU_ENABLE=1";
      else
        setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);  // allowed since 2.30 (experimental)
    }
    if (agree(why)) return why;

    ncclUniqueId id{};
    if (rank_ == 0) SF_NCCL_CHECK(ncclGetUniqueId(&id));
    SF_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // non-blocking: init progress is polled with a deadline below
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &cfg);
    if (r == ncclSuccess || r == ncclInProgress) r = wait_comm("ncclCommInitRankConfig");
    if (r != ncclSuccess)
      why = "NCCL " + version_string(version) + " init failed: " + ncclGetErrorString(r) +
            (shared_gpu ? " (ranks share a GPU)" : "");
    if (agree(why)) {
      abort_comm();
      return why;
    }
    owner_ = NcclOwner(comm_);
    name_ = "nccl " + version_string(version) + (shared_gpu ? " (multi-rank per GPU)" : "");
    cudaStream_t cs = nullptr;
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    comm_stream_owner_ = StreamOwner(cs);
    comm_stream_ = cs;
    return "";
  }

  std::string name() const override { return name_; }
  int size() const override { return size_; }

  // DDP on a comm stream: the comm stream waits for the event that marks the bucket's backward
  // compute on the compute stream, then runs the bucket's collective; backward compute goes on
  // meanwhile. Event pairs around each collective time it on the device (waiting for peers
  // included); an injected late entry is a spin on the comm stream before the pair.
  void start_bucket(Device& d, std::size_t offset, std::size_t count, BucketOp op, double entry_delay_s) override {
    if (offset + count > d.grad_floats()) throw std::invalid_argument("bucket outside the gradient buffer");
    if (op == BucketOp::reduce_scatter && count % static_cast<std::size_t>(size_) != 0)
      throw std::invalid_argument("reduce-scatter bucket not a multiple of the world size");
    const std::size_t k = started_++;
    last_entry_delay_s_ = entry_delay_s;
    while (events_.size() < 3 * (k + 1)) events_.push_back(make_event());
    cudaEvent_t ready = events_[3 * k].get(), begin = events_[3 * k + 1].get(), end = events_[3 * k + 2].get();
    SF_CUDA_CHECK(cudaEventRecord(ready, cuda_stream_of(d)));
    SF_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready, 0));
    if (entry_delay_s > 0) SF_CUDA_CHECK(cuda::launch_spin(comm_stream_, static_cast<unsigned long long>(entry_delay_s * 1e9)));
    SF_CUDA_CHECK(cudaEventRecord(begin, comm_stream_));
    float* g = cuda_grads_of(d) + offset;
    if (op == BucketOp::allreduce) {
      check(ncclAllReduce(g, g, count, ncclFloat, ncclSum, comm_, comm_stream_), "ncclAllReduce");
    } else {
      const std::size_t n = count / static_cast<std::size_t>(size_);
      check(ncclReduceScatter(g, g + static_cast<std::size_t>(rank_) * n, n, ncclFloat, ncclSum, comm_, comm_stream_),
            "ncclReduceScatter");
    }
    SF_CUDA_CHECK(cudaEventRecord(end, comm_stream_));
  }

  // The rank's wait from its arrival: from the moment its last bucket's gradients were ready on
  // the compute stream (less an injected late entry, which is this rank's own doing) to the end of
  // the last collective on the comm stream.
  double wait_buckets(Device& d) override {
    wait_on(comm_stream_);
    double inside = 0;
    if (started_ > 0) {
      const std::size_t k = started_ - 1;
      float ms = 0;
      SF_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[3 * k].get(), events_[3 * k + 2].get()));
      inside = std::max(0.0, ms * 1e-3 - last_entry_delay_s_);
    }
    // Kernels queued later (the optimizer) see the reduced gradients.
    if (started_ > 0) SF_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream_of(d), events_[3 * (started_ - 1) + 2].get(), 0));
    started_ = 0;
    return inside;
  }

  void allreduce(Device& d) override {
    float* g = cuda_grads_of(d);
    check(ncclAllReduce(g, g, d.grad_floats(), ncclFloat, ncclSum, comm_, cuda_stream_of(d)), "ncclAllReduce");
    wait_stream(d);
  }
  void allgather(Device& d) override {
    float* g = cuda_grads_of(d);
    const std::size_t n = d.grad_floats() / static_cast<std::size_t>(size_);
    check(ncclAllGather(g + static_cast<std::size_t>(rank_) * n, g, n, ncclFloat, comm_, cuda_stream_of(d)), "ncclAllGather");
    wait_stream(d);
  }
  void reduce_scatter(Device& d) override {
    float* g = cuda_grads_of(d);
    const std::size_t n = d.grad_floats() / static_cast<std::size_t>(size_);
    check(ncclReduceScatter(g, g + static_cast<std::size_t>(rank_) * n, n, ncclFloat, ncclSum, comm_, cuda_stream_of(d)),
          "ncclReduceScatter");
    wait_stream(d);
  }
  void barrier() override { SF_MPI_CHECK(MPI_Barrier(mpi_)); }

private:
  /// True when any rank has a reason (then every rank returns it).
  bool agree(std::string& why) {
    int bad = why.empty() ? 0 : 1, any = 0;
    SF_MPI_CHECK(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, mpi_));
    if (any && why.empty()) why = "NCCL set-up failed on another rank";
    return any != 0;
  }

  ncclResult_t wait_comm(const char*) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kTimeoutS);
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return ncclInternalError;
      if (std::chrono::steady_clock::now() > deadline) return ncclInternalError;
      if (state == ncclInProgress) std::this_thread::yield();
    }
    return state;
  }

  void check(ncclResult_t r, const char* call) {
    if (r == ncclInProgress) r = wait_comm(call);
    if (r != ncclSuccess) fail(std::string(call) + ": " + ncclGetErrorString(r));
  }

  static EventOwner make_event() {
    cudaEvent_t e = nullptr;
    SF_CUDA_CHECK(cudaEventCreate(&e));
    return EventOwner(e);
  }

  /// The host waits for the collective as a trainer does, polling for asynchronous errors.
  void wait_stream(Device& d) { wait_on(cuda_stream_of(d)); }

  void wait_on(cudaStream_t stream) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kTimeoutS);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) fail(std::string("stream: ") + cudaGetErrorString(q));
      ncclResult_t async = ncclSuccess;
      if (const ncclResult_t q_err = ncclCommGetAsyncError(comm_, &async); q_err != ncclSuccess) async = q_err;
      if (async != ncclSuccess && async != ncclInProgress) fail(std::string("async error: ") + ncclGetErrorString(async));
      if (std::chrono::steady_clock::now() > deadline) fail("collective did not complete within 60 s");
      std::this_thread::yield();
    }
  }

  /// Aborts the communicator (a failed or stuck collective, or a failed set-up): nothing to
  /// finalize afterwards.
  void abort_comm() noexcept {
    if (!comm_) return;
    owner_.release();
    SF_NCCL_CHECK_NOEXCEPT(ncclCommAbort(comm_));
    comm_ = nullptr;
  }

  [[noreturn]] void fail(const std::string& what) {
    abort_comm();
    throw std::runtime_error("NCCL " + what + " (communicator aborted)");
  }

  Device& device_;
  recorder::CommOwner mpi_owner_;
  NcclOwner owner_;
  StreamOwner comm_stream_owner_;
  cudaStream_t comm_stream_ = nullptr;
  std::vector<EventOwner> events_;  // per started bucket: ready, begin, end
  std::size_t started_ = 0;
  double last_entry_delay_s_ = 0;  // the last bucket's injected late entry
  MPI_Comm mpi_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  std::string name_ = "nccl";
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm parent, Device& device, std::string* why) {
  auto c = std::make_unique<NcclComm>(parent, device);
  const std::string reason = c->init();
  if (!reason.empty()) {
    if (why) *why = reason;
    return nullptr;
  }
  return c;
}

}  // namespace sf::sim
