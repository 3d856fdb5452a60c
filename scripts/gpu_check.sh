#!/usr/bin/env bash
# One prepared run on a GPU machine (issue 31): build the CUDA preset, run tests/gpu, then the GPU
# rows, each part under its own time limit so that one failure leaves the rest, into at most 8
# files in OUTDIR (each names the device, driver, CUDA and NCCL versions and the commit).
#
#   bash scripts/gpu_check.sh [--dry-run | --rehearse] OUTDIR
#
# From a bare checkout plus the .ompi bundle (../shared/tools/ompi-bundle.sh .ompi, then
# `(cd .ompi/debs && apt-get download libfast-float-dev)`: --dry-run says so; carried to the
# GPU machine): the script unpacks it itself. --dry-run prints the plan and each part's budget and
# checks what it can without a GPU (the tools it needs, the bundle, the budgets' sum), running
# nothing. --rehearse runs the parts after the build on this CPU machine with the CPU build
# (build/, --device host, validate --device cpu, gloo and a data tail in the torch part; no
# bundle, build or tests/gpu), to find what a CPU can find before the GPU's 15 minutes. Parts (budgets in seconds; all within GPU_CHECK_TOTAL_S, 480 by default):
#   bundle       unpack .ompi (Open MPI, Eigen, CLI11, nlohmann-json, RapidCheck, GoogleTest, ...)
#   build        cmake --preset cuda with -DNCCL_ROOT=<site-packages>/nvidia/nccl, build -j16
#   gpu_tests    tests/gpu: gpu_test (spin calibration, events, GEMM, gradients) and the gpu.* CTest
#   events       Table 5: fwd_device and fwd_host, --device cuda --recorder event --event-q 1, 4 ranks,
#                and fwd_device's sham (delay 0)
#   routing      --device cuda, 8 ranks sharing the GPU, MPI all-reduce: data_tail, bwd_compute and
#                fwd_device at 120 ms beside their sham (the same seed, delay 0)
#   calibration  the spin calibration (gpu_test CudaSpin) and validate --device cuda (healthy, and a
#                4x compute fail-slow on rank 1)
#   overhead     always-on recording cost at 8 and 16 ranks on the quiet 16 cores, with the A/A arm
#   nccl         --comm nccl at 2, 4 and 8 ranks on the one GPU where NCCL allows it
#                (NCCL_MULTI_RANK_GPU_ENABLE=1, NCCL >= 2.30); otherwise one line why, and MPI rows
#   torch        sf_torch in PyTorch DDP on 2 ranks with CUDA events (train.py --event-q 1):
#                nccl where the NCCL above allows two ranks on one GPU, gloo on CUDA tensors otherwise
# Files: env.txt (versions, plan, each part's status and seconds), gpu_tests.log, events.csv,
# routing.csv, calibration.txt, overhead.csv, nccl.csv, torch.csv.
set -uo pipefail

DRY=0
REHEARSE=0
case "${1:-}" in
  --dry-run) DRY=1; shift ;;
  --rehearse) REHEARSE=1; shift ;;
esac
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: bash scripts/gpu_check.sh [--dry-run | --rehearse] OUTDIR" >&2
  exit 2
fi
OUT=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ $REHEARSE -eq 1 ]; then
  BUILD=${BUILD:-$ROOT/build}
  DEV=host VDEV=cpu GEMM_N=384 OH_RANKS="2 4"
  TORCH_RUN=(--scenario data_tail --delay-ms 120)
else
  BUILD=${BUILD:-$ROOT/build-cuda}
  DEV=cuda VDEV=cuda GEMM_N=2048 OH_RANKS="8 16"
  TORCH_RUN=(--scenario fwd_device --delay-ms 120 --event-q 1)
fi
BUNDLE=${BUNDLE:-$ROOT/.ompi}
TOTAL_S=${GPU_CHECK_TOTAL_S:-480}
PY=${PYTHON:-python3}
# Rehearsing here: Debian's interpreter has torch (a pyenv python3 on PATH may not).
if [ $REHEARSE -eq 1 ] && [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; fi
SF=$BUILD/sf-testbed
WORK=${GPU_CHECK_WORK:-$BUILD/gpu_check}

# name:budget seconds: what (the order they run in)
PLAN=(
  "bundle:20:unpack the .ompi bundle (MPI and the C++ build dependencies)"
  "build:150:configure the cuda preset (NCCL_ROOT from the Python wheel) and build -j16"
  "gpu_tests:45:tests/gpu: gpu_test and the gpu.* CTest entries"
  "events:45:Table 5: fwd_device, fwd_host (--event-q 1, 4 ranks) and fwd_device's sham"
  "routing:50:--device cuda, 8 ranks, MPI: data_tail, bwd_compute, fwd_device at 120 ms and their sham"
  "calibration:25:spin calibration and validate --device cuda (healthy; rank 1 4x slow)"
  "overhead:55:recording overhead at 8 and 16 ranks with the A/A arm"
  "nccl:50:--comm nccl at 2, 4, 8 ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1), else why and MPI"
  "torch:35:sf_torch DDP, 2 ranks, CUDA events (nccl if allowed, else gloo on CUDA tensors)"
)

plan_sum() {
  local s=0 p
  for p in "${PLAN[@]}"; do s=$((s + $(cut -d: -f2 <<<"$p"))); done
  echo "$s"
}

print_plan() {
  local p
  echo "gpu_check plan (OUTDIR $OUT, build $BUILD, bundle $BUNDLE):"
  for p in "${PLAN[@]}"; do
    printf '  %-12s %4s s  %s\n' "$(cut -d: -f1 <<<"$p")" "$(cut -d: -f2 <<<"$p")" "$(cut -d: -f3- <<<"$p")"
  done
  printf '  %-12s %4s s  (limit %s s)\n' "total" "$(plan_sum)" "$TOTAL_S"
  echo "  files: env.txt gpu_tests.log events.csv routing.csv calibration.txt overhead.csv nccl.csv torch.csv"
}

# Packages the configure requires that ../shared/tools/ompi-bundle.sh does not fetch (it predates
# them): without them the build part fails after the machine's start is paid for.
BUNDLE_EXTRA="libfast-float-dev"
bundle_lacks() {
  local p missing=()
  for p in $BUNDLE_EXTRA; do ls "$BUNDLE/debs/${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
  echo "${missing[*]}"
}
bundle_fix() { echo "add: (cd $BUNDLE/debs && apt-get download $BUNDLE_EXTRA)"; }

if [ "$(plan_sum)" -gt "$TOTAL_S" ]; then
  echo "gpu_check: the parts' budgets sum to $(plan_sum) s, over the $TOTAL_S s limit" >&2
  exit 2
fi

if [ $DRY -eq 1 ]; then
  print_plan
  bad=0
  for t in cmake "$PY"; do command -v "$t" >/dev/null || { echo "  missing here: $t"; bad=1; }; done
  if [ -f "$BUNDLE/unpack.sh" ] && [ -f "$BUNDLE/env.sh" ] && ls "$BUNDLE"/debs/*.deb >/dev/null 2>&1; then
    echo "  bundle: $BUNDLE ($(ls "$BUNDLE"/debs/*.deb | wc -l) packages)"
    lacking=$(bundle_lacks)
    [ -z "$lacking" ] || { echo "  bundle: $BUNDLE lacks $lacking, which the configure requires ($(bundle_fix))"; bad=1; }
  else
    echo "  bundle: $BUNDLE missing or incomplete (make it with ../shared/tools/ompi-bundle.sh .ompi)"
  fi
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | head -1 | sed 's/^/  GPU: /' || echo "  GPU: none here (dry run only)"
  exit $bad
fi

mkdir -p "$OUT" "$WORK" || { echo "gpu_check: cannot create $OUT or $WORK" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# The versions every file carries on its first line.
nccl_root() { "$PY" -c 'import nvidia.nccl as n, os; print(list(n.__path__)[0])' 2>/dev/null; }
nccl_version() {
  local h
  h=$(nccl_root)/include/nccl.h
  [ -f "$h" ] && awk '/#define NCCL_MAJOR/{a=$3}/#define NCCL_MINOR/{b=$3}/#define NCCL_PATCH/{c=$3}END{if(a!="")print a"."b"."c}' "$h"
}
DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
CUDA_V=$( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | sed -n 's/.*release \([0-9.]*\).*/\1/p' | head -1)
NCCL_V=$(nccl_version)
# The commit the tree was made from. The device machine's copy may have no .git, or (as on the first
# H200 run) a .git whose HEAD is the session's starting commit with the submitted tree as changes:
# GPU_CHECK_COMMIT, when given, wins; else HEAD, marked -dirty when tracked files differ from it.
# The build bakes the same name into every run.json (SF_BUILD_COMMIT, cmake/BuildInfo.cmake).
if [ -n "${GPU_CHECK_COMMIT:-}" ]; then
  COMMIT=$GPU_CHECK_COMMIT
elif COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null); then
  [ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] || COMMIT="$COMMIT-dirty"
else
  COMMIT=unknown
fi
export SF_BUILD_COMMIT=$COMMIT
HEADER="# device=${DEVICE:-none} driver=${DRIVER:-none} cuda=${CUDA_V:-none} nccl=${NCCL_V:-none} commit=$COMMIT date=$(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname)"
{
  echo "$HEADER"
  echo "# torch: $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "")' 2>&1 | tail -1)"
  echo "# cores: $(nproc); command: bash scripts/gpu_check.sh $OUT"
  print_plan
  echo "part,status,seconds,budget_s"
} > "$OUT/env.txt"
for f in gpu_tests.log calibration.txt; do echo "$HEADER" > "$OUT/$f"; done

# Each part runs in its own shell under `timeout`; its status goes to env.txt either way.
run_part() {
  local name=$1 budget=$2 t0 rc status
  t0=$(date +%s)
  echo "gpu_check: $name (budget ${budget} s)"
  timeout --kill-after=5 "$budget" bash -c "part_$name" >> "$WORK/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status="failed rc=$rc" ;;
  esac
  echo "$name,$status,$(($(date +%s) - t0)),$budget" >> "$OUT/env.txt"
  echo "gpu_check: $name: $status ($(($(date +%s) - t0)) s); log $WORK/$name.log"
  if [ "$status" != ok ]; then  # why, in env.txt too (the part logs stay on the machine)
    tail -5 "$WORK/$name.log" | sed "s/^/  $name: /"
    tail -15 "$WORK/$name.log" | sed "s/^/# $name: /" >> "$OUT/env.txt"
  fi
  return 0
}

part_bundle() {
  [ -f "$BUNDLE/unpack.sh" ] || { echo "no bundle at $BUNDLE"; exit 1; }
  local lacking
  lacking=$(bundle_lacks)
  [ -z "$lacking" ] || { echo "the bundle lacks $lacking, which the configure requires ($(bundle_fix))"; exit 1; }
  bash "$BUNDLE/unpack.sh"
}

part_build() {
  local nr pyb gen=() nccl=()
  nr=$(nccl_root)
  pyb=$("$PY" -m pybind11 --cmakedir 2>/dev/null)
  # The preset leaves the generator to CMake (Makefiles); a machine with ninja and no make gets Ninja.
  if ! command -v make >/dev/null && command -v ninja >/dev/null; then gen=(-G Ninja); fi
  echo "# tools: $(cmake --version | head -1); make $(command -v make || echo none); ninja $(command -v ninja || echo none);" \
    "c++ $(c++ --version 2>/dev/null | head -1); NCCL_ROOT ${nr:-none}; pybind11 ${pyb:-none}" | tee -a "$OUT/env.txt"
  configure() {
    cmake --preset cuda "${gen[@]}" -DNCCL_ROOT="$nr" -DPython3_EXECUTABLE="$(command -v "$PY")" \
      ${pyb:+-Dpybind11_DIR=$pyb} -DCMAKE_BUILD_TYPE=Release "${nccl[@]}" > "$WORK/configure.log" 2>&1
  }
  if ! configure; then
    # Without NCCL the CUDA device and every MPI part still run; the nccl part then says why.
    echo "# configure with NCCL failed ($(grep -m1 -i 'error' "$WORK/configure.log")); again with SF_WITH_NCCL=OFF" >> "$OUT/env.txt"
    rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"  # not $BUILD: the part logs live in it
    nccl=(-DSF_WITH_NCCL=OFF)
    configure || { tail -20 "$WORK/configure.log"; exit 1; }
  fi
  cmake --build "$BUILD" -j16 --target sf-testbed gpu_test || exit 1
  # sf_torch's module exists only where the Python development files and pybind11 were found.
  if grep -q 'sf_torch: building' "$WORK/configure.log"; then
    cmake --build "$BUILD" -j16 --target sf_torch_core || echo "# sf_torch_core failed to build: the torch part cannot run" >> "$OUT/env.txt"
  else
    echo "# sf_torch: $(grep -m1 'sf_torch:' "$WORK/configure.log")" >> "$OUT/env.txt"
  fi
}

part_gpu_tests() {
  if nccl_allows_shared_gpu; then export NCCL_MULTI_RANK_GPU_ENABLE=1; fi  # gpu.nccl_route: 2 ranks, 1 GPU
  { "$BUILD/tests/gpu/gpu_test" 2>&1; cd "$BUILD" && ctest -R '^gpu\.' --output-on-failure 2>&1; } |
    tee -a "$OUT/gpu_tests.log"
}

runs_rows() {  # PART DIR...: one CSV line per run directory
  local part=$1
  shift
  "$PY" "$ROOT/scripts/gpu_rows.py" runs "$HEADER" "$OUT/$part.csv" "$@"
}

sf_run() {  # DIR RANKS ARGS...: one `sf-testbed run`, its stdout kept beside its files
  local dir=$1 np=$2
  shift 2
  rm -rf "$dir"
  mkdir -p "$dir"
  local rc
  mpirun -np "$np" "$SF" run --details --out "$dir" "$@" > "$dir/stdout.txt" 2>&1
  rc=$?
  echo "$(basename "$dir"): exit $rc"
  [ "$rc" -eq 0 ] || head -3 "$dir/stdout.txt"
}

part_events() {
  local d=$WORK/events sc
  for sc in fwd_device fwd_host; do
    sf_run "$d/$sc" 4 --device "$DEV" --recorder event --event-q 1 --scenario "$sc" --delay-ms 120 --steps 16 --warmup 3 --seed 1
    runs_rows events "$d/$sc"
  done
  sf_run "$d/sham_fwd_device" 4 --device "$DEV" --recorder event --event-q 1 --scenario fwd_device --delay-ms 0 --steps 16 --warmup 3 --seed 1
  runs_rows events "$d/sham_fwd_device"
}

part_routing() {
  local d=$WORK/routing sc
  for sc in data_tail bwd_compute fwd_device; do
    sf_run "$d/$sc" 8 --device "$DEV" --comm mpi --scenario "$sc" --delay-ms 120 --steps 12 --warmup 3 --seed 2
    runs_rows routing "$d/$sc"
  done
  sf_run "$d/sham" 8 --device "$DEV" --comm mpi --scenario data_tail --delay-ms 0 --steps 12 --warmup 3 --seed 2
  runs_rows routing "$d/sham"
}

part_calibration() {
  {
    [ -x "$BUILD/tests/gpu/gpu_test" ] && "$BUILD/tests/gpu/gpu_test" --gtest_filter='CudaSpin.*:CudaGemm.*' 2>&1
    echo "## validate --device $VDEV, healthy (2 ranks)"
    mpirun -np 2 "$SF" validate --device "$VDEV" --no-p2p --gemm-n "$GEMM_N" --out "$WORK/validate_healthy.json" 2>&1
    echo "exit $?"
    echo "## validate --device $VDEV, rank 1 4x slow (exit 1 expected: rank 1 named)"
    mpirun -np 2 "$SF" validate --device "$VDEV" --no-p2p --gemm-n "$GEMM_N" --compute-slowdown 1:4 --check \
      --out "$WORK/validate_slow.json" 2>&1
    echo "exit $?"
  } | tee -a "$OUT/calibration.txt"
}

part_overhead() {
  local d=$WORK/overhead np
  for np in $OH_RANKS; do  # rows after each rank count: a timeout at 16 ranks keeps the 8-rank rows
    rm -rf "$d/ranks-$np"
    mpirun -np "$np" "$SF" run --device "$DEV" --overhead-pairs 3 --overhead-window 8 --warmup 2 --cost-scale 0.25 \
      --quiet --out "$d/ranks-$np" 2>&1 | tail -3
    "$PY" "$ROOT/scripts/gpu_rows.py" overhead "$HEADER" "$OUT/overhead.csv" "$d/ranks-$np"
  done
}

nccl_allows_shared_gpu() {  # NCCL >= 2.30 from the wheel: the experimental multi-rank switch exists
  local v
  v=$(nccl_version)
  [ -n "$v" ] && [ "$(printf '%s\n2.30.0\n' "$v" | sort -V | head -1)" = "2.30.0" ]
}

part_nccl() {
  local d=$WORK/nccl np
  if nccl_allows_shared_gpu; then
    export NCCL_MULTI_RANK_GPU_ENABLE=1
    echo "NCCL $(nccl_version): NCCL_MULTI_RANK_GPU_ENABLE=1, several ranks on one GPU"
    for np in 2 4 8; do
      sf_run "$d/nccl-$np" "$np" --device "$DEV" --comm nccl --scenario bwd_compute --delay-ms 120 --steps 10 --warmup 2 --seed 3
      runs_rows nccl "$d/nccl-$np"
    done
  else
    echo "# NCCL ${NCCL_V:-none} refuses two ranks of a communicator on one GPU (needs >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1): MPI rows instead" >> "$OUT/env.txt"
    for np in 2 4; do
      sf_run "$d/mpi-$np" "$np" --device "$DEV" --comm mpi --scenario bwd_compute --delay-ms 120 --steps 10 --warmup 2 --seed 3
      runs_rows nccl "$d/mpi-$np"
    done
  fi
}

part_torch() {
  local d=$WORK/torch
  rm -rf "$d"
  mkdir -p "$d"
  if nccl_allows_shared_gpu; then export NCCL_MULTI_RANK_GPU_ENABLE=1; fi
  local args
  read -r -a args <<<"$TORCH_RUN_ARGS"
  SF_TORCH_CORE_DIR="$BUILD/python/sf_torch" "$PY" "$ROOT/examples/torch_ddp/train.py" --nproc-per-node 2 \
    "${args[@]}" --steps 16 --warmup 3 --seed 1 --out "$d" > "$WORK/torch_stdout.txt" 2>&1
  echo "train.py: exit $?"
  tail -15 "$WORK/torch_stdout.txt"
  cp "$WORK/torch_stdout.txt" "$d/stdout.txt"
  runs_rows torch "$d"
}

export -f bundle_lacks bundle_fix part_bundle part_build part_gpu_tests part_events part_routing part_calibration part_overhead part_nccl \
  part_torch runs_rows sf_run nccl_root nccl_version nccl_allows_shared_gpu
export ROOT BUILD BUNDLE BUNDLE_EXTRA PY SF WORK OUT HEADER NCCL_V DEV VDEV GEMM_N OH_RANKS
export TORCH_RUN_ARGS="${TORCH_RUN[*]}"

for p in "${PLAN[@]}"; do
  name=$(cut -d: -f1 <<<"$p")
  budget=$(cut -d: -f2 <<<"$p")
  if [ $REHEARSE -eq 1 ] && { [ "$name" = bundle ] || [ "$name" = build ] || [ "$name" = gpu_tests ]; }; then
    echo "$name,skipped: rehearsal on a CPU,0,$budget" >> "$OUT/env.txt"
    continue
  fi
  if [ "$name" = bundle ]; then
    run_part bundle "$budget"
    # shellcheck disable=SC1091
    [ -f "$BUNDLE/env.sh" ] && source "$BUNDLE/env.sh"
    export OMPI_MCA_rmaps_base_oversubscribe=1
    continue
  fi
  if [ "$name" != build ] && [ ! -x "$SF" ]; then
    echo "$name,skipped: no $SF (the build failed),0,$budget" >> "$OUT/env.txt"
    continue
  fi
  run_part "$name" "$budget"
done
echo "# total ${TOTAL_S} s budget, $(($(date +%s) - START)) s used" >> "$OUT/env.txt"
echo "gpu_check: done in $(($(date +%s) - START)) s; $(ls "$OUT" | wc -l) files in $OUT"
