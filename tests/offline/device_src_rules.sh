#!/usr/bin/env bash
# The colibri rule, checked: kernel sources (device_src/*.cu) never test a vendor or compiler macro;
# every difference lives in kiln/rtc.h. Each source starts with its `//! kiln-kernels: ` line and
# includes <kiln/rtc.h>.
# usage: device_src_rules.sh <device_src dir>      exit: 0 clean, 1 a rule is broken
set -u
device_src="${1:?device_src dir}"
shopt -s nullglob
sources=("$device_src"/*.cu)
((${#sources[@]} > 0)) || { echo "FAILED: no .cu files in $device_src"; exit 1; }

vendor_macros='__CUDACC__|__CUDACC_RTC__|__CUDA_ARCH__|__NVCC__|__HIP__|__HIPCC__|__HIPCC_RTC__|__HIP_PLATFORM_[A-Z_]*|__HIP_DEVICE_COMPILE__|__AMDGCN[A-Z_]*|__AMDGPU__|__gfx[0-9a-z]*__|KILN_CUDA|KILN_HIP|KILN_RTC'
failures=0
for source in "${sources[@]}"; do
  name="$(basename "$source")"
  if [[ "$(head -n 1 "$source")" != '//! kiln-kernels: '* ]]; then
    echo "FAIL $name: the first line must be '//! kiln-kernels: <names>'"
    failures=$((failures + 1))
  fi
  if ! grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]kiln/rtc\.h[>"]' "$source"; then
    echo "FAIL $name: does not include <kiln/rtc.h>"
    failures=$((failures + 1))
  fi
  if hits="$(grep -nE "^[[:space:]]*#[[:space:]]*(if|ifdef|ifndef|elif|elifdef|elifndef)\b.*($vendor_macros)" "$source")"; then
    echo "FAIL $name tests a vendor macro (move the difference into kiln/rtc.h):"
    printf '%s\n' "$hits"
    failures=$((failures + 1))
  fi
done
echo "device_src rules: ${#sources[@]} source(s), $failures failure(s)"
((failures == 0))
