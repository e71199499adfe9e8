"""Switching kiln.cuda_core on and off: enable() checks that cuda.core's version and the parts of it this
module touches are the ones it was written for, then puts the routing Program subclass in place of
cuda.core.Program; disable() puts cuda.core's own class back; enabled() says which one is in place."""

import importlib
import inspect

from .. import _native, _routing
from ..errors import Error
from . import _program, _state

SUPPORTED_VERSIONS = ((1, 2),)  # (major, minor) of the cuda.core releases this module was written for

# Program.compile of cuda.core 1.2: (self, target_type, name_expressions=(), logs=None, *, cache=None).
_COMPILE_PARAMETERS = (("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                       ("target_type", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                       ("name_expressions", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                       ("logs", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                       ("cache", inspect.Parameter.KEYWORD_ONLY))


def _nvrtc_error_class(core, version):
    """cuda.core's NVRTCError: top-level from 1.3, in cuda.core._utils.cuda_utils before."""
    found = getattr(core, "NVRTCError", None)
    if found is None:
        try:
            found = getattr(importlib.import_module("cuda.core._utils.cuda_utils"), "NVRTCError", None)
        except ImportError:
            found = None
    if not (isinstance(found, type) and issubclass(found, Exception)):
        raise Error(f"kiln.cuda_core: cuda.core {version} has no NVRTCError (cuda.core._utils.cuda_utils); "
                    "nothing was changed")
    return found


def _check_cuda_core():
    """(cuda.core, its own Program class, NVRTCError) once cuda.core's version and the parts enable()
    touches are as expected."""
    try:
        import cuda.core as core
    except ImportError as error:
        raise Error(f"kiln.cuda_core: cuda.core cannot be imported ({error})") from None
    _routing.check_version("kiln.cuda_core", "cuda.core", core, SUPPORTED_VERSIONS,
                           "cuda.core compiles as it always does")
    version = core.__version__
    program = getattr(core, "Program", None)
    if _state.routed_class is not None and program is _state.routed_class:
        program = _state.original
    for name in ("Program", "ProgramOptions", "ObjectCode"):
        if not isinstance(getattr(core, name, None), type):
            raise Error(f"kiln.cuda_core: cuda.core {version} has no class cuda.core.{name}; nothing was changed")
    try:
        parameters = tuple((p.name, p.kind) for p in inspect.signature(program.compile).parameters.values())
    except (TypeError, ValueError):
        parameters = None  # a compiled method without a signature: the version check stands for it
    if parameters is not None and parameters != _COMPILE_PARAMETERS:
        raise Error(f"kiln.cuda_core: cuda.core.Program.compile of cuda.core {version} is not the one kiln.cuda_core "
                    f"was written for (parameters {[name for name, _kind in parameters]}); nothing was changed")
    if not callable(getattr(core.ProgramOptions, "as_bytes", None)):
        raise Error(f"kiln.cuda_core: cuda.core {version} has no ProgramOptions.as_bytes; nothing was changed")
    for name in ("from_cubin", "from_ptx", "from_ltoir", "symbol_mapping"):
        if not hasattr(core.ObjectCode, name):
            raise Error(f"kiln.cuda_core: cuda.core {version} has no ObjectCode.{name}; nothing was changed")
    try:
        type("_KilnProbe", (program,), {})
    except TypeError as error:
        raise Error(f"kiln.cuda_core: cuda.core.Program of cuda.core {version} cannot be subclassed ({error}); "
                    "nothing was changed") from None
    return core, program, _nvrtc_error_class(core, version)


def enable(engine=None):
    """Routes cuda.core's C++ compiles (Program(code, "c++", options).compile(...)) through kiln from now
    on: cuda.core.Program becomes a subclass of cuda.core's own class whose compile() lets kiln serve
    what it can. Programs made before, or through a name bound before (`from cuda.core import Program`
    ahead of enable()), stay with cuda.core. `engine`: the kiln.Engine to compile with (default:
    kiln.default_engine(), set from the KILN_* environment). Raises kiln.Error, changing nothing, when
    cuda.core is not 1.2.x, its parts differ, or libkiln is too old (kiln_compile is API version 2).
    Enabling twice is harmless (a second call only changes the engine, when one is given)."""
    with _state.lock:
        core, original, nvrtc_error = _check_cuda_core()
        _native.require(_native.COMPILE_API_VERSION, "kiln.cuda_core (kiln_compile)")
        if engine is not None:
            _state.engine = engine
        if _state.original is not original or _state.routed_class is None:
            _state.original = original
            _state.routed_class = _program.routed_class_for(original)
            _state.ltoir = None
        _state.nvrtc_error = nvrtc_error
        core.Program = _state.routed_class
        # cuda.core's own tests and some of its users (numba-cuda) take the class from its module.
        module = _program_module()
        if module is not None and getattr(module, "Program", None) is original:
            module.Program = _state.routed_class
        _state.enabled = True


def _program_module():
    """cuda.core._program, where cuda.core defines Program (None when it has no such module)."""
    try:
        return importlib.import_module("cuda.core._program")
    except ImportError:
        return None


def disable():
    """Puts cuda.core's own Program class back. Programs made while enabled compile with cuda.core from
    now on; what kiln compiled stays as it is."""
    _routing.put_back(_state, (("cuda.core", "Program"), ("cuda.core._program", "Program")),
                      lambda: (_state.routed_class,))


def enabled():
    """True while cuda.core's C++ compiles go through kiln."""
    return _state.enabled
