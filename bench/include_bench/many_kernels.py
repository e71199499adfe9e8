#!/usr/bin/env python3
"""A program's worth of kernels over one header tree, through kiln's Python package: the time kiln's
compile call takes per kernel in a fresh process with the cache warm (no CuPy, no GPU needed).

This is the shape of a CuPy program (bench/cupy_bench.py): every kernel includes the same big tree
(here the CUDA toolkit's CCCL: CUB and libcu++) through the same include folders, so each request has
its own dependency manifest naming the same ~1,400 paths. The first lookup of a process stats them
all; the others should cost little. One child fills the cache (compiles), then N children each time
every compile call in a fresh process; prints the median per call (first call, and the rest) and the
per-child total, and the engine's counters of the last child. The filling child's calls say what kiln
itself spends on each cold compile besides NVRTC.

    KILN_LIBRARY=build/engine/libkiln.so PYTHONPATH=python python3 bench/include_bench/many_kernels.py \
        [--kernels 24] [--children 5] [--target sm_90]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TEMPLATE = r'''
#include <cub/block/block_reduce.cuh>
#include <cuda/std/tuple>
extern "C" __global__ void many_{index}(const float* in, float* out) {{
  using R = cub::BlockReduce<float, 128>;
  __shared__ typename R::TempStorage t;
  cuda::std::tuple<float, float> p{{in[threadIdx.x], {index}.0f}};
  float v = R(t).Sum(cuda::std::get<0>(p) * cuda::std::get<1>(p));
  if (threadIdx.x == 0) *out = v;
}}
'''


def child(args):
    import kiln
    engine = kiln.Engine(cache_dir=args.cache)
    calls, own = [], []
    for index in range(args.kernels):
        source = kiln.Source.from_text(TEMPLATE.format(index=index), name=f"many_{index}.cu")
        compiling = engine.stats()["compile_nanoseconds"]
        start = time.perf_counter()
        binary = engine.compile(source, options=["--toolkit-includes"], target=args.target)
        calls.append(time.perf_counter() - start)
        # kiln's own share of the call: all of it but the compiler's (NVRTC) time.
        own.append(calls[-1] - (engine.stats()["compile_nanoseconds"] - compiling) / 1e9)
        if args.expect_hits and binary.origin != "disk":
            raise SystemExit(f"kernel {index}: origin {binary.origin}, expected a disk hit")
    print(json.dumps({"calls": calls, "own": own, "stats": engine.stats()}))
    return 0


def run_child(args, expect_hits):
    command = [sys.executable, os.path.abspath(__file__), "--child", "--cache", args.cache, "--kernels",
               str(args.kernels), "--target", args.target] + (["--expect-hits"] if expect_hits else [])
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"child failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=24)
    parser.add_argument("--children", type=int, default=5)
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--expect-hits", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.kernels < 2 or args.children < 1:
        parser.error("--kernels >= 2, --children >= 1")
    with tempfile.TemporaryDirectory(prefix="kiln-many-kernels-") as work:
        args.cache = os.path.join(work, "cache")
        start = time.perf_counter()
        filled = run_child(args, expect_hits=False)
        print(f"many_kernels: {args.kernels} kernels over CUB + libcu++ (--toolkit-includes), {args.target}; "
              f"cache filled in {time.perf_counter() - start:.1f} s")
        # The filling child compiled every kernel (an empty cache): what kiln itself spent on each compile
        # besides NVRTC (resolve the includes, keys, write the entry and the manifest).
        own = [seconds * 1e3 for seconds in filled["own"]]
        print(f"cold, one process: kiln's own time per compile (the call minus NVRTC): first {own[0]:.2f} ms "
              f"(reads the tree), then median {statistics.median(own[1:]):.2f} ms "
              f"(p90 {statistics.quantiles(own[1:], n=10)[-1]:.2f} ms)")
        firsts, rests, totals, last = [], [], [], None
        for _ in range(args.children):
            last = run_child(args, expect_hits=True)
            firsts.append(last["calls"][0] * 1e3)
            rests.extend(seconds * 1e3 for seconds in last["calls"][1:])
            totals.append(sum(last["calls"]) * 1e3)
        print(f"fresh processes, cache warm, {args.children} children:")
        print(f"  first call (stats the tree):  median {statistics.median(firsts):.3f} ms")
        print(f"  each later call:              median {statistics.median(rests):.3f} ms "
              f"(p90 {statistics.quantiles(rests, n=10)[-1]:.3f} ms)")
        print(f"  all {args.kernels} calls:                median {statistics.median(totals):.2f} ms per process")
        stats = last["stats"]
        print(f"  last child's engine: disk_hits {stats['disk_hits']}, compiles {stats['compiles']}, "
              f"manifest_hits {stats.get('manifest_hits')}, include_resolves {stats.get('include_resolves')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
