"""What kiln.triton did in this process: stats() and reset_stats()."""

from . import _state


def _fresh():
    return {"groups": {"hits": {}, "misses": 0, "stored": 0, "not_stored": 0, "incomplete": 0},
            "files": {"hits": {}, "misses": 0, "stored": 0, "not_stored": 0},
            "undecodable": 0, "delegated": {}, "handed_over": {"files": 0, "bytes": 0, "written_bytes": 0},
            "seconds": {"kiln": 0.0, "files": 0.0}}


_counts = _fresh()


def hit(kind, origin):
    """A group or file ("groups"/"files") found, where ("disk", "pack", "remote")."""
    with _state.lock:
        table = _counts[kind]["hits"]
        table[origin] = table.get(origin, 0) + 1


def count(kind, name, amount=1):
    """One more `name` of `kind` ("groups", "files"), or of a top-level counter when kind is None."""
    with _state.lock:
        if kind is None:
            _counts[name] += amount
        else:
            _counts[kind][name] += amount


def delegated(reason):
    with _state.lock:
        _counts["delegated"][reason] = _counts["delegated"].get(reason, 0) + 1


def handed_over(files, size, written, seconds):
    with _state.lock:
        _counts["handed_over"]["files"] += files
        _counts["handed_over"]["bytes"] += size
        _counts["handed_over"]["written_bytes"] += written
        _counts["seconds"]["files"] += seconds


def kiln_seconds(seconds):
    with _state.lock:
        _counts["seconds"]["kiln"] += seconds


def stats():
    """What kiln.triton did since the process started (or reset_stats()): `groups` (a compiled kernel's files:
    `hits` by where kiln found them, "disk", "pack" or "remote"; `misses`, when Triton compiles; `stored` and
    `not_stored` when Triton put one; `incomplete`, a group Triton put whose files kiln did not have, not
    stored), `files` (files Triton put or asked for on their own: launchers, autotune results; the same
    counters), `undecodable` (stored groups not in kiln.triton's format: removed, answered as misses),
    `delegated` {reason: managers} (Triton's dump and override managers, or a Triton kiln.triton does not
    support, kept Triton's own FileCacheManager), `handed_over` (files written or found right in the folder
    Triton reads them from, their bytes, and the bytes actually written), `seconds` {"kiln": in kiln's cache,
    "files": handing files over}, and `engine`, the kiln engine's counters (None before the first manager)."""
    with _state.lock:
        result = {key: (dict(value) if isinstance(value, dict) else value) for key, value in _counts.items()}
        for kind in ("groups", "files"):
            result[kind]["hits"] = dict(result[kind]["hits"])
        engine = _state._engine[1] if _state._engine is not None else None
        if _state.given_engine is not None:
            engine = _state.given_engine[1]
    result["engine"] = engine.stats() if engine is not None else None
    return result


def reset_stats():
    global _counts
    with _state.lock:
        _counts = _fresh()
