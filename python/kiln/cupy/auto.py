"""`import kiln.cupy.auto` routes CuPy's compiles through kiln: kiln.cupy.enable() as one import line.
Raises kiln.Error (and changes nothing) for a CuPy other than 14.2.x."""

from . import enable

enable()
