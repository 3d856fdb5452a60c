// Gradient synchronisation over MPI on the host gradient buffer (the CPU builds' backend).
#include "sf/sim/mpi_backends.h"

#include "sf/check/check.h"
#include "sf/recorder/mpi_transport.h"

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
  std::string name() const override { return "mpi"; }
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

private:
  recorder::CommOwner comm_;
  int size_ = 1;
  std::vector<float> shard_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm parent) { return std::make_unique<MpiComm>(parent); }

}  // namespace sf::sim
