"""Route NVIDIA cuda.core's C++ compiles through kiln (cuda.core 1.2.x).

cuda.core compiles C++ with Program(code, "c++", options=ProgramOptions(...)).compile(target_type,
name_expressions=(), logs=None, *, cache=None). Its Program is a Cython extension type whose methods
cannot be replaced, so enable() puts a subclass of it in place of cuda.core.Program: the requests kiln
can serve are compiled by kiln (its cache tiers: engine memory, the disk cache, packs, the Redis remote)
and returned as the ObjectCode cuda.core would return (ObjectCode.from_cubin / from_ptx / from_ltoir,
named after ProgramOptions.name, symbol_mapping from each name expression to its lowered name, so
get_kernel(name_expression) works); everything else goes to cuda.core's own compile() unchanged.

Ways to switch it on:

    import kiln.cuda_core; kiln.cuda_core.enable()   in code (raises kiln.Error for an unsupported cuda.core)
    import kiln.cuda_core.auto                       the same, as one import line
    python -m kiln.cuda_core program.py [args]       a program you cannot edit (also: -m package.module)
    KILN_CUDA_CORE=1                                 `import kiln` anywhere in the process routes cuda.core from
                                                     the moment cuda.core is imported (warns instead of raising)

Enable before `from cuda.core import Program` binds the name (the three last ways do); `cuda.core.Program`
looked up at call time is routed whenever it is called.

What kiln compiles: code_type "c++" for target_type "cubin" (sm_XY), "ptx" (compute_XY) and, once the
loaded libkiln has the lto_XY target, "ltoir"; the options ProgramOptions.as_bytes("nvrtc") spells that
kiln can pass (include_path, define_macro/undefine_macro, std c++17/c++20, arch, use_fast_math, ftz,
prec_div, prec_sqrt, fma, max_register_count, restrict, disable_warnings, relocatable_device_code, ...;
cubin, PTX and LTO-IR). Include
folders are keyed by the headers' content (kiln's dependency manifests), the case cuda.core's own
cache= refuses. What stays with cuda.core: code_type "ptx" and "nvvm", a cache= argument other than a
kiln.cuda_core.ProgramCache (the caller chose another program cache), LTO-IR and relocatable code with a libkiln older than API 5, debug and
line information (kiln's bytes differ from cuda.core's there), whole-program code, PCH, pre_include, ptxas_options, options this module does not know, any request kiln refuses as
configured (its message counts in stats()["fallbacks"]), a header only found next to the source, and a
HIP kiln engine. A compile error is raised as cuda.core's NVRTCError with the compiler log.

A program cache for cuda.core's own Program.compile(..., cache=...): kiln.cuda_core.ProgramCache(cache_dir=None,
max_size=None, namespace="cuda.core") implements cuda.core's ProgramCacheResource over kiln's disk cache
(checksums, size cap, CLI, packs, the remote tier; see _program_cache.py). With routing enabled, a compile
given one is served by kiln itself through that cache's folder (kiln's key covers header content and name
expressions; the ObjectCode keeps its symbol_mapping on a hit), and counted in its stats().

Importing this module does not import cuda.core; enable() does, and so does the first use of ProgramCache.
"""

# Where the work is done (this file only re-exports):
#   _options.py      cuda.core's NVRTC flags (ProgramOptions.as_bytes) in kiln's spelling; arch -> target
#   _program.py      the routing Program subclass: kiln or cuda.core, compile, ObjectCode, fall back
#   _program_cache.py  ProgramCache: cuda.core's ProgramCacheResource over kiln's cache (its value format)
#   _patch.py        enable(), disable(), enabled(); the checks of cuda.core's version and the parts touched
#   _stats.py        the counters: stats(), reset_stats()
#   _import_hook.py  KILN_CUDA_CORE=1: enable once cuda.core is imported
#   _state.py        the state they share

from ._options import target_for, translate_flags
from ._patch import SUPPORTED_VERSIONS, disable, enable, enabled
from ._stats import reset_stats, stats

__all__ = ["enable", "disable", "enabled", "stats", "reset_stats", "translate_flags", "target_for",
           "SUPPORTED_VERSIONS", "ProgramCache"]


def __getattr__(name):
    # ProgramCache is made on first use, with cuda.core's ProgramCacheResource as its base when cuda.core is
    # importable: importing this module must not import cuda.core.
    if name == "ProgramCache":
        from ._program_cache import program_cache_class
        return program_cache_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
