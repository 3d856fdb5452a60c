#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every test: unit, property (10^4 cases each), golden,
# the real mpiexec tests and the install test, all through CTest. Then builds the no-MPI preset
# and checks score/verify/sim there, and compiles the CUDA preset where nvcc is installed (GPU
# tests are compiled there but only registered when a GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ctest --preset cpu -j"$(nproc)"
echo "test: building the no-MPI preset (build-nompi/): score, verify and sim must work without MPI"
cmake --preset nompi >/dev/null
cmake --build --preset nompi -j"$(nproc)" --target sf-testbed
bash tests/nompi/check.sh build-nompi/sf-testbed examples
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "test: compiling the CUDA preset (build-cuda/)"
  cmake --preset cuda >/dev/null
  # The binary and the GPU tests (CPU tests are the same sources, already run above).
  cmake --build --preset cuda -j"$(nproc)" --target sf-testbed gpu_test
  if nvidia-smi -L >/dev/null 2>&1; then ctest --test-dir build-cuda -R '^(gpu|Cuda)' --output-on-failure; fi
else
  echo "test: WARNING: no /usr/local/cuda/bin/nvcc, CUDA preset not compiled"
fi
echo "test: all tests passed"
