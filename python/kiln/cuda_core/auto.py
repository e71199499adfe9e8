"""`import kiln.cuda_core.auto` routes cuda.core's C++ compiles through kiln: kiln.cuda_core.enable() as one
import line. Raises kiln.Error (and changes nothing) for a cuda.core other than 1.2.x."""

from . import enable

enable()
