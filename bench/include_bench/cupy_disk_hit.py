#!/usr/bin/env python3
"""A fresh process's disk hit of a CuPy-style kernel that includes CuPy's headers and CCCL: CuPy 14's own
cache vs kiln's, side by side in one run (needs CuPy and a GPU; run on the H200).

CuPy side: each child process imports CuPy (outside the clock), then times the compile-with-cache call
(cupy.cuda.compiler._compile_with_cache_cuda, wrapped) that RawModule.get_function makes, with CuPy's
cache warm. kiln side: include_bench --source with the same source and the same include folders
(taken from the options CuPy passed), which times Engine::kernel in fresh processes with kiln's cache
warm (see include_bench.cpp). Prints both medians and the ratio.

    cupy_disk_hit.py INCLUDE_BENCH [--children N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SOURCE = r'''
#include <cupy/complex.cuh>
#include <cub/block/block_reduce.cuh>
#include <cuda/std/tuple>
extern "C" __global__ void k(const float* in, float* out) {
  using R = cub::BlockReduce<float, 128>;
  __shared__ typename R::TempStorage t;
  thrust::complex<float> z(in[threadIdx.x], 1.0f);
  cuda::std::tuple<float, float> p{abs(z), 2.0f};
  float v = R(t).Sum(cuda::std::get<0>(p) * cuda::std::get<1>(p));
  if (threadIdx.x == 0) *out = v;
}
'''

CHILD = r'''
import json, sys, time
import cupy
from cupy.cuda import compiler
seen = {}
original = compiler._compile_with_cache_cuda
def timed(source, options, *args, **kwargs):
    t0 = time.perf_counter()
    try:
        return original(source, options, *args, **kwargs)
    finally:
        seen["ms"] = seen.get("ms", 0.0) + (time.perf_counter() - t0) * 1e3
        seen["options"] = list(options)
compiler._compile_with_cache_cuda = timed
t0 = time.perf_counter()
cupy.RawModule(code=sys.argv[1], options=("-std=c++17",)).get_function("k")
seen["total_ms"] = (time.perf_counter() - t0) * 1e3
print(json.dumps(seen))
'''


def cupy_child(env):
    out = subprocess.run([sys.executable, "-c", CHILD, SOURCE], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("include_bench")
    parser.add_argument("--children", type=int, default=30)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="kiln-cupy-hit-")
    env = dict(os.environ, CUPY_CACHE_DIR=os.path.join(scratch, "cupy-cache"))
    first = cupy_child(env)  # compiles and fills CuPy's cache
    folders = [o[2:] for o in first["options"] if o.startswith("-I")]
    print(f"CuPy compile (cold): {first['ms']:.1f} ms; include folders CuPy passed: {len(folders)}")
    cupy_ms = [cupy_child(env)["ms"] for _ in range(args.children)]

    source = os.path.join(scratch, "cupy_style.cu")
    with open(source, "w") as f:
        f.write(SOURCE)
    command = [args.include_bench, "--runs", "1", "--children", str(args.children), "--source", source, "--kernel", "k"]
    for folder in folders:
        command += ["-I", folder]
    bench = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    print(bench)
    kiln_us = None
    for line in bench.splitlines():
        if line.startswith("| kiln: Engine::kernel"):
            kiln_us = float(line.split("**")[1])
    if kiln_us is None:
        sys.exit("cupy_disk_hit: include_bench printed no kiln disk-hit row (no GPU?)")
    q = statistics.quantiles(cupy_ms, n=4)
    median = statistics.median(cupy_ms)
    print(f"## CuPy 14 disk hit vs kiln's, fresh processes, {args.children} per side\n")
    print("| side | p25 / **median** / p75 |\n|---|---|")
    print(f"| CuPy: _compile_with_cache_cuda (warm CuPy cache) | {q[0]:.2f} / **{median:.2f}** / {q[2]:.2f} ms |")
    print(f"| kiln: Engine::kernel (warm kiln cache, same source and include folders) | **{kiln_us / 1e3:.3f}** ms |")
    print(f"\nCuPy / kiln: **{median * 1e3 / kiln_us:.1f}x**")


if __name__ == "__main__":
    main()
