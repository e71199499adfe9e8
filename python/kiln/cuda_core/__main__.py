"""python -m kiln.cuda_core PROGRAM.py [ARGS...] | -m MODULE [ARGS...]

Runs a Python program with cuda.core's C++ compiles routed through kiln (kiln.cuda_core.enable() first),
for programs you cannot edit. The program sees the argv it would see when run directly. Exit status: the
program's; 2 for a usage error or when kiln.cuda_core cannot be enabled (the message says why)."""

import os
import runpy
import sys

from . import enable
from ..errors import Error

_USAGE = "usage: python -m kiln.cuda_core PROGRAM.py [ARGS...] | -m MODULE [ARGS...]"


def _prefixed(text):
    return text if text.startswith("kiln.cuda_core") else f"kiln.cuda_core: {text}"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "-m" and len(argv) < 2:
        print(_USAGE, file=sys.stderr)
        return 2
    try:
        enable()
    except Error as error:
        print(_prefixed(str(error)), file=sys.stderr)
        return 2
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python PROGRAM.py` sets it
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
