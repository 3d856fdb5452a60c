#include "sim/sim.h"

#include <vector>

namespace sf::sim {

namespace {

class MpiComm final : public Comm {
public:
  explicit MpiComm(MPI_Comm parent) {
    MPI_Comm_dup(parent, &comm_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  std::string name() const override { return "mpi"; }
  void allreduce(Device& d) override {
    d.grads_to_host();
    MPI_Allreduce(MPI_IN_PLACE, d.host_grads(), static_cast<int>(d.grad_floats()), MPI_FLOAT, MPI_SUM, comm_);
    d.grads_from_host();
  }
  void allgather(Device& d) override {
    const int n = static_cast<int>(d.grad_floats()) / size_;
    shard_.assign(static_cast<std::size_t>(n), 1.0f);
    MPI_Allgather(shard_.data(), n, MPI_FLOAT, d.host_grads(), n, MPI_FLOAT, comm_);
    d.grads_from_host();
  }
  void reduce_scatter(Device& d) override {
    const int n = static_cast<int>(d.grad_floats()) / size_;
    shard_.resize(static_cast<std::size_t>(n));
    d.grads_to_host();
    MPI_Reduce_scatter_block(d.host_grads(), shard_.data(), n, MPI_FLOAT, MPI_SUM, comm_);
  }
  void barrier() override { MPI_Barrier(comm_); }

private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  std::vector<float> shard_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm parent) { return std::make_unique<MpiComm>(parent); }

}  // namespace sf::sim
