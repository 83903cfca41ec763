#!/bin/bash
# The CUDA backend against the CPU reference (`execute --backend cuda --check`), on one GPU: one
# rank, and two ranks sharing it over MPI. Skips (exit 77) when no GPU is visible.
# Usage: cuda_check.sh DOMINO MPIEXEC SOURCE_DIR
set -uo pipefail
domino=$1 mpiexec=$2 src=$3
probe=$("$domino" execute --backend cuda --model "$src/models/examples/tiny-gpt.yaml" \
        --cluster dgx-h100:1:1 --tp 1 --seq-len 16 --micro-batch 4 2>&1)
if grep -q "no CUDA GPU is visible\|no CUDA support" <<<"$probe"; then
  echo "skipped: $probe"
  exit 77
fi
status=0
for model in tiny-gpt tiny-llama; do
  for split in "--row-split 1 --scope none" "--row-split 2 --scope inter-layer" \
               "--row-split 4 --col-split 2 --scope inter-layer"; do
    for ranks in 1 2; do
      out=$("$mpiexec" -np "$ranks" --oversubscribe "$domino" execute --backend cuda --check \
            --model "$src/models/examples/$model.yaml" --cluster "dgx-h100:1:$ranks" --tp "$ranks" \
            --seq-len 16 --micro-batch 12 $split --tolerance 1e-3 2>&1)
      if grep -q "check passed" <<<"$out"; then
        echo "ok   $model tp $ranks $split"
      else
        echo "FAIL $model tp $ranks $split"; echo "$out" | tail -20; status=1
      fi
    done
  done
done
((status == 0)) && echo "cuda check ok"
exit $status
