#!/bin/bash
# `domino compare` of a whole step's prediction (simulate --report-iteration) with its CPU run
# (execute --extent step --report): rank 0's ops of every stream match their predictions by label.
# Usage: step_compare.sh DOMINO MPIEXEC SOURCE_DIR
set -uo pipefail
domino=$1 mpiexec=$2 src=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
flags=(--model "$src/models/examples/tiny-gpt.yaml" --cluster dgx-h100:1:8 --tp 2 --pp 2 --dp 2
       --seq-len 16 --micro-batch 4 --global-batch 16)
"$domino" simulate "${flags[@]}" --report-iteration "$dir/predicted.yaml" >/dev/null ||
  fail "simulate --report-iteration"
out=$(timeout 120 "$mpiexec" -np 8 --oversubscribe "$domino" execute --backend cpu "${flags[@]}" \
      --report "$dir/measured.yaml" 2>&1) || fail "execute: $out"
out=$("$domino" compare "$dir/predicted.yaml" "$dir/measured.yaml" --top 100 2>&1) ||
  fail "compare: $out"
# Stage 0 of tp 2 x pp 2 x dp 2 with 2 micro-batches: 2 forwards, 2 sends, 2 recvs, 2 backwards,
# 2 DP buckets (layer 0, then the embedding), the embedding's sync and Adam.
grep -q "^12 ops matched (11 of 23 predicted ops unmatched, 12 measured)" <<<"$out" ||
  fail "not every measured op matched: $out"
grep -q "^whole iteration, rank 0's stage (matched ops)" <<<"$out" ||
  fail "the iteration's figures are not labelled as such: $out"
# The prediction priced megatron-core's kernels, the default stack; the executor runs its own.
grep -q "^# note: the prediction prices the megatron-core stack's kernels; domino execute runs its own (stack domino)" <<<"$out" ||
  fail "no note on the stack the prediction priced: $out"
grep -q "^# note: the prediction's loss runs as cross_entropy vocab-parallel; the executor's as fused" <<<"$out" ||
  fail "no note on the loss the prediction priced: $out"
grep -q "^# note: the prediction's attention runs as flash; the executor's as unfused" <<<"$out" ||
  fail "no note on the attention kernel the prediction priced: $out"
# Predicted with the executor's stack, nothing to note; with bf16 gradient buckets, those.
"$domino" simulate "${flags[@]}" --stack domino --report-iteration "$dir/domino.yaml" >/dev/null ||
  fail "simulate --stack domino"
same=$("$domino" compare "$dir/domino.yaml" "$dir/measured.yaml" 2>&1) || fail "compare: $same"
! grep -q "^# note" <<<"$same" || fail "a note where the prediction priced what ran: $same"
"$domino" simulate "${flags[@]}" --stack domino --grad-reduce param \
  --report-iteration "$dir/bf16.yaml" >/dev/null || fail "simulate --grad-reduce param"
half=$("$domino" compare "$dir/bf16.yaml" "$dir/measured.yaml" 2>&1) || fail "compare: $half"
grep -q "^# note: the prediction reduces gradients in 2-byte elements; the executor's buckets hold 4-byte ones" <<<"$half" ||
  fail "no note on the gradient type: $half"
for op in "forward v0 mb1 fwd" "backward v0 mb0 bwd" "pp.send v0 mb0 fwd" "pp.recv v0 mb1 bwd" \
          "dp.allreduce v0 L0 bwd" "embedding.allreduce S1 optim" "optimizer optim"; do
  grep -q "^$op " <<<"$out" || fail "$op not compared: $out"
done
# The measured step against a plan without a timeline: the figures that need TP collectives timed
# apart are not compared (they are the step's bubbles and other communication too).
# A report cut before its timeline is refused; the plan in it, without its report: line, is not.
"$domino" simulate "${flags[@]}" --report "$dir/plan.yaml" >/dev/null || fail "simulate --report"
sed -i '/^timeline:/,$d' "$dir/plan.yaml"
cut=$("$domino" compare "$dir/plan.yaml" "$dir/measured.yaml" 2>&1) && fail "a cut report compared: $cut"
grep -q "plan.yaml:2:9: report: simulate, but no timeline: block follows: the file was cut short" \
  <<<"$cut" || fail "wrong refusal of a cut report: $cut"
sed -i '/^report:/d' "$dir/plan.yaml"
bare=$("$domino" compare "$dir/plan.yaml" "$dir/measured.yaml" 2>&1) || fail "compare: $bare"
grep -Eq "^ideal ms +[0-9.]+ +- +-$" <<<"$bare" || fail "a step's ideal compared: $bare"
grep -Eq "^exposed TP comm ms +[0-9.]+ +- +-$" <<<"$bare" || fail "a step's exposed comm compared: $bare"
grep -q "^timeline:  # a whole iteration on one rank" "$dir/measured.yaml" ||
  fail "the step's timeline called something else: $(grep "^timeline:" "$dir/measured.yaml")"
# At tp 1 the collectives move nothing: no TP comm time on either side of the layer stack. A layer
# stack measured against a whole model's prediction is said to be one.
tiny=(--model "$src/models/examples/tiny-llama.yaml" --cluster dgx-h100:1:1 --seq-len 16
      --micro-batch 4 --stack domino)
"$domino" simulate "${tiny[@]}" --report "$dir/p1.yaml" >/dev/null || fail "simulate tp 1"
"$domino" execute "${tiny[@]}" --report "$dir/m1.yaml" >/dev/null || fail "execute tp 1"
"$domino" execute "${tiny[@]}" --extent layers --report "$dir/ml.yaml" >/dev/null ||
  fail "execute --extent layers"
one=$("$domino" compare "$dir/p1.yaml" "$dir/m1.yaml" 2>&1) || fail "compare tp 1: $one"
grep -Eq "^TP comm busy ms +0\.000 +0\.000 " <<<"$one" || fail "tp 1's collectives as TP comm: $one"
layers=$("$domino" compare "$dir/p1.yaml" "$dir/ml.yaml" 2>&1) || fail "compare layers: $layers"
grep -q "^# note: the measured report holds the layer stack only" <<<"$layers" ||
  fail "a layer stack against a whole model not said: $layers"
# Two runs of the executor compared: nothing a prediction priced to note, only what the first
# column holds.
twice=$("$domino" compare "$dir/m1.yaml" "$dir/m1.yaml" 2>&1) || fail "compare of two runs: $twice"
[[ "$(grep "^# note" <<<"$twice")" == "# note: $dir/m1.yaml holds a measurement, not a prediction: the predicted column is its measured figures" ]] ||
  fail "notes on two measurements: $twice"
echo "step compare ok"
