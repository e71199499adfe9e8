"""What kiln.torch did: the counters the routed compile keeps, stats() and reset_stats()."""

from .._routing import Counters
from . import _state

_counters = Counters(_state.lock, ("python", "kiln"))
count = _counters.count
count_compile_error = _counters.count_compile_error
add_seconds = _counters.add_seconds  # (python, kiln) of one routed compile


def stats():
    """What this module did since the process started (or reset_stats()): `routed` {origin: count} for the
    compiles kiln served (origin "compiled", "memory", "disk", "pack" or "remote"), `fallbacks` {reason:
    count} for those handed to torch's own NVRTC call, `compile_errors` (raised as torch raises them),
    `seconds` {"python": this module's own work before calling kiln (options, target), "kiln": time in
    kiln's compile call}, `output` ("cubin" or "ptx": what torch's function returns, known once enabled) and
    `engine`, the kiln engine's counters (None before the first routed compile)."""
    from . import _compile

    result = _counters.snapshot()
    result["output"] = _state.kind
    engine = _state.engine or _compile.made_engine()
    result["engine"] = engine.stats() if engine is not None else None
    return result


def reset_stats():
    _counters.reset()
