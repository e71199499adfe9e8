#!/usr/bin/env bash
# One device call (a merged tree's check): build (Release), GPU tests + rtc_pch + rtc_pch_store + include_reach, launch_bench, compile_bench,
# then CuPy's kernel tests as shipped and through kiln.cupy with a per-test diff.
#   bash scripts/h200_check.sh OUT [steps]   steps: any of build,ctest,launch,compile,cupy (default all)
# Needs .carry/include (Debian's xxhash, fmt, CLI11, nlohmann-json and Catch2 headers) and .carry/cupy_tests/tests
# (CuPy's tests/conftest.py, package __init__ files and the test files, by `git archive` of its v14.2.0 tag).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$1"; steps="${2:-build,ctest,launch,compile,cupy}"
build="${KILN_H200_BUILD:-/tmp/kiln-dev-build}"  # shared with h200_run.sh through KILN_H200_BUILD
export CMAKE_INCLUDE_PATH="$root/.carry/include" CPATH="$root/.carry/include"
export KILN_CACHE_DIR=/tmp/kiln-dev-cache; rm -rf "$KILN_CACHE_DIR"
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
git -C "$root" log --oneline -1 2>/dev/null | tee -a "$out/gpu.txt"
stamp configure
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_HIP=OFF >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
gpu_tests=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \(gpu_[a-z_]*\).*/\1/p' | tr '\n' ' ')
stamp "build ($gpu_tests)"
cmake --build "$build" -j16 --target kiln kiln_cli rtc_pch rtc_pch_child rtc_pch_store include_reach launch_bench compile_bench $gpu_tests >"$out/build.log" 2>&1 \
  || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
if [[ $steps == *ctest* ]]; then
  stamp ctest
  (cd "$build" && timeout 200 ctest -R '^(gpu_|rtc_pch$|rtc_pch_store$|include_reach$)' --output-on-failure 2>&1 | tee "$out/ctest.log" | grep -E 'Test +#|tests passed|FAILED')
fi
if [[ $steps == *launch* ]]; then
  stamp launch_bench
  timeout 120 "$build/bench/launch_bench/launch_bench" 2>&1 | tee "$out/launch.txt" | tail -25
fi
if [[ $steps == *compile* ]]; then
  stamp compile_bench
  CUDA_CACHE_DISABLE=1 timeout 150 "$build/bench/compile_bench/compile_bench" --lanes nvrtc --runs 7 2>&1 | tee "$out/compile.txt" | tail -8
fi
if [[ $steps == *cupy* ]]; then
  export KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python"
  tests_root="$root/.carry/cupy_tests/tests"
  tests=$(cd "$tests_root" && find . -name 'test_*.py' | sort | tr '\n' ' ')
  for mode in ${KILN_MODES:-plain kiln}; do
    stamp "CuPy tests ($mode)"
    (cd "$tests_root" && timeout 200 python3 "$root/scripts/h200_cupy_tests.py" "$mode" "/tmp/kiln-cupy-stats-$mode" $tests -- -vv -n 16 \
      >"$out/cupy_$mode.txt" 2>&1)
    echo "exit $?"; grep -E "passed|failed|kiln.cupy stats" "$out/cupy_$mode.txt" | tail -3
  done
  python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
def outcomes(mode):
    res = {}
    for line in open(f"{out}/cupy_{mode}.txt", errors="replace"):
        m = re.search(r"\b(PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)\s+(\S+::\S+)", line)
        if m: res[m.group(2)] = m.group(1)
    return res
try:
    a, b = outcomes("plain"), outcomes("kiln")
except OSError as e:
    sys.exit(f"no diff: {e}")
import collections
print("plain:", dict(collections.Counter(a.values())), "kiln:", dict(collections.Counter(b.values())))
diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
print(f"{len(diff)} tests differ of {len(set(a) | set(b))}")
for k in diff[:60]: print(" ", a.get(k), "->", b.get(k), k)
PY
fi
stamp done
