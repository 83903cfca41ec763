#!/bin/bash
# `domino simulate` on whole iterations: the breakdown of a 3D plan adds up, a plan that does not
# fit in GPU memory is refused with its numbers and no report written, and the plan file may be
# given as the positional argument.
# Usage: simulate_cli.sh DOMINO
set -uo pipefail
domino=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

out=$("$domino" simulate --model gpt3-175b --cluster dgx-a100:8 --tp 8 --pp 8 --micro-batch 1 \
  --global-batch 64 --seq-len 2048 --recompute full --virtual-stages 3) || fail "175B plan failed"
for part in "compute (TP comm free)" "TP comm exposed in its passes" "pipeline bubble" "exposed PP transfers" \
            "exposed DP comm" "optimizer step"; do
  grep -q "^$part " <<<"$out" || fail "no '$part' line"
done
# The parts add up to the iteration.
python3 - "$out" <<'PY' || fail "breakdown does not add up"
import re, sys
text = sys.argv[1]
iteration = float(re.search(r"^iteration\s+([\d.]+) ms", text, re.M).group(1))
start = text.index("iteration on stage")
parts = [float(m.group(1)) for m in re.finditer(r"^[a-zA-Z (]+[a-z)]\s+(-?[\d.]+)\s+-?[\d.]+$", text[start:], re.M)]
assert len(parts) == 6, parts
assert abs(sum(parts) - iteration) < 0.05, (parts, iteration)
PY

big=(--model llama3-405b --cluster dgx-h100:2048 --tp 8 --pp 16 --dp 128 --seq-len 8192
     --micro-batch 1 --global-batch 2048)
if "$domino" simulate "${big[@]}" --report "$tmp/r.yaml" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  fail "a plan that does not fit was predicted"
fi
grep -q "does not fit at seq 8192 and micro-batch 1: .* GiB per GPU .* exceeds the h100-sxm's 79.2 GiB" "$tmp/err.txt" ||
  fail "unclear refusal: $(cat "$tmp/err.txt")"
[[ ! -e "$tmp/r.yaml" ]] || fail "a report was written for a refused plan"
"$domino" simulate "${big[@]}" --ignore-memory >/dev/null || fail "--ignore-memory did not predict"

# A bf16 Adam state (NeMo's optim.dtype bf16): 6 bytes of state a parameter instead of 12, which
# the distributed optimizer shards over dp 2, so 3 bytes fewer per parameter held.
mid=(--model gpt3-13b --cluster dgx-h100:2 --tp 8 --dp 2 --micro-batch 1 --seq-len 2048
     --distributed-optimizer)
gib() { sed -n 's/^memory per GPU *\([0-9.]*\) GiB$/\1/p'; }
fp32=$("$domino" simulate "${mid[@]}" | gib)
bf16=$("$domino" simulate "${mid[@]}" --optimizer-dtype bf16 | gib)
python3 - "$fp32" "$bf16" <<'PY' || fail "bf16 Adam state: $fp32 -> $bf16 GiB"
import sys
fp32, bf16 = map(float, sys.argv[1:])
params = 13e9 / 8  # about 1.6e9 parameters a GPU
assert abs((fp32 - bf16) * 2**30 / params - 3) < 0.2, (fp32, bf16)
PY
if "$domino" simulate "${mid[@]}" --optimizer-dtype fp8 >/dev/null 2>"$tmp/err.txt"; then
  fail "--optimizer-dtype fp8 was taken"
fi
grep -q "optimizer-dtype" "$tmp/err.txt" || fail "unclear refusal: $(cat "$tmp/err.txt")"

# FlashAttention-2 where the stack runs cuDNN's (--attention flash2, NVTE_FUSED_ATTN=0): the same
# memory, a slower attention, and the plan in the report says so.
attn() { sed -n 's/^attention *\([0-9.]*\) .*$/\1/p'; }
cudnn=$("$domino" simulate "${mid[@]}" | attn)
"$domino" simulate "${mid[@]}" --attention flash2 --report "$tmp/flash2.yaml" >"$tmp/flash2.txt" ||
  fail "--attention flash2 failed"
fa2=$(attn <"$tmp/flash2.txt")
python3 - "$cudnn" "$fa2" <<'PY' || fail "flash2 attention not slower than cuDNN's: $cudnn -> $fa2 ms"
import sys
cudnn, fa2 = map(float, sys.argv[1:])
assert 1.4 < fa2 / cudnn < 2.0, (cudnn, fa2)
PY
[[ $(gib <"$tmp/flash2.txt") == "$("$domino" simulate "${mid[@]}" | gib)" ]] ||
  fail "flash2 changed the memory estimate"
grep -q "attention: flash2}" "$tmp/flash2.yaml" || fail "the report's plan lost training.attention"
if "$domino" simulate "${mid[@]}" --attention flash3 >/dev/null 2>"$tmp/err.txt"; then
  fail "--attention flash3 was taken"
fi
grep -q "attention.*flash2" "$tmp/err.txt" || fail "unclear refusal: $(cat "$tmp/err.txt")"

# fp8 with current scaling (an amax pass before most casts) is slower than delayed scaling; a
# recipe for a bf16 plan is refused, naming the key.
iter() { sed -n 's/^iteration *\([0-9.]*\) ms$/\1/p'; }
delayed=$("$domino" simulate "${mid[@]}" --precision fp8 | iter)
current=$("$domino" simulate "${mid[@]}" --precision fp8 --fp8-recipe current | iter)
python3 -c "import sys; d, c = map(float, sys.argv[1:]); assert d < c < 1.1 * d, (d, c)" \
  "$delayed" "$current" || fail "fp8 recipes: delayed $delayed ms, current $current ms"
if "$domino" simulate "${mid[@]}" --fp8-recipe current >/dev/null 2>"$tmp/err.txt"; then
  fail "--fp8-recipe with bf16 was taken"
fi
grep -q "training.fp8_recipe.*needs precision fp8" "$tmp/err.txt" ||
  fail "unclear refusal: $(cat "$tmp/err.txt")"

# Casts, on one compute-bound GPU: each te.Linear casting its own fp8 input is slower than
# Megatron-Core's norms writing QKV's and fc1's (the stack's), which is slower than TE's
# LayerNormMLP writing fc2's as well.
one=(--model gpt3-2.7b --cluster dgx-h100:1:1 --tp 1 --micro-batch 2 --seq-len 2048
     --distributed-optimizer)
both=$("$domino" simulate "${one[@]}" --precision fp8 --fp8-cast norm-and-activation | iter)
norm=$("$domino" simulate "${one[@]}" --precision fp8 | iter)
linear=$("$domino" simulate "${one[@]}" --precision fp8 --fp8-cast linear | iter)
python3 -c "import sys; b, n, l = map(float, sys.argv[1:]); assert b < n < l < 1.1 * b, (b, n, l)" \
  "$both" "$norm" "$linear" || fail "fp8 casts: $both, $norm (norm), $linear ms"
# Unfused attention's softmax: three kernels cost more than one, two (no mask) in between.
# (The scores through HBM take memory too: --ignore-memory.)
unfused=("${one[@]}" --ignore-memory --attention unfused)
fused=$("$domino" simulate "${unfused[@]}" | iter)
three=$("$domino" simulate "${unfused[@]}" --softmax scale-mask-softmax | iter)
two=$("$domino" simulate "${unfused[@]}" --softmax scale-softmax | iter)
python3 -c "import sys; f, t, w = map(float, sys.argv[1:]); assert f < w < t, (f, t, w)" \
  "$fused" "$three" "$two" || fail "softmax kernels: $fused, $three (three), $two (two) ms"
if "$domino" simulate "${mid[@]}" --softmax scale-softmax >/dev/null 2>"$tmp/err.txt"; then
  fail "--softmax with flash attention was taken"
fi
grep -q "training.softmax.*the plan's attention is flash" "$tmp/err.txt" ||
  fail "unclear refusal: $(cat "$tmp/err.txt")"

# The plan file as the positional argument is --plan: the same prediction, flags override it.
"$domino" plan --model gpt3-2.7b --cluster dgx-h100:1 --out "$tmp/p.yaml" >/dev/null 2>&1 ||
  fail "plan --out failed"
a=$("$domino" simulate "$tmp/p.yaml" --format json) || fail "simulate PLAN failed"
b=$("$domino" simulate --plan "$tmp/p.yaml" --format json) || fail "simulate --plan failed"
[[ "$a" == "$b" ]] || fail "simulate PLAN and simulate --plan PLAN differ"
c=$("$domino" simulate "$tmp/p.yaml" --micro-batch 1 --format json) || fail "override failed"
[[ "$a" != "$c" ]] || fail "--micro-batch did not override the plan file's value"
# --cuda-graphs is recorded in the report, which reads back to the same prediction.
"$domino" simulate --model gpt3-13b --cluster dgx-h100:1 --micro-batch 8 --row-split 4 \
  --cuda-graphs --report "$tmp/cg.yaml" >"$tmp/cg.txt" || fail "simulate --cuda-graphs failed"
grep -q "cuda_graphs: true" "$tmp/cg.yaml" || fail "--cuda-graphs not in the report"
graphs=$(iter <"$tmp/cg.txt")
back=$("$domino" simulate "$tmp/cg.yaml" | iter)
eager=$("$domino" simulate --model gpt3-13b --cluster dgx-h100:1 --micro-batch 8 --row-split 4 | iter)
[[ "$graphs" == "$back" && "$graphs" != "$eager" ]] ||
  fail "cuda graphs $graphs ms, read back $back ms, eager $eager ms"
# A plan file names its model, stack and node files beside it: it loads from any folder.
mkdir -p "$tmp/sub/nodes"
cp "$(dirname "$0")/../../models/examples/tiny-llama.yaml" "$tmp/sub/m.yaml"
cp "$(dirname "$0")/../../hardware/catalog/nodes/dgx-h100.yaml" "$tmp/sub/nodes/n.yaml"
printf 'model: m.yaml\ncluster: nodes/n.yaml:1:1\ntraining: {seq_len: 16, micro_batch: 2}\n' >"$tmp/sub/p.yaml"
(cd / && "$domino" simulate "$tmp/sub/p.yaml" >/dev/null) || fail "a plan's neighbouring files not found"
(cd "$tmp/sub" && "$domino" simulate p.yaml >/dev/null) || fail "a plan's files not found beside it"
# A GPU whose catalog entry names a caveat prints it beside the prediction (and plan beside its
# table); one without prints none.
out=$("$domino" simulate --model gpt3-2.7b --cluster dgx-b200:1 --tp 8 --micro-batch 1 --global-batch 8 --seq-len 1024) \
  || fail "b200 simulate failed"
grep -q '^# note: b200: published Blackwell runs took 25-33% longer' <<<"$out" || fail "no b200 caveat"
out=$("$domino" plan --model gpt3-2.7b --cluster gb200-nvl72:1:8 --global-batch 8 --seq-len 1024 \
  --top 1) || fail "gb200 plan failed"
grep -q '^# note: gb200: ' <<<"$out" || fail "no gb200 caveat in plan"
out=$("$domino" simulate --model gpt3-2.7b --cluster dgx-h100:1 --tp 8 --micro-batch 1 --global-batch 8 --seq-len 1024) \
  || fail "h100 simulate failed"
grep -q '^# note:' <<<"$out" && fail "a caveat on h100"
echo "simulate cli ok"
