"""kiln from Python: JIT-compile GPU kernels with NVRTC/HIPRTC through kiln's content-hashed cache,
over libkiln's C API (ctypes; no other dependency).

    import kiln
    engine = kiln.Engine()                                   # settings from the KILN_* environment
    source = kiln.Source.from_text(KERNEL_TEXT, name="saxpy.cu")
    kernel = engine.kernel(source, "saxpy")                  # compile or cache hit, then load
    kernel((blocks,), (256,), [kiln.f32(2.0), x, y, kiln.u32(n)], stream=stream_ptr)

    binary = kiln.compile(source, names=["scale<float>"], target="sm_90")   # compile only, no GPU needed
    binary.data, binary.kind, binary.lowered_names["scale<float>"]

Kernel arguments: CuPy arrays and PyTorch tensors pass as device pointers; ctypes values
(kiln.f32/f64/i32/u32/i64/u64/ptr, any ctypes scalar or Structure) and NumPy scalars pass by value.
Errors: kiln.Error and one subclass per kiln status (kiln.CompileError carries the compiler log).
CuPy: see kiln.cupy (routes CuPy's own kernel compiles through kiln).

libkiln is found through KILN_LIBRARY, the wheel's own (kiln/lib/), next to the package or in its
install tree, a kiln source tree the package belongs to, then the system loader (details: kiln._native).
It is loaded on first use; kiln.library_path names the one loaded.
`KILN_CUPY=1` in the environment makes `import kiln` route CuPy through kiln as soon as CuPy is
imported (see kiln.cupy); `KILN_CUDA_CORE=1` does the same for cuda.core (see kiln.cuda_core) and
`KILN_TORCH=1` for torch.cuda._compile_kernel (see kiln.torch). Triton's kernel cache (torch.compile's
kernels): TRITON_CACHE_MANAGER=kiln.triton:CacheManager (see kiln.triton).
"""

import os as _os
import warnings as _warnings

from ._api import (Binary, Engine, Kernel, Program, Source, compile, default_engine, f32, f64, i32, i64, prewarm, ptr,
                   stats, u32, u64)
from .errors import (CompileError, ConfigError, DeviceUnavailableError, Error, InternalError, InvalidArgumentError,
                     InvalidHandleError, LaunchError, LibraryError, LoadError, OutOfMemoryError)


def _read_version():
    # kiln/VERSION is the project's one statement of its version (CMake and setuptools read it too).
    try:
        with open(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "VERSION")) as file:
            return file.read().strip()
    except OSError:  # a copy of the package without its data files: a version that says so
        return "0+unknown"


__version__ = _read_version()

KilnError = Error  # the name the single-file example used

__all__ = ["Engine", "Source", "Program", "Kernel", "Binary", "compile", "prewarm", "stats", "default_engine",
           "api_version", "library_path", "Error", "KilnError", "InvalidArgumentError", "InvalidHandleError",
           "CompileError", "LoadError", "LaunchError", "ConfigError", "DeviceUnavailableError", "OutOfMemoryError",
           "InternalError", "LibraryError", "f32", "f64", "i32", "u32", "i64", "u64", "ptr"]


def api_version():
    """kiln_api_version() of the loaded libkiln (loads it)."""
    from . import _native
    return _native.load()[2]


def __getattr__(name):
    if name == "library_path":  # the path of the loaded libkiln; loads it on first access
        from . import _native
        return _native.load()[1]
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")


# The switches `import kiln` reads: (variable, the subpackage whose _import_hook enables it, what 1 does).
_SWITCHES = (("KILN_CUPY", "cupy", "route CuPy's compiles through kiln"),
             ("KILN_CUDA_CORE", "cuda_core", "route cuda.core's compiles through kiln"),
             ("KILN_TORCH", "torch", "route torch.cuda._compile_kernel through kiln"))


def _read_switches():
    """1: the runtime is routed through kiln once it is imported (at once when it is already); 0 or unset:
    nothing; any other value: ignored with a warning. The import hooks are imported only for a 1."""
    for variable, package, purpose in _SWITCHES:
        value = _os.environ.get(variable, "")
        if value == "1":
            import importlib
            importlib.import_module(f".{package}._import_hook", __name__).enable_when_imported()
        elif value not in ("", "0"):
            _warnings.warn(f"{variable}={value!r} ignored: use 1 ({purpose}) or 0", RuntimeWarning, stacklevel=3)


_read_switches()
