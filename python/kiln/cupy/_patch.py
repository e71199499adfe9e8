"""Switching kiln.cupy on and off: enable() checks that CuPy's version and the internals it touches are
the ones kiln.cupy was written for, then puts the replacement compile function in place of CuPy's;
disable() gives CuPy its own back; enabled() says which one is in place."""

import inspect

from .. import _native, _routing
from ..errors import Error
from . import _state
from ._compile import _compile_with_cache_cuda

SUPPORTED_VERSIONS = ((14, 2),)  # (major, minor) of the CuPy releases whose internals this module was written for

# The v14.2 signature of the function enable() replaces; a CuPy whose function differs is refused.
_SIGNATURE = (("source", inspect.Parameter.empty), ("options", inspect.Parameter.empty),
              ("arch", inspect.Parameter.empty), ("extra_source", None), ("backend", "nvrtc"),
              ("enable_cooperative_groups", False), ("name_expressions", None), ("log_stream", None),
              ("cache_in_memory", False), ("jitify", False), ("to_ltoir", False))


def _check_cupy():
    """CuPy's compiler module, once CuPy's version and the internals enable() touches are as expected."""
    try:
        import cupy
    except ImportError as error:
        raise Error(f"kiln.cupy: CuPy cannot be imported ({error})") from None
    _routing.check_version("kiln.cupy", "CuPy", cupy, SUPPORTED_VERSIONS, "CuPy compiles as it always does")
    version = cupy.__version__
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
    with _state.lock:
        compiler = _check_cupy()
        _native.require(_native.COMPILE_API_VERSION, "kiln.cupy (kiln_compile)")
        if engine is not None:
            _state.engine = engine
        if _state.enabled and compiler._compile_with_cache_cuda is _compile_with_cache_cuda:
            return
        if compiler._compile_with_cache_cuda is not _compile_with_cache_cuda:
            _state.original = compiler._compile_with_cache_cuda
        compiler._compile_with_cache_cuda = _compile_with_cache_cuda
        _state.enabled = True


def disable():
    """Gives CuPy back its own compile function. Modules kiln already compiled stay loaded."""
    _routing.put_back(_state, (("cupy.cuda.compiler", "_compile_with_cache_cuda"),),
                      lambda: (_compile_with_cache_cuda,))


def enabled():
    """True while CuPy's compiles go through kiln."""
    return _state.enabled
