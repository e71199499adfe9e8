"""What kiln.cupy did: the counters the compile function keeps, stats() and reset_stats()."""

from .. import _api
from .._routing import Counters
from . import _state

_counters = Counters(_state.lock, ("python", "kiln", "load"))
count = _counters.count
count_compile_error = _counters.count_compile_error
add_seconds = _counters.add_seconds  # (python, kiln, load) of one routed compile


def stats():
    """What this module did since the process started (or reset_stats()): `routed` {origin: count} for
    the compiles kiln served (origin "compiled", "memory", "disk", "pack" or "remote"), `fallbacks`
    {reason: count} for those handed to CuPy, `compile_errors`; `seconds` {"python": this module's own
    work before calling kiln (options, target), "kiln": time in kiln's compile call (cache lookups and
    compiles), "load": time loading the binaries into CuPy modules} over the routed compiles; and
    `engine`, the kiln engine's own counters (None before the first routed compile)."""
    result = _counters.snapshot()
    engine = _state.engine or _api._default
    result["engine"] = engine.stats() if engine is not None else None
    return result


def seconds():
    """stats()["seconds"] alone (cheap: no engine call), for timing each compile call."""
    return _counters.snapshot()["seconds"]


def reset_stats():
    _counters.reset()
