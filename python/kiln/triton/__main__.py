"""python -m kiln.triton PROGRAM.py [ARGS...] | -m MODULE [ARGS...]

Runs a Python program with Triton's kernel cache kept by kiln (kiln.triton.enable() first: TRITON_CACHE_MANAGER
is set, so Inductor's compile workers and other child processes keep theirs in kiln too). The program sees
the argv it would see when run directly. Exit status: the program's; 2 for a usage error or when kiln.triton
cannot be enabled (the message says why)."""

import sys

from .._routing import run_main
from . import enable


def main(argv):
    return run_main(argv, "kiln.triton", enable)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
