#!/usr/bin/env bash
# The full test suite: set up, build everything, run every ctest label. Tests that need something
# absent (a GPU) report "Skipped" with the reason. Exit status is non-zero when any test fails.
#   scripts/test.sh [ctest args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
"$root/scripts/setup.sh" "$build"
jobs="$(nproc)"
cmake --build "$build" -j"$jobs"
cd "$build"
ctest --output-on-failure -j"$jobs" "$@"
