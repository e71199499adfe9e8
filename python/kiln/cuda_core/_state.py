"""The switch's state, shared by enable()/disable() (_patch), the routing Program subclass (_program) and
stats() (_stats). It lives here alone, read and changed as `_state.<name>`, so that every module sees the
same values."""

import threading

lock = threading.RLock()  # guards the switch, the counters, the warnings given and the LTO-IR finding
enabled = False
original = None  # cuda.core's own Program class, saved by the first enable()
routed_class = None  # the subclass enable() put in its place (made once per original class)
engine = None  # None: kiln.default_engine()
nvrtc_error = None  # cuda.core's NVRTCError class, found by enable()
ltoir = None  # whether the loaded libkiln compiles target lto_XY: None until the first ltoir request says
