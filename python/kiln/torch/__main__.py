"""python -m kiln.torch PROGRAM.py [ARGS...] | -m MODULE [ARGS...]

Runs a Python program with torch.cuda._compile_kernel's compiles routed through kiln (kiln.torch.enable()
first), for programs you cannot edit. The program sees the argv it would see when run directly. Exit status:
the program's; 2 for a usage error or when kiln.torch cannot be enabled (the message says why)."""

import sys

from .._routing import run_main
from . import enable


def main(argv):
    return run_main(argv, "kiln.torch", enable)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
