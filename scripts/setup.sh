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
pkgs=(cmake g++ make git pkg-config
      libopenmpi-dev openmpi-bin
      libeigen3-dev libcli11-dev nlohmann-json3-dev librapidcheck-dev
      libgtest-dev libbenchmark-dev
      python3 python3-pandas python3-matplotlib python3-scipy
      zlib1g-dev python3-dev pybind11-dev python3-torch tmux iproute2 python3-prometheus-client python3-mypy
      clang libclang-rt-14-dev ninja-build libsimdjson-dev libfast-float-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then echo "setup: run as root (apt-get install needs it)" >&2; exit 2; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake --preset cpu >/dev/null
cmake --build --preset cpu -j"$(nproc)"
