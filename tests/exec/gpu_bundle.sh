#!/bin/bash
# tools/gpu-bundle's output runs on a machine with an NVIDIA driver and nothing else: assembled
# from this build's binaries, with an empty LD_LIBRARY_PATH, ldd resolves every library of every
# bundled binary inside the bundle, but the C library's and the driver's libcuda.so.1 (loaded at
# run time by the static CUDA runtime; never "not found" but for it), and the binaries' RUNPATH
# is the bundle's. This machine has CUDA in its loader cache, so a library found outside the
# bundle is a failure even when it resolves.
# With --slim (tools/gpu-bundle --slim) cuBLAS, cuBLASLt and NCCL come from the GPU machine: they
# may resolve outside the bundle or not at all, REQUIREMENTS must name them, and the bundle must fit
# the 64 MiB a lent device machine takes along.
# Usage: gpu_bundle.sh [--slim] SOURCE_DIR BINARY...  (assembles a bundle of them, then checks it)
#        gpu_bundle.sh --bundle DIR                   (checks a bundle tools/gpu-bundle wrote)
set -euo pipefail
slim=()
if [[ $1 == --slim ]]; then
  slim=(--slim)
  shift
fi
if [[ $1 == --bundle ]]; then
  bundle=$(cd "$2" && pwd)
  set -- "$bundle/domino" "$bundle/exec_gpu_test"
else
  src=$1
  shift
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$src/tools/gpu-bundle" "${slim[@]}" --assemble "$tmp/gpu-bundle" "$@" >/dev/null
  bundle="$tmp/gpu-bundle"
fi
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
status=0
for binary in "$@"; do
  b="$bundle/$(basename "$binary")"
  runpath=$(readelf -d "$b" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [[ $runpath == '$ORIGIN/lib' ]] || { echo "FAIL $b: RUNPATH '$runpath'"; status=1; }
  resolved=$(env -u LD_LIBRARY_PATH ldd "$b")
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if ((${#slim[@]})) && [[ $name =~ ^(libcublas|libcublasLt|libnccl)\.so ]]; then
      [[ -e "$bundle/lib/$name" ]] && { echo "FAIL $b: the slim bundle carries $name"; status=1; }
      continue
    fi
    if [[ $path == "not" ]]; then
      [[ $name == libcuda.so.1 ]] || { echo "FAIL $b: $name not found"; status=1; }
    elif [[ ! $name =~ $system && $path != "$bundle/lib/"* ]]; then
      echo "FAIL $b: $name resolves outside the bundle ($path)"; status=1
    fi
    [[ $name != libcudart.so* ]] || { echo "FAIL $b: links the shared CUDA runtime"; status=1; }
  done <<<"$resolved"
  ((${#slim[@]})) && continue
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    grep -q "$lib => $bundle/lib/" <<<"$resolved" ||
      { echo "FAIL $b: $lib not from the bundle"; status=1; }
  done
done
grep -q '^driver [0-9]' "$bundle/REQUIREMENTS" || { echo "FAIL: REQUIREMENTS has no driver"; status=1; }
grep -q '^glibc [0-9]' "$bundle/REQUIREMENTS" || { echo "FAIL: REQUIREMENTS has no glibc"; status=1; }
if ((${#slim[@]})); then
  grep -q '^machine_libs .*libcublas.so.13' "$bundle/REQUIREMENTS" ||
    { echo "FAIL: REQUIREMENTS names no machine libraries"; status=1; }
  mib=$(du -smL "$bundle" | cut -f1)
  ((mib < 64)) || { echo "FAIL: the slim bundle is $mib MiB (a device machine takes 64)"; status=1; }
fi
((status == 0)) && echo "gpu bundle ok"
exit $status
