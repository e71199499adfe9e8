"""A stand-in for the parts of NVIDIA cuda.core 1.2 that kiln.cuda_core touches, for machines without
cuda.core or a GPU.

It mirrors cuda.core 1.2.0's public names, signatures and types where kiln.cuda_core depends on them (so
a change in how kiln.cuda_core calls cuda.core shows up here), and records what it was given:
  cuda.core.__version__                   ("1.2.0"; CUDA_CORE_STAND_IN_VERSION poses as another release)
  cuda.core.Program                       a class whose attributes cannot be set, as a Cython extension
                                          type's; its source and options are kept out of reach; compile()
                                          has 1.2's signature (target_type, name_expressions=(), logs=None,
                                          *, cache=None), records each call in cuda.core._program.calls and
                                          returns an ObjectCode holding a marker, never a real binary
  cuda.core.ProgramOptions                the 1.2 fields; as_bytes("nvrtc", target_type) spells the NVRTC
                                          flags as cuda.core does; arch=None asks Device().arch
  cuda.core.ObjectCode                    _init, from_cubin/from_ptx/from_ltoir (bytes in memory, a str is a
                                          path), code, name, code_type, symbol_mapping (a copy), get_kernel
                                          (looks the mapped symbol up in the binary's bytes)
  cuda.core.Device().arch                 cuda.core._device.STAND_IN_ARCH ("90")
  cuda.core._utils.cuda_utils.NVRTCError  (and CUDAError, its base)
  cuda.core.utils                         ProgramCacheResource and make_program_cache_key (utils/_program_cache.py);
                                          compile(cache=...) keys with it, refuses name_expressions, reads
                                          cache.get(key) (bytes) and stores cache[key] = ObjectCode on a miss
"""

import os as _os

__version__ = _os.environ.get("CUDA_CORE_STAND_IN_VERSION", "1.2.0")

from cuda.core._device import Device  # noqa: E402
from cuda.core._module import Kernel, ObjectCode  # noqa: E402
from cuda.core._program import Program, ProgramOptions  # noqa: E402

__all__ = ["Device", "Kernel", "ObjectCode", "Program", "ProgramOptions"]
