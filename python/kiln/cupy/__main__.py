"""python -m kiln.cupy PROGRAM.py [ARGS...] | -m MODULE [ARGS...]

Runs a Python program with CuPy's kernel compiles routed through kiln (kiln.cupy.enable() first), for
programs you cannot edit. The program sees the argv it would see when run directly. Exit status: the
program's; 2 for a usage error or when kiln.cupy cannot be enabled (the message says why)."""

import sys

from .._routing import run_main
from . import enable


def main(argv):
    return run_main(argv, "kiln.cupy", enable)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
