#!/usr/bin/env bash
# Installs what kiln needs (Debian packages) and configures the build. Idempotent: packages already
# present are not reinstalled, and an existing build directory is reconfigured in place.
#   scripts/setup.sh [build-dir]        (default: build)
# Environment: KILN_SKIP_APT=1 skips the package step; CI=true turns warnings into errors.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"

packages=(cmake g++ make libxxhash-dev libfmt-dev catch2 libcli11-dev nlohmann-json3-dev
          libamdhip64-dev hipcc libhiredis-dev redis-server libcurl4-openssl-dev nginx-light openssl clang-14 libclang-rt-14-dev ccache python3
          python3-pytest python3-pip python3-setuptools python3-wheel python3-venv pkgconf)
if [[ "${KILN_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "kiln setup: installing ${missing[*]}"
    sudo_cmd=()
    [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

werror=OFF
[[ "${CI:-}" == true ]] && werror=ON
launcher=()
# ccache caches a file compiled with a precompiled header (the tests') only when told that the header's
# macros and __TIME__ may be trusted (ccache's "Precompiled headers" rules); the launcher carries that setting, so
# that a plain `cmake --build` gets it too.
ccache_launcher="env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache"
command -v ccache >/dev/null && launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$ccache_launcher" "-DCMAKE_C_COMPILER_LAUNCHER=$ccache_launcher")
cmake -S "$root" -B "$build" -DKILN_WERROR="$werror" "${launcher[@]}" ${KILN_CMAKE_ARGS:-} >/dev/null
lanes=$(sed -nE 's/^KILN_(CUDA|HIP)_INCLUDE:PATH=(.+)$/\1 headers \2/p' "$build/CMakeCache.txt" 2>/dev/null | grep -v NOTFOUND | tr '\n' ';' | sed 's/;$//; s/;/; /g' || true)
echo "kiln setup: configured $build (${lanes:-no vendor headers found: both lanes compiled out})"
