"""KILN_CUDA_CORE=1 (read by `import kiln`): enable kiln.cuda_core as soon as cuda.core is imported,
through a meta path finder that wraps cuda.core's loader for that one import (kiln._routing), or at once
when cuda.core is imported already. An unsupported cuda.core gets a warning here instead of enable()'s
exception."""

import os
import warnings

from .. import _routing

_NAME = "cuda.core"


def _enable_or_warn():
    from ._patch import enable

    _routing.enable_or_warn(enable, "KILN_CUDA_CORE", "cuda.core")


def _remove_finder():
    _routing.remove_finder(_NAME)


def enable_when_imported():
    """Enable now when cuda.core is imported already, else when it is."""
    _routing.when_imported(_NAME, lambda module: hasattr(module, "Program"), _enable_or_warn)


def from_environment():
    """KILN_CUDA_CORE at `import kiln`: 1 routes cuda.core through kiln; 0 or unset does nothing; anything
    else is ignored with a warning."""
    value = os.environ.get("KILN_CUDA_CORE", "")
    if value == "1":
        enable_when_imported()
    elif value not in ("", "0"):
        warnings.warn(f"KILN_CUDA_CORE={value!r} ignored: use 1 (route cuda.core's compiles through kiln) or 0",
                      RuntimeWarning, stacklevel=4)
