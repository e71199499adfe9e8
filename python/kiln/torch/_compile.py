"""The replacement of torch.cuda._utils._nvrtc_compile: the call torch.cuda._compile_kernel makes to compile
a kernel's source with NVRTC (no cache of its own). kiln compiles what torch would (the same source name, the
same options in the same order, the same target) and returns what torch's function returns, (bytes, lowered
name); what kiln does not take goes to torch's own function unchanged."""

import os
import time

from .. import _api, _native, _routing
from ..cupy._options import translate_options  # NVRTC's flags in kiln's spelling (CuPy's are NVRTC's)
from ..errors import CompileError, Error
from . import _state, _stats

_warn_once = _routing.OnceWarner(_state.lock, "kiln.torch: torch compiles this kernel itself: ", stacklevel=4).warn
_made = None  # (pid, kiln.Engine) made here
# torch adds "--pch" for auto_pch: a precompiled header speeds NVRTC up and changes none of its output, and
# kiln's cache answers a repeated compile without one.
_DROPPED = frozenset({"--pch", "-pch"})


def made_engine():
    return _made[1] if _made is not None and _made[0] == os.getpid() else None


def engine():
    """The engine enable() was given, else one of this process made from the KILN_* environment, without a GPU
    runtime where libkiln has API 7 (torch owns the device; kiln only compiles)."""
    global _made
    if _state.engine is not None:
        return _state.engine
    with _state.lock:
        if made_engine() is None:
            if _made is not None:
                _made[1]._handle = None  # a forked child's inheritance: the parent's engine, never destroyed here
            runtime = _native.load()[2] < _native.LABEL_API_VERSION
            _made = (os.getpid(), _api.Engine(runtime=runtime))
        return _made[1]


def _include_flags(folders):
    """-I flags for `folders` that exist (NVRTC skips a folder that does not; kiln refuses one)."""
    return [f"-I{folder}" for folder in folders if os.path.isdir(str(folder))]


def _torch_options(torch, cuda_include_dirs, nvcc_options):
    """The options torch's _nvrtc_compile passes after the architecture, in its order: CUDA's include folders
    (torch.utils.cpp_extension.include_paths("cuda")), cuda_include_dirs, nvcc_options, then the NVRTC-safe
    COMMON_NVCC_FLAGS (torch's own _get_gpu_rtc_compatible_flags)."""
    from torch.utils.cpp_extension import include_paths

    options = _include_flags(include_paths("cuda"))
    options += _include_flags(cuda_include_dirs or ())
    options += [option for option in (nvcc_options or ()) if option not in _DROPPED]
    options += list(torch.cuda._utils._get_gpu_rtc_compatible_flags())
    return options


def compile_kernel(kernel_source, kernel_name, compute_capability, header_code, cuda_include_dirs, nvcc_options,
                   fallback):
    """kiln's side of both forms of torch's function (see _patch.FORMS); fallback(reason) calls torch's."""
    entered = time.perf_counter()
    if not _state.enabled:
        return fallback(None)
    import torch

    if torch.version.hip:
        return fallback("a HIP build of torch")
    if not isinstance(kernel_source, str) or not isinstance(kernel_name, str) or not kernel_name:
        return fallback("kernel_source or kernel_name is not a str")
    if header_code:
        kernel_source = header_code + "\n" + kernel_source  # as torch joins them
    if compute_capability is None:
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        compute_capability = f"{properties.major}{properties.minor}"
    capability = str(compute_capability)
    if not capability[:1].isdigit() or not capability.isalnum():
        return fallback(f"compute_capability {capability!r}")
    try:
        options = _torch_options(torch, cuda_include_dirs, nvcc_options)
    except Exception as error:  # torch cannot say its include folders (no CUDA_HOME): its own call says why
        return fallback(f"torch's options: {type(error).__name__}: {error}"[:200])
    kiln_options, reason = translate_options(options)
    if reason:
        return fallback(reason)
    target = ("sm_" if _state.kind == "cubin" else "compute_") + capability

    started = time.perf_counter()
    try:
        library = _native.require(_native.COMPILE_API_VERSION, "kiln.torch (kiln_compile)")
        binary = engine()._compile_text(library, f"{kernel_name}.cu", kernel_source, kiln_options, [kernel_name],
                                        target)
    except CompileError as error:
        _stats.count_compile_error()
        raise RuntimeError(f"Kernel compilation failed:\n{error.log or error.message}") from None
    except (Error, ValueError) as error:
        # kiln refuses the request as configured (an option or folder it cannot take, no NVRTC, ...): torch
        # may still compile it, and the program should not fail because kiln is in the way.
        what = getattr(error, "status", None) or type(error).__name__
        said = f"kiln: {what}: {getattr(error, 'message', error)}"
        _warn_once(said)
        return fallback(said.split("\n", 1)[0][:200])
    _stats.add_seconds(started - entered, time.perf_counter() - started)
    _stats.count("routed", binary.origin)
    return binary.data, binary.lowered_names[kernel_name]


def _fallback_to(arguments):
    original = _state.original

    def fallback(reason):
        if reason is not None:
            _stats.count("fallbacks", reason)
        return original(*arguments)

    return fallback


def nvrtc_compile(kernel_source, kernel_name, compute_capability=None, cuda_include_dirs=None, nvcc_options=None,
                  auto_pch=False):
    """kiln's stand-in for torch.cuda._utils._nvrtc_compile (torch 2.11's parameters: see _patch.FORMS)."""
    fallback = _fallback_to((kernel_source, kernel_name, compute_capability, cuda_include_dirs, nvcc_options,
                             auto_pch))
    return compile_kernel(kernel_source, kernel_name, compute_capability, "", cuda_include_dirs, nvcc_options,
                          fallback)


def nvrtc_compile_with_header(kernel_source, kernel_name, compute_capability=None, header_code="",
                              cuda_include_dirs=None, nvcc_options=None, enable_automatic_pch=False):
    """The same for the form with header_code (torch releases before the one above)."""
    fallback = _fallback_to((kernel_source, kernel_name, compute_capability, header_code, cuda_include_dirs,
                             nvcc_options, enable_automatic_pch))
    return compile_kernel(kernel_source, kernel_name, compute_capability, header_code, cuda_include_dirs,
                          nvcc_options, fallback)
