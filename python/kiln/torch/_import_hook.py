"""KILN_TORCH=1 (read by `import kiln`): enable kiln.torch as soon as torch is imported, through a meta path
finder that wraps torch's loader for that one import (kiln._routing), or at once when torch is imported
already. An unsupported torch gets a warning here instead of enable()'s exception."""

import os
import sys
import warnings

from .. import _routing


def _enable_or_warn():
    from ._patch import enable

    _routing.enable_or_warn(enable, "KILN_TORCH", "torch")


def enable_when_imported():
    _routing.when_imported("torch", lambda module: "torch.cuda._utils" in sys.modules, _enable_or_warn)


def from_environment():
    """KILN_TORCH at `import kiln`: 1 routes torch.cuda._compile_kernel through kiln; 0 or unset does nothing;
    anything else is ignored with a warning."""
    value = os.environ.get("KILN_TORCH", "")
    if value == "1":
        enable_when_imported()
    elif value not in ("", "0"):
        warnings.warn(f"KILN_TORCH={value!r} ignored: use 1 (route torch.cuda._compile_kernel through kiln) or 0",
                      RuntimeWarning, stacklevel=4)
