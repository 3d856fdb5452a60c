#!/usr/bin/env bash
# Configures a CMake preset: scripts/configure.sh PRESET. The clang presets (sanitize, tsan) use
# Ninja since a build made with another generator (before 2026-11-26: Unix Makefiles) cannot be
# reconfigured with it in place, that build's cache is cleared first (its outputs are rebuilt; a
# fuzz corpus under build-sanitize/fuzz/ is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=$1
dir=$(/usr/bin/python3 -c "import json,sys; print([p['binaryDir'] for p in json.load(open('CMakePresets.json'))['configurePresets'] if p['name']==sys.argv[1]][0].replace('\${sourceDir}/',''))" "$preset")
want=$(/usr/bin/python3 -c "import json,sys; print([p.get('generator','') for p in json.load(open('CMakePresets.json'))['configurePresets'] if p['name']==sys.argv[1]][0])" "$preset")
if [ -n "$want" ] && [ -f "$dir/CMakeCache.txt" ] && ! grep -qx "CMAKE_GENERATOR:INTERNAL=$want" "$dir/CMakeCache.txt"; then
  echo "configure: $dir was made with another generator; clearing its cache for $want"
  rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
fi
cmake --preset "$preset" >/dev/null
