"""The state kiln.triton's parts share, read and changed as `_state.<name>` (so every module sees the same
values): the lock, the switch, and the kiln engine the managers keep Triton's files with."""

import atexit
import os
import threading

lock = threading.RLock()  # guards the switch, the engine, the counters and the warnings given
enabled = False  # enable() put kiln's manager in place (the environment alone also does: see _patch.enabled)
saved_environment = None  # (had it, its value): TRITON_CACHE_MANAGER before enable()
saved_knob = None  # (had it, its value): an explicitly set triton.knobs.cache.manager_class before enable()
given_engine = None  # (pid, kiln.Engine) from enable(engine=...)
_engine = None  # (pid, kiln.Engine) made here


def engine():
    """The kiln.Engine of this process: the one enable() was given, else one made from the KILN_* environment
    without a GPU runtime (a compile worker of Inductor must not initialise CUDA; libkiln API 7, else a plain
    one). Made again in a forked child: an engine's threads do not survive a fork."""
    global _engine, given_engine
    pid = os.getpid()
    with lock:
        if given_engine is not None:
            if given_engine[0] == pid:
                return given_engine[1]
            _forget(given_engine[1])
            given_engine = None
        if _engine is None or _engine[0] != pid:
            from .. import _api, _native

            if _engine is not None:
                _forget(_engine[1])

            runtime = _native.load()[2] < _native.LABEL_API_VERSION
            _engine = (pid, _api.Engine(runtime=runtime))
            atexit.register(_close, pid)
        return _engine[1]


def _forget(inherited):
    """An engine a forked child inherited: never destroyed here (its threads are the parent's; destroying it
    would wait for them). Its handle is dropped; the parent still owns the engine."""
    inherited._handle = None


def _close(pid):
    """At exit: closes the engine made here, so that what it still has to publish reaches the remote tiers
    (an engine's close flushes them, within KILN_REMOTE_* limits)."""
    global _engine
    with lock:
        made, _engine = _engine, None
    if made is not None and made[0] == pid == os.getpid():
        made[1].close()
