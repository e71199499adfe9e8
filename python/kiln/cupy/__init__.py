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
CUPY_COMPILE_WITH_PTX=1, PTX (compute_XX); options kiln knows how to pass (include folders, -std=c++17/
c++20, -D/-U, the fast-math, line-info, debug, FMA, register, ftz/prec flags). What stays with CuPy:
the nvcc backend, jitify, relocatable device code and LTO IR (-dc, -rdc=true, -dlto, to_ltoir),
CUPY_CACHE_IN_MEMORY=1, any option this module does not know, any request kiln refuses as configured
(its message counts in stats()["fallbacks"]), and HIP builds of CuPy. A compile error is raised as
CuPy's own cupy.cuda.compiler.CompileException with the compiler log.

Importing this module does not import CuPy; enable() does.
"""

import inspect
import os
import re
import sys
import threading
import time
import warnings

from .. import _api, _native
from ..errors import CompileError, Error

__all__ = ["enable", "disable", "enabled", "stats", "reset_stats", "translate_options", "SUPPORTED_VERSIONS"]

SUPPORTED_VERSIONS = ((14, 2),)  # (major, minor) of the CuPy releases whose internals this module was written for

# The v14.2 signature of the function enable() replaces; a CuPy whose function differs is refused.
_SIGNATURE = (("source", inspect.Parameter.empty), ("options", inspect.Parameter.empty),
              ("arch", inspect.Parameter.empty), ("extra_source", None), ("backend", "nvrtc"),
              ("enable_cooperative_groups", False), ("name_expressions", None), ("log_stream", None),
              ("cache_in_memory", False), ("jitify", False), ("to_ltoir", False))

# The source name kiln compiles CuPy's code under: it appears in compiler messages and in the key.
SOURCE_NAME = "cupy_kernel.cu"

_lock = threading.RLock()
_enabled = False
_original = None  # CuPy's function, saved by the first enable()
_engine = None  # None: kiln.default_engine()
_counts = {"routed": {}, "fallbacks": {}, "compile_errors": 0, "seconds": {"python": 0.0, "kiln": 0.0, "load": 0.0}}
_warned = set()
_translated = {}  # CuPy's options tuple -> translate_options(it): a program compiles with a few option sets

# --- options ---------------------------------------------------------------------------------------
# CuPy passes NVRTC flags. Each one this module knows maps to kiln's spelling; the others send the
# request back to CuPy, which knows them all.
_PORTABLE = {"--use_fast_math": "--fast-math", "-use_fast_math": "--fast-math", "-lineinfo": "--line-info",
             "--generate-line-info": "--line-info", "-G": "--device-debug", "--device-debug": "--device-debug",
             "-fmad=false": "--no-fma", "--fmad=false": "--no-fma"}
# kiln adds the default-execution-space flag itself; precompiled headers only speed up NVRTC, and
# kiln's cache answers repeated compiles without it.
_DROPPED = frozenset({"-default-device", "--device-as-default-execution-space", "--pch", "-pch"})
_RAW_EXACT = frozenset({"-fmad=true", "--fmad=true", "--extra-device-vectorization", "--restrict", "-restrict", "-w",
                        "--disable-warnings", "--Wno-deprecated-declarations", "-device-int128"})
_RAW_PREFIXES = ("-ftz=", "--ftz=", "-prec-div=", "--prec-div=", "-prec-sqrt=", "--prec-sqrt=", "-maxrregcount=",
                 "--maxrregcount=")
# Relocatable device code and LTO IR need a link step or another output kind: CuPy's path only.
_SEPARATE = frozenset({"--device-c", "-dc", "-rdc=true", "--relocatable-device-code=true", "-dlto", "-ewp",
                       "--extensible-whole-program"})
_STANDARDS = ("c++17", "c++20")
_MACRO = re.compile(r"-[DU][A-Za-z_][A-Za-z_0-9]*(=.*)?$", re.S)


def translate_options(options):
    """(kiln options, None) for CuPy's NVRTC options without the target, or (None, reason) when one of
    them is not something this module passes to kiln."""
    out = []
    for option in options:
        if not isinstance(option, str):
            return None, f"option {option!r} is not a string"
        if option in _SEPARATE:
            return None, f"{option}: relocatable device code / LTO stays with CuPy"
        if option in _DROPPED:
            continue
        if option in _PORTABLE:
            out.append(_PORTABLE[option])
        elif option in _RAW_EXACT or option.startswith(_RAW_PREFIXES):
            out.append(option)
        elif option.startswith(("-std=", "--std=")):
            standard = option.split("=", 1)[1]
            if standard not in _STANDARDS:
                return None, f"{option}: kiln compiles C++17 or C++20 only"
            out.append("-std=" + standard)
        elif option.startswith("-I") or option.startswith("--include-path="):
            folder = option[2:] if option.startswith("-I") else option[len("--include-path="):]
            if not folder.strip():
                return None, f"{option}: an include folder without a name"
            out.append(option)
        elif _MACRO.match(option):
            if option.startswith("-U") and "=" in option:
                return None, f"{option}: -U takes a name only"
            out.append(option)
        else:
            return None, f"{option}: not an option kiln.cupy passes on"
    return out, None


# --- the replacement -------------------------------------------------------------------------------
def _env_flag(name):
    # As CuPy reads its boolean variables: unset or empty is off, an integer 1 is on, anything else off.
    value = os.environ.get(name)
    if not value:
        return False
    try:
        return int(value) == 1
    except ValueError:
        return False


def _count(kind, key):
    with _lock:
        table = _counts[kind]
        table[key] = table.get(key, 0) + 1


# Every NVRTC CuPy 14.2 runs with (CUDA 12.0 and later) compiles cubins up to compute capability 9.0.
_NVRTC_CUBIN_FLOOR = 90


def _arch_flag(compiler, arch):
    """The -arch flag CuPy would compile this request with (compiler._get_arch and
    _get_arch_for_options_for_nvrtc decide it). CuPy asks NVRTC its version for the newest cubin arch,
    and the first such question loads NVRTC (milliseconds), which a request kiln answers from its cache
    does not need: while CuPy has not loaded NVRTC, an arch at or below every NVRTC's newest is decided
    here by CuPy's own rule (the device's compute capability; PTX when CUPY_COMPILE_WITH_PTX is set)."""
    if compiler._nvrtc_version is None:
        if arch is None:
            from cupy.cuda import device

            capability = device.Device().compute_capability
            if int(capability) <= _NVRTC_CUBIN_FLOOR:
                arch = capability  # CuPy: min(capability, NVRTC's newest), or a Tegra arch as it is
        if arch is not None and int(arch) <= _NVRTC_CUBIN_FLOOR:
            return f"-arch=compute_{arch}" if compiler._use_ptx else f"-arch=sm_{arch}"
    if arch is None:
        arch = compiler._get_arch()
    return compiler._get_arch_for_options_for_nvrtc(arch)[0]


def _fallback_reason(options, backend, cache_in_memory, jitify, to_ltoir):
    if backend != "nvrtc":
        return f"backend {backend}"
    if to_ltoir:
        return "LTO IR (to_ltoir)"
    if jitify or "-DCUPY_USE_JITIFY" in options:
        return "jitify"
    if cache_in_memory:
        return "CUPY_CACHE_IN_MEMORY=1"
    return None


def _warn_once(reason):
    with _lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(f"kiln.cupy: CuPy compiles this kernel itself: {reason}", RuntimeWarning, stacklevel=4)


# kiln's CompileError for a header it did not find (engine/src/includes.cpp: describe_missing_include).
_MISSING_HEADER = "is not among the in-memory headers"


def _compile_with_cache_cuda(source, options, arch, extra_source=None, backend="nvrtc",
                             enable_cooperative_groups=False, name_expressions=None, log_stream=None,
                             cache_in_memory=False, jitify=False, to_ltoir=False):
    """kiln's stand-in for CuPy's function of the same name and signature (see the module's text)."""
    entered = time.perf_counter()
    original = _original

    def fallback(reason):
        _count("fallbacks", reason)
        return original(source, options, arch, extra_source, backend, enable_cooperative_groups, name_expressions,
                        log_stream, cache_in_memory, jitify, to_ltoir)

    if not _enabled:  # disabled, but something still holds this function: behave as CuPy
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
    arch_flag = _arch_flag(compiler, arch)
    target = arch_flag.split("=", 1)[1]  # sm_XX (CUBIN) or compute_XX (PTX)
    try:
        translated = _translated.get(full)
    except TypeError:  # an option that is not hashable: translate_options says why it is refused
        translated = None
    if translated is None:
        translated = translate_options(full)
        if len(_translated) < 256:
            try:
                _translated[full] = translated
            except TypeError:
                pass
    kiln_options, reason = translated
    if reason:
        return fallback(reason)
    if isinstance(source, bytes):
        source = source.decode()

    started = time.perf_counter()
    try:
        engine = _engine or _api.default_engine()
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
        with _lock:
            _counts["compile_errors"] += 1
        exception = compiler.CompileException(error.log or error.message, source, SOURCE_NAME, full + (arch_flag,),
                                              "nvrtc")
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
    with _lock:
        _counts["seconds"]["python"] += started - entered
        _counts["seconds"]["kiln"] += compiled - started
        _counts["seconds"]["load"] += loaded - compiled
    _count("routed", binary.origin)
    return module


# --- switching ---------------------------------------------------------------------------------------
def _cupy_version(text):
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _check_cupy():
    """CuPy's compiler module, once CuPy's version and the internals enable() touches are as expected."""
    try:
        import cupy
    except ImportError as error:
        raise Error(f"kiln.cupy: CuPy cannot be imported ({error})") from None
    version = getattr(cupy, "__version__", None)
    if _cupy_version(version) not in SUPPORTED_VERSIONS:
        supported = ", ".join(f"{major}.{minor}.x" for major, minor in SUPPORTED_VERSIONS)
        raise Error(f"kiln.cupy supports CuPy {supported}; this is CuPy {version} ({os.path.dirname(cupy.__file__)}): "
                    "nothing was changed, CuPy compiles as it always does")
    from cupy.cuda import compiler, function

    current = compiler._compile_with_cache_cuda
    if current is not _compile_with_cache_cuda:
        try:
            parameters = inspect.signature(current).parameters.values()
            found = tuple((p.name, p.default) for p in parameters)
        except (TypeError, ValueError):
            found = None
        if found != _SIGNATURE:
            raise Error(f"kiln.cupy: cupy.cuda.compiler._compile_with_cache_cuda of CuPy {version} is not the one "
                        f"kiln.cupy was written for (parameters {found}); nothing was changed")
    from cupy.cuda import device

    for owner, name in ((compiler, "CompileException"), (compiler, "_get_arch"),
                        (compiler, "_get_arch_for_options_for_nvrtc"), (compiler, "_nvrtc_version"),
                        (compiler, "_use_ptx"), (function, "Module"), (device, "Device")):
        if not hasattr(owner, name):
            raise Error(f"kiln.cupy: CuPy {version} has no {owner.__name__}.{name}; nothing was changed")
    for name in ("load", "_set_mapping"):
        if not hasattr(function.Module, name):
            raise Error(f"kiln.cupy: CuPy {version} has no cupy.cuda.function.Module.{name}; nothing was changed")
    return compiler


def enable(engine=None):
    """Routes CuPy's kernel compiles through kiln from now on (kernels CuPy already built in this process
    stay as they are). `engine`: the kiln.Engine to compile with (default: kiln.default_engine(), set
    from the KILN_* environment). Raises kiln.Error, changing nothing, when CuPy is not 14.2.x, its
    internals differ, or libkiln is too old (kiln_compile is API version 2). Enabling twice is harmless
    (a second call only changes the engine, when one is given)."""
    global _enabled, _original, _engine
    with _lock:
        compiler = _check_cupy()
        _native.require(_native.COMPILE_API_VERSION, "kiln.cupy (kiln_compile)")
        if engine is not None:
            _engine = engine
        if _enabled and compiler._compile_with_cache_cuda is _compile_with_cache_cuda:
            return
        if compiler._compile_with_cache_cuda is not _compile_with_cache_cuda:
            _original = compiler._compile_with_cache_cuda
        compiler._compile_with_cache_cuda = _compile_with_cache_cuda
        _enabled = True


def disable():
    """Gives CuPy back its own compile function. Modules kiln already compiled stay loaded."""
    global _enabled, _engine
    with _lock:
        if not _enabled:
            return
        _enabled = False
        _engine = None
        compiler = sys.modules.get("cupy.cuda.compiler")
        if compiler is not None and compiler._compile_with_cache_cuda is _compile_with_cache_cuda:
            compiler._compile_with_cache_cuda = _original


def enabled():
    """True while CuPy's compiles go through kiln."""
    return _enabled


def stats():
    """What this module did since the process started (or reset_stats()): `routed` {origin: count} for
    the compiles kiln served (origin "compiled", "memory", "disk", "pack" or "remote"), `fallbacks`
    {reason: count} for those handed to CuPy, `compile_errors`; `seconds` {"python": this module's own
    work before calling kiln (options, target), "kiln": time in kiln's compile call (cache lookups and
    compiles), "load": time loading the binaries into CuPy modules} over the routed compiles; and `engine`, the kiln engine's own counters (None before the first routed
    compile)."""
    with _lock:
        result = {"routed": dict(_counts["routed"]), "fallbacks": dict(_counts["fallbacks"]),
                  "compile_errors": _counts["compile_errors"], "seconds": dict(_counts["seconds"])}
    engine = _engine or _api._default
    result["engine"] = engine.stats() if engine is not None else None
    return result


def reset_stats():
    with _lock:
        _counts["routed"].clear()
        _counts["fallbacks"].clear()
        _counts["compile_errors"] = 0
        _counts["seconds"] = {"python": 0.0, "kiln": 0.0, "load": 0.0}


# --- KILN_CUPY=1: enable once CuPy is imported ------------------------------------------------------
def _enable_or_warn():
    try:
        enable()
    except Error as error:
        warnings.warn(f"KILN_CUPY=1: CuPy keeps its own compiler: {error}", RuntimeWarning, stacklevel=2)


class _CuPyLoader:
    """Wraps CuPy's package loader: runs it, then enables kiln.cupy. Everything else is delegated."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        try:
            self._loader.exec_module(module)
        finally:
            # CuPy keeps its own loader: this wrapper is only here for the one import.
            module.__loader__ = self._loader
            if spec is not None:
                spec.loader = self._loader
        _enable_or_warn()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _CuPyFinder:
    """A meta path finder that waits for `import cupy`, then steps aside: it finds CuPy through the
    other finders and hands the import a loader that enables kiln.cupy once CuPy is initialised."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "cupy":
            return None
        _remove_finder()
        import importlib.util
        spec = importlib.util.find_spec("cupy")
        if spec is not None and spec.loader is not None:
            spec.loader = _CuPyLoader(spec.loader)
        return spec


def _remove_finder():
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _CuPyFinder)]


def _enable_when_imported():
    """KILN_CUPY=1 at `import kiln`: enable now when CuPy is imported already, else when it is."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and getattr(cupy, "__spec__", None) is not None and "cupy.cuda.compiler" in sys.modules:
        _enable_or_warn()
    elif not any(isinstance(finder, _CuPyFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _CuPyFinder())
