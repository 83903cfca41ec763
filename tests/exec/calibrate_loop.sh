#!/bin/bash
# The CPU loop: calibrate on the CPU backend -> simulate with the profile -> execute on the CPU ->
# compare; the median per-op error must be under 25%. Usage: calibrate_loop.sh DOMINO MPIEXEC SRC
set -euo pipefail
domino=$1 mpiexec=$2 src=$3
# Keep the output short (ctest shows only the first KiB of it) and say where a failure happened.
trap 'echo "calibrate_loop: failed at line $LINENO" >&2' ERR
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--model "$src/models/examples/tiny-llama.yaml" --cluster dgx-h100:1:2 --tp 2 --seq-len 16
       --micro-batch 12 --row-split 2 --scope inter-layer)
# One pass of the loop; prints the median per-op error.
loop() {
  "$mpiexec" -np 2 --oversubscribe "$domino" calibrate "${flags[@]}" --out "$tmp/profile.yaml" \
    --force >/dev/null
  grep -q "^contention: false" "$tmp/profile.yaml"
  grep -q "^  - \[allreduce, 2, " "$tmp/profile.yaml"
  "$domino" simulate "${flags[@]}" --hardware-profile "$tmp/profile.yaml" --report "$tmp/p.yaml" \
    --force >/dev/null
  "$mpiexec" -np 2 --oversubscribe "$domino" execute "${flags[@]}" --iterations 7 \
    --report "$tmp/m.yaml" --force >/dev/null
  "$domino" compare "$tmp/p.yaml" "$tmp/m.yaml" >"$tmp/compare.txt"
  sed -nE 's/^median per-op error: ([0-9.]+)% .*/\1/p' "$tmp/compare.txt"
}
# Microsecond CPU kernels on a shared 2-vCPU machine: a burst of noise during calibration or
# execution can spoil one pass (typically 1-20% error; on a noisy day of this VM a third of the
# calibrations read the same tiny GEMM 1.6x faster than the others and every op of that pass
# 30-50% off), so three passes are allowed; a real modelling error fails all three.
for attempt in 1 2 3; do
  error=$(loop)
  [[ -n $error ]] || { cat "$tmp/compare.txt"; echo "no median per-op error printed"; exit 1; }
  python3 -c "import sys; sys.exit(0 if float('$error') < 25 else 1)" && break
  echo "pass $attempt: median per-op error $error% is not under 25%"
  if [[ $attempt == 3 ]]; then sed -n '/op class/,$p' "$tmp/compare.txt"; exit 1; fi
done
# A profile that is not one is refused with its line.
printf 'device: cpu\nbackend: cpu\ncompute:\n  - [qkv, -3]\n' >"$tmp/bad.yaml"
if "$domino" simulate "${flags[@]}" --hardware-profile "$tmp/bad.yaml" 2>"$tmp/err.txt"; then
  echo "a bad profile was accepted"; exit 1
fi
grep -q "bad.yaml:4:.*compute" "$tmp/err.txt"
echo "calibration loop ok: median per-op error $error%"
