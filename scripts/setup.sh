#!/usr/bin/env bash
# Installs what sf-testbed needs on Debian 12 (apt-get, as root) and builds the CPU preset into
# build/ (the binary is build/sf-testbed). Safe to re-run: installed packages are skipped.
# The preset is a unity build (CMakePresets.json; scripts/test.sh says why): on this project's
# 2-core AMD EPYC VM (2026-12-02, `cmake --build -j2` alone) it built in 373 s and 682 CPU-s
# against 528 s and 1025 CPU-s file by file.
set -euo pipefail
cd "$(dirname "$0")/.."

# Why the less obvious packages are here:
#   libfast-float-dev: formats/ parses CSV numbers with fast_float (header-only)
#   libsimdjson-dev: bench/kineto_parsers only (the Kineto parser comparison)
#   python3-mypy: CTest python.mypy and python.stubtest check the Python's types (mypy.ini) and sf_torch's _core.pyi against the built module
#   python3-prometheus-client: the --metrics tests read the file with the reference parser
#   ninja-build: the clang presets (sanitize, tsan) build with Ninja, which keeps both cores busy across targets
#   iproute2 (ip netns, veth, bridge, tc): the multihost tests
#   tmux: the run --live test drives a terminal as a person would
#   clang, libclang-rt-14-dev: the clang build, sanitizers and libFuzzer (scripts/test.sh, scripts/fuzz.sh)
# What the CPU build needs (its configure included: python3-mypy is looked for there) ...
build_pkgs=(cmake g++ make git pkg-config
            libopenmpi-dev openmpi-bin
            libeigen3-dev libcli11-dev nlohmann-json3-dev librapidcheck-dev
            libgtest-dev libbenchmark-dev
            python3 zlib1g-dev python3-dev pybind11-dev python3-mypy
            ninja-build libsimdjson-dev libfast-float-dev)
# ... and what only the tests, the runs and the clang jobs need. These, the larger half (torch,
# scipy, clang), install while the build compiles: on a fresh machine the download and unpacking
# overlap the compiler's CPU rather than come before it. setup waits for them before it ends.
run_pkgs=(python3-pandas python3-matplotlib python3-scipy python3-torch tmux iproute2 python3-prometheus-client
          clang libclang-rt-14-dev)
missing() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing_build < <(missing "${build_pkgs[@]}")
mapfile -t missing_run < <(missing "${run_pkgs[@]}")
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
run_pid="" run_log=""
if [ $((${#missing_build[@]} + ${#missing_run[@]})) -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: run as root (apt-get install needs it): missing ${missing_build[*]} ${missing_run[*]}" >&2; exit 2
  fi
  apt-get update -qq
  if [ ${#missing_build[@]} -gt 0 ]; then
    echo "setup: installing ${missing_build[*]}"
    apt_install "${missing_build[@]}"
  fi
  if [ ${#missing_run[@]} -gt 0 ]; then
    echo "setup: installing ${missing_run[*]}, beside the build"
    run_log=$(mktemp)
    apt_install "${missing_run[@]}" >"$run_log" 2>&1 &
    run_pid=$!
    # Never killed: a dpkg stopped half-way leaves packages broken. A failed build waits for it too.
    trap 'wait "$run_pid" 2>/dev/null || true' EXIT
  fi
fi

cmake --preset cpu >/dev/null
cmake --build --preset cpu -j"$(nproc)"
if [ -n "$run_pid" ]; then
  rc=0; wait "$run_pid" || rc=$?
  trap - EXIT
  if [ "$rc" -ne 0 ]; then
    cat "$run_log" >&2
    echo "setup: apt-get install ${missing_run[*]} failed (exit $rc)" >&2
    exit "$rc"
  fi
  rm -f "$run_log"
fi
