"""What kiln.cuda_core did: the counters the routed compile keeps, stats() and reset_stats()."""

from .. import _api
from .._routing import Counters
from . import _state

_counters = Counters(_state.lock, ("python", "kiln"))
count = _counters.count
count_compile_error = _counters.count_compile_error
add_seconds = _counters.add_seconds  # (python, kiln) of one routed compile


def stats():
    """What this module did since the process started (or reset_stats()): `routed` {origin: count} for the
    compiles kiln served (origin "compiled", "memory", "disk", "pack" or "remote"), `fallbacks` {reason:
    count} for the requests handed to cuda.core's own Program.compile, `compile_errors` (raised as
    cuda.core's NVRTCError), `seconds` {"python": this module's own work before calling kiln, "kiln": time
    in kiln's compile call}, `ltoir_in_kiln` (None until an ltoir request found out whether the loaded
    libkiln compiles LTO-IR, then True or False) and `engine`, the kiln engine's own counters (None before
    the first routed compile)."""
    result = _counters.snapshot()
    result["ltoir_in_kiln"] = _state.ltoir
    engine = _state.engine or _api._default
    result["engine"] = engine.stats() if engine is not None else None
    return result


def reset_stats():
    _counters.reset()
