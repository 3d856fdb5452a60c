#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every test: unit, property (10^4 cases each), golden,
# and the real mpiexec tests, all through CTest. Also compiles the CUDA preset where nvcc is
# installed (GPU tests are compiled there but only registered when a GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ctest --preset cpu -j"$(nproc)"
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "test: compiling the CUDA preset (build-cuda/)"
  cmake --preset cuda >/dev/null
  cmake --build --preset cuda -j"$(nproc)"
else
  echo "test: WARNING: no /usr/local/cuda/bin/nvcc, CUDA preset not compiled"
fi
echo "test: all tests passed"
