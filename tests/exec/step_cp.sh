#!/bin/bash
# Whole training steps with context parallelism through the launcher's MPI, one run for each of
# Transformer Engine's CP comm types, each checked against the single rank: the p2p ring beside
# TP, all_gather over row slices, a2a (MPI's all-to-all) beside TP, and a2a+p2p (split groups);
# then under recompute, whose forward runs the core again in the backward.
# Usage: step_cp.sh DOMINO MPIEXEC SOURCE_DIR
set -uo pipefail
domino=$1 mpiexec=$2 src=$3
fail() { echo "FAIL: $*"; exit 1; }
run() {  # TP CP COMM SAYS FLAGS...
  local tp=$1 cp=$2 comm=$3 says=$4
  shift 4
  local ranks=$((tp * cp))
  out=$(timeout 120 "$mpiexec" -np "$ranks" --oversubscribe "$domino" execute --backend cpu \
        --check --model "$src/models/examples/tiny-llama.yaml" --cluster "dgx-h100:1:$ranks" \
        --tp "$tp" --cp "$cp" --cp-comm "$comm" --seq-len 16 --micro-batch 4 --global-batch 8 \
        "$@" 2>&1)
  grep -q "^check passed" <<<"$out" || fail "tp $tp cp $cp $comm $*: $out"
  grep -q "^# tp $tp x cp $cp x pp 1 x dp 1 (context parallelism $says) |" <<<"$out" ||
    fail "tp $tp cp $cp $comm: the header does not say how CP communicates: $out"
  echo "ok tp $tp cp $cp $comm $*"
}
run 2 2 p2p p2p
run 1 2 all_gather all_gather --row-split 2
run 2 2 a2a a2a
run 1 4 a2a+p2p "a2a+p2p, a2a groups of 2"
run 1 2 all_gather all_gather --recompute selective
run 1 2 a2a a2a --recompute full
run 1 4 a2a+p2p "a2a+p2p, a2a groups of 2" --recompute full
echo "context parallel steps ok"
