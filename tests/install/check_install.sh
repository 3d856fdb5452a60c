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
# Each component on its own, as docs/api.md tells a user to ask for it, linked into a program:
# find_package(sf COMPONENTS formats) once failed to configure (formats' Threads was not looked
# for), and a link only of sf::frontier could not show it (issue 40).
for c in check frontier detect formats verify recorder inject sim testbed; do
  mkdir -p "$tmp/one_$c"
  cat >"$tmp/one_$c/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(sf_one_$c LANGUAGES C CXX)
find_package(sf CONFIG REQUIRED COMPONENTS $c)
add_executable(one one.cpp)
target_link_libraries(one PRIVATE sf::$c)
CMAKE
  echo 'int main() { return 0; }' >"$tmp/one_$c/one.cpp"
  if ! out=$(cmake -S "$tmp/one_$c" -B "$tmp/one_$c/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" 2>&1 && cmake --build "$tmp/one_$c/build" 2>&1); then
    echo "FAIL: find_package(sf COMPONENTS $c) and a link of sf::$c:"; echo "$out" | tail -15; exit 1
  fi
done
echo "install: ok"
