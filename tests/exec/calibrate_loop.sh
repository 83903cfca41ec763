#!/bin/bash
# The CPU loop: calibrate on the CPU backend -> simulate with the profile -> execute on the CPU ->
# compare; the median per-op error must be under 25%. Usage: calibrate_loop.sh DOMINO MPIEXEC SRC
set -euo pipefail
domino=$1 mpiexec=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--model "$src/models/examples/tiny-llama.yaml" --cluster dgx-h100:1:2 --tp 2 --seq-len 16
       --micro-batch 12 --row-split 2 --scope inter-layer)
"$mpiexec" -np 2 --oversubscribe "$domino" calibrate "${flags[@]}" --out "$tmp/profile.yaml"
grep -q "^contention: false" "$tmp/profile.yaml"
grep -q "^  - \[allreduce, 2, " "$tmp/profile.yaml"
"$domino" simulate "${flags[@]}" --hardware-profile "$tmp/profile.yaml" --report "$tmp/p.yaml" >/dev/null
"$mpiexec" -np 2 --oversubscribe "$domino" execute "${flags[@]}" --iterations 7 \
  --report "$tmp/m.yaml" >/dev/null
"$domino" compare "$tmp/p.yaml" "$tmp/m.yaml" | tee "$tmp/compare.txt"
error=$(sed -nE 's/^median per-op error: ([0-9.]+)% .*/\1/p' "$tmp/compare.txt")
[[ -n $error ]] || { echo "no median per-op error printed"; exit 1; }
python3 -c "import sys; sys.exit(0 if float('$error') < 25 else 1)" ||
  { echo "median per-op error $error% is not under 25%"; exit 1; }
# A profile that is not one is refused with its line.
printf 'device: cpu\nbackend: cpu\ncompute:\n  - [qkv, -3]\n' >"$tmp/bad.yaml"
if "$domino" simulate "${flags[@]}" --hardware-profile "$tmp/bad.yaml" 2>"$tmp/err.txt"; then
  echo "a bad profile was accepted"; exit 1
fi
grep -q "bad.yaml:4:.*compute" "$tmp/err.txt"
echo "calibration loop ok: median per-op error $error%"
