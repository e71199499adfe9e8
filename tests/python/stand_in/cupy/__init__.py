"""A stand-in for the parts of CuPy 14.2 that kiln.cupy touches, for machines without CuPy or a GPU.

It mirrors CuPy v14.2.0's names, signatures and types where kiln.cupy depends on them (so a change
in how kiln.cupy calls CuPy shows up here), and records what it was given:
  cupy.__version__
  cupy.cuda.compiler._compile_with_cache_cuda   (same signature; records each call, returns a Module)
  cupy.cuda.compiler.CompileException           (same constructor; get_message, dump)
  cupy.cuda.compiler._get_arch, _get_arch_for_options_for_nvrtc, _nvrtc_version, _use_ptx
                                                (CuPy's rules; the NVRTC version "loads NVRTC" once)
  cupy.cuda.device.Device().compute_capability
  cupy.cuda.function.Module                     (load takes bytes only, as CuPy's Cython signature;
                                                 _set_mapping takes a dict or None)
Tests pose as another release with CUPY_STAND_IN_VERSION (environment), and steer the arch functions
with cupy.cuda.device.STAND_IN_CAPABILITY ("90"), cupy.cuda.compiler.STAND_IN_NVRTC_VERSION ((13, 0))
and _use_ptx; cupy.cuda.compiler.nvrtc_loads counts the NVRTC version lookups.
"""

import os as _os

__version__ = _os.environ.get("CUPY_STAND_IN_VERSION", "14.2.0")  # a test may pose as another release

from cupy import cuda  # noqa: E402,F401  (CuPy imports cupy.cuda, and with it the compiler, at import)
