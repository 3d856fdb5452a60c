// The CUDA device backend: real kernels on a per-rank stream, asynchronous launches, cudaEvent
// pairs polled with cudaEventQuery, never a synchronize outside Device::synchronize().
#include "cuda_kernels.h"

#include "sf/check/check.h"
#include "sf/sim/sim.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace sf::sim {

namespace {

void destroy_stream(cudaStream_t s) noexcept { SF_CUDA_CHECK_NOEXCEPT(cudaStreamDestroy(s)); }
void destroy_event(cudaEvent_t e) noexcept { SF_CUDA_CHECK_NOEXCEPT(cudaEventDestroy(e)); }
void destroy_blas(cublasHandle_t h) noexcept { SF_CUBLAS_CHECK_NOEXCEPT(cublasDestroy(h)); }
void free_device(void* p) noexcept { SF_CUDA_CHECK_NOEXCEPT(cudaFree(p)); }
void free_host(float* p) noexcept { SF_CUDA_CHECK_NOEXCEPT(cudaFreeHost(p)); }

using Stream = check::Owner<cudaStream_t, destroy_stream>;
using Event = check::Owner<cudaEvent_t, destroy_event>;
using BlasHandle = check::Owner<cublasHandle_t, destroy_blas>;
using PinnedHost = check::Owner<float*, free_host>;

Event make_event() {
  cudaEvent_t e = nullptr;
  SF_CUDA_CHECK(cudaEventCreate(&e));
  return Event(e);
}

/// Move-only owner of a device allocation.
class DeviceBuffer {
public:
  explicit DeviceBuffer(std::size_t bytes) {
    void* p = nullptr;
    SF_CUDA_CHECK(cudaMalloc(&p, bytes));
    p_ = check::Owner<void*, free_device>(p);
  }
  float* get() const { return static_cast<float*>(p_.get()); }

private:
  check::Owner<void*, free_device> p_;
};

/// cudaEvent pairs from a fixed pool; query() never synchronizes.
class EventPool final : public recorder::EventTimer {
public:
  explicit EventPool(int pairs, cudaStream_t stream) : stream_(stream) {
    for (int i = 0; i < pairs; ++i) {
      begin_.push_back(make_event());
      end_.push_back(make_event());
      free_.push_back(pairs - 1 - i);
    }
  }
  int acquire() override {
    if (free_.empty()) return -1;
    const int p = free_.back();
    free_.pop_back();
    return p;
  }
  void record_begin(int p) override { SF_CUDA_CHECK(cudaEventRecord(begin_[p].get(), stream_)); }
  void record_end(int p) override { SF_CUDA_CHECK(cudaEventRecord(end_[p].get(), stream_)); }
  std::optional<double> query(int p) override {
    // Not ready (or failed): no value; the recorder reports the sample missing at its boundary.
    if (cudaEventQuery(end_[p].get()) != cudaSuccess) return std::nullopt;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, begin_[p].get(), end_[p].get()) != cudaSuccess) return std::nullopt;
    return ms * 1e-3;
  }
  void release(int p) override { free_.push_back(p); }

private:
  cudaStream_t stream_;
  std::vector<Event> begin_, end_;
  std::vector<int> free_;
};

class CudaDevice final : public Device {
public:
  // Every resource is an owner member, so a throw anywhere in the constructor leaks nothing.
  CudaDevice(int local_rank, std::size_t grad_floats) : gpu_(select_gpu(local_rank)), grads_(grad_floats * sizeof(float)), n_(grad_floats) {
    cudaStream_t s = nullptr;
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_owner_ = Stream(s);
    stream_ = s;
    float* h = nullptr;
    SF_CUDA_CHECK(cudaMallocHost(&h, grad_floats * sizeof(float)));
    host_owner_ = PinnedHost(h);
    host_ = h;
    std::fill(host_, host_ + grad_floats, 1.0f);
    SF_CUDA_CHECK(cudaMemcpy(grads_.get(), host_, grad_floats * sizeof(float), cudaMemcpyHostToDevice));
    cublasHandle_t b = nullptr;
    SF_CUBLAS_CHECK(cublasCreate(&b));
    blas_owner_ = BlasHandle(b);
    blas_ = b;
    SF_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    cudaStream_t cs = nullptr;
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    copy_owner_ = Stream(cs);
    copy_stream_ = cs;
    events_ = std::make_unique<EventPool>(256, stream_);
    calibrate();
  }
  ~CudaDevice() override { SF_CUDA_CHECK_NOEXCEPT(cudaStreamSynchronize(stream_)); }

  std::string name() const override { return "cuda:" + std::to_string(gpu_); }

  /// Model compute: SGEMMs through cuBLAS, as many as fill `seconds` at the calibrated rate.
  void compute(double seconds) override {
    const int reps = std::max(1, static_cast<int>(std::lround(seconds / gemm_s_)));
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < reps; ++i)
      SF_CUBLAS_CHECK(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, a_->get(), kN, b_->get(), kN, &zero,
                            c_->get(), kN));
  }

  void spin(double seconds) override {
    const double ns = std::max(0.0, seconds * 1e9 - spin_overhead_ns_);
    SF_CUDA_CHECK(cuda::launch_spin(stream_, static_cast<unsigned long long>(ns)));
  }

  void synchronize() override { SF_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  recorder::EventTimer& events() override { return *events_; }
  float* host_grads() override { return host_; }
  std::size_t grad_floats() const override { return n_; }
  void grads_to_host() override {
    SF_CUDA_CHECK(cudaMemcpyAsync(host_, grads_.get(), n_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    SF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void grads_from_host() override {
    SF_CUDA_CHECK(cudaMemcpyAsync(grads_.get(), host_, n_ * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }

  /// A host function in stream order (cudaLaunchHostFunc): it runs on a CUDA-owned thread once
  /// the work queued before it has finished, and only hands work over (no CUDA calls in it).
  void when_reached(std::function<void()> fn) override {
    auto* heap = new std::function<void()>(std::move(fn));
    const cudaError_t e = cudaLaunchHostFunc(
        stream_,
        [](void* p) {
          const std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(p));
          (*f)();
        },
        heap);
    if (e != cudaSuccess) {
      delete heap;
      SF_CUDA_CHECK(e);
    }
  }
  // One bucket through the host mirror for a host-side (MPI) collective, on the copy stream from
  // the comm backend's thread; the bucket's gradients are complete when this is called.
  void bucket_to_host(std::size_t offset, std::size_t count) override {
    SF_CUDA_CHECK(cudaSetDevice(gpu_));
    SF_CUDA_CHECK(cudaMemcpyAsync(host_ + offset, grads_.get() + offset, count * sizeof(float), cudaMemcpyDeviceToHost,
                                  copy_stream_));
    SF_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  }
  void bucket_from_host(std::size_t offset, std::size_t count) override {
    SF_CUDA_CHECK(cudaSetDevice(gpu_));
    SF_CUDA_CHECK(cudaMemcpyAsync(grads_.get() + offset, host_ + offset, count * sizeof(float), cudaMemcpyHostToDevice,
                                  copy_stream_));
    SF_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  }

  cudaStream_t stream() const { return stream_; }
  float* device_grads() const { return grads_.get(); }

  /// Device time of a spin measured with an event pair (for calibration reports).
  double measure_spin(double seconds) {
    const Event b = make_event(), e = make_event();
    SF_CUDA_CHECK(cudaEventRecord(b.get(), stream_));
    spin(seconds);
    SF_CUDA_CHECK(cudaEventRecord(e.get(), stream_));
    SF_CUDA_CHECK(cudaEventSynchronize(e.get()));
    float ms = 0;
    SF_CUDA_CHECK(cudaEventElapsedTime(&ms, b.get(), e.get()));
    return ms * 1e-3;
  }

private:
  static constexpr int kN = 2048;

  void calibrate() {
    const std::size_t bytes = static_cast<std::size_t>(kN) * kN * sizeof(float);
    a_ = std::make_unique<DeviceBuffer>(bytes);
    b_ = std::make_unique<DeviceBuffer>(bytes);
    c_ = std::make_unique<DeviceBuffer>(bytes);
    SF_CUDA_CHECK(cudaMemsetAsync(a_->get(), 0, bytes, stream_));
    SF_CUDA_CHECK(cudaMemsetAsync(b_->get(), 0, bytes, stream_));
    // GEMM rate: median of several timed batches after a warm-up.
    const Event ev_b = make_event(), ev_e = make_event();
    cudaEvent_t b = ev_b.get(), e = ev_e.get();
    gemm_s_ = 1e-3;
    compute(10e-3);
    std::vector<double> per;
    for (int k = 0; k < 5; ++k) {
      SF_CUDA_CHECK(cudaEventRecord(b, stream_));
      const float one = 1.0f, zero = 0.0f;
      for (int i = 0; i < 20; ++i)
        SF_CUBLAS_CHECK(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, a_->get(), kN, b_->get(), kN, &zero,
                              c_->get(), kN));
      SF_CUDA_CHECK(cudaEventRecord(e, stream_));
      SF_CUDA_CHECK(cudaEventSynchronize(e));
      float ms = 0;
      SF_CUDA_CHECK(cudaEventElapsedTime(&ms, b, e));
      per.push_back(ms * 1e-3 / 20);
    }
    std::sort(per.begin(), per.end());
    gemm_s_ = per[per.size() / 2];
    // Spin: the fixed launch/exit cost, so a requested duration is what the stream spends.
    spin_overhead_ns_ = 0;
    std::vector<double> err;
    for (int k = 0; k < 5; ++k) err.push_back(measure_spin(1e-3) * 1e9 - 1e6);
    std::sort(err.begin(), err.end());
    spin_overhead_ns_ = std::max(0.0, err[err.size() / 2]);
  }

  static int select_gpu(int local_rank) {
    int count = 0;
    SF_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (count == 0) throw std::runtime_error("no CUDA device");
    const int gpu = local_rank % count;
    SF_CUDA_CHECK(cudaSetDevice(gpu));
    return gpu;
  }

  int gpu_ = 0;
  // Owners first: members are destroyed in reverse order, the pool and buffers before the
  // stream they were used on.
  Stream stream_owner_;
  Stream copy_owner_;
  BlasHandle blas_owner_;
  PinnedHost host_owner_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  DeviceBuffer grads_;
  std::size_t n_;
  float* host_ = nullptr;
  std::unique_ptr<DeviceBuffer> a_, b_, c_;
  std::unique_ptr<EventPool> events_;
  double gemm_s_ = 1e-3;
  double spin_overhead_ns_ = 0;
};

}  // namespace

bool cuda_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // Without a GPU the runtime reports an old or absent driver: that means "no device".
    if (why) *why = std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

std::unique_ptr<Device> make_cuda_device(int local_rank, std::size_t grad_floats) {
  return std::make_unique<CudaDevice>(local_rank, grad_floats);
}

std::vector<SpinCalibration> cuda_spin_calibration(Device& device, const std::vector<double>& ms) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  if (!cuda) throw std::runtime_error("spin calibration needs the CUDA device backend");
  std::vector<SpinCalibration> out;
  for (double m : ms) {
    const double got = cuda->measure_spin(m * 1e-3) * 1e3;
    out.push_back({m, got, (got - m) / m * 100});
  }
  return out;
}

double cuda_gemm_seconds(int local_rank, int n, int reps, int repeat) {
  std::string why;
  if (!cuda_available(&why)) throw std::runtime_error(why);
  if (n < 1 || reps < 1 || repeat < 1) throw std::invalid_argument("cuda_gemm_seconds: n, reps and repeat must be >= 1");
  int count = 0;
  SF_CUDA_CHECK(cudaGetDeviceCount(&count));
  SF_CUDA_CHECK(cudaSetDevice(local_rank % count));
  cudaStream_t raw = nullptr;
  SF_CUDA_CHECK(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking));
  const Stream stream(raw);
  cublasHandle_t h = nullptr;
  SF_CUBLAS_CHECK(cublasCreate(&h));
  const BlasHandle blas(h);
  SF_CUBLAS_CHECK(cublasSetStream(h, raw));
  const std::size_t bytes = static_cast<std::size_t>(n) * static_cast<std::size_t>(n) * sizeof(float);
  DeviceBuffer a(bytes), b(bytes), c(bytes);
  // Operand values do not change a GEMM's time; zeroed memory keeps the products finite.
  SF_CUDA_CHECK(cudaMemsetAsync(a.get(), 0, bytes, raw));
  SF_CUDA_CHECK(cudaMemsetAsync(b.get(), 0, bytes, raw));
  const float one = 1.0f, zero = 0.0f;
  auto product = [&] {
    SF_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.get(), n, b.get(), n, &zero, c.get(), n));
  };
  product();  // warm-up: cuBLAS picks and loads its kernel here
  const Event t0 = make_event(), t1 = make_event();
  double best = 0;
  for (int k = 0; k < reps; ++k) {
    SF_CUDA_CHECK(cudaEventRecord(t0.get(), raw));
    for (int j = 0; j < repeat; ++j) product();
    SF_CUDA_CHECK(cudaEventRecord(t1.get(), raw));
    SF_CUDA_CHECK(cudaEventSynchronize(t1.get()));
    float ms = 0;
    SF_CUDA_CHECK(cudaEventElapsedTime(&ms, t0.get(), t1.get()));
    const double s = static_cast<double>(ms) * 1e-3;
    if (k == 0 || s < best) best = s;
  }
  return best;
}

/// For the NCCL backend (same translation unit family): the stream and device buffer.
cudaStream_t cuda_stream_of(Device& d) { return dynamic_cast<CudaDevice&>(d).stream(); }
float* cuda_grads_of(Device& d) { return dynamic_cast<CudaDevice&>(d).device_grads(); }

}  // namespace sf::sim
