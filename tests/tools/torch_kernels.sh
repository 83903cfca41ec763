#!/bin/bash
# tools/torch-kernels measures on a GPU machine with PyTorch. Here: its help works without
# PyTorch, and without PyTorch (or a GPU) a run ends in one line and a non-zero exit.
# Usage: torch_kernels.sh SOURCE_DIR
set -u
tool="$1/tools/torch-kernels"
for flag in --gemm-context --memory --contention --layers; do
  python3 "$tool" --help | grep -q -- "$flag" || { echo "no $flag in --help"; exit 1; }
done
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  out="$(python3 "$tool" 2>&1)"
  rc=$?
  [[ $rc -ne 0 ]] || { echo "exit 0 without PyTorch or a GPU"; exit 1; }
  [[ $(printf '%s\n' "$out" | wc -l) -eq 1 ]] || { echo "more than one line: $out"; exit 1; }
fi
echo "torch-kernels ok"
