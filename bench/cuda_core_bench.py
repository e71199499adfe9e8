#!/usr/bin/env python3
"""Warm starts through NVIDIA's Python compile API, with and without kiln (issue 32's two benchmarks).

Needs a GPU, cuda.core (1.2.x), libkiln (KILN_LIBRARY or a build of this repository) and, for part 2,
numba-cuda. Every measurement is a fresh Python process; "warm" means its caches were filled by an earlier
process. No network.

    python3 bench/cuda_core_bench.py [--runs N] [--parts 1,2] [--work DIR]

 1. cuda.core `Program.compile("cubin")` of a source that includes a header from an include folder and
    CUB (through CCCL): the time from Program() to the ObjectCode, in a warm process, for
      - `plain`: cuda.core without a cache (what every process pays without one);
      - `filestream`: cuda.core's FileStreamProgramCache. Its key refuses include_path unless the caller
        hashes the headers himself (extra_digest): the bench does what a careful user must, a digest of every
        file under the include folder (CCCL's headers come from the toolkit and are keyed by its version);
      - `kiln`: kiln.cuda_core.enable(); the header's content is in kiln's key by itself.
    Then the header is edited: which modes compile again (a cache that did not key it would serve the old
    binary: the bench says so).
 2. numba-cuda: a kernel that calls a device function from a linked `.cu` file that uses CCCL (numba-cuda
    compiles the file through cuda.core's Program each time the kernel is compiled): the first launch's
    time in a warm process, numba-cuda alone vs with kiln.cuda_core (its compile of the file becomes a
    disk hit), and the result checked.

Exit status 0 when every check passed, 1 when one failed, 2 when something needed is missing.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

SOURCE = r'''
#include <scale.h>
#include <cub/block/block_reduce.cuh>
extern "C" __global__ void block_sums(const float* in, float* out) {
  using Reduce = cub::BlockReduce<float, 128>;
  __shared__ typename Reduce::TempStorage storage;
  float total = Reduce(storage).Sum(in[blockIdx.x * 128 + threadIdx.x]);
  if (threadIdx.x == 0) out[blockIdx.x] = total * SCALE;
}
'''

# Part 1's child: one compile, its time and what served it, as one JSON line.
CORE_CHILD = textwrap.dedent('''
    import hashlib, json, os, sys, time
    mode, include, cache_dir, arch = sys.argv[1:5]
    source = open(sys.argv[5]).read()
    import cuda.core as core
    if mode == "kiln":
        import kiln.cuda_core
        kiln.cuda_core.enable()
    core.Device().set_current()
    start = time.perf_counter()
    # cuda.core hands NVRTC no folder of its own: CUB comes from the toolkit's CCCL folder, named as a user must.
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    toolkit = [os.path.join(cuda_home, "include", "cccl"), os.path.join(cuda_home, "include")]
    options = core.ProgramOptions(arch=arch, include_path=[include] + [d for d in toolkit if os.path.isdir(d)],
                                  std="c++17")
    program = core.Program(source, "c++", options)
    how = mode
    if mode == "filestream":
        from cuda.core.utils import FileStreamProgramCache, make_program_cache_key
        digest = hashlib.sha256()
        for root, dirs, files in sorted(os.walk(include)):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                digest.update(path.encode() + b"\\0" + open(path, "rb").read())
        key = make_program_cache_key(code=source, code_type="c++", options=options, target_type="cubin",
                                     extra_digest=digest.digest())
        cache = FileStreamProgramCache(cache_dir)
        code = cache.get(key)
        how = "filestream hit" if code is not None else "filestream miss"
        if isinstance(code, (bytes, bytearray, memoryview)):  # cuda.core 1.2's caches keep the code's bytes alone
            code = core.ObjectCode.from_cubin(bytes(code))
        if code is None:
            code = program.compile("cubin")
            cache[key] = code
    else:
        code = program.compile("cubin")
    seconds = time.perf_counter() - start
    kernel = code.get_kernel("block_sums")
    if mode == "kiln":
        how = "kiln " + ",".join(f"{k}={v}" for k, v in sorted(kiln.cuda_core.stats()["routed"].items()))
    print(json.dumps({"seconds": seconds, "how": how, "bytes": len(bytes(code.code)),
                      "digest": hashlib.sha256(bytes(code.code)).hexdigest()[:16]}))
''')

CU_FILE = r'''
#include <cuda/std/cmath>
#include <cub/warp/warp_reduce.cuh>
// numba's calling convention for a device function: the status is returned, the result written through the
// first argument.
extern "C" __device__ int warp_norm(float* result, float x) {
  using Reduce = cub::WarpReduce<float>;
  __shared__ typename Reduce::TempStorage storage;
  float total = Reduce(storage).Sum(x * x);
  *result = cuda::std::sqrt(__shfl_sync(0xffffffffu, total, 0));
  return 0;
}
'''

# Part 2's child: define the kernel, launch it once (numba compiles it and the linked file), as one JSON line.
NUMBA_CHILD = textwrap.dedent('''
    import json, sys, time
    mode, cu_path = sys.argv[1:3]
    if mode == "kiln":
        import kiln.cuda_core
        kiln.cuda_core.enable()
    import numpy
    if not hasattr(numpy, "row_stack"):
        # numba-cuda 0.30 registers an overload of numpy.row_stack when its CUDA target loads; a recent NumPy has
        # no row_stack any more (vstack is what it was), so without this numba-cuda cannot compile a kernel.
        numpy.row_stack = numpy.vstack
    from numba import cuda
    start = time.perf_counter()
    warp_norm = cuda.declare_device("warp_norm", "float32(float32)", link=[cu_path])

    @cuda.jit
    def kernel(x, out):
        out[cuda.threadIdx.x] = warp_norm(x[cuda.threadIdx.x])

    x = cuda.to_device(numpy.arange(32, dtype=numpy.float32))
    out = cuda.device_array(32, dtype=numpy.float32)
    kernel[1, 32](x, out)
    cuda.synchronize()
    seconds = time.perf_counter() - start
    value = float(out.copy_to_host()[0])
    how = mode
    if mode == "kiln":
        how = "kiln " + json.dumps(kiln.cuda_core.stats()["routed"], sort_keys=True)
    print(json.dumps({"seconds": seconds, "how": how, "value": value}))
''')


def run_child(script, args, env):
    done = subprocess.run([sys.executable, "-c", script] + args, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"child failed (exit {done.returncode}): {done.stdout[-2000:]}{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def part_cuda_core(work, runs, env, arch):
    print("\n== 1. cuda.core Program.compile with include_path, warm processes (ms from Program() to ObjectCode)")
    include = os.path.join(work, "include")
    os.makedirs(include, exist_ok=True)
    with open(os.path.join(include, "scale.h"), "w") as f:
        f.write("#define SCALE 2.0f\n")
    source_path = os.path.join(work, "block_sums.cu")
    with open(source_path, "w") as f:
        f.write(SOURCE)
    ok = True
    rows = {}
    for mode in ("plain", "filestream", "kiln"):
        cache_dir = os.path.join(work, f"cache-{mode}")
        child_env = dict(env, KILN_CACHE_DIR=os.path.join(work, "kiln-cache"))
        fill = run_child(CORE_CHILD, [mode, include, cache_dir, arch, source_path], child_env)
        warm = [run_child(CORE_CHILD, [mode, include, cache_dir, arch, source_path], child_env) for _ in range(runs)]
        rows[mode] = (fill, warm)
        print(f"  {mode:<10} first {fill['seconds'] * 1e3:8.1f} ms ({fill['how']}); warm median "
              f"{statistics.median(w['seconds'] for w in warm) * 1e3:8.1f} ms over {runs} ({warm[-1]['how']})")
    digests = {mode: rows[mode][1][-1]["digest"] for mode in rows}
    if len(set(digests.values())) != 1:
        print(f"  MISMATCH: the cubins differ between modes: {digests}")
        ok = False
    else:
        print(f"  all modes gave the same cubin ({rows['plain'][1][-1]['bytes']} bytes)")
    with open(os.path.join(include, "scale.h"), "w") as f:
        f.write("#define SCALE 3.0f\n")
    for mode in ("filestream", "kiln"):
        child_env = dict(env, KILN_CACHE_DIR=os.path.join(work, "kiln-cache"))
        edited = run_child(CORE_CHILD, [mode, include, os.path.join(work, f"cache-{mode}"), arch, source_path], child_env)
        fresh = edited["digest"] != digests[mode]
        print(f"  after an edit of scale.h, {mode}: {edited['how']}, {edited['seconds'] * 1e3:.1f} ms, "
              f"{'a new binary' if fresh else 'THE OLD BINARY (stale)'}")
        ok &= fresh
    return ok


def part_numba(work, runs, env):
    print("\n== 2. numba-cuda: a kernel calling a device function from a linked .cu file using CCCL, warm processes "
          "(ms from declare_device to the first launch's end)")
    cu_path = os.path.join(work, "warp_norm.cu")
    with open(cu_path, "w") as f:
        f.write(CU_FILE)
    expected = float(sum(i * i for i in range(32)) ** 0.5)
    ok = True
    child_env = dict(env, KILN_CACHE_DIR=os.path.join(work, "kiln-cache-numba"))
    for mode in ("plain", "kiln"):
        fill = run_child(NUMBA_CHILD, [mode, cu_path], child_env)
        warm = [run_child(NUMBA_CHILD, [mode, cu_path], child_env) for _ in range(runs)]
        values = {round(w["value"], 3) for w in warm + [fill]}
        good = values == {round(expected, 3)}
        ok &= good
        print(f"  {mode:<6} first {fill['seconds'] * 1e3:8.1f} ms ({fill['how']}); warm median "
              f"{statistics.median(w['seconds'] for w in warm) * 1e3:8.1f} ms over {runs} ({warm[-1]['how']}); "
              f"result {'right' if good else f'WRONG {values} (expected {expected:.3f})'}")
    return ok


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="warm processes per mode (default 5)")
    parser.add_argument("--parts", default="1,2")
    parser.add_argument("--work", help="work folder (default: a new temporary folder)")
    parser.add_argument("--arch", default=None, help="target (default: the GPU's, e.g. sm_90)")
    args = parser.parse_args(argv)
    try:
        import cuda.core as core
    except ImportError as error:
        print(f"cuda_core_bench: cannot run: cuda.core is not importable ({error})", file=sys.stderr)
        return 2
    env = dict(os.environ)
    try:
        import kiln  # noqa: F401
    except ImportError:
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python")] + [p for p in [env.get("PYTHONPATH")] if p])
    arch = args.arch or "sm_" + "".join(str(v) for v in core.Device().compute_capability)
    work = args.work or tempfile.mkdtemp(prefix="kiln-cuda-core-bench-")
    print(f"cuda.core {core.__version__}, target {arch}, work folder {work}")
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    ok = True
    if "1" in parts:
        ok &= part_cuda_core(work, args.runs, env, arch)
    if "2" in parts:
        try:
            import numba_cuda  # noqa: F401
        except ImportError:
            print("\n== 2. skipped: numba-cuda is not importable")
        else:
            ok &= part_numba(work, args.runs, env)
    print("\nresult: " + ("every check passed" if ok else "a check FAILED (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
