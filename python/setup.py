"""What pyproject.toml cannot say statically: whether this build is the pure-Python package or the
platform wheel that carries libkiln and the kiln CLI.

scripts/build_wheel.sh stages a copy of python/ with kiln/lib/libkiln.so.0 (and the private shared
libraries it needs) and kiln/bin/kiln in it, then builds here: that wheel is tagged
py3-none-<platform> (the package is ctypes only, so any Python 3 loads it, but the binaries are the
platform's), installs into platlib and declares the `kiln` command. Built from the source tree or an
sdist, without those files, the package stays pure Python and declares no command: people who bring
their own libkiln bring their own CLI too."""

import os

from setuptools import Distribution, setup

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = all(os.path.isfile(os.path.join(HERE, "kiln", *part.split("/"))) for part in ("lib/libkiln.so.0", "bin/kiln"))


class NativeDistribution(Distribution):
    """Binaries inside, though no extension module: platlib and a platform wheel."""

    def has_ext_modules(self):
        return True


def platform_wheel_command():
    try:  # setuptools 70.1 and newer carry bdist_wheel; before that it is the wheel package's
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        def get_tag(self):
            platform = super().get_tag()[2]
            return "py3", "none", platform  # no CPython ABI used: ctypes loads the library

    return PlatformWheel


if NATIVE:
    setup(distclass=NativeDistribution, cmdclass={"bdist_wheel": platform_wheel_command()},
          entry_points={"console_scripts": ["kiln = kiln._cli:main"]})
else:
    setup(entry_points={})  # pyproject.toml leaves the scripts to this file: none here
