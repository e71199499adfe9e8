"""Route torch.cuda._compile_kernel through kiln (torch 2.11.x): a disk cache, packs and remote tiers for the
kernels PyTorch compiles from CUDA source at run time.

torch.cuda._compile_kernel(kernel_source, kernel_name, compute_capability=None, cuda_include_dirs=None,
nvcc_options=None) compiles with NVRTC through ctypes, with no cache, then loads the binary with
cuModuleLoadData. Its compile is one private function, torch.cuda._utils._nvrtc_compile, which it imports
at each call; enable() replaces it: kiln compiles what torch would (the source named <kernel_name>.cu, torch's
own options in its order: CUDA's include folders, cuda_include_dirs as -I folders keyed by the headers'
content, nvcc_options, torch's NVRTC-safe flags; the target torch picks, sm_XY from the device's compute
capability) and returns what torch's function returns, the CUBIN (or, for a torch whose function returns
PTX, the PTX) and the kernel's lowered name; torch loads it as before.

Ways to switch it on:

    import kiln.torch; kiln.torch.enable()      in code (raises kiln.Error for an unsupported torch)
    import kiln.torch.auto                      the same, as one import line
    python -m kiln.torch program.py [args]      a program you cannot edit (also: -m package.module)
    KILN_TORCH=1                                `import kiln` anywhere in the process routes torch from the
                                                moment torch is imported (warns instead of raising)

What stays with torch (its own call, unchanged): a HIP build of torch, an option kiln does not pass (a
relocatable-code or LTO flag, one kiln.cupy's NVRTC translation does not know), a request kiln refuses (it
warns once per reason, counted in stats()["fallbacks"]). A compile error is raised as torch raises it
(RuntimeError "Kernel compilation failed:" and the log). torch.compile's Triton kernels are another path:
see kiln.triton.

Importing this module does not import torch; enable() does.
"""

# Where the work is done (this file only re-exports):
#   _compile.py      the replacement of torch's _nvrtc_compile: options, target, compile, fall back
#   _patch.py        enable(), disable(), enabled(); the checks of torch's version and the function replaced
#   _stats.py        stats(), reset_stats()
#   _import_hook.py  KILN_TORCH=1: enable once torch is imported
#   _state.py        the state they share

from ._patch import FORMS, SUPPORTED_VERSIONS, disable, enable, enabled
from ._stats import reset_stats, stats

__all__ = ["enable", "disable", "enabled", "stats", "reset_stats", "SUPPORTED_VERSIONS"]
