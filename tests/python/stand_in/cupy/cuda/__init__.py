from cupy.cuda import compiler  # noqa: F401
from cupy.cuda import function  # noqa: F401
