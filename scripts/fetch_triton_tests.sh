#!/usr/bin/env bash
# Puts Triton's own runtime cache tests, at the tag of the Triton version the GPU machine has, into
# .carry/triton_tests (for scripts/h200_triton.py, part "tests"), from a git mirror of Triton's repository:
#   scripts/fetch_triton_tests.sh [VERSION] [MIRROR]
# VERSION: 3.6.0 (the installed Triton's; the tag is v<VERSION>); MIRROR: /work/.mirror/triton-lang+triton/repo
# (a bare mirror, as `fetch github:triton-lang/triton` leaves it). The files, as Triton's tree has them:
#   python/test/conftest.py, python/test/unit/conftest.py      (the device, fresh_triton_cache, fresh_knobs fixtures)
#   python/test/unit/runtime/test_cache.py                     (the JIT's cache: keys, reuse, specialization,
#                                                               preload, hooks, async compile)
#   python/test/unit/runtime/test_build.py                     (launcher modules built and cached, a bad cached one)
#   python/test/unit/runtime/test_subproc.py                   (compiles in child processes sharing the cache)
# A file the tag does not have is left out (and named); nothing else is taken from the mirror.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:-3.6.0}"
mirror="${2:-/work/.mirror/triton-lang+triton/repo}"
out="$root/.carry/triton_tests"
files=(python/test/conftest.py python/test/unit/conftest.py python/test/unit/runtime/test_cache.py
       python/test/unit/runtime/test_build.py python/test/unit/runtime/test_subproc.py)
tag="v$version"
git --git-dir="$mirror" rev-parse --verify --quiet "$tag^{commit}" >/dev/null \
  || { echo "fetch_triton_tests: no tag $tag in $mirror" >&2; exit 1; }
present=()
for file in "${files[@]}"; do
  if git --git-dir="$mirror" cat-file -e "$tag:$file" 2>/dev/null; then present+=("$file"); else echo "not at $tag: $file"; fi
done
rm -rf "$out" && mkdir -p "$out"
git --git-dir="$mirror" archive "$tag" "${present[@]}" | tar -x -C "$out"
echo "$tag $(git --git-dir="$mirror" rev-parse "$tag^{commit}")" >"$out/TAG"
echo "into $out (Triton $tag):"
(cd "$out" && find . -type f | sort)
