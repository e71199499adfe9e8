"""The replacement of cupy.cuda.compiler._compile_with_cache_cuda: decides whether kiln or CuPy compiles a
request, compiles with kiln, loads the binary into a CuPy Module, and hands everything else (and every
request kiln refuses) to CuPy's own function."""

import os
import sys
import time

from .. import _api, _native, _routing
from ..errors import CompileError, Error
from . import _options, _state, _stats

# The source name kiln compiles CuPy's code under: it appears in compiler messages and in the key.
SOURCE_NAME = "cupy_kernel.cu"

# kiln's CompileError for a header it did not find (includes/src/compile_log.cpp: describe_missing_include).
_MISSING_HEADER = "is not among the in-memory headers"

# Each fallback reason is warned about once per process.
_warn_once = _routing.OnceWarner(_state.lock, "kiln.cupy: CuPy compiles this kernel itself: ", stacklevel=4).warn


def _env_flag(name):
    # As CuPy reads its boolean variables: unset or empty is off, an integer 1 is on, anything else off.
    value = os.environ.get(name)
    if not value:
        return False
    try:
        return int(value) == 1
    except ValueError:
        return False


_LTOIR_API_VERSION = 5  # libkiln's lto_XY targets


def _fallback_reason(options, backend, cache_in_memory, jitify, to_ltoir):
    if backend != "nvrtc":
        return f"backend {backend}"
    if to_ltoir and _native.load()[2] < _LTOIR_API_VERSION:
        return "LTO IR (to_ltoir): the loaded libkiln has no lto_XY target"
    if jitify or "-DCUPY_USE_JITIFY" in options:
        return "jitify"
    if cache_in_memory:
        return "CUPY_CACHE_IN_MEMORY=1"
    return None




def _compile_with_cache_cuda(source, options, arch, extra_source=None, backend="nvrtc",
                             enable_cooperative_groups=False, name_expressions=None, log_stream=None,
                             cache_in_memory=False, jitify=False, to_ltoir=False):
    """kiln's stand-in for CuPy's function of the same name and signature (see kiln.cupy's text)."""
    entered = time.perf_counter()
    original = _state.original

    def fallback(reason):
        _stats.count("fallbacks", reason)
        return original(source, options, arch, extra_source, backend, enable_cooperative_groups, name_expressions,
                        log_stream, cache_in_memory, jitify, to_ltoir)

    if not _state.enabled:  # disabled, but something still holds this function: behave as CuPy
        return original(source, options, arch, extra_source, backend, enable_cooperative_groups, name_expressions,
                        log_stream, cache_in_memory, jitify, to_ltoir)
    reason = _fallback_reason(options, backend, cache_in_memory, jitify, to_ltoir)
    if reason:
        return fallback(reason)

    from cupy.cuda import compiler, function

    # The flags CuPy's own function adds before compiling, so that kiln compiles what CuPy would.
    full = tuple(options) + ("-ftz=true",)
    if _env_flag("CUPY_CUDA_COMPILE_WITH_DEBUG"):
        full += ("--device-debug", "--generate-line-info")
    arch_flag = _options.arch_flag(compiler, arch)
    target = arch_flag.split("=", 1)[1]  # sm_XX (CUBIN) or compute_XX (PTX)
    if to_ltoir:
        # CuPy adds -dlto to its options; kiln asks for LTO-IR by target (NVRTC gives the same bytes for
        # -dlto with sm_XX or compute_XX, which is what lto_XX compiles).
        target = "lto_" + target.split("_", 1)[1]
    kiln_options, reason = _options.translate_cached(full)
    if reason:
        return fallback(reason)
    if isinstance(source, bytes):
        source = source.decode()

    started = time.perf_counter()
    try:
        engine = _state.engine or _api.default_engine()
        library = _native.require(_native.COMPILE_API_VERSION, "kiln.cupy (kiln_compile)")
        binary = engine._compile_text(library, SOURCE_NAME, source, kiln_options, name_expressions, target)
    except CompileError as error:
        if _MISSING_HEADER in error.message:
            # kiln hands NVRTC in-memory headers only; CuPy's own NVRTC call also searches the working
            # directory (next to the source) for a quoted include, which kiln cannot key. CuPy decides:
            # it compiles what it finds there, or reports the header missing as it always has.
            reason = "kiln: a header not found in the include folders (CuPy also searches the working directory)"
            said = next(line for line in error.message.splitlines() if _MISSING_HEADER in line)
            _warn_once(f"{reason}: {said.strip()[:300]}")
            return fallback(reason)
        _stats.count_compile_error()
        said_options = full + (("-dlto",) if to_ltoir else ()) + (arch_flag,)  # the options CuPy would name
        exception = compiler.CompileException(error.log or error.message, source, SOURCE_NAME, said_options, "nvrtc")
        if _env_flag("CUPY_DUMP_CUDA_SOURCE_ON_ERROR"):
            exception.dump(sys.stderr)
        raise exception from None
    except (Error, ValueError) as error:
        # kiln refuses the request as configured (an option or header it cannot take, no NVRTC, a string
        # holding a NUL byte that a C string cannot carry, ...): CuPy may still compile it, and the
        # program should not fail because kiln is in the way.
        what = getattr(error, "status", None) or type(error).__name__
        reason = f"kiln: {what}: {getattr(error, 'message', error)}"
        _warn_once(reason)
        return fallback(reason.split("\n", 1)[0][:200])

    data = binary.data
    if to_ltoir:
        # CuPy hands LTO-IR around as bytes (for its link step with nvJitLink), never as a module.
        if log_stream is not None:
            log_stream.write(binary.log)
        _stats.add_seconds(started - entered, time.perf_counter() - started, 0.0)
        _stats.count("routed", binary.origin)
        return data
    if binary.kind == "ptx" and not data.endswith(b"\0"):
        data += b"\0"  # cuModuleLoadData reads PTX as a C string
    compiled = time.perf_counter()
    module = function.Module()
    module.load(data)
    if name_expressions:
        module._set_mapping({expression: binary.lowered_names[expression] for expression in name_expressions})
    if log_stream is not None:
        log_stream.write(binary.log)
    loaded = time.perf_counter()
    _stats.add_seconds(started - entered, compiled - started, loaded - compiled)
    _stats.count("routed", binary.origin)
    return module
