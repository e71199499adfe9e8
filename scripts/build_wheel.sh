#!/usr/bin/env bash
# Builds the kiln wheel from a CMake build: the Python package with libkiln and the kiln CLI inside,
# one file that `pip install` makes a working `import kiln` and `kiln` command, with no build tree.
#   scripts/build_wheel.sh [build-dir] [out-dir]        (defaults: build, <build-dir>/wheel)
# The last line printed is the wheel's path: kiln-<version>-py3-none-linux_<arch>.whl. Inside it:
#   kiln/lib/libkiln.so.0   libkiln (stripped), RUNPATH $ORIGIN, and the private shared libraries it
#                           needs beyond the C/C++ runtime (hiredis, when the Redis tier is built)
#   kiln/bin/kiln           the CLI, RUNPATH $ORIGIN/../lib; the `kiln` command runs it (kiln/_cli.py)
# Tagged py3-none: the package is ctypes only, so one wheel serves every Python 3 of the platform.
# Environment: KILN_PYTHON, the interpreter that builds it (default /usr/bin/python3: it needs setuptools
# and wheel, Debian's python3-setuptools python3-wheel); KILN_WHEEL_NO_BUILD=1 takes the build as it
# is (the wheel test) instead of building the targets kiln and kiln_cli first.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(realpath -m "${1:-$root/build}")"
out="$(realpath -m "${2:-$build/wheel}")"
python="${KILN_PYTHON:-/usr/bin/python3}"
[[ -x "$python" ]] || python="$(command -v python3 || true)"
fail() { echo "build_wheel: $*" >&2; exit 1; }

[[ -f "$build/CMakeCache.txt" ]] || fail "$build is not a configured kiln build (scripts/setup.sh $build)"
[[ -n "$python" ]] && "$python" -c "import setuptools, wheel" 2>/dev/null \
  || fail "${python:-python3} lacks setuptools or wheel (Debian: python3-setuptools python3-wheel;" \
          "or set KILN_PYTHON)"
if [[ "${KILN_WHEEL_NO_BUILD:-0}" != 1 ]]; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
  cmake --build "$build" -j"$(nproc)" --target kiln kiln_cli
fi
[[ -f "$build/engine/libkiln.so" ]] \
  || fail "no $build/engine/libkiln.so: the wheel needs a shared libkiln (BUILD_SHARED_LIBS=ON)"
[[ -x "$build/tools/kiln" ]] || fail "no $build/tools/kiln: the wheel needs the CLI (KILN_BUILD_TOOLS=ON)"

version="$(head -n1 "$root/python/kiln/VERSION")"
stage="$build/wheel-stage"
prefix="$stage/prefix"
package="$stage/src/kiln"
rm -rf "$stage"
mkdir -p "$stage" "$out"

# What `cmake --install` lays out (RUNPATHs as installed), stripped.
for component in kiln_library kiln_cli; do
  cmake --install "$build" --prefix "$prefix" --component "$component" --strip >"$stage/install-$component.log" \
    || fail "cmake --install --component $component failed (see $stage/install-$component.log)"
done
libdir="$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")"
soname="$(readelf -d "$prefix/$libdir/libkiln.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
# kiln/_native.py (WHEEL_LIBRARY) and the CLI's DT_NEEDED both name the library by this soname.
[[ "$soname" == libkiln.so.0 ]] \
  || fail "libkiln's soname is '$soname'; kiln/_native.py expects libkiln.so.0 in the wheel"
runpath="$(readelf -d "$prefix/bin/kiln" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
[[ "$runpath" == '$ORIGIN/../lib' ]] \
  || fail "the installed CLI's RUNPATH is '$runpath', not \$ORIGIN/../lib (configure with -DCMAKE_INSTALL_LIBDIR=lib)"

# The package, from the source tree, without build leftovers.
mkdir -p "$stage/src"
cp -r "$root/python/." "$stage/src/"
rm -rf "$stage/src/build" "$stage/src/"*.egg-info "$package/lib" "$package/bin"
find "$stage/src" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$package/lib" "$package/bin"
cp -L "$prefix/$libdir/libkiln.so" "$package/lib/$soname"
cp "$prefix/bin/kiln" "$package/bin/kiln"
cp "$root/LICENSE" "$stage/src/LICENSE"  # kiln's (setuptools puts LICEN[CS]E* in the wheel's metadata folder)

# The C and C++ runtime comes from the machine that installs the wheel (as for any Linux binary);
# every other shared library the two binaries need travels with them, beside libkiln.
system='^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s)\.so'
bundled=()
for binary in "$package/lib/$soname" "$package/bin/kiln"; do
  while read -r name _ path _; do
    [[ "$name" =~ $system || "$name" == "$soname" ]] && continue
    [[ -f "$path" ]] || fail "$(basename "$binary") needs $name, which was not found"
    if [[ ! -e "$package/lib/$name" ]]; then
      cp -L "$path" "$package/lib/$name"
      bundled+=("$name")
      # The carried library's license travels with it: Debian keeps it as the package's copyright file.
      owner="$(dpkg -S "$(realpath "$path")" 2>/dev/null | head -n1 | cut -d: -f1)"
      if [[ -n "$owner" && -f "/usr/share/doc/$owner/copyright" ]]; then
        cp "/usr/share/doc/$owner/copyright" "$package/lib/$name.copyright"
      fi
    fi
  done < <(ldd "$binary" | awk '$2 == "=>" { print $1, $2, $3, $4 }')
done
# Each carried library must find everything it needs in the wheel or among the system's runtime. Only the
# ELF files: lib/ also holds each carried library's license text, which ldd would call "not a dynamic executable".
for binary in "$package/lib/"* "$package/bin/kiln"; do
  readelf -h "$binary" >/dev/null 2>&1 || continue
  while read -r name _ path _; do
    [[ "$name" =~ $system ]] && continue
    [[ "$(realpath "$path")" == "$(realpath "$package/lib")/"* ]] \
      || fail "$(basename "$binary") finds $name at '$path', outside the wheel (a dependency of a carried library?)"
  done < <(env -u LD_LIBRARY_PATH ldd "$binary" | awk '$2 == "=>" { print $1, $2, $3, $4 }')
done
cli_version="$(env -u LD_LIBRARY_PATH "$package/bin/kiln" --version)"
[[ "$cli_version" == "kiln $version" ]] \
  || fail "the CLI says '$cli_version' but python/kiln/VERSION is $version: reconfigure and rebuild $build"

# setuptools (python/setup.py) sees lib/ and bin/ and makes the platform wheel.
rm -f "$out/kiln-$version-py3-none-"*.whl
name="$(cd "$stage/src" && "$python" - "$out" 2>"$stage/setuptools.log" <<'EOF'
import contextlib
import sys

from setuptools import build_meta

with contextlib.redirect_stdout(sys.stderr):
    name = build_meta.build_wheel(sys.argv[1])
print(name)
EOF
)" || { tail -20 "$stage/setuptools.log" >&2; fail "setuptools failed (log: $stage/setuptools.log)"; }
wheel="$out/$name"
echo "kiln wheel: $(du -k "$wheel" | cut -f1) KiB: libkiln $version (soname $soname), the kiln CLI${bundled[*]:+, ${bundled[*]}}"
echo "$wheel"
