// Backends: which device and gradient-sync implementations a run uses (MPI builds).
#include "detail.h"

#include "sf/check/check.h"
#include "sf/sim/mpi_backends.h"

namespace sf::testbed::detail {

/// Chooses device and comm backends; returns an error line (identical on every rank) or "".
std::string make_backends(const RunConfig& cfg, MPI_Comm world, int local_rank, Backends& b) {
  int size = 1;
  SF_MPI_CHECK(MPI_Comm_size(world, &size));
  // The whole gradient, in buckets that reduce-scatter can split evenly when sharded.
  const std::size_t grad_floats =
      sim::total_grad_floats(cfg.workload.layout, cfg.workload.sharded ? static_cast<std::size_t>(size) : 1);
  std::string why;
  const bool cuda_ok = sim::cuda_available(&why);
  if (cfg.device == DeviceKind::cuda && !cuda_ok) return "--device cuda: " + why;
  if (cfg.comm == CommKind::nccl && !cuda_ok)
    b.notes += "--comm nccl needs a CUDA device (" + why + "); using MPI all-reduce. ";
  if (cfg.device != DeviceKind::host && cuda_ok) {
    b.device = sim::make_cuda_device(local_rank, grad_floats);
  } else {
    b.device = sim::make_host_stream_device(grad_floats, cfg.workload.spin_ns);
  }
  if (cfg.comm == CommKind::nccl && cuda_ok && b.device->name() != "host-stream") {
    std::string nccl_why;
    b.comm = sim::make_nccl_comm(world, *b.device, &nccl_why);
    if (!b.comm) b.notes += "--comm nccl unavailable (" + nccl_why + "); using MPI all-reduce. ";
  }
  if (!b.comm) {
    // The bucketed step's MPI collectives run on a comm thread, one thread at a time.
    int level = MPI_THREAD_SINGLE;
    SF_MPI_CHECK(MPI_Query_thread(&level));
    if (cfg.workload.sync_mode == sim::SyncMode::bucketed && level < MPI_THREAD_SERIALIZED)
      return "--sync-mode bucketed needs MPI_THREAD_SERIALIZED; this MPI library provides level " + std::to_string(level) +
             " (use --sync-mode single)";
    b.comm = sim::make_mpi_comm(world);
  }
  return "";
}

}  // namespace sf::testbed::detail
