// sf::check — one way to call foreign C libraries (MPI, CUDA, cuBLAS, NCCL): thin macros that
// name the failed call, the file and the line, and move-only owners for the handles those
// libraries hand out, so a throw half-way through a constructor leaks nothing.
//
// The macros need the library's own header included first (they use its error codes and error
// strings); this header includes none of them. Formatting lives in one out-of-line function.
// Model: nvbench's cuda_call.cuh and cuda_timer.cuh.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace sf::check {

/// A failed foreign call. what() is "FILE:LINE: CALL failed: LIBRARY error TEXT (code N)".
class CallError : public std::runtime_error {
public:
  CallError(std::string_view library, long code, const std::string& message)
      : std::runtime_error(message), library_(library), code_(code) {}
  const std::string& library() const { return library_; }
  long code() const { return code_; }

private:
  std::string library_;
  long code_;
};

/// The one line every check prints or throws.
std::string describe(std::string_view library, long code, std::string_view text, const char* call, const char* file,
                     int line);
/// Throws CallError for a failed call.
[[noreturn]] void fail(std::string_view library, long code, std::string_view text, const char* call, const char* file,
                       int line);
/// For destructors and other places that must not throw: prints the same line to stderr.
void report(std::string_view library, long code, std::string_view text, const char* call, const char* file,
            int line) noexcept;

/// Move-only owner of a library handle: `Destroy(handle)` runs once, when the owner is reset or
/// destroyed (Destroy must not throw). Create with the library's call into a local handle,
/// checked, then hand it over: `Owner<cudaStream_t, destroy_stream> s{raw};`.
template <class Handle, auto Destroy>
class Owner {
public:
  Owner() = default;
  explicit Owner(Handle h) noexcept : h_(h), engaged_(true) {}
  Owner(Owner&& o) noexcept : h_(o.h_), engaged_(std::exchange(o.engaged_, false)) {}
  Owner& operator=(Owner&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = o.h_;
      engaged_ = std::exchange(o.engaged_, false);
    }
    return *this;
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  ~Owner() { reset(); }

  Handle get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return engaged_; }
  /// Destroys the handle now (no-op when empty).
  void reset() noexcept {
    if (engaged_) {
      engaged_ = false;
      Destroy(h_);
    }
  }
  /// Gives the handle up without destroying it (e.g. after the library consumed it).
  Handle release() noexcept {
    engaged_ = false;
    return h_;
  }

private:
  Handle h_{};
  bool engaged_ = false;
};

}  // namespace sf::check

// ---- MPI (include <mpi.h> first) ------------------------------------------------------------
#define SF_MPI_CHECK_IMPL_(call, on_error)                                     \
  do {                                                                         \
    const int sf_rc_ = (call);                                                 \
    if (sf_rc_ != MPI_SUCCESS) {                                               \
      char sf_text_[MPI_MAX_ERROR_STRING] = {};                                \
      int sf_len_ = 0;                                                         \
      MPI_Error_string(sf_rc_, sf_text_, &sf_len_);                            \
      ::sf::check::on_error("MPI", sf_rc_, std::string_view(sf_text_, static_cast<std::size_t>(sf_len_)), #call, \
                            __FILE__, __LINE__);                               \
    }                                                                          \
  } while (0)
/// Throws sf::check::CallError unless the MPI call returns MPI_SUCCESS.
#define SF_MPI_CHECK(call) SF_MPI_CHECK_IMPL_(call, fail)
/// Reports a failed MPI call on stderr and goes on (destructors).
#define SF_MPI_CHECK_NOEXCEPT(call) SF_MPI_CHECK_IMPL_(call, report)

// ---- CUDA runtime (include <cuda_runtime.h> first) ------------------------------------------
#define SF_CUDA_CHECK_IMPL_(call, on_error)                                                       \
  do {                                                                                            \
    const cudaError_t sf_rc_ = (call);                                                            \
    if (sf_rc_ != cudaSuccess)                                                                    \
      ::sf::check::on_error("CUDA", static_cast<long>(sf_rc_), cudaGetErrorString(sf_rc_), #call, \
                            __FILE__, __LINE__);                                                  \
  } while (0)
#define SF_CUDA_CHECK(call) SF_CUDA_CHECK_IMPL_(call, fail)
#define SF_CUDA_CHECK_NOEXCEPT(call) SF_CUDA_CHECK_IMPL_(call, report)

// ---- cuBLAS (include <cublas_v2.h> first) ---------------------------------------------------
#define SF_CUBLAS_CHECK_IMPL_(call, on_error)                                                           \
  do {                                                                                                  \
    const cublasStatus_t sf_rc_ = (call);                                                               \
    if (sf_rc_ != CUBLAS_STATUS_SUCCESS)                                                                \
      ::sf::check::on_error("cuBLAS", static_cast<long>(sf_rc_), cublasGetStatusString(sf_rc_), #call, \
                            __FILE__, __LINE__);                                                        \
  } while (0)
#define SF_CUBLAS_CHECK(call) SF_CUBLAS_CHECK_IMPL_(call, fail)
#define SF_CUBLAS_CHECK_NOEXCEPT(call) SF_CUBLAS_CHECK_IMPL_(call, report)

// ---- NCCL (include <nccl.h> first) ----------------------------------------------------------
#define SF_NCCL_CHECK_IMPL_(call, on_error)                                                       \
  do {                                                                                            \
    const ncclResult_t sf_rc_ = (call);                                                           \
    if (sf_rc_ != ncclSuccess)                                                                    \
      ::sf::check::on_error("NCCL", static_cast<long>(sf_rc_), ncclGetErrorString(sf_rc_), #call, \
                            __FILE__, __LINE__);                                                  \
  } while (0)
#define SF_NCCL_CHECK(call) SF_NCCL_CHECK_IMPL_(call, fail)
#define SF_NCCL_CHECK_NOEXCEPT(call) SF_NCCL_CHECK_IMPL_(call, report)
