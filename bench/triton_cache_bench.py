"""Triton's kernel cache: Triton's own FileCacheManager against kiln.triton's CacheManager, on the hit path a
fresh process takes (get_group of each kernel, then reading every file it names, as triton.compile's
CompiledKernel does), for kernels whose files have the sizes of small Inductor kernels. No GPU needed.

  KILN_LIBRARY=build/engine/libkiln.so PYTHONPATH=python[:tests/python/stand_in] \
      python3 bench/triton_cache_bench.py [--kernels 64] [--runs 5]

With Triton installed its own cache module is used; without it, put tests/python/stand_in on PYTHONPATH (the
stand-in's FileCacheManager does what Triton 3.6's does). Each cell is a fresh process (the median of --runs):
  triton        FileCacheManager, the kernels in its folder
  kiln          kiln's manager, the kernels in kiln's cache and their files already in the hand-over folder
  kiln-empty    kiln's manager, an empty hand-over folder (a fresh node with a pack, or a cleared folder):
                every file written from kiln's checked bytes
Prints the time per kernel (get_group and the reads) and the process's whole time.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Bytes of each file of one kernel, as a small Inductor kernel's are (a pointwise or a row reduction).
SIZES = {"source": 2_500, "ttir": 9_000, "ttgir": 14_000, "llir": 60_000, "ptx": 45_000, "cubin": 18_000}

CHILD = r"""
import json, os, sys, time
started = time.perf_counter()
mode, count = sys.argv[1], int(sys.argv[2])
if mode != "triton":
    os.environ["TRITON_CACHE_MANAGER"] = "kiln.triton:CacheManager"
from triton.runtime.cache import get_cache_manager
import hashlib
read = 0
before = time.perf_counter()
for index in range(count):
    manager = get_cache_manager(hashlib.sha256(str(index).encode()).hexdigest())
    group = manager.get_group(f"kernel_{index}.json")
    assert group and f"kernel_{index}.json" in group, (mode, index, group)
    for path in group.values():
        with open(path, "rb") as file:
            read += len(file.read())
elapsed = time.perf_counter() - before
print(json.dumps({"per_kernel_ms": elapsed * 1000 / count, "bytes": read, "process_s": time.perf_counter() - started}))
"""

FILL = r"""
import json, os, sys, hashlib
mode, count = sys.argv[1], int(sys.argv[2])
sizes = json.loads(sys.argv[3])
if mode != "triton":
    os.environ["TRITON_CACHE_MANAGER"] = "kiln.triton:CacheManager"
from triton.runtime.cache import get_cache_manager
for index in range(count):
    manager = get_cache_manager(hashlib.sha256(str(index).encode()).hexdigest())
    assert manager.get_group(f"kernel_{index}.json") is None
    group = {}
    for stage, size in sizes.items():
        data = (f"{stage} {index} " * (size // 8 + 1))[:size]
        name = f"kernel_{index}.{stage}"
        group[name] = manager.put(data.encode() if stage == "cubin" else data, name)
    meta = json.dumps({"name": f"kernel_{index}", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}})
    group[f"kernel_{index}.json"] = manager.put(meta, f"kernel_{index}.json", binary=False)
    manager.put_group(f"kernel_{index}.json", group)
"""


def run(code, args, env):
    result = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"child failed: {result.stderr[-2000:]}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="kiln-triton-bench-")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("TRITON_CACHE_MANAGER", None)
    env.pop("KILN_TRITON_DIR", None)
    cells = {}
    for mode in ("triton", "kiln"):
        env_mode = dict(env, TRITON_CACHE_DIR=os.path.join(work, f"{mode}-folder"),
                        KILN_CACHE_DIR=os.path.join(work, "kiln-cache"))
        run(FILL, [mode, str(args.kernels), json.dumps(SIZES)], env_mode)
        cells[mode] = [json.loads(run(CHILD, [mode, str(args.kernels)], env_mode)) for _ in range(args.runs)]
        if mode == "kiln":
            empty = []
            for index in range(args.runs):
                folder = os.path.join(work, f"empty-{index}")
                empty.append(json.loads(run(CHILD, [mode, str(args.kernels)], dict(env_mode, TRITON_CACHE_DIR=folder))))
                shutil.rmtree(folder)
            cells["kiln-empty"] = empty
    import triton
    print(f"Triton {triton.__version__} ({os.path.dirname(triton.__file__)}); {args.kernels} kernels of "
          f"{sum(SIZES.values()) // 1000 + 1} KB in 7 files; median of {args.runs} fresh processes each")
    print(f"{'cell':<12}{'ms per kernel':>15}{'process s':>12}{'bytes read':>12}")
    for mode, found in cells.items():
        print(f"{mode:<12}{statistics.median(c['per_kernel_ms'] for c in found):>15.3f}"
              f"{statistics.median(c['process_s'] for c in found):>12.3f}{found[0]['bytes']:>12}")
    if not args.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
