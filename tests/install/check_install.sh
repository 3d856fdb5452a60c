#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs examples/consumer against it
# with find_package(sf CONFIG): the installed headers, targets and config must be complete.
#   check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -f "$tmp/prefix/include/sf/frontier/frontier.h"
test -f "$tmp/prefix/lib/cmake/sf/sfConfig.cmake"
# The pure engine's public header must not reach MPI, JSON or RapidCheck.
if grep -rqE '#include *[<"](mpi\.h|nlohmann|rapidcheck)' "$tmp/prefix/include/sf/frontier"; then
  echo "FAIL: installed frontier headers include MPI/JSON/RapidCheck"; exit 1
fi
cmake -S "$src/examples/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer"
# Every exported library resolves with its dependencies (no component list: all of them).
cat >"$tmp/all.cmake" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(sf_all LANGUAGES C CXX)
find_package(sf CONFIG REQUIRED)
foreach(t frontier formats verify recorder inject sim testbed check)
  if(NOT TARGET sf::${t})
    message(FATAL_ERROR "sf::${t} missing after find_package(sf)")
  endif()
endforeach()
CMAKE
mkdir -p "$tmp/all"
cp "$tmp/all.cmake" "$tmp/all/CMakeLists.txt"
cmake -S "$tmp/all" -B "$tmp/all/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
echo "install: ok"
