#!/usr/bin/env python3
"""CuPy with and without kiln: same results, kernel preparation time, and a prewarmed cache.

Needs CuPy 14.2.x, NumPy, a GPU, libkiln (KILN_LIBRARY or a build of this repository) and, for part 3,
the kiln CLI (--kiln, $KILN_CLI, `kiln` on PATH, or build*/tools/kiln). No network.

    python3 bench/cupy_bench.py [--quick] [--runs N] [--work DIR] [--kiln PATH] [--keep] [--parts 1,2,3]

Every run is a fresh Python process running the same CuPy workload (about 20 distinct kernels:
ElementwiseKernel, ReductionKernel, RawKernel, RawModule with name expressions and options,
cupyx.jit.rawkernel, @cupy.fuse, CuPy's own element-wise, reduction and scan routines, CUB block
reductions). Mode `cupy` is CuPy as shipped; mode `kiln` is the same with kiln.cupy.enable(). Each
process gets its own CUPY_CACHE_DIR and KILN_CACHE_DIR, as the part needs them.

 1. Results: one run per mode on empty caches; every output array is saved with numpy.save and the
    files are compared byte for byte.
 2. Kernel preparation: the time spent in cupy.cuda.compiler._compile_with_cache_cuda (CuPy's own or
    kiln's, wrapped with a timer in both modes), medians over N processes per mode, cold (empty caches
    each run) and warm (caches filled by one run before the N); the modes take turns, and each pair's
    ratio is printed too. Every child loads NVRTC before its workload (see
    child_main), and module loads (cuModuleLoadData, the same on both sides) are timed apart too.
 3. Prewarm: one kiln run with KILN_RECORD writing a manifest, `kiln prewarm --manifest` into an empty
    cache, then a kiln run on that cache: every kernel must come from disk (no compile, no fallback).

--quick: one process per cell in part 2. Exit status: 0 when every check passed, 1 when one failed,
2 when the run could not start (the message says what is missing).
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SUPPORTED_CUPY = "14.2"
CHILD_TIMEOUT_S = 1800


class SetupError(Exception):
    """Something the benchmark needs is missing: exit status 2 with this message."""


# --- pure helpers (unit-tested in tests/python/test_cupy_bench.py) ---------------------------------
def median(values):
    return statistics.median(values) if values else float("nan")


def format_table(rows, headers):
    """A plain text table; numbers (floats) with 4 significant digits."""
    def cell(value):
        if isinstance(value, float):
            return "-" if value != value else f"{value:.4g}"
        return str(value)
    body = [[cell(v) for v in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in body)) if body else len(str(h)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in body]
    return "\n".join(out)


def compare_outputs(reference_dir, other_dir):
    """[(file, problem)] for the .npy files that are not byte-identical between the two folders (a file
    missing on either side counts). Empty when all match."""
    problems = []
    names = sorted(set(os.listdir(reference_dir)) | set(os.listdir(other_dir)))
    names = [n for n in names if n.endswith(".npy")]
    if not names:
        return [("*", "no .npy outputs")]
    for name in names:
        a, b = os.path.join(reference_dir, name), os.path.join(other_dir, name)
        if not os.path.exists(a) or not os.path.exists(b):
            problems.append((name, f"missing in {'reference' if not os.path.exists(a) else 'other'} run"))
            continue
        with open(a, "rb") as fa, open(b, "rb") as fb:
            da, db = fa.read(), fb.read()
        if da != db:
            first = next((i for i, (x, y) in enumerate(zip(da, db)) if x != y), min(len(da), len(db)))
            problems.append((name, f"differs from byte {first} ({len(da)} vs {len(db)} bytes)"))
    return problems


def prewarm_problems(report):
    """What keeps a kiln run from being 'every kernel from disk': [] when it was."""
    problems = []
    kiln_stats = report.get("kiln") or {}
    routed = kiln_stats.get("routed") or {}
    not_disk = {origin: n for origin, n in routed.items() if origin not in ("disk", "memory")}
    if not_disk:
        problems.append(f"kernels not from disk: {not_disk}")
    if not routed.get("disk"):
        problems.append("no kernel came from disk")
    if kiln_stats.get("fallbacks"):
        problems.append(f"compiled by CuPy instead: {kiln_stats['fallbacks']}")
    engine = kiln_stats.get("engine") or {}
    if engine.get("compiles"):
        problems.append(f"kiln compiled {engine['compiles']} kernel(s)")
    if report.get("calls", 0) != sum(routed.values()) + sum((kiln_stats.get("fallbacks") or {}).values()):
        problems.append(f"{report.get('calls')} compile calls but kiln.cupy counted {routed}")
    return problems


def find_kiln_cli(explicit=None):
    candidates = [explicit, os.environ.get("KILN_CLI"), shutil.which("kiln")]
    candidates += sorted(glob.glob(os.path.join(REPO, "build*", "tools", "kiln")), key=os.path.getmtime, reverse=True)
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def child_env(base, mode, cupy_cache, kiln_cache, record=None, pythonpath=None):
    env = dict(base)
    env["CUPY_CACHE_DIR"] = cupy_cache
    env["KILN_CACHE_DIR"] = kiln_cache
    env.pop("KILN_CUPY", None)  # the child enables kiln.cupy itself, in kiln mode only
    env.pop("CUPY_CACHE_IN_MEMORY", None)
    if record:
        env["KILN_RECORD"] = record
    else:
        env.pop("KILN_RECORD", None)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["BENCH_MODE"] = mode
    return env


# --- the workload (child process) ---------------------------------------------------------------
def workload(cupy, numpy, save):
    """About 20 distinct kernels; each result goes to save(name, array)."""
    import cupyx.jit

    rng = numpy.random.default_rng(20240)
    n = 1 << 16
    xh = rng.standard_normal(n).astype(numpy.float32)
    yh = rng.standard_normal(n).astype(numpy.float32)
    x, y = cupy.asarray(xh), cupy.asarray(yh)
    xd = cupy.asarray(rng.standard_normal(n))
    m = cupy.asarray(rng.standard_normal((64, 1024)).astype(numpy.float32))
    c = cupy.asarray((rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(numpy.complex64))
    h = cupy.asarray(rng.standard_normal(n).astype(numpy.float16))

    squared_diff = cupy.ElementwiseKernel("float32 a, float32 b", "float32 z", "z = (a - b) * (a - b)", "bench_sqdiff")
    save("elementwise_sqdiff", squared_diff(x, y))
    generic = cupy.ElementwiseKernel("T a, T b", "T z", "z = a * b + (T)1", "bench_fma_generic")
    save("elementwise_generic_f64", generic(xd, xd))
    l2 = cupy.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "bench_l2norm")
    save("reduction_l2", l2(x))
    complex_mul = cupy.ElementwiseKernel("complex64 a", "complex64 z", "z = a * a + a", "bench_cmul")
    save("elementwise_complex", complex_mul(c))

    saxpy = cupy.RawKernel(r'''
extern "C" __global__ void bench_saxpy(float a, const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}''', "bench_saxpy", options=("--use_fast_math",))
    out = cupy.empty_like(x)
    saxpy(((n + 255) // 256,), (256,), (numpy.float32(2.5), x, y, out, numpy.int32(n)))
    save("rawkernel_saxpy", out)

    module = cupy.RawModule(code=r'''
template <typename T>
__global__ void bench_scale(const T* in, T* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * static_cast<T>(SCALE);
}''', options=("-std=c++17", "-DSCALE=3"), name_expressions=("bench_scale<float>", "bench_scale<double>"))
    out = cupy.empty_like(x)
    module.get_function("bench_scale<float>")(((n + 255) // 256,), (256,), (x, out, numpy.int32(n)))
    save("rawmodule_scale_f32", out)
    outd = cupy.empty_like(xd)
    module.get_function("bench_scale<double>")(((n + 255) // 256,), (256,), (xd, outd, numpy.int32(n)))
    save("rawmodule_scale_f64", outd)

    @cupyx.jit.rawkernel()
    def jit_add(a, b, z, size):
        tid = cupyx.jit.blockIdx.x * cupyx.jit.blockDim.x + cupyx.jit.threadIdx.x
        if tid < size:
            z[tid] = a[tid] + b[tid]
    out = cupy.empty_like(x)
    jit_add(((n + 255) // 256,), (256,), (x, y, out, numpy.uint32(n)))
    save("jit_rawkernel_add", out)

    @cupy.fuse()
    def fused(a, b):
        return cupy.sin(a) * b + cupy.cos(b)
    save("fuse_sin_cos", fused(x, y))

    save("op_arith", x * y + x)
    save("op_exp", cupy.exp(x))
    save("op_sqrt_abs", cupy.sqrt(cupy.abs(x)))
    save("op_where", cupy.where(x > y, x, y))
    save("op_half", h * h + h)
    save("reduce_sum", cupy.sum(x))
    save("reduce_max_axis", cupy.max(m, axis=1))
    save("reduce_argmax", cupy.argmax(x))
    save("reduce_mean_f64", cupy.mean(xd))
    save("scan_cumsum_axis1", cupy.cumsum(m, axis=1))
    # cumsum of a whole array runs CUB's DeviceScan (CuPy's precompiled CUB, not a kernel it compiles),
    # whose decoupled look-back adds floats in an order that depends on timing: two runs of the same
    # CuPy can differ in the last bits. Whole numbers keep every partial sum exact (|sum| < 2**24), so
    # the comparison stays byte for byte.
    whole = cupy.asarray(rng.integers(-8, 9, n).astype(numpy.float32))
    save("scan_cumsum", cupy.cumsum(whole))
    cupy.cuda.Device().synchronize()


def program_workload(cupy, numpy, save):
    """A CuPy program's worth of kernels, shaped like the first run issue 31 measured (about 1 in 5 of its
    distinct compiles CUB-based, the rest small): the bench workload, then element-wise routines over
    several dtypes, CuPy's reductions that take CUB block reductions (user ReductionKernels, mean, all,
    any, count_nonzero over contiguous arrays, several dtypes: each dtype and operation is its own kernel
    over the same CUB prelude), RawModule templates, cupyx.jit kernels and cupyx.scipy.ndimage filters.
    Every output is exact or deterministic: no atomics, no device-wide scans."""
    import cupyx.jit
    import cupyx.scipy.ndimage as ndimage

    workload(cupy, numpy, save)
    rng = numpy.random.default_rng(31)
    n = 1 << 15
    floats = {name: cupy.asarray(rng.standard_normal(n).astype(name)) for name in ("float16", "float32", "float64")}
    ints = {name: cupy.asarray(rng.integers(-50, 50, n).astype(name)) for name in ("int32", "int64", "uint8")}
    c128 = cupy.asarray((rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(numpy.complex128))
    for name, a in floats.items():
        save(f"prog_exp_{name}", cupy.exp(a))
        save(f"prog_tanh_{name}", cupy.tanh(a))
        save(f"prog_log1p_abs_{name}", cupy.log1p(cupy.abs(a)))
        save(f"prog_clip_{name}", cupy.clip(a, -0.5, 0.5))
    for name, a in ints.items():
        save(f"prog_mul_add_{name}", a * a + a)
        save(f"prog_maximum_{name}", cupy.maximum(a, a[::-1]))
        save(f"prog_bitand_{name}", a & 7)
    save("prog_complex_abs", cupy.abs(c128))
    save("prog_complex_conj_mul", c128 * cupy.conj(c128))
    save("prog_compare_where", cupy.where(floats["float64"] > 0, floats["float64"], -1.0))
    save("prog_isfinite", cupy.isfinite(floats["float32"] / floats["float32"]))

    # CUB block reductions: each (operation, dtype) its own kernel, all after the same two CUB includes.
    l1 = cupy.ReductionKernel("T x", "T y", "abs(x)", "a + b", "y = a", "0", "prog_l1norm")
    sumsq = cupy.ReductionKernel("T x", "T y", "x * x", "a + b", "y = a", "0", "prog_sumsq")
    maxabs = cupy.ReductionKernel("T x", "T y", "abs(x)", "max(a, b)", "y = a", "0", "prog_maxabs")
    for name in ("float32", "float64"):
        save(f"prog_l1_{name}", l1(floats[name]))
        save(f"prog_sumsq_{name}", sumsq(floats[name]))
        save(f"prog_maxabs_{name}", maxabs(floats[name]))
        save(f"prog_mean_{name}", cupy.mean(floats[name]))
    save("prog_mean_int32", cupy.mean(ints["int32"]))
    save("prog_all", cupy.all(ints["int64"] != 1000))
    save("prog_any", cupy.any(ints["int32"] > 45))
    save("prog_count_nonzero", cupy.count_nonzero(ints["uint8"]))

    module = cupy.RawModule(code=r'''
template <typename T, int R>
__global__ void prog_stencil(const T* in, T* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T acc = T(0);
  for (int k = -R; k <= R; ++k) { int j = min(max(i + k, 0), n - 1); acc += in[j]; }
  out[i] = acc;
}''', options=("-std=c++17",), name_expressions=("prog_stencil<float, 2>", "prog_stencil<double, 3>"))
    for expression, name in (("prog_stencil<float, 2>", "float32"), ("prog_stencil<double, 3>", "float64")):
        out = cupy.empty_like(floats[name])
        module.get_function(expression)(((n + 255) // 256,), (256,), (floats[name], out, numpy.int32(n)))
        save(f"prog_rawmodule_{name}", out)

    @cupyx.jit.rawkernel()
    def jit_axpby(a, x, b, y, z, size):
        tid = cupyx.jit.blockIdx.x * cupyx.jit.blockDim.x + cupyx.jit.threadIdx.x
        if tid < size:
            z[tid] = a * x[tid] + b * y[tid]
    for name in ("float32", "float64"):
        x = floats[name]
        out = cupy.empty_like(x)
        scalar = numpy.dtype(name).type
        jit_axpby(((n + 255) // 256,), (256,), (scalar(2.0), x, scalar(-1.0), x[::-1].copy(), out, numpy.uint32(n)))
        save(f"prog_jit_axpby_{name}", out)

    image = cupy.asarray(rng.standard_normal((128, 128)).astype(numpy.float32))
    save("prog_ndimage_uniform", ndimage.uniform_filter(image, size=5))
    save("prog_ndimage_gaussian", ndimage.gaussian_filter(image, sigma=1.5))
    save("prog_ndimage_median", ndimage.median_filter(image, size=3))
    save("prog_ndimage_sobel", ndimage.sobel(image, axis=0))
    save("prog_ndimage_maximum", ndimage.maximum_filter(image, size=(3, 5)))
    save("prog_ndimage_correlate", ndimage.correlate(image, cupy.ones((3, 3), dtype=numpy.float32) / 9))
    cupy.cuda.Device().synchronize()


def second_program_workload(cupy, numpy, save):
    """A second program over the same headers as `program` whose kernels all differ from its: other element-wise
    routines and dtypes (CuPy's headers), other CUB block reductions (the same CUB prelude), another RawModule
    template, another cupyx.jit kernel, other ndimage filters. Run after `program` (--after program), it is the
    next script of a user whose caches hold the first one's kernels: no kernel repeats, every header set does.
    Every output is exact or deterministic."""
    import cupyx.jit
    import cupyx.scipy.ndimage as ndimage

    rng = numpy.random.default_rng(48)
    n = 1 << 15
    floats = {name: cupy.asarray(rng.standard_normal(n).astype(name)) for name in ("float16", "float32", "float64")}
    ints = {name: cupy.asarray(rng.integers(1, 60, n).astype(name)) for name in ("int32", "int64", "uint8")}
    c128 = cupy.asarray((rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(numpy.complex128))
    for name, a in floats.items():
        save(f"prog2_sin_{name}", cupy.sin(a))
        save(f"prog2_cosh_{name}", cupy.cosh(a))
        save(f"prog2_expm1_{name}", cupy.expm1(a))
        save(f"prog2_floor_sign_{name}", cupy.floor(a) * cupy.sign(a))
    for name, a in ints.items():
        save(f"prog2_floordiv_{name}", a // 3 - a)
        save(f"prog2_minimum_{name}", cupy.minimum(a, a[::-1]))
        save(f"prog2_xor_shift_{name}", (a ^ 5) << 1)
    save("prog2_complex_exp", cupy.exp(c128))
    save("prog2_complex_angle", cupy.angle(c128))
    save("prog2_hypot", cupy.hypot(floats["float64"], floats["float64"][::-1]))
    save("prog2_signbit", cupy.signbit(floats["float32"]))

    # CUB block reductions: other operations and names than `program`'s, over the same CUB prelude.
    l2 = cupy.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "prog2_l2norm")
    minabs = cupy.ReductionKernel("T x", "T y", "abs(x)", "min(a, b)", "y = a", "1e30", "prog2_minabs")
    cubes = cupy.ReductionKernel("T x", "T y", "x * x * x", "a + b", "y = a", "0", "prog2_sumcubes")
    for name in ("float32", "float64"):
        save(f"prog2_l2_{name}", l2(floats[name]))
        save(f"prog2_minabs_{name}", minabs(floats[name]))
        save(f"prog2_cubes_{name}", cubes(floats[name]))
        save(f"prog2_max_{name}", cupy.max(floats[name]))
    save("prog2_sum_int64", cupy.sum(ints["int64"]))
    save("prog2_prod_uint8", cupy.prod(ints["uint8"] % 2 + 1, dtype=numpy.uint64))
    save("prog2_min_int32", cupy.min(ints["int32"]))

    module = cupy.RawModule(code=r'''
template <typename T, int K>
__global__ void prog2_decimate(const T* in, T* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i * K >= n) return;
  T best = in[i * K];
  for (int k = 1; k < K && i * K + k < n; ++k) best = max(best, in[i * K + k]);
  out[i] = best;
}''', options=("-std=c++17",), name_expressions=("prog2_decimate<float, 4>", "prog2_decimate<double, 2>"))
    for expression, name, k in (("prog2_decimate<float, 4>", "float32", 4), ("prog2_decimate<double, 2>", "float64", 2)):
        out = cupy.empty(n // k, dtype=name)
        module.get_function(expression)(((n // k + 255) // 256,), (256,), (floats[name], out, numpy.int32(n)))
        save(f"prog2_rawmodule_{name}", out)

    @cupyx.jit.rawkernel()
    def jit_clamp_scale(x, low, high, z, size):
        tid = cupyx.jit.blockIdx.x * cupyx.jit.blockDim.x + cupyx.jit.threadIdx.x
        if tid < size:
            v = x[tid]
            if v < low:
                v = low
            if v > high:
                v = high
            z[tid] = v + v
    for name in ("float32", "float64"):
        out = cupy.empty_like(floats[name])
        scalar = numpy.dtype(name).type
        jit_clamp_scale(((n + 255) // 256,), (256,), (floats[name], scalar(-1.0), scalar(1.0), out, numpy.uint32(n)))
        save(f"prog2_jit_clamp_{name}", out)

    image = cupy.asarray(rng.standard_normal((128, 128)).astype(numpy.float32))
    save("prog2_ndimage_minimum", ndimage.minimum_filter(image, size=4))
    save("prog2_ndimage_laplace", ndimage.laplace(image))
    save("prog2_ndimage_prewitt", ndimage.prewitt(image, axis=1))
    save("prog2_ndimage_uniform1d", ndimage.uniform_filter1d(image, size=7, axis=1))
    save("prog2_ndimage_percentile", ndimage.percentile_filter(image, 25, size=3))
    cupy.cuda.Device().synchronize()


WORKLOADS = {"bench": workload, "program": program_workload, "second-program": second_program_workload}


def child_main(args):
    import numpy
    import cupy
    from cupy.cuda import compiler

    report = {"mode": args.mode, "cupy": cupy.__version__, "calls": 0, "compile_seconds": 0.0}
    # NVRTC is loaded before the workload, in both modes. CuPy loads it at its first compile call (its key
    # needs NVRTC's version); kiln.cupy, serving from kiln's cache, does not need it, but CuPy's CUB
    # reductions ask NVRTC's version outside the compile function anyway, so in this workload a kiln
    # process would only pay the load later, outside the time measured. Loaded up front, it counts on
    # neither side.
    start = time.perf_counter()
    compiler._get_nvrtc_version()
    report["nvrtc_load_seconds"] = time.perf_counter() - start
    if args.mode == "kiln":
        import kiln
        import kiln.cupy
        kiln.cupy.enable()
        report["kiln_library"] = kiln.library_path

    def timed(owner, name, key):
        """Wraps owner.name so that its time adds up in report[key] (and its calls in report[key + '_calls'])."""
        inner = getattr(owner, name)
        report[key], report[key + "_calls"] = 0.0, 0

        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                report[key] += time.perf_counter() - start
                report[key + "_calls"] += 1
        setattr(owner, name, wrapper)

    timed(compiler, "_compile_with_cache_cuda", "compile_seconds")
    # Module loads, on both sides: CuPy's function and kiln.cupy both create function.Module() and call
    # its load() (cuModuleLoadData), so a subclass that times load() sees every one of them.
    from cupy.cuda import function
    report["module_load_seconds"] = 0.0
    try:
        class TimedModule(function.Module):
            def load(self, cubin):
                start = time.perf_counter()
                try:
                    return super().load(cubin)
                finally:
                    report["module_load_seconds"] += time.perf_counter() - start
        function.Module = TimedModule
    except TypeError:  # a CuPy whose Module cannot be subclassed: no split
        report["module_load_seconds"] = None
    # Each compile call on its own: [ms] (cupy) or [ms, kiln.cupy's python ms, kiln's call ms, load ms] (kiln).
    calls = report["per_call_ms"] = []
    outer = compiler._compile_with_cache_cuda

    def per_call(*a, **k):
        split = kiln.cupy._seconds() if args.mode == "kiln" else None
        before = split
        start = time.perf_counter()
        try:
            return outer(*a, **k)
        finally:
            row = [(time.perf_counter() - start) * 1e3]
            if split is not None:
                after = kiln.cupy._seconds()
                row += [(after[part] - before[part]) * 1e3 for part in ("python", "kiln", "load")]
            calls.append([round(value, 3) for value in row])
    compiler._compile_with_cache_cuda = per_call
    if args.mode == "kiln":
        from kiln import _api
        timed(_api, "default_engine", "engine_seconds")  # the first call creates kiln's engine
        inner = _api.Engine.compile
        per_call = report["kiln_call_ms"] = []

        def compile_timed(self, *a, **k):
            start = time.perf_counter()
            try:
                return inner(self, *a, **k)
            finally:
                per_call.append(round((time.perf_counter() - start) * 1e3, 3))
        _api.Engine.compile = compile_timed
    if args.mode == "cupy":
        # Where CuPy's own preparation goes: its key's preprocessing run of NVRTC (once per option set
        # and process), the compiles, and the cache file reads; the rest is hashing and module loads.
        timed(compiler, "_preprocess", "preprocess_seconds")
        timed(compiler, "_compile_using_nvrtc_no_warning", "nvrtc_seconds")
        backend = getattr(compiler, "_kernel_cache_backend", None)
        if backend is not None and hasattr(backend, "load"):
            timed(backend, "load", "cache_read_seconds")
    os.makedirs(args.out, exist_ok=True)
    saved = []
    steps = []  # per output: seconds since the previous one, and the preparation time among them
    mark = {"at": 0.0, "prepare": 0.0}

    def save(name, array):
        path = os.path.join(args.out, f"{len(saved):02d}_{name}.npy")
        numpy.save(path, cupy.asnumpy(array))
        saved.append(name)
        now = time.perf_counter()
        steps.append([name, now - mark["at"], report["compile_seconds"] - mark["prepare"]])
        mark["at"], mark["prepare"] = now, report["compile_seconds"]

    start = mark["at"] = time.perf_counter()
    WORKLOADS[args.workload](cupy, numpy, save)
    report["workload_seconds"] = time.perf_counter() - start
    report["outputs"] = saved
    report["steps"] = steps
    report["calls"] = report["compile_seconds_calls"]
    if args.mode == "kiln":
        import kiln.cupy
        report["kiln"] = kiln.cupy.stats()
    with open(args.report, "w") as f:
        json.dump(report, f)
    return 0


# --- the orchestrator -----------------------------------------------------------------------------
class Runner:
    def __init__(self, args):
        self.args = args
        self.work = args.work or tempfile.mkdtemp(prefix="kiln-cupy-bench-")
        os.makedirs(self.work, exist_ok=True)
        self.count = 0
        self.pythonpath = None

    def fresh(self, what):
        self.count += 1
        path = os.path.join(self.work, f"{self.count:03d}-{what}")
        os.makedirs(path, mode=0o700)
        return path

    def run(self, mode, cupy_cache, kiln_cache, record=None, workload=None):
        """One fresh process running `workload` (default: --workload); its report (dict). Raises RuntimeError
        with the child's output on failure."""
        out = self.fresh(f"{mode}-out")
        report_path = os.path.join(out, "report.json")
        command = [sys.executable, os.path.abspath(__file__), "--child", "--mode", mode, "--out", out,
                   "--report", report_path, "--workload", workload or self.args.workload]
        env = child_env(os.environ, mode, cupy_cache, kiln_cache, record, self.pythonpath)
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        if result.returncode != 0 or not os.path.exists(report_path):
            raise RuntimeError(f"{mode} run failed (exit {result.returncode}):\n{result.stdout[-4000:]}"
                               f"{result.stderr[-4000:]}")
        if result.stderr.strip():
            print(f"  ({mode} run said: {result.stderr.strip().splitlines()[-1][:200]})")
        with open(report_path) as f:
            report = json.load(f)
        report["out"] = out
        return report


def check_setup(args, runner):
    try:
        import cupy
    except ImportError as error:
        raise SetupError(f"CuPy is not importable here ({error}): install CuPy {SUPPORTED_CUPY}.x") from None
    if not cupy.__version__.startswith(SUPPORTED_CUPY + "."):
        raise SetupError(f"CuPy {cupy.__version__} found; kiln.cupy supports {SUPPORTED_CUPY}.x")
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise SetupError("NumPy is not importable") from None
    try:
        import kiln
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "python"))
        import kiln
        runner.pythonpath = os.path.join(REPO, "python")
    try:
        version = kiln.api_version()
    except kiln.Error as error:
        raise SetupError(str(error)) from None
    if version < 2:
        raise SetupError(f"{kiln.library_path} has kiln API version {version}; kiln.cupy needs 2 (kiln_compile)")
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
        device_name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode() if devices else None
    except Exception as error:  # CuPy's runtime errors have no common base worth naming here
        raise SetupError(f"CuPy cannot use a GPU here: {error}") from None
    if not devices:
        raise SetupError("no GPU visible to CuPy")
    kiln_cli = None
    if "3" in args.parts:
        kiln_cli = find_kiln_cli(args.kiln)
        if kiln_cli is None:
            raise SetupError("the kiln CLI was not found: pass --kiln PATH (or set KILN_CLI), or leave part 3 out "
                             "(--parts 1,2)")
    print(f"CuPy {cupy.__version__}, kiln {kiln.library_path} (API {version}), device {device_name}, "
          f"work folder {runner.work}")
    return kiln_cli


def part_results(runner):
    print("\n== 1. results: CuPy vs CuPy through kiln, empty caches, byte-for-byte")
    plain = runner.run("cupy", runner.fresh("cupy-cache"), runner.fresh("kiln-cache"))
    routed = runner.run("kiln", runner.fresh("cupy-cache"), runner.fresh("kiln-cache"))
    problems = compare_outputs(plain["out"], routed["out"])
    stats = routed.get("kiln") or {}
    print(f"  {len(plain['outputs'])} outputs, {plain['calls']} kernel compiles in CuPy's run, "
          f"{routed['calls']} in kiln's; kiln served {stats.get('routed')}, "
          f"CuPy kept {stats.get('fallbacks') or 'none'}")
    for name, problem in problems:
        print(f"  MISMATCH {name}: {problem}")
    if not problems:
        print(f"  all {len(plain['outputs'])} outputs identical")
    return not problems


def breakdown(report):
    """{part: seconds} of one run's preparation (see part_timing)."""
    if report["mode"] == "cupy":
        known = {"preprocess": report.get("preprocess_seconds", 0.0), "nvrtc": report.get("nvrtc_seconds", 0.0),
                 "cache read": report.get("cache_read_seconds", 0.0)}
        if report.get("module_load_seconds") is not None:
            known["load"] = report["module_load_seconds"]
    else:
        seconds = (report.get("kiln") or {}).get("seconds") or {}
        engine = (report.get("kiln") or {}).get("engine") or {}
        nvrtc = engine.get("compile_nanoseconds", 0) / 1e9
        known = {"nvrtc": nvrtc, "kiln": max(seconds.get("kiln", 0.0) - nvrtc, 0.0), "load": seconds.get("load", 0.0),
                 "kiln.cupy": seconds.get("python", 0.0)}
    known["rest"] = max(report["compile_seconds"] - sum(known.values()), 0.0)
    return known


def pair_ratios(cupy_reports, kiln_reports):
    """kiln's preparation time over CuPy's for each pair of runs made one after the other: [ratio]."""
    return [k["compile_seconds"] / c["compile_seconds"] for c, k in zip(cupy_reports, kiln_reports)
            if c["compile_seconds"] > 0]


def step_differences(cupy_reports, kiln_reports, count=5):
    """The workload steps whose time outside preparation grows most with kiln: [(name, cupy ms, kiln ms)]."""
    def outside(reports):
        table = {}
        for report in reports:
            for name, seconds, prepare in report.get("steps", []):
                table.setdefault(name, []).append((seconds - prepare) * 1e3)
        return {name: median(values) for name, values in table.items()}
    plain, routed = outside(cupy_reports), outside(kiln_reports)
    rows = [(name, plain[name], routed[name]) for name in plain if name in routed]
    rows.sort(key=lambda row: row[2] - row[1], reverse=True)
    return rows[:count]


def part_timing(runner, runs):
    print(f"\n== 2. kernel preparation (time in _compile_with_cache_cuda), median of {runs} fresh process(es)"
          + (f"; each cold run's caches first filled by one run of `{runner.args.after}`" if runner.args.after else ""))
    rows, parts, reports = [], [], {}
    reference = None
    mismatches = []
    # The two modes take turns (cupy, kiln, then kiln, cupy, ...): both sides of a pair run moments apart,
    # so a machine that drifts (NVRTC's own time moves by 20-30% between instances and over minutes)
    # moves both, and the ratio of each pair says more than a ratio of two far-apart medians.
    order = [("cupy", "kiln") if i % 2 == 0 else ("kiln", "cupy") for i in range(runs)]
    by_mode = {("cupy", "cold"): [], ("kiln", "cold"): [], ("cupy", "warm"): [], ("kiln", "warm"): []}
    for pair in order:
        for mode in pair:
            caches = runner.fresh("cupy-cache"), runner.fresh("kiln-cache")
            if runner.args.after:  # caches that hold an earlier program's kernels (and, for kiln, its PCHs)
                runner.run(mode, *caches, workload=runner.args.after)
            by_mode[(mode, "cold")].append(runner.run(mode, *caches))
    labels = ("cold", "warm") if runner.args.warm else ("cold",)
    if runner.args.warm:
        caches = {mode: (runner.fresh("cupy-cache"), runner.fresh("kiln-cache")) for mode in ("cupy", "kiln")}
        for mode in ("cupy", "kiln"):
            runner.run(mode, *caches[mode])  # fills the caches
        for pair in order:
            for mode in pair:
                by_mode[(mode, "warm")].append(runner.run(mode, *caches[mode]))
    for mode in ("cupy", "kiln"):
        for label in labels:
            group = by_mode[(mode, label)]
            reports[(mode, label)] = group
            for report in group:  # every run's outputs against the first CuPy run's: a control as well
                reference = reference or report["out"]
                mismatches += [(f"{mode} {label}", name, problem) for name, problem in
                               compare_outputs(reference, report["out"])]
            rows.append([mode, label, median([r["calls"] for r in group]),
                         median([r["compile_seconds"] for r in group]) * 1e3,
                         median([r["compile_seconds"] / max(r["calls"], 1) for r in group]) * 1e3,
                         median([r["workload_seconds"] for r in group]) * 1e3,
                         median([r["workload_seconds"] - r["compile_seconds"] for r in group]) * 1e3])
            split = [breakdown(r) for r in group]
            parts.append([mode, label] + [f"{name} {median([s[name] for s in split]) * 1e3:.1f}" for name in split[0]])
    print(format_table(rows, ["mode", "caches", "compiles", "prepare ms", "per kernel ms", "workload ms",
                              "outside prepare ms"]))
    for label in labels:
        ratios = pair_ratios(reports[("cupy", label)], reports[("kiln", label)])
        print(f"  {label}: kiln / CuPy preparation, run by run (each pair moments apart): "
              f"{', '.join(f'{r:.3f}' for r in ratios)}; median {median(ratios):.3f}, worst {max(ratios):.3f}")
        # Each pair's two sides, so that a wide pair says which side moved (NVRTC's own time, or kiln's
        # precompiled headers made / used).
        for index, (plain, routed) in enumerate(zip(reports[("cupy", label)], reports[("kiln", label)])):
            engine = (routed.get("kiln") or {}).get("engine") or {}
            first = "cupy" if order[index][0] == "cupy" else "kiln"
            print(f"    pair {index + 1} ({first} first): cupy {plain['compile_seconds']:.2f} s (NVRTC "
                  f"{breakdown(plain)['nvrtc']:.2f}), kiln {routed['compile_seconds']:.2f} s (NVRTC "
                  f"{breakdown(routed)['nvrtc']:.2f}, PCH made {engine.get('pch_made', '?')} used "
                  f"{engine.get('pch_used', '?')})")
    # The module loads (cuModuleLoadData of the same binaries) cost both sides the same; without them,
    # what is left is what each cache does.
    for label in labels:
        sides = [[r["compile_seconds"] - r["module_load_seconds"] for r in reports[(mode, label)]
                  if r.get("module_load_seconds") is not None] for mode in ("cupy", "kiln")]
        loads = [[r["module_load_seconds"] for r in reports[(mode, label)] if r.get("module_load_seconds") is not None]
                 for mode in ("cupy", "kiln")]
        if all(sides):
            print(f"  {label}: module loads (median) cupy {median(loads[0]) * 1e3:.1f} ms, kiln "
                  f"{median(loads[1]) * 1e3:.1f} ms; preparation without them: cupy {median(sides[0]) * 1e3:.1f} ms, "
                  f"kiln {median(sides[1]) * 1e3:.1f} ms ({median(sides[0]) / max(median(sides[1]), 1e-9):.2f}x)")
    print("\n  where the preparation goes (medians, ms; cupy: its key's preprocessing runs, NVRTC, cache file "
          "reads, module loads, the rest (hashing); kiln: NVRTC, the rest of kiln's call (keys, includes, cache), "
          "module loads, kiln.cupy's own work before the call, the rest)")
    for row in parts:
        print("  " + "  ".join(str(cell) for cell in row))
    for label in labels:
        print(f"\n  {label}: workload steps whose time outside preparation grows most with kiln (cupy ms -> kiln ms)")
        for name, plain, routed in step_differences(reports[("cupy", label)], reports[("kiln", label)]):
            print(f"    {name}: {plain:.2f} -> {routed:.2f}")
    for where, name, problem in mismatches:
        print(f"  MISMATCH ({where} run vs the first CuPy run) {name}: {problem}")
    if not mismatches:
        print(f"\n  every run's outputs identical to the first CuPy run's ({sum(len(g) for g in reports.values())} runs)")
    return not mismatches


def part_prewarm(runner, kiln_cli):
    print("\n== 3. KILN_RECORD, kiln prewarm --manifest into an empty cache, then a run from that cache")
    manifest = os.path.join(runner.fresh("manifest"), "cupy.jsonl")
    recorded = runner.run("kiln", runner.fresh("cupy-cache"), runner.fresh("kiln-cache"), record=manifest)
    if not os.path.exists(manifest):
        print(f"  FAILED: KILN_RECORD wrote no manifest ({manifest})")
        return False
    with open(manifest) as f:
        lines = sum(1 for line in f if line.strip())
    empty = runner.fresh("prewarmed-cache")
    command = [kiln_cli, "prewarm", "--manifest", manifest, "--cache-dir", empty]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        print(f"  FAILED: {' '.join(command)} exited {result.returncode}:\n"
              f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
        return False
    print(f"  recorded {lines} request(s) from {recorded['calls']} compile calls; prewarm took {seconds:.2f} s")
    report = runner.run("kiln", runner.fresh("cupy-cache"), empty)
    problems = prewarm_problems(report)
    stats = report.get("kiln") or {}
    print(f"  run on the prewarmed cache: kiln served {stats.get('routed')}, engine compiles "
          f"{(stats.get('engine') or {}).get('compiles')}, disk hits {(stats.get('engine') or {}).get('disk_hits')}, "
          f"preparation {report['compile_seconds'] * 1e3:.1f} ms")
    for problem in problems:
        print(f"  FAILED: {problem}")
    outputs = compare_outputs(recorded["out"], report["out"])
    for name, problem in outputs:
        print(f"  MISMATCH {name}: {problem}")
    return not problems and not outputs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one process per timing cell")
    parser.add_argument("--runs", type=int, default=9, help="processes per timing cell (default 9: single processes "
                        "move by several ms in module loads alone, so a cell needs that many for a stable median)")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run, e.g. 1,3")
    parser.add_argument("--work", help="folder for caches and outputs (default: a new temporary folder)")
    parser.add_argument("--kiln", help="the kiln CLI (part 3)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="bench",
                        help="bench: about 20 kernels of every kind (the default); program: those and about 60 more, "
                        "about 1 in 5 of them CUB-based, as a real program's first run; second-program: about 60 "
                        "others over the same headers (see --after)")
    parser.add_argument("--after", choices=sorted(WORKLOADS),
                        help="part 2: before each cold run, one untimed run of this workload over the same (empty) "
                        "caches, in the same mode: the timed run is a later program of the same user (with "
                        "--workload second-program --after program: new kernels over headers seen before)")
    parser.add_argument("--cold-only", dest="warm", action="store_false",
                        help="part 2 times cold runs alone (no warm cell)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("cupy", "kiln"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args)
    args.parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not args.parts <= {"1", "2", "3"}:
        parser.error("--parts takes numbers from 1 to 3")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    runs = 1 if args.quick else args.runs
    runner = Runner(args)
    ok = True
    try:
        kiln_cli = check_setup(args, runner)
        if "1" in args.parts:
            ok &= part_results(runner)
        if "2" in args.parts:
            ok &= part_timing(runner, runs)
        if "3" in args.parts:
            ok &= part_prewarm(runner, kiln_cli)
    except SetupError as error:
        print(f"cupy_bench: cannot run: {error}", file=sys.stderr)
        return 2
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"cupy_bench: {error}", file=sys.stderr)
        ok = False
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(runner.work, ignore_errors=True)
        elif os.path.isdir(runner.work):
            print(f"\nwork folder kept: {runner.work}")
    print("\nresult: " + ("every check passed" if ok else "a check FAILED (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
