"""A stand-in of torch 2.11 for kiln.torch's tests: torch.cuda._compile_kernel and what it calls,
torch.cuda._utils._nvrtc_compile (a real NVRTC compile through ctypes: the options torch passes, in its order;
the CUBIN and the lowered name back) and _cuda_load_module (records what it is given instead of loading it),
torch.utils.cpp_extension's include_paths and COMMON_NVCC_FLAGS, and the device's compute capability
(TORCH_STAND_IN_CC, default 90). Written for the tests from torch's documented behaviour; no torch code.
TORCH_STAND_IN_VERSION overrides the version, TORCH_STAND_IN_HIP makes it a HIP build."""

import os

__version__ = os.environ.get("TORCH_STAND_IN_VERSION", "2.11.0+cu130")

from . import version  # noqa: E402,F401
from . import cuda  # noqa: E402,F401
from . import utils  # noqa: E402,F401
