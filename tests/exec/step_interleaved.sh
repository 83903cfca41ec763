#!/bin/bash
# Whole training steps with the interleaved pipeline schedule (2 model chunks per stage), which
# needs pp x 2 = 4 layers: 4-layer copies of the tiny models. Usage: step_interleaved.sh DOMINO
# MPIEXEC SOURCE_DIR
set -uo pipefail
domino=$1 mpiexec=$2 src=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for model in tiny-gpt tiny-llama; do
  sed -e 's/^layers: .*/layers: 4/' -e "s/^name: .*/name: $model-4/" \
    "$src/models/examples/$model.yaml" >"$dir/$model-4.yaml"
done
run() {  # MODEL TP PP DP FLAGS...
  local model=$1 tp=$2 pp=$3 dp=$4
  shift 4
  local ranks=$((tp * pp * dp))
  out=$(timeout 120 "$mpiexec" -np "$ranks" --oversubscribe "$domino" execute --backend cpu \
        --check --model "$dir/$model-4.yaml" --cluster "dgx-h100:1:$ranks" --tp "$tp" --pp "$pp" \
        --dp "$dp" --virtual-stages 2 --seq-len 16 --micro-batch 4 --global-batch 16 "$@" 2>&1)
  grep -q "^check passed" <<<"$out" || fail "$model tp $tp pp $pp dp $dp $*: $out"
  grep -q "interleaved, 2 chunks per stage" <<<"$out" || fail "$model: not interleaved: $out"
  echo "ok $model tp $tp pp $pp dp $dp v 2 $*"
}
run tiny-gpt 1 2 2
run tiny-llama 2 2 1 --sp --row-split 2 --distributed-optimizer
run tiny-gpt 1 2 2 --stack megatron-core --distributed-optimizer
echo "interleaved steps ok"
