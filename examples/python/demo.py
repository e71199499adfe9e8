"""kiln from Python: one kernel source, JIT-compiled through kiln's C API (ctypes), launched on CuPy
arrays and on PyTorch tensors on each framework's current stream, checked against NumPy / PyTorch on
the CPU. A framework that is not installed is skipped with a message. Without a GPU the kernels are
compiled for sm_90 into the kiln cache (prewarm) and not run.

    python3 examples/python/demo.py          (KILN_LIBRARY=/path/to/libkiln.so if not in ./build*)

It uses the kiln package (python/): the installed one (pip install --no-build-isolation ./python), else
the one in this checkout.

Exit status: 0 when everything that ran was correct, 1 otherwise.
"""

import os
import sys

try:
    import kiln
except ImportError:  # not installed: the package of this checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import kiln

SOURCE = r"""
#include <kiln/rtc.h>

// y = a * x + y
KILN_KERNEL void demo_saxpy(float a, const float* __restrict__ x, float* __restrict__ y, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// out = alpha * x + beta * y, for any element type (a name expression picks T).
template <typename T>
__global__ void demo_axpby(T alpha, const T* __restrict__ x, T beta, const T* __restrict__ y, T* __restrict__ out,
                           unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = alpha * x[i] + beta * y[i];
}
"""

N = 1 << 20
BLOCK = 256
GRID = (N + BLOCK - 1) // BLOCK


def report(label, ok, max_error):
    print(f"  {label}: max error {max_error:.3g}: {'OK' if ok else 'MISMATCH'}")
    return ok


def run_cupy(engine, source):
    try:
        import cupy
        import numpy
    except ImportError as error:
        print(f"CuPy: not installed, skipped ({error})")
        return True
    print(f"CuPy {cupy.__version__}:")
    saxpy = engine.kernel(source, "demo_saxpy")
    axpby = engine.program(source, names=["demo_axpby<double>"]).kernel("demo_axpby<double>")
    ok = True
    with cupy.cuda.Stream(non_blocking=True) as stream:  # kiln launches on CuPy's current stream
        assert cupy.cuda.get_current_stream().ptr == stream.ptr != 0
        x = cupy.arange(N, dtype=cupy.float32) / N
        y = cupy.ones(N, dtype=cupy.float32)
        x_host, y_host = cupy.asnumpy(x), cupy.asnumpy(y)
        saxpy(GRID, BLOCK, [numpy.float32(2.5), x, y, kiln.u32(N)], stream=cupy.cuda.get_current_stream().ptr)
        expected = numpy.float32(2.5) * x_host + y_host
        error = float(numpy.max(numpy.abs(cupy.asnumpy(y) - expected)))
        ok &= report(f"demo_saxpy on cupy.float32[{N}], stream {stream.ptr:#x}", error <= 1e-6, error)

        a = cupy.random.default_rng(1).standard_normal(N)
        b = cupy.random.default_rng(2).standard_normal(N)
        out = cupy.empty_like(a)
        axpby(GRID, BLOCK, [kiln.f64(0.75), a, kiln.f64(-2.0), b, out, kiln.u32(N)], stream=stream)
        expected = 0.75 * cupy.asnumpy(a) - 2.0 * cupy.asnumpy(b)
        error = float(numpy.max(numpy.abs(cupy.asnumpy(out) - expected)))
        ok &= report(f"demo_axpby<double> on cupy.float64[{N}]", error <= 1e-12, error)
    return ok


def run_torch(engine, source):
    try:
        import torch
    except ImportError as error:
        print(f"PyTorch: not installed, skipped ({error})")
        return True
    if not torch.cuda.is_available():
        print("PyTorch: installed without a usable CUDA device, skipped")
        return True
    print(f"PyTorch {torch.__version__}:")
    saxpy = engine.kernel(source, "demo_saxpy")
    axpby = engine.program(source, names=["demo_axpby<float>"]).kernel("demo_axpby<float>")
    ok = True
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # kiln launches on PyTorch's current stream
        current = torch.cuda.current_stream()
        assert current.cuda_stream == side.cuda_stream != 0
        x = torch.linspace(-1, 1, N, device="cuda", dtype=torch.float32)
        y = torch.full((N,), 3.0, device="cuda", dtype=torch.float32)
        expected = 0.5 * x.cpu() + y.cpu()
        saxpy(GRID, BLOCK, [kiln.f32(0.5), x, y, kiln.u32(N)], stream=current.cuda_stream)
        error = (y.cpu() - expected).abs().max().item()
        ok &= report(f"demo_saxpy on torch.float32[{N}], stream {current.cuda_stream:#x}", error <= 1e-6, error)

        g = torch.Generator(device="cuda").manual_seed(3)
        a = torch.randn(N, device="cuda", generator=g)
        b = torch.randn(N, device="cuda", generator=g)
        out = torch.empty_like(a)
        axpby(GRID, BLOCK, [kiln.f32(1.5), a, kiln.f32(0.25), b, out, kiln.u32(N)], stream=current)
        reference = 1.5 * a + 0.25 * b  # torch on the GPU, same stream
        error = (out - reference).abs().max().item()
        ok &= report(f"demo_axpby<float> on torch.float32[{N}] vs torch", error <= 1e-5, error)
    side.synchronize()
    return ok


def main():
    print(f"kiln: {kiln.library_path}")
    engine = kiln.Engine()
    source = kiln.Source.from_text(SOURCE, name="demo.cu")
    devices = engine.devices()
    if not devices:
        print("no GPU: compiling for sm_90 into the kiln cache (prewarm); the kernels cannot run here")
        for names in ([], ["demo_axpby<float>"], ["demo_axpby<double>"]):
            result = engine.prewarm(source, "sm_90", names=names)
            print(f"  {', '.join(names) or 'demo_saxpy'}: {result['origin']}, {result['binary_bytes']} bytes, "
                  f"key {result['key'][:12]}...")
        if kiln.api_version() >= 2:  # compile only: the binary itself, for runtimes that load modules
            binary = engine.compile(source, names=["demo_axpby<float>"], target="sm_90")
            print(f"  compile only: {binary.kind}, {len(binary.data)} bytes from {binary.origin}, demo_axpby<float> "
                  f"is {binary.lowered_names['demo_axpby<float>']}")
            # Header trees from folders: -I (kiln records every header read; a later process checks them by
            # stat) and --toolkit-includes (the CUDA toolkit's own headers: CUB, libcu++, cuda_fp16.h).
            cub = engine.compile('#include <cub/block/block_reduce.cuh>\n'
                                 'extern "C" __global__ void demo_sum(const int* in, int* out) {\n'
                                 '  using R = cub::BlockReduce<int, 128>; __shared__ typename R::TempStorage t;\n'
                                 '  int v = R(t).Sum(in[threadIdx.x]); if (threadIdx.x == 0) *out = v; }\n',
                                 options=["--toolkit-includes"], target="sm_90")
            print(f"  CUB through --toolkit-includes: {cub.kind}, {len(cub.data)} bytes from {cub.origin}")
        # The bindings report errors as exceptions with kiln's message.
        try:
            engine.kernel(source, "demo_saxpy")
            print("unexpected: kernel get succeeded without a device")
            return 1
        except kiln.Error as error:
            print(f"  kernel get without a device: {error.status}")
        try:
            engine.prewarm(kiln.Source.from_text("#include <kiln/rtc.h>\nKILN_KERNEL void k() { nope; }\n"), "sm_90")
            print("unexpected: a broken source compiled")
            return 1
        except kiln.Error as error:
            print(f"  broken source: {error.status}, log has {len(error.log)} characters")
        print(f"statistics: {engine.stats()}")
        return 0
    for device in devices:
        print(f"device {device['ordinal']}: {device['name']} ({device['target']})")
    ok = run_cupy(engine, source)
    ok = run_torch(engine, source) and ok
    stats = engine.stats()
    print(f"statistics: compiles {stats['compiles']}, disk hits {stats['disk_hits']}, "
          f"memory hits {stats['memory_hits']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
