#!/usr/bin/env bash
# Build and run kiln's GPU work on a machine with NVIDIA GPUs but without Debian's -dev packages
# (the lent H200 machine): header-only dependencies travel in .carry/include. Builds with the
# machine's cmake/g++, then runs the GPU tests, the examples and the GPU benchmarks.
#   scripts/h200_run.sh [outdir]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-/tmp/kiln-h200}"
mkdir -p "$out"
build="${KILN_H200_BUILD:-/tmp/kiln-h200-build}"  # KILN_H200_BUILD: one build for this and h200_check.sh
export CMAKE_INCLUDE_PATH="$root/.carry/include"
export KILN_CACHE_DIR=/tmp/kiln-h200-cache
rm -rf "$KILN_CACHE_DIR"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$out/gpus.txt"
cat /etc/os-release | head -2
# Installs the wheel scripts/build_wheel.sh made elsewhere (.carry/wheel/kiln-*.whl) into a fresh venv that sees the
# machine's Python packages, and puts that venv first on PATH (no KILN_LIBRARY, PYTHONPATH or build tree after this).
use_wheel_venv() {
  wheel=$(ls "$root"/.carry/wheel/kiln-*.whl 2>/dev/null | head -1)
  [[ -n "$wheel" ]] || { echo "no .carry/wheel/kiln-*.whl (scripts/build_wheel.sh makes it)"; exit 1; }
  venv=/tmp/kiln-wheel-venv; rm -rf "$venv"
  python3 -m venv --system-site-packages --without-pip "$venv" || exit 1
  # The machine's CuPy and cuda.core sit in a virtual environment of their own (python3 is its interpreter), which
  # --system-site-packages does not reach: a .pth file adds its site-packages after the new venv's own.
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
    >"$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/machine_env.pth"
  pip_args=(install --no-index --no-deps --disable-pip-version-check "$wheel")
  "$venv/bin/python" -m pip "${pip_args[@]}" || python3 -m pip --python "$venv/bin/python" "${pip_args[@]}" || exit 1
  cd /tmp && unset KILN_LIBRARY PYTHONPATH && export PATH="$venv/bin:$PATH"
  python -c 'import kiln; print("kiln", kiln.__version__, "from", kiln.__file__, "library", kiln.library_path)' \
    | tee "$out/wheel.txt"
}
# CuPy's own kernel tests (from CuPy's repository at the installed version's tag, in .carry/cupy_tests/tests;
# KILN_CUPY_TESTS overrides the list), in the modes of KILN_CUPY_TESTS_MODES (default "plain kiln": as shipped and
# through kiln.cupy), on KILN_CUPY_TESTS_WORKERS pytest workers (16); -vv (with the runner's -q: one line a test), so that a run cut by its time limit still
# shows which tests finished. The counts of each and kiln.cupy's summed stats (scripts/h200_cupy_tests.py).
run_cupy_tests() {
  local python_bin=$1 tests_root="$root/.carry/cupy_tests/tests" tests mode
  tests=${KILN_CUPY_TESTS:-$(cd "$tests_root" && find . -name 'test_*.py' | sort | tr '\n' ' ')}
  for mode in ${KILN_CUPY_TESTS_MODES:-plain kiln}; do
    echo "== CuPy's tests ($mode), $(date -u +%H:%M:%S)"
    (cd "$tests_root" && timeout "${KILN_CUPY_TESTS_TIMEOUT:-240}" "$python_bin" "$root/scripts/h200_cupy_tests.py" "$mode" \
      "$out/cupy_tests_stats_$mode" $tests -- -vv -n "${KILN_CUPY_TESTS_WORKERS:-16}" >"$out/cupy_tests_$mode.txt" 2>&1)
    echo "exit $? at $(date -u +%H:%M:%S); per-test results: $(grep -oE ' (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR) ' \
      "$out/cupy_tests_$mode.txt" | sort | uniq -c | tr '\n' ' ')"
    grep -E "^(FAILED|ERROR)|passed|failed|kiln.cupy stats" "$out/cupy_tests_$mode.txt" | tail -12
  done
}
# KILN_H200_ONLY=wheel: no build here. The wheel goes into a fresh venv (use_wheel_venv); from there: import kiln,
# `kiln devices`, then cupy_bench (KILN_CUPY_BENCH_RUNS, 1 here; part 3's `kiln prewarm` is the wheel's CLI, on PATH
# from the venv); KILN_WHEEL_PROGRAM=1 adds the program workload's cold cells. KILN_WHEEL_CUPY_TESTS=1 runs CuPy's
# kernel tests (run_cupy_tests) with the wheel's kiln instead, and nothing else.
if [[ "${KILN_H200_ONLY:-}" == wheel ]]; then
  use_wheel_venv
  if [[ "${KILN_WHEEL_CUPY_TESTS:-0}" == 1 ]]; then run_cupy_tests "$venv/bin/python"; exit 0; fi
  rm -rf /tmp/kiln-cupy-bench-wheel
  echo "== kiln devices ($(command -v kiln))"; kiln --version; kiln devices | tee -a "$out/wheel.txt"
  echo "== cupy_bench"
  timeout "${KILN_CUPY_BENCH_TIMEOUT:-540}" python "$root/bench/cupy_bench.py" --runs "${KILN_CUPY_BENCH_RUNS:-1}" \
    --work /tmp/kiln-cupy-bench-wheel --keep 2>&1 | tee "$out/cupy_bench_wheel.txt"
  status=${PIPESTATUS[0]}
  # KILN_WHEEL_PROGRAM=1: then the program workload's cold cells (CuPy vs kiln, empty caches), with the wheel's kiln.
  if [[ "${KILN_WHEEL_PROGRAM:-0}" == 1 ]]; then
    echo "== cupy_bench --workload program --cold-only (the wheel's libkiln)"; rm -rf /tmp/kiln-cupy-program
    timeout "${KILN_CUPY_PROGRAM_TIMEOUT:-300}" python "$root/bench/cupy_bench.py" --workload program --cold-only --parts 1,2 \
      --runs "${KILN_CUPY_PROGRAM_RUNS:-2}" --work /tmp/kiln-cupy-program 2>&1 | tee "$out/cupy_program_wheel.txt"
  fi
  exit "$status"
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_HIP=OFF >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
# KILN_H200_ONLY=launch | prewarm: build and run that benchmark alone (a quick re-measure);
# KILN_H200_ONLY=floor: hash_dispatch, read_floor twice, then cache_bench (hashing, the disk-hit floor
# and the disk hit);
# KILN_H200_ONLY=timeline: time-stamped progress of `kiln prewarm -j 16` (KILN_LOG=debug phases).
if [[ "${KILN_H200_ONLY:-}" == launch ]]; then
  cmake --build "$build" -j"$(nproc)" --target launch_bench >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  for run in 1 2 3; do echo "== launch_bench (run $run)"; "$build/bench/launch_bench/launch_bench" | tee "$out/launch_bench_$run.txt"; done
  exit 0
fi
# KILN_H200_ONLY=cudacore: kiln.cuda_core against the real cuda.core (scripts/h200_cuda_core.py), then cold_bench
# replaying a CuPy request log (KILN_COLD_LOG, recorded by an earlier round's cupy_bench) over 3 rounds.
if [[ "${KILN_H200_ONLY:-}" == cudacore ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli cold_bench >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  echo "== kiln.cuda_core against cuda.core"
  KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python" timeout 300 python3 "$root/scripts/h200_cuda_core.py" 2>&1 \
    | tee "$out/cuda_core.txt"
  if [[ -n "${KILN_COLD_LOG:-}" && -f "$KILN_COLD_LOG" ]]; then
    echo "== cold_bench --rounds 3 (CuPy's own requests, $KILN_COLD_LOG)"
    timeout 280 "$build/bench/cold_bench/cold_bench" --log "$KILN_COLD_LOG" --rounds 3 --json "$out/cold_cupy3.json" 2>&1 \
      | tee "$out/cold_cupy3.txt"
  fi
  exit 0
fi
# KILN_H200_ONLY=triton: kiln.triton and kiln.torch against the machine's torch 2.11 and Triton 3.6
# (scripts/h200_triton.py): Triton's own runtime cache tests (.carry/triton_tests, scripts/fetch_triton_tests.sh)
# as shipped and with kiln's manager, torch.compile of an MLP cold / warm / on a second node in fresh processes,
# torch.cuda._compile_kernel through kiln against torch's own. KILN_TRITON_PARTS chooses parts (tests,compile,kernel).
if [[ "${KILN_H200_ONLY:-}" == triton ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  export KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python" KILN_CLI="$build/tools/kiln"
  rm -rf /tmp/kiln-h200-triton
  timeout "${KILN_TRITON_TIMEOUT:-420}" python3 "$root/scripts/h200_triton.py" --work /tmp/kiln-h200-triton \
    --parts "${KILN_TRITON_PARTS:-tests,compile,kernel}" 2>&1 | tee "$out/triton.txt" | cut -c1-400
  exit "${PIPESTATUS[0]}"
fi
# KILN_H200_ONLY=numba: kiln.cuda_core against the real cuda.core, then numba-cuda's tests that compile or link
# CUDA C++ (KILN_NUMBA_TESTS) as shipped and with cuda.core's Program routed through kiln, then bench/cuda_core_bench.py.
if [[ "${KILN_H200_ONLY:-}" == numba ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  export KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python"
  echo "== kiln.cuda_core against cuda.core"; timeout 120 python3 "$root/scripts/h200_cuda_core.py" 2>&1 | tee "$out/cuda_core.txt" | grep -vE "^(PASS|info)"
  tree=$(python3 -c 'import numba_cuda, os; print(os.path.dirname(numba_cuda.__file__))')/numba/cuda/tests
  # As module names (numba-cuda's tests import as numba.cuda.tests.*, not from their files' folders).
  tests=${KILN_NUMBA_TESTS:-$(cd "$tree" && find . -name 'test_*.py' \( -name '*nvrtc*' -o -name '*link*' \) | sort \
    | sed 's|^\./||; s|\.py$||; s|/|.|g; s|^|numba.cuda.tests.|' | tr '\n' ' ')}
  for mode in plain kiln; do
    echo "== numba-cuda ($mode): $tests"
    timeout 150 python3 "$root/scripts/h200_numba.py" "$mode" $tests >"$out/numba_$mode.txt" 2>&1
    tail -3 "$out/numba_$mode.txt"
  done
  [[ "${KILN_NUMBA_BENCH:-1}" == 1 ]] || exit 0
  echo "== bench/cuda_core_bench.py (warm starts: cuda.core with include_path, numba-cuda linking a .cu)"
  timeout 240 python3 "$root/bench/cuda_core_bench.py" --runs "${KILN_RUNTIMES_RUNS:-3}" 2>&1 | tee "$out/cuda_core_bench.txt"
  exit 0
fi
# KILN_H200_ONLY=final: one call's check of a merged tree: the GPU tests and rtc_pch, cuda_core_bench (both
# runtimes, warm), cupy_bench's part 1 (outputs byte for byte) and cold_bench over the program's recorded requests
# (KILN_COLD_LOG; one round), each under its own time limit.
if [[ "${KILN_H200_ONLY:-}" == final ]]; then
  gpu_tests=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \(gpu_[a-z_]*\).*/\1/p')
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli rtc_pch cold_bench $gpu_tests >"$out/build.log" 2>&1 \
    || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  echo "== ctest -L gpu, rtc_pch"
  (cd "$build" && ctest -R '^(gpu_|rtc_pch$)' --output-on-failure 2>&1 | tee "$out/ctest_gpu.log" | grep -E 'Test +#|tests passed|FAILED')
  export KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python"
  echo "== bench/cuda_core_bench.py"
  timeout 120 python3 "$root/bench/cuda_core_bench.py" --runs 3 2>&1 | tee "$out/cuda_core_bench.txt" | grep -vE "Warning|warn\("
  echo "== cupy_bench --parts 1"
  timeout 100 python3 "$root/bench/cupy_bench.py" --parts 1 --work /tmp/kiln-final-cupy 2>&1 | tee "$out/cupy_bench.txt" | grep -vE "said:"
  if [[ -n "${KILN_COLD_LOG:-}" && -f "$KILN_COLD_LOG" ]]; then
    echo "== cold_bench (one round, $KILN_COLD_LOG)"
    timeout "${KILN_FINAL_COLD_TIMEOUT:-170}" "$build/bench/cold_bench/cold_bench" --log "$KILN_COLD_LOG" --json "$out/cold.json" 2>&1 \
      | tee "$out/cold.txt" | tail -30
  fi
  exit 0
fi
# KILN_H200_ONLY=runtimes: cuda.core's own Program tests (from cuda.core's repository, in .carry/cuda_core_tests)
# as shipped and through kiln.cuda_core, kiln.cuda_core.ProgramCache against the real cuda.core
# (scripts/h200_program_cache.py), then bench/cuda_core_bench.py.
if [[ "${KILN_H200_ONLY:-}" == runtimes ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  export KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python"
  for mode in plain kiln; do
    echo "== cuda.core's Program tests ($mode)"
    timeout 150 python3 "$root/scripts/h200_cuda_core_tests.py" "$mode" "$root"/.carry/cuda_core_tests/test_*.py \
      >"$out/cuda_core_tests_$mode.txt" 2>&1
    grep -E "^(FAILED|ERROR)|passed|failed|kiln.cuda_core stats" "$out/cuda_core_tests_$mode.txt" | tail -25
  done
  echo "== kiln.cuda_core.ProgramCache against cuda.core"
  timeout 120 python3 "$root/scripts/h200_program_cache.py" 2>&1 | tee "$out/program_cache.txt" | grep -vE "^info"
  echo "== bench/cuda_core_bench.py"
  timeout "${KILN_RUNTIMES_BENCH_TIMEOUT:-240}" python3 "$root/bench/cuda_core_bench.py" --runs "${KILN_RUNTIMES_RUNS:-3}" 2>&1 \
    | tee "$out/cuda_core_bench.txt"
  exit 0
fi
# KILN_H200_ONLY=pchcrash: the crash of 2026-12-07 (CuPy's kernel tests through kiln, workers sharing stored PCHs:
# SIGSEGV in kiln's compile call, executing at an address in libkiln's read-only data). A libkiln with line tables
# (-g1) of its own build; CuPy's test_bfloat16.py through kiln.cupy with KILN_PCH=auto, without Python's faulthandler
# (it catches the signal first and raises it again, which loses the faulting context), under
# scripts/diag/segv_trace.c: on 4 workers over one empty cache (W), then one process after another over one cache
# (A makes the header sets' PCHs, B compiles other kernels over them: cross-process use without concurrency). Each
# crash's instruction, frames and the stack words that point into an image, libkiln's resolved with addr2line.
if [[ "${KILN_H200_ONLY:-}" == pchcrash ]]; then
  traced="${build}-g1"
  cmake -S "$root" -B "$traced" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g1 -DKILN_WITH_HIP=OFF >"$out/configure-g1.log" 2>&1 || exit 1
  cmake --build "$traced" -j"$(nproc)" --target kiln kiln_cli >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  gcc -shared -fPIC -O1 -o /tmp/segv_trace.so "$root/scripts/diag/segv_trace.c" -ldl || exit 1
  # Which libstdc++ libkiln carries: the crash's frames named iostream code inside libkiln itself.
  echo "== toolchain: $(g++ --version | head -1); -lstdc++ is $(readlink -f "$(g++ -print-file-name=libstdc++.so)")"
  echo "libkiln needs: $(readelf -d "$traced/engine/libkiln.so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | paste -sd' ')"
  echo "libkiln defines $(nm -D --defined-only "$traced/engine/libkiln.so" | grep -cE ' (_Znwm|_ZNSi|_ZNSt6locale)') of operator new, istream and locale symbols:" \
    "$(nm -D --defined-only "$traced/engine/libkiln.so" | grep -E ' (_Znwm|_ZNSi10_M_extractIdEERSiRT_|_ZNSt6locale7classicEv)$' | paste -sd' ')"
  trace_run() {  # name, pytest arguments...
    local name=$1; shift
    local traces="/tmp/kiln-segv-$name"; rm -rf "$traces"; mkdir -p "$traces"
    echo "== $name: $* ($(date -u +%H:%M:%S))"
    # h200_cupy_tests is the plugin that imports kiln (KILN_CUPY=1 then routes CuPy) and writes each process's stats.
    local stats="/tmp/kiln-stats-$name"; rm -rf "$stats"; mkdir -p "$stats"
    (cd "$root/.carry/cupy_tests/tests" && KILN_LIBRARY="$traced/engine/libkiln.so" PYTHONPATH="$root/python:$root/scripts" \
      KILN_CUPY=1 KILN_CUPY_TESTS_STATS="$stats" KILN_PCH=auto LD_PRELOAD=/tmp/segv_trace.so SEGV_TRACE_DIR="$traces" \
      timeout "${KILN_PCHCRASH_TIMEOUT:-90}" python3 -m pytest -p no:faulthandler -p no:cacheprovider -p h200_cupy_tests \
      -q "$@" >"$out/pchcrash_$name.txt" 2>&1)
    echo "exit $?: $(tail -1 "$out/pchcrash_$name.txt"); $(ls "$traces" | wc -l) crash traces"
    (cd "$root/scripts" && python3 -c 'import sys, h200_cupy_tests as h; print("stats:", h.summed(sys.argv[1]))' "$stats")
    "$traced/tools/kiln" cache ls --pch 2>&1 | tail -3
    for f in $(ls "$traces"/* 2>/dev/null | head -2); do
      cp "$f" "$out/pchcrash_${name}_$(basename "$f")"
      echo "-- $f"; grep -v '^ADDR2LINE' "$f" | grep -v '^sp+' | head -30
      grep '^sp+' "$f" | grep -E 'libkiln|libnvrtc|libcuda' | head -24
      grep '^ADDR2LINE' "$f" | grep libkiln | sort -u | head -24 | while read -r _ image offset; do
        echo "$offset: $(addr2line -f -C -i -e "$image" "$offset" 2>/dev/null | paste -sd' ' | cut -c1-240)"
      done
    done
  }
  tests=cupy_tests/core_tests/test_bfloat16.py
  if [[ "${KILN_PCHCRASH_SMALL:-1}" == 1 ]]; then  # 0: only the 16-worker run below
    export KILN_CACHE_DIR=/tmp/kiln-pchcrash-w CUPY_CACHE_DIR=/tmp/cupy-pchcrash-w; rm -rf "$KILN_CACHE_DIR" "$CUPY_CACHE_DIR"
    trace_run W "$tests" -n 4
    export KILN_CACHE_DIR=/tmp/kiln-pchcrash-ab CUPY_CACHE_DIR=/tmp/cupy-pchcrash-ab; rm -rf "$KILN_CACHE_DIR" "$CUPY_CACHE_DIR"
    trace_run A "$tests" -k unary
    trace_run B "$tests" -k binary
  fi
  # F: the run that crashed on 2026-12-07 (all the files, 16 workers), where the smaller runs above did not.
  export KILN_CACHE_DIR=/tmp/kiln-pchcrash-f CUPY_CACHE_DIR=/tmp/cupy-pchcrash-f; rm -rf "$KILN_CACHE_DIR" "$CUPY_CACHE_DIR"
  [[ "${KILN_PCHCRASH_FULL:-1}" == 1 ]] && KILN_PCHCRASH_TIMEOUT=${KILN_PCHCRASH_FULL_TIMEOUT:-150} \
    trace_run F $(cd "$root/.carry/cupy_tests/tests" && find . -name 'test_*.py' | sort) -n 16
  exit 0
fi
# KILN_H200_ONLY=cupytests: CuPy's own kernel tests (run_cupy_tests) with kiln built here.
if [[ "${KILN_H200_ONLY:-}" == cupytests ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  export KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python"
  run_cupy_tests python3
  exit 0
fi
# KILN_H200_ONLY=program: cupy_bench's program workload (about 80 kernels, 1 in 5 CUB-based: a program's first run)
# with KILN_CUPY_BENCH_RUNS processes per cell (2 here), then cold_bench replaying its KILN_RECORD log.
if [[ "${KILN_H200_ONLY:-}" == program ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli cold_bench >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  echo "== cupy_bench --workload program"; rm -rf /tmp/kiln-cupy-program
  KILN_LIBRARY="$build/engine/libkiln.so" timeout "${KILN_CUPY_BENCH_TIMEOUT:-420}" python3 "$root/bench/cupy_bench.py" \
    --workload program --kiln "$build/tools/kiln" --runs "${KILN_CUPY_BENCH_RUNS:-2}" --parts "${KILN_CUPY_BENCH_PARTS:-1,2,3}" \
    --work /tmp/kiln-cupy-program --keep 2>&1 | tee "$out/cupy_program.txt"
  record=$(ls /tmp/kiln-cupy-program/*-manifest/cupy.jsonl 2>/dev/null | head -1)
  if [[ -n "$record" && "${KILN_COLD_BENCH:-1}" == 1 ]]; then
    cp "$record" "$out/cupy_program_requests.jsonl"
    echo "== cold_bench (the program's requests)"
    timeout 150 "$build/bench/cold_bench/cold_bench" --log "$record" --json "$out/cold_program.json" 2>&1 | tee "$out/cold_program.txt"
  fi
  exit 0
fi
# KILN_H200_ONLY=cold31: issue 31's figures in one call: the GPU tests, rtc_pch and include_resolve_ahead; the first
# request of a fresh process (cold_bench over .carry/first_request.jsonl, KILN_FIRST_ROUNDS times, 20: the median of
# the kiln / bare ratios); the program workload's cold cells (cupy_bench --workload program --cold-only --parts 2,
# 2 runs, KILN_COLD31_PROGRAM_RUNS); cold_bench over the program's recorded requests (.carry/cupy_program_requests.jsonl),
# each under a limit. KILN_COLD31_FIRST_ONLY=1 stops after the first request; KILN_FIRST_ROUNDS=0 leaves the first
# request out, KILN_COLD_BENCH=0 the cold_bench over the program's requests; KILN_COLD_MODES (bare,kiln-pch: about half
# the four modes' time) chooses its modes.
if [[ "${KILN_H200_ONLY:-}" == cold31 ]]; then
  gpu_tests=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \(gpu_[a-z_]*\).*/\1/p')
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli rtc_pch include_resolve_ahead cold_bench $gpu_tests \
    >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  (cd "$build" && ctest -R '^(gpu_|rtc_pch$|include_resolve_ahead$)' 2>&1 | tee "$out/ctest.log" | grep -E 'Test +#|tests passed|FAILED')
  if [[ -f "$root/.carry/first_request.jsonl" && "${KILN_FIRST_ROUNDS:-20}" != 0 ]]; then
    echo "== first request of a fresh process, ${KILN_FIRST_ROUNDS:-20} rounds"
    for i in $(seq "${KILN_FIRST_ROUNDS:-20}"); do
      "$build/bench/cold_bench/cold_bench" --log "$root/.carry/first_request.jsonl" --json "$out/first_$i.json" >/dev/null 2>&1
    done
    python3 - "$out" "${KILN_FIRST_ROUNDS:-20}" <<'PY' | tee "$out/first.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {}
for i in range(1, rounds + 1):
    try:
        data = json.load(open(f"{out}/first_{i}.json"))
    except OSError:
        continue
    for mode, children in data["runs"].items():
        request = (children[0] if isinstance(children, list) else children)["requests"][0]
        runs.setdefault(mode, []).append((request["wall_ns"] / 1e6, request["compile_ns"] / 1e6))
for mode, rows in runs.items():
    print(mode, "wall median %.1f ms (min %.1f, max %.1f)" % (statistics.median(w for w, _ in rows),
          min(w for w, _ in rows), max(w for w, _ in rows)),
          "compile median %.1f ms" % statistics.median(c for _, c in rows) if rows[0][1] else "")
for mode in ("kiln", "kiln-pch"):
    ratios = [a[0] / b[0] for a, b in zip(runs.get(mode, []), runs.get("bare", []))]
    if ratios:
        print(f"{mode} / bare: median of {len(ratios)} ratios {statistics.median(ratios):.3f}, mean "
              f"{statistics.mean(ratios):.3f}; sorted: {' '.join(f'{r:.2f}' for r in sorted(ratios))}")
PY
  fi
  [[ "${KILN_COLD31_FIRST_ONLY:-0}" == 1 ]] && exit 0  # the tests and the first request only
  echo "== cupy_bench --workload program --cold-only --parts 2 --runs ${KILN_COLD31_PROGRAM_RUNS:-2}"
  KILN_LIBRARY="$build/engine/libkiln.so" timeout "${KILN_CUPY_BENCH_TIMEOUT:-240}" python3 "$root/bench/cupy_bench.py" \
    --workload program --cold-only --parts 2 --runs "${KILN_COLD31_PROGRAM_RUNS:-2}" --kiln "$build/tools/kiln" --work /tmp/kiln-cupy-program 2>&1 \
    | tee "$out/cupy_program.txt" | grep -v 'said:'
  if [[ -f "$root/.carry/cupy_program_requests.jsonl" && "${KILN_COLD_BENCH:-1}" == 1 ]]; then
    echo "== cold_bench (the program's requests)"
    timeout "${KILN_COLD_TIMEOUT:-170}" "$build/bench/cold_bench/cold_bench" --log "$root/.carry/cupy_program_requests.jsonl" \
      --modes "${KILN_COLD_MODES:-bare,bare-pch,kiln,kiln-pch}" --json "$out/cold_program.json" 2>&1 \
      | tee "$out/cold_program.txt" | tail -30
  fi
  exit 0
fi
# KILN_H200_ONLY=pch48: issue 48's figures (stored precompiled headers) in one call, every ratio against bare NVRTC
# without PCH in the same call: the PCH tests (rtc_pch, rtc_pch_store) and the GPU tests; cold_bench --fresh 1 over
# the built-in CCCL set (every request in a fresh process; kiln-stored: its header set's PCH stored by an earlier
# process: "a new CUB kernel", "a small kernel"); over the program's recorded CuPy requests
# (.carry/cupy_program_requests.jsonl, or KILN_COLD_LOG), the same plus kiln, so that every kiln-stored binary is
# compared with KILN_PCH=0's; the first request of a fresh process with a stored PCH (.carry/first_request.jsonl,
# KILN_FIRST_ROUNDS rounds, 10: the median of the ratios); KILN_PCH48_CCCL=0 leaves the built-in set out;
# KILN_PCH48_TESTS=0 leaves the tests out; KILN_PCH48_CUPYTESTS=1 adds CuPy's kernel tests as shipped
# and through kiln (run_cupy_tests: 16 workers, empty caches).
if [[ "${KILN_H200_ONLY:-}" == pch48 ]]; then
  gpu_tests=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \(gpu_[a-z_]*\).*/\1/p')
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli rtc_pch rtc_pch_child rtc_pch_store cold_bench $gpu_tests \
    >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  if [[ "${KILN_PCH48_TESTS:-1}" == 1 ]]; then  # 0: leave the tests out (a call that only measures)
    echo "== ctest: GPU tests, rtc_pch, rtc_pch_store"
    (cd "$build" && timeout 300 ctest -R '^(gpu_|rtc_pch$|rtc_pch_store$)' --output-on-failure 2>&1 | tee "$out/ctest.log" \
      | grep -E 'Test +#|tests passed|FAILED')
  fi
  cold="$build/bench/cold_bench/cold_bench"
  if [[ "${KILN_PCH48_CCCL:-1}" == 1 ]]; then  # 0: leave the built-in set out (measured 2026-12-07 16:20)
    echo "== cold_bench --fresh 1, built-in CCCL set (6 small, 6 CUB), bare vs kiln-stored"
    timeout 240 "$cold" --small 6 --cub 6 --fresh 1 --modes bare,kiln-stored --json "$out/pch48_cccl.json" 2>&1 \
      | tee "$out/pch48_cccl.txt" | tail -25
  fi
  log="${KILN_COLD_LOG:-$root/.carry/cupy_program_requests.jsonl}"
  first="$root/.carry/first_request.jsonl"
  if [[ ! -f "$log" ]] && python3 -c "import cupy" 2>/dev/null; then
    # No recorded log carried: record the program workload's requests here (one kiln run under KILN_RECORD, part 3
    # of cupy_bench), and take its first request as the fresh process's first.
    echo "== recording the program workload's requests (cupy_bench --workload program --parts 3 --runs 1)"
    rm -rf /tmp/kiln-cupy-program
    KILN_LIBRARY="$build/engine/libkiln.so" timeout 240 python3 "$root/bench/cupy_bench.py" --workload program \
      --kiln "$build/tools/kiln" --runs 1 --parts 3 --work /tmp/kiln-cupy-program --keep >/tmp/kiln-pch48-record.txt 2>&1
    log=$(ls /tmp/kiln-cupy-program/*-manifest/cupy.jsonl 2>/dev/null | head -1)
    [[ -n "$log" ]] && { echo "recorded $(wc -l <"$log") requests"; head -1 "$log" >/tmp/kiln-first-request.jsonl; first=/tmp/kiln-first-request.jsonl; } \
      || { echo "no log recorded"; tail -5 /tmp/kiln-pch48-record.txt; log=/nonexistent; }
  fi
  if [[ -f "$log" ]]; then
    echo "== cold_bench --fresh 1, CuPy's requests ($log), bare vs kiln vs kiln-stored"
    timeout "${KILN_PCH48_COLD_TIMEOUT:-420}" "$cold" --log "$log" --fresh 1 --modes bare,kiln,kiln-stored \
      --json "$out/pch48_cupy.json" 2>&1 | tee "$out/pch48_cupy.txt" | tail -25
  fi
  if [[ -f "$first" && "${KILN_FIRST_ROUNDS:-10}" != 0 ]]; then
    echo "== first request of a fresh process with a stored PCH, ${KILN_FIRST_ROUNDS:-10} rounds"
    for i in $(seq "${KILN_FIRST_ROUNDS:-10}"); do
      "$cold" --log "$first" --modes bare,kiln-stored --json "/tmp/pch48_first_$i.json" \
        >/dev/null 2>&1
    done
    python3 - /tmp "${KILN_FIRST_ROUNDS:-10}" <<'PY' | tee "$out/pch48_first.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
walls = {}
for i in range(1, rounds + 1):
    try:
        data = json.load(open(f"{out}/pch48_first_{i}.json"))
    except OSError:
        continue
    for mode, children in data["runs"].items():
        walls.setdefault(mode, []).append(children[0]["requests"][0]["wall_ns"] / 1e6)
for mode, values in walls.items():
    print(mode, "wall median %.1f ms (min %.1f, max %.1f)" % (statistics.median(values), min(values), max(values)))
ratios = [a / b for a, b in zip(walls.get("kiln-stored", []), walls.get("bare", []))]
if ratios:
    print(f"kiln-stored / bare: median of {len(ratios)} ratios {statistics.median(ratios):.3f}; sorted: "
          f"{' '.join(f'{r:.2f}' for r in sorted(ratios))}")
PY
  fi
  if [[ "${KILN_PCH48_CUPYTESTS:-0}" == 1 ]]; then
    export KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python"
    rm -rf "$KILN_CACHE_DIR"  # empty caches: the 16 workers share one, and make and use its PCHs
    KILN_PCH=${KILN_PCH:-auto} run_cupy_tests python3
  fi
  exit 0
fi
# KILN_H200_ONLY=programs: CuPy's `program` then `second-program` (bench/cupy_bench.py's workloads, one child process
# each), through kiln over one cache (k1), then as shipped over one CuPy cache (c): each child's compile time, its
# PCHs made / used, and, after each kiln child, `kiln cache ls --pch` and `kiln cache stats` (which header sets have a
# stored PCH, the share's use); KILN_RECORD logs and KILN_LOG=debug logs beside them in $out/programs.
# KILN_PROGRAMS_PCH0=1 adds the kiln pair with KILN_PCH=0 (k0). Then the GPU tests and rtc_pch_store first, and
# KILN_PCH48_CUPYTESTS=1 CuPy's kernel tests (run_cupy_tests).
if [[ "${KILN_H200_ONLY:-}" == programs ]]; then
  gpu_tests=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \(gpu_[a-z_]*\).*/\1/p')
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli rtc_pch_store rtc_pch_child $gpu_tests >"$out/build.log" 2>&1 \
    || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  (cd "$build" && timeout 240 ctest -R '^(gpu_|rtc_pch_store$)' --output-on-failure 2>&1 | tee "$out/ctest.log" \
    | grep -E 'Test +#|tests passed|FAILED')
  export KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python"
  work=/tmp/kiln-programs; rm -rf "$work"; mkdir -p "$work" "$out/programs"
  program_child() {  # name workload mode cache [VAR=value...]
    local name=$1 workload=$2 mode=$3 cache=$4 start rc; shift 4
    start=$(date +%s%N)
    env "$@" KILN_RECORD="$work/$name.jsonl" CUPY_CACHE_DIR="$work/cupy-$cache" KILN_CACHE_DIR="$work/kiln-$cache" \
      KILN_LOG=debug timeout 200 python3 "$root/bench/cupy_bench.py" --child --mode "$mode" --out "$work/$name" \
      --report "$out/programs/$name.json" --workload "$workload" >"$out/programs/$name.stdout" 2>"$out/programs/$name.log"
    rc=$?
    python3 - "$out/programs/$name.json" "$name ($workload, $mode, cache $cache): exit $rc, $(( ($(date +%s%N) - start) / 1000000 )) ms" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(print(sys.argv[2], "no report:", e))
engine = (r.get("kiln") or {}).get("engine") or {}
print(sys.argv[2], "compile %.2f s, workload %.2f s, %d calls, PCHs made %s used %s" % (r["compile_seconds"],
      r["workload_seconds"], r["calls"], engine.get("pch_made", "-"), engine.get("pch_used", "-")))
PY
    if [[ $mode == kiln ]]; then
      KILN_CACHE_DIR="$work/kiln-$cache" "$build/tools/kiln" cache ls --pch >"$out/programs/$name.pch.txt" 2>&1
      KILN_CACHE_DIR="$work/kiln-$cache" "$build/tools/kiln" cache stats 2>&1 | tee "$out/programs/$name.stats.txt" \
        | grep -E "precompiled hdrs|header sets"
    fi
  }
  program_child p1 program kiln k1
  program_child p2 second-program kiln k1
  if [[ "${KILN_PROGRAMS_PCH0:-0}" == 1 ]]; then
    program_child q1 program kiln k0 KILN_PCH=0
    program_child q2 second-program kiln k0 KILN_PCH=0
  fi
  program_child c1 program cupy c
  program_child c2 second-program cupy c
  cp "$work"/*.jsonl "$out/programs/" 2>/dev/null
  if [[ "${KILN_PCH48_CUPYTESTS:-0}" == 1 ]]; then KILN_CUPY_TESTS_MODES="kiln plain" run_cupy_tests python3; fi
  exit 0
fi
# KILN_H200_ONLY=include: the include-folder benchmarks (include_bench; CuPy's disk hit vs kiln's).
include_benches() {
  echo "== include_bench (CUB + libcu++ with --toolkit-includes)"
  "$build/bench/include_bench/include_bench" --runs 5 --children 30 | tee "$out/include_bench.txt"
  if python3 -c "import cupy" 2>/dev/null; then
    echo "== CuPy disk hit vs kiln (CuPy-style kernel, CuPy's include folders)"
    python3 "$root/bench/include_bench/cupy_disk_hit.py" "$build/bench/include_bench/include_bench" --children 30 \
      | tee "$out/cupy_disk_hit.txt"
  fi
}
if [[ "${KILN_H200_ONLY:-}" == include ]]; then
  cmake --build "$build" -j"$(nproc)" --target include_bench kiln_cli >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  include_benches
  exit 0
fi
# KILN_H200_ONLY=cupy: the GPU tests, then CuPy with and without kiln.cupy (bench/cupy_bench.py:
# outputs bit for bit, kernel preparation cold and warm, KILN_RECORD + kiln prewarm --manifest).
if [[ "${KILN_H200_ONLY:-}" == cupy ]]; then
  gpu_tests=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \(gpu_[a-z_]*\).*/\1/p')
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli $gpu_tests >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  echo "== ctest -L gpu"; (cd "$build" && ctest -L gpu --output-on-failure 2>&1 | tail -12)
  echo "== cupy_bench"
  KILN_LIBRARY="$build/engine/libkiln.so" timeout "${KILN_CUPY_BENCH_TIMEOUT:-540}" python3 "$root/bench/cupy_bench.py" \
    --kiln "$build/tools/kiln" --runs "${KILN_CUPY_BENCH_RUNS:-9}" --work /tmp/kiln-cupy-bench --keep 2>&1 | tee "$out/cupy_bench.txt"
  exit 0
fi
# KILN_H200_ONLY=check: the GPU tests and the tests of what the compilers may open (include_reach,
# system_third_probe, capi_c) against the real driver, then cupy_bench (KILN_CUPY_BENCH_RUNS, 3 here).
if [[ "${KILN_H200_ONLY:-}" == check ]]; then
  gpu_tests=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \(gpu_[a-z_]*\).*/\1/p')
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli include_reach system_third_probe capi_c $gpu_tests \
    >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  echo "== ctest -L gpu"; (cd "$build" && ctest -L gpu --output-on-failure 2>&1 | tee "$out/ctest_gpu.log" | tail -12)
  echo "== ctest (what the compilers may open)"
  (cd "$build" && ctest -R '^(include_reach|system_third_probe|capi_c)$' --output-on-failure 2>&1 | grep -E 'Test +#|tests passed|FAILED')
  echo "== cupy_bench"
  KILN_LIBRARY="$build/engine/libkiln.so" timeout "${KILN_CUPY_BENCH_TIMEOUT:-400}" python3 "$root/bench/cupy_bench.py" \
    --kiln "$build/tools/kiln" --runs "${KILN_CUPY_BENCH_RUNS:-3}" --work /tmp/kiln-cupy-bench --keep 2>&1 | tee "$out/cupy_bench.txt"
  exit 0
fi
# KILN_H200_ONLY=round: the GPU tests, the PCH tests, launch_bench twice and include_bench (the request path and
# the include folders after a restructuring), then the cold path: cold_bench over the toolkit's CCCL, cupy_bench
# (KILN_CUPY_BENCH_RUNS, 3 here; its part 3 records CuPy's requests with KILN_RECORD) and cold_bench replaying
# that record (CuPy's own requests, per request: bare NVRTC, bare NVRTC + PCH, kiln, kiln + PCH).
# KILN_H200_STEP=check | cold runs one half (each fits one 10-minute command); tests: the check half's tests alone.
if [[ "${KILN_H200_ONLY:-}" == round ]]; then
  gpu_tests=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \(gpu_[a-z_]*\).*/\1/p')
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli rtc_pch launch_bench include_bench cold_bench $gpu_tests \
    >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  if [[ "${KILN_H200_STEP:-check}" == check || "${KILN_H200_STEP:-}" == tests ]]; then
    echo "== ctest -L gpu, rtc_pch"
    (cd "$build" && ctest -L gpu -R '^(gpu_|rtc_pch)' --output-on-failure 2>&1 | tee "$out/ctest_gpu.log" | grep -E 'Test +#|tests passed|FAILED')
    (cd "$build" && ctest -R '^rtc_pch$' --output-on-failure 2>&1 | grep -E 'Test +#|tests passed|FAILED')
    "$build/tools/kiln" devices | tee "$out/devices.txt"
    [[ "${KILN_H200_STEP:-}" == tests ]] && exit 0
    for run in 1 2; do echo "== launch_bench (run $run)"; "$build/bench/launch_bench/launch_bench" | tee "$out/launch_bench_$run.txt"; done
    echo "== include_bench"; "$build/bench/include_bench/include_bench" --runs 5 --children 30 | tee "$out/include_bench.txt"
    exit 0
  fi
  echo "== cold_bench (the toolkit's CCCL)"
  timeout 200 "$build/bench/cold_bench/cold_bench" --small 24 --cub 6 --json "$out/cold_cccl.json" 2>&1 | tee "$out/cold_cccl.txt"
  echo "== cupy_bench"; rm -rf /tmp/kiln-cupy-bench
  KILN_LIBRARY="$build/engine/libkiln.so" timeout "${KILN_CUPY_BENCH_TIMEOUT:-240}" python3 "$root/bench/cupy_bench.py" \
    --kiln "$build/tools/kiln" --runs "${KILN_CUPY_BENCH_RUNS:-3}" --work /tmp/kiln-cupy-bench --keep 2>&1 | tee "$out/cupy_bench.txt"
  record=$(ls /tmp/kiln-cupy-bench/*-manifest/cupy.jsonl 2>/dev/null | head -1)
  if [[ -n "$record" ]]; then
    cp "$record" "$out/cupy_requests.jsonl"
    echo "== cold_bench (CuPy's own requests, from $record)"
    timeout 200 "$build/bench/cold_bench/cold_bench" --log "$record" --json "$out/cold_cupy.json" 2>&1 | tee "$out/cold_cupy.txt"
  fi
  exit 0
fi
# KILN_H200_ONLY=cupydiag: single cupy_bench children with KILN_LOG=debug (kiln cold, kiln warm), a clean
# kiln warm child and a CuPy warm child; their reports and logs land in the output folder.
if [[ "${KILN_H200_ONLY:-}" == cupydiag ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  diag=/tmp/kiln-cupy-diag; rm -rf "$diag"; mkdir -p "$diag"
  child() {  # mode label cupy_cache kiln_cache [KILN_LOG]
    mkdir -p "$diag/$2"
    env KILN_LIBRARY="$build/engine/libkiln.so" PYTHONPATH="$root/python" CUPY_CACHE_DIR="$3" KILN_CACHE_DIR="$4" \
      KILN_LOG="${5:-warn}" python3 "$root/bench/cupy_bench.py" --child --mode "$1" --out "$diag/$2" \
      --report "$out/$2.json" 2>"$out/$2.log"
    echo "$2: exit $?, $(wc -l <"$out/$2.log") log lines"
  }
  child kiln kiln-cold "$diag/c1" "$diag/k1" debug
  child kiln kiln-warm-debug "$diag/c1" "$diag/k1" debug
  child kiln kiln-warm "$diag/c1" "$diag/k1"
  child kiln kiln-warm2 "$diag/c1" "$diag/k1"
  child cupy cupy-cold "$diag/c2" "$diag/k2"
  child cupy cupy-warm "$diag/c2" "$diag/k2"
  child cupy cupy-warm2 "$diag/c2" "$diag/k2"
  # The device returns a handful of files: the reports and logs travel as one archive.
  tar czf "$out/cupydiag.tgz" -C "$out" --remove-files $(cd "$out" && ls *.json *.log | grep -v -e build.log -e configure.log)
  exit 0
fi
# One `kiln prewarm -j 16` of the 64 cli_bench requests, each progress line time-stamped on arrival.
timeline() {
  local variants=(); for v in 1 2 3 4 5 6 7 8; do variants+=("--option-set=-DKILN_BENCH_VARIANT=$v"); done
  echo "== timeline: kiln prewarm -j 16, 64 requests"
  KILN_LOG=debug python3 "$root/.carry/timeline.py" "$build/tools/kiln" 16 "${variants[@]}" 2>&1 \
    | grep -v "debug: compiled\|debug: put\|info: no GPU\|worker .*: ready\|no more work" \
    | awk 'NR<=4 || /\[(1|2|8|16|32|48|60|64)\/64\]/ || /prewarm:|exit/' | cut -c1-150
}
if [[ "${KILN_H200_ONLY:-}" == timeline ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln_cli >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  timeline; timeline
  exit 0
fi
if [[ "${KILN_H200_ONLY:-}" == prewarm ]]; then
  cmake --build "$build" -j"$(nproc)" --target kiln_cli cli_bench >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  nproc; uptime
  for round in 1 2 3; do
    timeout 150 "$build/bench/cli_bench/cli_bench" prewarm --jobs 1,16 --variants 8 --target sm_90 \
      --repeat 5 --kiln "$build/tools/kiln" 2>&1 | tee "$out/cli_bench_$round.txt" | tail -2
  done
  exit 0
fi
# The read floor (read vs read + XXH3 vs mapped reads) of files shaped like cache_bench's two entries.
read_floor() {
  head -c 512986 /dev/urandom >"$build/floor_500k.bin"
  head -c 6098 /dev/urandom >"$build/floor_5k.bin"
  for f in floor_500k floor_5k; do "$build/bench/read_floor/read_floor" "$build/$f.bin" 2000 | tee -a "$out/read_floor.txt"; done
}
if [[ "${KILN_H200_ONLY:-}" == floor ]]; then
  cmake --build "$build" -j"$(nproc)" --target read_floor cache_bench hash_dispatch >"$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
  "$build/bench/hash_dispatch/hash_dispatch" | tee "$out/hash_dispatch.txt"
  for round in 1 2; do read_floor; done
  timeout 120 "$build/bench/cache_bench/cache_bench" --entries 2000 2>&1 | tee "$out/cache_bench.txt" | head -12
  exit 0
fi
targets=(kiln_cli hello expr_jit launch_bench compile_bench include_bench)
for t in gpu_kernels gpu_threads gpu_disk_reuse gpu_errors gpu_multi_device capi_c cli_bench cache_bench read_floor hash_dispatch cache_entry_test \
         cache_store_test rtc_compiler_probe rtc_probe_child; do
  grep -q "^$t:" <(cmake --build "$build" --target help 2>/dev/null | sed 's/^\.\.\. //; s/ .*//; s/$/:/') && targets+=("$t")
done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" -- -k >"$out/build.log" 2>&1 || { echo "BUILD FAILED (continuing with what built):"; grep -E "error" -A3 "$out/build.log" | head -40; }
echo "== ctest -L gpu"
(cd "$build" && ctest -L gpu --output-on-failure 2>&1 | tee "$out/ctest_gpu.log" | tail -25)
(cd "$build" && ctest -R '^(capi_c|cache_entry_test|cache_store_test|rtc_compiler_probe)$' --output-on-failure 2>&1 | tail -12)
echo "== CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) avx512f: $(grep -c -m1 avx512f /proc/cpuinfo)"
echo "== hello"; "$build/examples/hello/hello"
echo "== expr_jit (first run, then second run)"; rm -rf /tmp/kiln-expr-cache
KILN_CACHE_DIR=/tmp/kiln-expr-cache "$build/examples/expr_jit/expr_jit" | tail -12
KILN_CACHE_DIR=/tmp/kiln-expr-cache "$build/examples/expr_jit/expr_jit" | tail -6
echo "== python"; KILN_LIBRARY="$build/engine/libkiln.so" python3 "$root/examples/python/demo.py" 2>&1 | tail -12
echo "== kiln devices"; "$build/tools/kiln" devices
for run in 1 2; do echo "== launch_bench (run $run)"; "$build/bench/launch_bench/launch_bench" | tee "$out/launch_bench_$run.txt"; done
echo "== compile_bench (CUDA_CACHE_DISABLE=1)"; CUDA_CACHE_DISABLE=1 "$build/bench/compile_bench/compile_bench" --lanes nvrtc --runs 7 | tee "$out/compile_bench.txt"
if [[ -x "$build/bench/cli_bench/cli_bench" ]]; then
  echo "== cli_bench prewarm scaling"
  uptime
  timeout 300 "$build/bench/cli_bench/cli_bench" prewarm --jobs 1,8,16 --variants 8 --target sm_90 --workers process,thread \
    --repeat 3 --kiln "$build/tools/kiln" 2>&1 | tee "$out/cli_bench.txt" | tail -20
  timeline
fi
if [[ -x "$build/bench/cache_bench/cache_bench" ]]; then
  echo "== cache_bench (memory tier on a GPU)"; timeout 120 "$build/bench/cache_bench/cache_bench" --entries 2000 2>&1 | tee "$out/cache_bench.txt" | tail -25
fi
if [[ -x "$build/bench/read_floor/read_floor" ]]; then echo "== read_floor"; read_floor; fi
if [[ -x "$build/bench/include_bench/include_bench" ]]; then include_benches; fi
if [[ -x "$build/bench/hash_dispatch/hash_dispatch" ]]; then
  echo "== hash_dispatch"; "$build/bench/hash_dispatch/hash_dispatch" | tee "$out/hash_dispatch.txt"
fi
