"""The switch's state, shared by enable()/disable() (_patch), the replacement compile function (_compile)
and stats() (_stats). It lives here alone, read and changed as `_state.<name>`, so that every module sees
the same values (kiln.cupy._enabled, ._original and ._engine reach these too)."""

import threading

lock = threading.RLock()  # guards the switch, the counters and the set of warnings given
enabled = False
original = None  # CuPy's function, saved by the first enable()
engine = None  # None: kiln.default_engine()
