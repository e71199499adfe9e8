#!/usr/bin/env bash
# Compiles every device_src/*.cu OFFLINE with nvcc or hipcc and checks that each kernel named on the
# file's `//! kiln-kernels: ` line is in the binary. Templates named by expression are instantiated
# through a generated wrapper that takes each kernel's address.
#
# usage: offline_compile.sh nvcc|hipcc <compiler path or empty> <device_src dir> <work dir>
# exit:  0 every file compiled and every kernel was found; 1 a compile failed or a kernel is missing;
#        77 skipped (the compiler is missing or cannot compile a trivial program here; the reason is
#        printed).
set -u

lane="${1:?lane (nvcc|hipcc)}"
compiler="${2-}"
device_src="${3:?device_src dir}"
work="${4:?work dir}"

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAILED: $*"
  exit 1
}

case "$lane" in
  nvcc)
    # target:warp size
    targets=("sm_90:32")
    ;;
  hipcc)
    targets=("gfx90a:64" "gfx1030:32")
    ;;
  *) fail "unknown lane '$lane' (nvcc|hipcc)" ;;
esac

[[ -n "$compiler" && -x "$compiler" ]] || skip "$lane not found (CMake searched PATH, CUDA_HOME/bin, /usr/local/cuda/bin, ROCM_PATH/bin, /opt/rocm/bin)"
for tool in readelf c++filt; do
  command -v "$tool" >/dev/null || skip "$tool not found: cannot inspect the binaries"
done

rm -rf "$work"
mkdir -p "$work" || fail "cannot create $work"

# compile <target> <warp> <source> <output>: prints the compiler's output; returns its status.
compile() {
  local target="$1" warp="$2" source="$3" output="$4"
  if [[ "$lane" == nvcc ]]; then
    "$compiler" -arch="$target" -cubin -std=c++17 -I"$device_src" -DKILN_WARP_SIZE="$warp" -o "$output" "$source"
  else
    # Device code only, unbundled: an AMDGPU ELF that readelf can list. An explicit --offload-arch
    # keeps hipcc from running rocm_agent_enumerator, which fails without a GPU.
    "$compiler" --offload-arch="$target" --cuda-device-only --no-gpu-bundle-output -c -std=c++17 \
      -I"$device_src" -DKILN_WARP_SIZE="$warp" -o "$output" "$source"
  fi
}

# The compiler must work at all before a failure can be blamed on kiln's sources.
probe="$work/probe.cu"
if [[ "$lane" == nvcc ]]; then
  printf '__global__ void kiln_probe(int* p) { *p = 1; }\n' >"$probe"
else
  printf '#include <hip/hip_runtime.h>\n__global__ void kiln_probe(int* p) { *p = 1; }\n' >"$probe"
fi
first_target="${targets[0]%%:*}"
first_warp="${targets[0]##*:}"
if ! probe_log=$(compile "$first_target" "$first_warp" "$probe" "$work/probe.bin" 2>&1); then
  skip "$lane cannot compile a trivial kernel for $first_target here: $(printf '%s' "$probe_log" | tail -n 5)"
fi

shopt -s nullglob
sources=("$device_src"/*.cu)
((${#sources[@]} > 0)) || fail "no .cu files in $device_src"

tag='//! kiln-kernels: '
failures=0
checked=0
for source in "${sources[@]}"; do
  base="$(basename "$source" .cu)"
  first_line="$(head -n 1 "$source")"
  if [[ "$first_line" != "$tag"* ]]; then
    echo "FAIL $base.cu: the first line is not '$tag<names>'"
    failures=$((failures + 1))
    continue
  fi
  names=()
  IFS=';' read -r -a raw <<<"${first_line#"$tag"}"
  for name in "${raw[@]}"; do
    name="$(printf '%s' "$name" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')"
    [[ -n "$name" ]] && names+=("$name")
  done
  if ((${#names[@]} == 0)); then
    echo "FAIL $base.cu: the kiln-kernels line names no kernel"
    failures=$((failures + 1))
    continue
  fi

  wrapper="$work/$base.instances.cu"
  {
    printf '#include "%s"\n' "$source"
    printf '__attribute__((used)) static const void* const kiln_offline_instances[] = {\n'
    for name in "${names[@]}"; do
      printf '    (const void*)&%s,\n' "$name"
    done
    printf '};\n'
  } >"$wrapper"

  for entry in "${targets[@]}"; do
    target="${entry%%:*}"
    warp="${entry##*:}"
    output="$work/$base.$target.bin"
    if ! log=$(compile "$target" "$warp" "$wrapper" "$output" 2>&1); then
      echo "FAIL $base.cu for $target (KILN_WARP_SIZE=$warp): $lane failed:"
      printf '%s\n' "$log"
      failures=$((failures + 1))
      continue
    fi
    if [[ -n "$log" ]]; then
      echo "note: $lane printed for $base.cu ($target):"
      printf '%s\n' "$log"
    fi
    # Function symbols, demangled, spaces removed: "voidkiln::map<float,4>(int,float,...)" or "saxpy".
    symbols="$(readelf -sW "$output" | awk '$4 == "FUNC" { print $NF }' | c++filt | tr -d ' ')"
    for name in "${names[@]}"; do
      wanted="$(printf '%s' "$name" | tr -d ' ')"
      if [[ "$wanted" == *"<"* ]]; then
        found="$(printf '%s\n' "$symbols" | grep -cF -- "void$wanted(")"
      else
        found="$(printf '%s\n' "$symbols" | grep -cxF -- "$wanted")"
      fi
      if ((found == 0)); then
        echo "FAIL $base.cu for $target: kernel '$name' is not in the binary (functions: $(printf '%s' "$symbols" | tr '\n' ' '))"
        failures=$((failures + 1))
      else
        checked=$((checked + 1))
      fi
    done
    echo "ok   $base.cu for $target (KILN_WARP_SIZE=$warp): ${#names[@]} kernel(s), $(stat -c %s "$output") bytes"
  done
done

echo "$lane: ${#sources[@]} source(s), $checked kernel instance(s) found, $failures failure(s)"
((failures == 0)) || exit 1
exit 0
