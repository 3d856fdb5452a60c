#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every test: unit, property (10^4 cases each), golden,
# the real mpiexec tests and the install test, all through CTest. Then builds the no-MPI preset
# and checks score/verify/sim there, and compiles the CUDA preset where nvcc is installed (GPU
# tests are compiled there but only registered when a GPU is present). Then the hardening jobs
# (README, "What CI runs"): a clang ASan+UBSan build running the unit, property (200 cases) and
# golden tests, a clang TSan build running the recorder and host-stream tests, and each libFuzzer
# harness for 60 s. Each job prints its duration. SF_CI_SKIP_HARDENING=1 skips them.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every job says how long it took, and when it ended counted from the start (CI's budget is 30 min).
job() { local t0=$SECONDS; "$@"; echo "test: job '$1 ${2:-}' took $((SECONDS - t0)) s (at $((SECONDS / 60)) min $((SECONDS % 60)) s)"; }
job bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
job ctest --preset cpu -j"$(nproc)"
nompi_job() {
  echo "test: building the no-MPI preset (build-nompi/): score, verify and sim must work without MPI"
  cmake --preset nompi >/dev/null
  cmake --build --preset nompi -j"$(nproc)" --target sf-testbed
  bash tests/nompi/check.sh build-nompi/sf-testbed examples
}
cuda_job() {
  echo "test: compiling the CUDA preset (build-cuda/)"
  cmake --preset cuda >/dev/null
  # The binary and the GPU tests (CPU tests are the same sources, already run above).
  cmake --build --preset cuda -j"$(nproc)" --target sf-testbed gpu_test
  if nvidia-smi -L >/dev/null 2>&1; then ctest --test-dir build-cuda -R '^(gpu|Cuda)' --output-on-failure; fi
}
job nompi_job
if [ -x /usr/local/cuda/bin/nvcc ]; then
  job cuda_job
else
  echo "test: WARNING: no /usr/local/cuda/bin/nvcc, CUDA preset not compiled"
fi
if [ "${SF_CI_SKIP_HARDENING:-0}" != 1 ]; then
  asan_job() {
    echo "test: clang ASan+UBSan build (build-sanitize/): unit, property (200 cases) and golden tests"
    cmake --preset sanitize >/dev/null
    cmake --build --preset sanitize -j"$(nproc)" --target formats_test frontier_test median_test properties_test \
          fixtures_test inject_test sf-testbed fuzz_stage_jsonl_replay fuzz_stage_csv_replay fuzz_config_replay
    # Property cases: 200 (the preset's SF_PROPERTY_CASES). Not here: MPI runs, the install
    # test, experiments, 1024-rank sim goldens, and tests of targets not built (NOT_BUILT).
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      ctest --test-dir build-sanitize -j"$(nproc)" --output-on-failure \
            -E '^(mpi\.|install\.|experiments\.|golden\.sim_|golden\.verify_)|NOT_BUILT' -LE multihost
  }
  tsan_job() {
    echo "test: clang TSan build (build-tsan/): recorder and host-stream tests"
    cmake --preset tsan >/dev/null
    cmake --build --preset tsan -j"$(nproc)" --target recorder_test sim_test
    RC_PARAMS="max_success=200" TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/recorder_test
    TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/sim_test
  }
  job asan_job
  job tsan_job
  job bash scripts/fuzz.sh 60
fi
echo "test: all tests passed"
