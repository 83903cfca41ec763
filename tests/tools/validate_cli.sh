#!/bin/bash
# `domino validate --row` picks rows by id or series, and `--explain` shows what lies behind a
# row's prediction: its source and assumptions, the prediction as `simulate` prints it, and a plan
# that `simulate --plan` predicts the same.
# Usage: validate_cli.sh DOMINO
set -uo pipefail
domino=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A series: the id's prefix up to a dash (the Megatron-LM README table has 9 rows).
out=$("$domino" validate --row mcore08) || fail "--row mcore08 failed"
grep -q "^9 rows from " <<<"$out" || fail "--row mcore08 did not pick 9 rows: $out"
# A few rows say nothing against a whole category's guard: no EXCEEDED mark.
grep -q "EXCEEDED" <<<"$out" && fail "a filtered table marks a guard exceeded"
# A prefix that ends inside a word names no row (mcore08-gpt-1 is not mcore08-gpt-1.7b).
"$domino" validate --row mcore08-gpt-1 >/dev/null 2>"$tmp/err" && fail "--row mcore08-gpt-1 passed"
grep -q "no row of .* has this id or begins with it and a dash" "$tmp/err" || fail "$(cat "$tmp/err")"
# Two ids, repeated --row: the two rows, an end-to-end one and a GEMM one.
out=$("$domino" validate --row mcore08-gpt-1.7b-48gpu --row azure-h100-fp8-1024x1024x1024 \
  --explain) || fail "--explain failed"
grep -q "^2 rows from " <<<"$out" || fail "two --row did not pick 2 rows"
grep -q "^## mcore08-gpt-1.7b-48gpu (end-to-end): measured 0.452 iteration_s" <<<"$out" ||
  fail "no explanation header"
grep -q "^assumed: Megatron-Core r0.8 rule: micro_batch 1" <<<"$out" || fail "no assumptions"
grep -q "^iteration on stage 0 (critical)" <<<"$out" || fail "no breakdown"
grep -q "^## azure-h100-fp8-1024x1024x1024 (gemm): measured 274.1 tflops" <<<"$out" ||
  fail "no GEMM explanation"
grep -qE "^kernel:  [0-9.]+ us: 128 tiles of 128x64 on 132 SMs in 1 wave\(s\), the last 97% full; .* at a main loop of 942 TFLOP/s, .*\(compute-bound\), then the last wave's C 0.7 us; 4.0 us fixed$" <<<"$out" ||
  fail "no GEMM kernel time and parts"
# A collective row names NCCL's algorithm, the time and the bandwidths.
coll=$("$domino" validate --row gtc24-dgxh100-ar-nvlstree-8192gpu-32mib --explain) ||
  fail "--explain failed"
grep -qE "^model:   nvls-tree, [0-9.]+ us, algbw [0-9.]+ GB/s, busbw 58.5 GB/s, [0-9]+ CTAs$" <<<"$coll" ||
  fail "no collective model line"
# A row whose error is not accounted for says what was checked.
unresolved=$("$domino" validate --row mcore08-gpt-32b-384gpu --explain) || fail "--explain failed"
grep -q "^unresolved: the published time is below what the assumed plan allows" <<<"$unresolved" ||
  fail "no unresolved line"
grep -q "^unresolved: " <<<"$out$coll" && fail "an unresolved line on a row without one"
# The row's plan, saved, predicts what the explanation shows.
sed -n '/^# mcore08-gpt-1.7b-48gpu$/,/^memory:/p' <<<"$out" >"$tmp/row.yaml"
explained=$(grep -m1 "^iteration  " <<<"$out")
simulated=$("$domino" simulate --plan "$tmp/row.yaml" | grep -m1 "^iteration  ") ||
  fail "the row's plan does not simulate: $(cat "$tmp/row.yaml")"
[[ -n $explained && $explained == "$simulated" ]] ||
  fail "explained '$explained', simulated '$simulated'"
# A published run that the memory model says does not fit fails --check, naming it; the table
# names the fullest row.
cat >"$tmp/t.yaml" <<'YAML'
rows:
  - id: too-big
    category: end-to-end
    source: "hand-made"
    plan:
      model: gpt3-175b
      cluster: dgx-h100:1
      training: {seq_len: 2048, micro_batch: 1, global_batch: 1}
      parallel: {tp: 8}
    measured: {iteration_s: 1}
YAML
"$domino" validate --table "$tmp/t.yaml" --check >"$tmp/out" 2>"$tmp/err" &&
  fail "--check passed a run that does not fit"
grep -q "1 of 1 published runs do not fit in the memory model, though they ran (too-big)" \
  "$tmp/err" || fail "unclear refusal: $(cat "$tmp/err")"
grep -q "^memory: 1 of 1 published runs do not fit" "$tmp/out" || fail "no memory line"
# Rows predicted on one thread or three: the same table, row for row.
"$domino" validate --jobs 1 --csv "$tmp/j1.csv" >/dev/null || fail "--jobs 1 failed"
"$domino" validate --jobs 3 --csv "$tmp/j3.csv" >/dev/null || fail "--jobs 3 failed"
cmp -s "$tmp/j1.csv" "$tmp/j3.csv" || fail "--jobs 1 and --jobs 3 predicted different rows"
"$domino" validate --jobs 0 >/dev/null 2>"$tmp/err"
[[ $? == 2 ]] && grep -q -- "--jobs" "$tmp/err" || fail "--jobs 0: $(cat "$tmp/err")"
echo "validate cli ok"
