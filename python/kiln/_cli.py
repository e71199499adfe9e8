"""The `kiln` command a wheel puts on PATH: it runs the kiln CLI the wheel carries (kiln/bin/kiln, a C++
program that finds the wheel's libkiln through its RUNPATH), with the arguments as given. A console
entry point is the one way onto PATH that every pip install layout (venv, --user, --target, --prefix)
gives; the program itself keeps its own start-up, output and exit status.

A package without the CLI (installed from the source tree or the sdist) declares no `kiln` command, so
main() only meets a missing program in a damaged install: it says so, with exit status 2 (the CLI's own
status for an error that stopped the command)."""

import os
import sys

from ._native import WHEEL_CLI


def program():
    """The path of the kiln CLI inside this package (it may be absent)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), WHEEL_CLI)


def main():
    path = program()
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"kiln: error: this kiln package carries no kiln CLI ({path} is missing or not executable): "
                         "install the kiln wheel (scripts/build_wheel.sh) or build kiln's kiln_cli target\n")
        return 2
    try:
        os.execv(path, [path] + sys.argv[1:])
    except OSError as error:
        sys.stderr.write(f"kiln: error: {path} could not be run: {error}\n")
        return 2
