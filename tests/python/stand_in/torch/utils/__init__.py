from . import cpp_extension  # noqa: F401
