#!/usr/bin/env bash
# kiln's main job: build, compile (prewarm) every built-in kernel for the default targets into the
# cache, run the example kernels where there is a GPU, and show what the cache holds.
# Default targets: the local GPUs' targets, or sm_90 and gfx90a on a machine without a GPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_BUILD_DIR:-$root/build}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
"$root/scripts/setup.sh" "$build"
cmake --build "$build" -j"$(nproc)" --target kiln_cli hello expr_jit
kiln="$build/tools/kiln"
export KILN_CACHE_DIR="${KILN_CACHE_DIR:-$build/demo-cache}"
echo
echo "== kiln devices"
"$kiln" devices
echo
echo "== kiln prewarm --all-builtin (default targets)"
"$kiln" prewarm --all-builtin
echo
echo "== examples"
"$build/examples/hello/hello"
"$build/examples/expr_jit/expr_jit"
echo
echo "== kiln cache ls"
"$kiln" cache ls
echo
echo "== kiln cache stats"
"$kiln" cache stats
