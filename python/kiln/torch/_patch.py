"""Switching kiln.torch on and off: enable() checks torch's version and the function it replaces, then puts
kiln's in place of torch.cuda._utils._nvrtc_compile (which torch.cuda._compile_kernel imports at each call);
disable() puts torch's back; enabled() says which one is in place."""

import inspect

from .. import _native, _routing
from ..errors import Error
from . import _compile, _state

SUPPORTED_VERSIONS = ((2, 11),)  # (major, minor) of the torch releases this module was written for

# The parameters of torch.cuda._utils._nvrtc_compile kiln.torch knows, each with kiln's function of the same
# parameters. "binary": torch 2.11's (kernel_source, kernel_name, compute_capability, cuda_include_dirs,
# nvcc_options, auto_pch), returning (CUBIN, lowered name); "header": the earlier one with header_code (prepended
# to the source), returning (PTX, lowered name). What the installed function returns is read from its own code
# (nvrtcGetCUBIN or nvrtcGetPTX): kiln compiles the same kind.
FORMS = {
    ("kernel_source", "kernel_name", "compute_capability", "cuda_include_dirs", "nvcc_options", "auto_pch"):
        ("binary", _compile.nvrtc_compile),
    ("kernel_source", "kernel_name", "compute_capability", "header_code", "cuda_include_dirs", "nvcc_options",
     "enable_automatic_pch"): ("header", _compile.nvrtc_compile_with_header),
}
_OURS = tuple(function for _form, function in FORMS.values())


def _output_kind(function):
    """"cubin" or "ptx": what torch's _nvrtc_compile hands back, by the NVRTC call that fetches it."""
    try:
        code = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    cubin, ptx = "nvrtcGetCUBIN" in code, "nvrtcGetPTX" in code
    return "cubin" if cubin and not ptx else "ptx" if ptx and not cubin else None


def _check_torch():
    """(torch.cuda._utils, torch's own _nvrtc_compile, form, output kind) once torch's version and the function
    enable() replaces are as expected."""
    try:
        import torch
        import torch.cuda._utils as utils
    except ImportError as error:
        raise Error(f"kiln.torch: torch cannot be imported ({error})") from None
    _routing.check_version("kiln.torch", "torch", torch, SUPPORTED_VERSIONS,
                           "torch.cuda._compile_kernel compiles as it always does")
    version = torch.__version__
    if not callable(getattr(torch.cuda, "_compile_kernel", None)):
        raise Error(f"kiln.torch: torch {version} has no torch.cuda._compile_kernel; nothing was changed")
    current = getattr(utils, "_nvrtc_compile", None)
    original = _state.original if current in _OURS else current
    if not callable(original):
        raise Error(f"kiln.torch: torch {version} has no torch.cuda._utils._nvrtc_compile; nothing was changed")
    try:
        parameters = tuple(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        parameters = None
    if parameters not in FORMS:
        raise Error(f"kiln.torch: torch.cuda._utils._nvrtc_compile of torch {version} is not one kiln.torch was "
                    f"written for (parameters {parameters}); nothing was changed")
    kind = _output_kind(original)
    if kind is None:
        raise Error(f"kiln.torch: cannot tell whether torch {version}'s _nvrtc_compile returns a CUBIN or PTX (its "
                    "source does not say); nothing was changed")
    for name in ("_get_gpu_rtc_compatible_flags", "_cuda_load_module"):
        if not callable(getattr(utils, name, None)):
            raise Error(f"kiln.torch: torch {version} has no torch.cuda._utils.{name}; nothing was changed")
    return utils, original, FORMS[parameters][0], kind


def enable(engine=None):
    """Routes torch.cuda._compile_kernel's NVRTC compiles through kiln from now on: each kernel's binary comes
    from kiln's cache tiers (engine memory, the disk cache, packs, the remote), byte for byte what torch's own
    call would compile, and torch loads it as before. `engine`: the kiln.Engine to compile with (default: one
    of this process, from the KILN_* environment, without a GPU runtime). Raises kiln.Error, changing
    nothing, when torch is not 2.11.x, its function differs from what kiln.torch was written for, or libkiln
    is too old (kiln_compile is API version 2). Enabling twice is harmless (a second call only changes the
    engine, when one is given)."""
    with _state.lock:
        utils, original, form, kind = _check_torch()
        _native.require(_native.COMPILE_API_VERSION, "kiln.torch (kiln_compile)")
        if engine is not None:
            _state.engine = engine
        _state.original, _state.form, _state.kind = original, form, kind
        utils._nvrtc_compile = dict(FORMS.values())[form]
        _state.enabled = True


def disable():
    """Gives torch back its own NVRTC call. Kernels kiln compiled stay loaded."""
    _routing.put_back(_state, (("torch.cuda._utils", "_nvrtc_compile"),), lambda: _OURS)


def enabled():
    """True while torch.cuda._compile_kernel's compiles go through kiln."""
    return _state.enabled
