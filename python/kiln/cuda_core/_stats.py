"""What kiln.cuda_core did: the counters the routed compile keeps, stats() and reset_stats()."""

from .. import _api
from . import _state

counts = {"routed": {}, "fallbacks": {}, "compile_errors": 0, "seconds": {"python": 0.0, "kiln": 0.0}}


def count(kind, key):
    """One more `key` in the table counts[kind] ("routed" by origin, "fallbacks" by reason)."""
    with _state.lock:
        table = counts[kind]
        table[key] = table.get(key, 0) + 1


def count_compile_error():
    with _state.lock:
        counts["compile_errors"] += 1


def add_seconds(python, kiln):
    with _state.lock:
        counts["seconds"]["python"] += python
        counts["seconds"]["kiln"] += kiln


def stats():
    """What this module did since the process started (or reset_stats()): `routed` {origin: count} for the
    compiles kiln served (origin "compiled", "memory", "disk", "pack" or "remote"), `fallbacks` {reason:
    count} for the requests handed to cuda.core's own Program.compile, `compile_errors` (raised as
    cuda.core's NVRTCError), `seconds` {"python": this module's own work before calling kiln, "kiln": time
    in kiln's compile call}, `ltoir_in_kiln` (None until an ltoir request found out whether the loaded
    libkiln compiles LTO-IR, then True or False) and `engine`, the kiln engine's own counters (None before
    the first routed compile)."""
    with _state.lock:
        result = {"routed": dict(counts["routed"]), "fallbacks": dict(counts["fallbacks"]),
                  "compile_errors": counts["compile_errors"], "seconds": dict(counts["seconds"]),
                  "ltoir_in_kiln": _state.ltoir}
    engine = _state.engine or _api._default
    result["engine"] = engine.stats() if engine is not None else None
    return result


def reset_stats():
    with _state.lock:
        counts["routed"].clear()
        counts["fallbacks"].clear()
        counts["compile_errors"] = 0
        counts["seconds"] = {"python": 0.0, "kiln": 0.0}
