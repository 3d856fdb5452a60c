// The CUDA device backend: real kernels on a per-rank stream, asynchronous launches, cudaEvent
// pairs polled with cudaEventQuery, never a synchronize outside Device::synchronize().
#include "sim/cuda_kernels.h"
#include "sim/sim.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace sf::sim {

namespace {

[[noreturn]] void cuda_fail(const char* what, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + what);
}

#define SF_CUDA(call)                                                   \
  do {                                                                  \
    const cudaError_t sf_e_ = (call);                                   \
    if (sf_e_ != cudaSuccess) cuda_fail(cudaGetErrorString(sf_e_), #call, __FILE__, __LINE__); \
  } while (0)
#define SF_CUBLAS(call)                                                 \
  do {                                                                  \
    const cublasStatus_t sf_s_ = (call);                                \
    if (sf_s_ != CUBLAS_STATUS_SUCCESS) cuda_fail(cublasGetStatusString(sf_s_), #call, __FILE__, __LINE__); \
  } while (0)
// Destructors must not throw: errors there are ignored on purpose.
#define SF_CUDA_NOEXCEPT(call) static_cast<void>(call)

/// Move-only owner of a device allocation.
class DeviceBuffer {
public:
  explicit DeviceBuffer(std::size_t bytes) { SF_CUDA(cudaMalloc(&p_, bytes)); }
  ~DeviceBuffer() {
    if (p_) SF_CUDA_NOEXCEPT(cudaFree(p_));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return static_cast<float*>(p_); }

private:
  void* p_ = nullptr;
};

/// cudaEvent pairs from a fixed pool; query() never synchronizes.
class EventPool final : public recorder::EventTimer {
public:
  explicit EventPool(int pairs, cudaStream_t stream) : stream_(stream), begin_(pairs), end_(pairs) {
    for (int i = 0; i < pairs; ++i) {
      SF_CUDA(cudaEventCreate(&begin_[i]));
      SF_CUDA(cudaEventCreate(&end_[i]));
      free_.push_back(pairs - 1 - i);
    }
  }
  ~EventPool() override {
    for (auto e : begin_) SF_CUDA_NOEXCEPT(cudaEventDestroy(e));
    for (auto e : end_) SF_CUDA_NOEXCEPT(cudaEventDestroy(e));
  }
  int acquire() override {
    if (free_.empty()) return -1;
    const int p = free_.back();
    free_.pop_back();
    return p;
  }
  void record_begin(int p) override { SF_CUDA(cudaEventRecord(begin_[p], stream_)); }
  void record_end(int p) override { SF_CUDA(cudaEventRecord(end_[p], stream_)); }
  std::optional<double> query(int p) override {
    if (cudaEventQuery(end_[p]) != cudaSuccess) return std::nullopt;  // not ready (or failed): no value
    float ms = 0;
    if (cudaEventElapsedTime(&ms, begin_[p], end_[p]) != cudaSuccess) return std::nullopt;
    return ms * 1e-3;
  }
  void release(int p) override { free_.push_back(p); }

private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> begin_, end_;
  std::vector<int> free_;
};

class CudaDevice final : public Device {
public:
  CudaDevice(int local_rank, std::size_t grad_floats) : grads_(grad_floats * sizeof(float)), n_(grad_floats) {
    int count = 0;
    SF_CUDA(cudaGetDeviceCount(&count));
    if (count == 0) throw std::runtime_error("no CUDA device");
    gpu_ = local_rank % count;
    SF_CUDA(cudaSetDevice(gpu_));
    SF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SF_CUDA(cudaMallocHost(&host_, grad_floats * sizeof(float)));
    std::fill(host_, host_ + grad_floats, 1.0f);
    SF_CUDA(cudaMemcpy(grads_.get(), host_, grad_floats * sizeof(float), cudaMemcpyHostToDevice));
    SF_CUBLAS(cublasCreate(&blas_));
    SF_CUBLAS(cublasSetStream(blas_, stream_));
    events_ = std::make_unique<EventPool>(256, stream_);
    calibrate();
  }
  ~CudaDevice() override {
    SF_CUDA_NOEXCEPT(cudaStreamSynchronize(stream_));
    events_.reset();
    SF_CUDA_NOEXCEPT(cublasDestroy(blas_));
    SF_CUDA_NOEXCEPT(cudaFreeHost(host_));
    SF_CUDA_NOEXCEPT(cudaStreamDestroy(stream_));
  }

  std::string name() const override { return "cuda:" + std::to_string(gpu_); }

  /// Model compute: SGEMMs through cuBLAS, as many as fill `seconds` at the calibrated rate.
  void compute(double seconds) override {
    const int reps = std::max(1, static_cast<int>(std::lround(seconds / gemm_s_)));
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < reps; ++i)
      SF_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, a_->get(), kN, b_->get(), kN, &zero,
                            c_->get(), kN));
  }

  void spin(double seconds) override {
    const double ns = std::max(0.0, seconds * 1e9 - spin_overhead_ns_);
    SF_CUDA(cuda::launch_spin(stream_, static_cast<unsigned long long>(ns)));
  }

  void synchronize() override { SF_CUDA(cudaStreamSynchronize(stream_)); }
  recorder::EventTimer& events() override { return *events_; }
  float* host_grads() override { return host_; }
  std::size_t grad_floats() const override { return n_; }
  void grads_to_host() override {
    SF_CUDA(cudaMemcpyAsync(host_, grads_.get(), n_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    SF_CUDA(cudaStreamSynchronize(stream_));
  }
  void grads_from_host() override {
    SF_CUDA(cudaMemcpyAsync(grads_.get(), host_, n_ * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }

  cudaStream_t stream() const { return stream_; }
  float* device_grads() const { return grads_.get(); }

  /// Device time of a spin measured with an event pair (for calibration reports).
  double measure_spin(double seconds) {
    cudaEvent_t b, e;
    SF_CUDA(cudaEventCreate(&b));
    SF_CUDA(cudaEventCreate(&e));
    SF_CUDA(cudaEventRecord(b, stream_));
    spin(seconds);
    SF_CUDA(cudaEventRecord(e, stream_));
    SF_CUDA(cudaEventSynchronize(e));
    float ms = 0;
    SF_CUDA(cudaEventElapsedTime(&ms, b, e));
    SF_CUDA_NOEXCEPT(cudaEventDestroy(b));
    SF_CUDA_NOEXCEPT(cudaEventDestroy(e));
    return ms * 1e-3;
  }

private:
  static constexpr int kN = 2048;

  void calibrate() {
    const std::size_t bytes = static_cast<std::size_t>(kN) * kN * sizeof(float);
    a_ = std::make_unique<DeviceBuffer>(bytes);
    b_ = std::make_unique<DeviceBuffer>(bytes);
    c_ = std::make_unique<DeviceBuffer>(bytes);
    SF_CUDA(cudaMemsetAsync(a_->get(), 0, bytes, stream_));
    SF_CUDA(cudaMemsetAsync(b_->get(), 0, bytes, stream_));
    // GEMM rate: median of several timed batches after a warm-up.
    cudaEvent_t b, e;
    SF_CUDA(cudaEventCreate(&b));
    SF_CUDA(cudaEventCreate(&e));
    gemm_s_ = 1e-3;
    compute(10e-3);
    std::vector<double> per;
    for (int k = 0; k < 5; ++k) {
      SF_CUDA(cudaEventRecord(b, stream_));
      const float one = 1.0f, zero = 0.0f;
      for (int i = 0; i < 20; ++i)
        SF_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, a_->get(), kN, b_->get(), kN, &zero,
                              c_->get(), kN));
      SF_CUDA(cudaEventRecord(e, stream_));
      SF_CUDA(cudaEventSynchronize(e));
      float ms = 0;
      SF_CUDA(cudaEventElapsedTime(&ms, b, e));
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
    SF_CUDA_NOEXCEPT(cudaEventDestroy(b));
    SF_CUDA_NOEXCEPT(cudaEventDestroy(e));
  }

  int gpu_ = 0;
  cudaStream_t stream_ = nullptr;
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

/// For the NCCL backend (same translation unit family): the stream and device buffer.
cudaStream_t cuda_stream_of(Device& d) { return dynamic_cast<CudaDevice&>(d).stream(); }
float* cuda_grads_of(Device& d) { return dynamic_cast<CudaDevice&>(d).device_grads(); }

}  // namespace sf::sim
