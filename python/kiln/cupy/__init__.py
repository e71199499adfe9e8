"""Route CuPy's kernel compiles through kiln (CuPy 14.2.x).

CuPy compiles every kernel it builds (ElementwiseKernel, ReductionKernel, RawKernel, RawModule,
cupyx.jit, its own element-wise and reduction routines, CUB-based ones) through one private function,
cupy.cuda.compiler._compile_with_cache_cuda. enable() replaces it: the requests kiln can serve are
compiled by kiln (its cache tiers: engine memory, the disk cache, packs, the Redis remote), and the
binary is loaded the way CuPy loads its own; everything else goes to CuPy's function unchanged.

Three ways to switch it on:

    import kiln.cupy; kiln.cupy.enable()      in code (raises kiln.Error for an unsupported CuPy)
    import kiln.cupy.auto                     the same, as one import line
    python -m kiln.cupy program.py [args]     a program you cannot edit (also: -m package.module)
    KILN_CUPY=1                               `import kiln` anywhere in the process routes CuPy from the
                                              moment CuPy is imported (warns instead of raising)

What kiln compiles: the NVRTC backend without jitify, for a cubin (sm_XX) or, with
CUPY_COMPILE_WITH_PTX=1, PTX (compute_XX), and LTO-IR where CuPy asks for it (to_ltoir, cupyx.jit's
device functions: kiln's lto_XX, returned as bytes as CuPy does); options kiln knows how to pass (include folders, -std=c++17/
c++20, -D/-U, the fast-math, line-info, debug, FMA, register, ftz/prec flags). What stays with CuPy:
the nvcc backend, jitify, relocatable device code (-dc, -rdc=true: CuPy links it with cudadevrt), LTO-IR
with a libkiln older than API 5,
CUPY_CACHE_IN_MEMORY=1, any option this module does not know, any request kiln refuses as configured
(its message counts in stats()["fallbacks"]), and HIP builds of CuPy. A compile error is raised as
CuPy's own cupy.cuda.compiler.CompileException with the compiler log.

Importing this module does not import CuPy; enable() does.
"""

# Where the work is done (this file only re-exports):
#   _options.py      CuPy's NVRTC options in kiln's spelling: translate_options(), arch_flag()
#   _compile.py      the replacement of CuPy's _compile_with_cache_cuda: kiln or CuPy, compile, load, fall back
#   _patch.py        enable(), disable(), enabled(); the checks of CuPy's version and internals
#   _stats.py        the counters the compile function keeps: stats(), reset_stats()
#   _import_hook.py  KILN_CUPY=1: enable once CuPy is imported
#   _state.py        the state they share (the lock, whether enabled, CuPy's function, the engine)

from ._compile import SOURCE_NAME
from ._options import translate_options
from ._patch import SUPPORTED_VERSIONS, disable, enable, enabled
from ._stats import reset_stats, stats

# Internals that tests and bench/cupy_bench.py reach (the compile function CuPy's calls go to, the
# architecture flag CuPy would pick, the seconds counted so far without the engine's counters).
from ._compile import _compile_with_cache_cuda
from ._options import arch_flag as _arch_flag
from ._stats import seconds as _seconds

__all__ = ["enable", "disable", "enabled", "stats", "reset_stats", "translate_options", "SUPPORTED_VERSIONS"]
