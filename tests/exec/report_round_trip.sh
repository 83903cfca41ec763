#!/bin/bash
# simulate --report, execute --report --trace under mpirun, then compare: every op of the
# prediction finds its measured twin, the trace is valid JSON, and the measured report is a plan.
# Usage: report_round_trip.sh DOMINO MPIEXEC SOURCE_DIR
set -euo pipefail
domino=$1 mpiexec=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--model "$src/models/examples/tiny-llama.yaml" --cluster dgx-h100:1:2 --tp 2 --seq-len 16
       --micro-batch 12 --row-split 2 --col-split 2 --scope inter-layer)
"$domino" simulate "${flags[@]}" --report "$tmp/predicted.yaml" >/dev/null
# The predicted report is a plan: execute it as one, given as PLAN.
"$mpiexec" -np 2 --oversubscribe "$domino" execute --backend cpu "$tmp/predicted.yaml" --check \
  --report "$tmp/measured.yaml" --trace "$tmp/measured.json" >"$tmp/execute.txt"
grep -q "check passed" "$tmp/execute.txt"
grep -q "^measured:" "$tmp/measured.yaml"
"$domino" compare "$tmp/predicted.yaml" "$tmp/measured.yaml" >"$tmp/compare.txt"
cat "$tmp/compare.txt"
grep -q "^iteration ms" "$tmp/compare.txt"
grep -q "^tp-comm" "$tmp/compare.txt"
# The run is the whole model (embedding, layers, LM head, loss), as the prediction: every op of
# the run must find its predicted twin.
read -r matched measured < <(sed -nE 's/^([0-9]+) ops matched .*, ([0-9]+) measured\).*/\1 \2/p' \
  "$tmp/compare.txt")
(( matched > 0 && measured == matched )) || { echo "matched $matched of $measured"; exit 1; }
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
assert any(e.get('ph') == 'X' for e in d['traceEvents'])" "$tmp/measured.json"
# The measured report is a plan again: simulate it.
"$domino" simulate --plan "$tmp/measured.yaml" >/dev/null
# Refuses to overwrite without --force, before running anything.
if "$mpiexec" -np 2 --oversubscribe "$domino" execute "${flags[@]}" --report "$tmp/measured.yaml" \
     >"$tmp/again.txt" 2>&1; then
  echo "overwrote a report without --force"; exit 1
fi
grep -q "already exists (use --force" "$tmp/again.txt"
echo "round trip ok"
