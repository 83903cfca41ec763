#!/bin/bash
# tools/gpu-check-summary reads a gpu-check log: here one made of real CPU outputs in gpu-check's
# sections. Usage: gpu_check_summary.sh DOMINO SOURCE_DIR
set -euo pipefail
domino=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--model "$src/models/examples/tiny-gpt.yaml" --cluster dgx-h100:1:1 --tp 1 --seq-len 16
       --micro-batch 12 --global-batch 12 --row-split 2 --scope inter-layer)
"$domino" simulate "${flags[@]}" --report "$tmp/p.yaml" >/dev/null
section() { printf '\n## %s\n\n```\n$ command\n' "$1"; }
{
  printf '# domino gpu-check\n'
  section "calibrate"
  printf 'dense GEMM 771.4 TFLOP/s, HBM 4210 GB/s (device-to-device copy)\n```\n'
  section "row2: measured (emulated collectives)"
  "$domino" execute "${flags[@]}" --report "$tmp/m.yaml"
  printf '```\n'
  section "row2: predicted vs measured"
  "$domino" compare "$tmp/p.yaml" "$tmp/m.yaml"
  printf '```\n'
} >"$tmp/log.md"
python3 "$src/tools/gpu-check-summary" "$tmp/log.md" >"$tmp/summary.md"
grep -q "^Measured dense GEMM peak 771.4 TFLOP/s, HBM 4210 GB/s" "$tmp/summary.md"
# row2: the stack's predicted and measured length and hidden fraction, the iteration and the GEMMs'
# TFLOP/s are numbers; what the log lacks (calibrated, CUDA graph, other strategies) is "-".
grep -qE '^\| row2 \| [0-9.]+ \| - \| [0-9.]+ \| [0-9.]+ \| - \| [0-9.]+ \| [0-9.]+ \| - \| [0-9.]+ \|$' \
  "$tmp/summary.md" || { cat "$tmp/summary.md"; exit 1; }
grep -q '^| baseline | - | - | - | - | - | - | - | - | - |$' "$tmp/summary.md"
echo "gpu-check summary ok"
