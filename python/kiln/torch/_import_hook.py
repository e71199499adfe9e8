"""KILN_TORCH=1 (read by `import kiln`): enable kiln.torch as soon as torch is imported, through a meta path
finder that wraps torch's loader for that one import (kiln._routing), or at once when torch is imported
already. An unsupported torch gets a warning here instead of enable()'s exception."""

import sys

from .. import _routing


def _enable_or_warn():
    from ._patch import enable

    _routing.enable_or_warn(enable, "KILN_TORCH", "torch")


def enable_when_imported():
    _routing.when_imported("torch", lambda module: "torch.cuda._utils" in sys.modules, _enable_or_warn)

