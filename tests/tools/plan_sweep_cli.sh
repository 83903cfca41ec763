#!/bin/bash
# `domino plan` and `domino sweep` end to end. Usage: plan_sweep_cli.sh DOMINO SOURCE_DIR
set -uo pipefail
domino=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The same inputs give byte-identical plans; the plan loads back and predicts the same.
args=(--model gpt3-2.7b --cluster dgx-h100:1 --global-batch 8 --seq-len 1024)
"$domino" plan "${args[@]}" --out "$tmp/a.yaml" >/dev/null || fail "plan failed"
"$domino" plan "${args[@]}" --out "$tmp/b.yaml" >/dev/null || fail "plan failed twice"
cmp -s "$tmp/a.yaml" "$tmp/b.yaml" || fail "two runs wrote different plans"
grep -q "^search:" "$tmp/a.yaml" || fail "no search: block"
# Bounding on more threads finds the same plan, runners-up and counts.
"$domino" plan "${args[@]}" --jobs 1 --out "$tmp/j1.yaml" >/dev/null || fail "plan --jobs 1 failed"
"$domino" plan "${args[@]}" --jobs 3 --out "$tmp/j3.yaml" >/dev/null || fail "plan --jobs 3 failed"
cmp -s "$tmp/j1.yaml" "$tmp/j3.yaml" || fail "--jobs 1 and --jobs 3 wrote different plans"
"$domino" plan "${args[@]}" --jobs 0 >/dev/null 2>"$tmp/err.txt"
[[ $? == 2 ]] && grep -q -- "--jobs" "$tmp/err.txt" || fail "--jobs 0: $(cat "$tmp/err.txt")"
grep -q "runners_up:" "$tmp/a.yaml" || fail "no runners-up"
"$domino" simulate --plan "$tmp/a.yaml" --report "$tmp/r.yaml" >/dev/null || fail "plan does not load"
planned=$(awk '/^predicted:/{p=1} p && /iteration_ms/{print $2; exit}' "$tmp/a.yaml")
simulated=$(awk '/^predicted:/{p=1} p && /iteration_ms/{print $2; exit}' "$tmp/r.yaml")
[[ -n $planned && $planned == "$simulated" ]] || fail "planned $planned ms, simulated $simulated ms"
# A switch takes 1/0 and yes/no in plan as in every command: --sp=yes pins what --sp does.
"$domino" plan "${args[@]}" --sp --out "$tmp/sp.yaml" >/dev/null || fail "plan --sp failed"
"$domino" plan "${args[@]}" --sp=yes --out "$tmp/sp-yes.yaml" >/dev/null || fail "plan --sp=yes failed"
cmp -s "$tmp/sp.yaml" "$tmp/sp-yes.yaml" || fail "--sp=yes and --sp wrote different plans"
# --explain names the rule that rejected each candidate; --fix pins.
"$domino" plan "${args[@]}" --explain --fix tp=8 >"$tmp/explain.txt" || fail "--explain failed"
grep -q "^rejected:" "$tmp/explain.txt" || fail "no rejected list"
grep -Eq "^  tp [0-9]+ pp .*: .*must" "$tmp/explain.txt" || fail "a rejection without its rule"
! grep -Eq "^ +[0-9]+  tp [1-7] " "$tmp/explain.txt" || fail "--fix tp=8 not honoured"
"$domino" plan "${args[@]}" --fix tp=eight >/dev/null 2>"$tmp/err.txt" && fail "bad --fix accepted"
grep -q "tp=eight" "$tmp/err.txt" || fail "bad --fix not named: $(cat "$tmp/err.txt")"
# --method and --chunks pin decomposed overlap; against --strategy they must agree.
"$domino" plan --model llama3-8b --cluster dgx-h100:2 --seq-len 4096 --global-batch 32 --tp 8 \
  --dp 2 --method decomposed --chunks 2 --top 3 --out "$tmp/m.yaml" >"$tmp/m.txt" ||
  fail "plan --method decomposed --chunks 2 failed"
grep -q "overlap: {.*method: decomposed, chunks: 2" "$tmp/m.yaml" || fail "--method/--chunks not pinned"
! grep -Eq "^ +[0-9]+  tp .* q 1 (none|intra-layer|inter-layer) *[0-9]" "$tmp/m.txt" ||
  fail "a plan without the pinned method ranked"
"$domino" plan "${args[@]}" --method decomposed --strategy row >/dev/null 2>"$tmp/err.txt" &&
  fail "--method decomposed --strategy row accepted"
grep -q -- "--method decomposed contradicts --strategy row" "$tmp/err.txt" ||
  fail "contradiction not said: $(cat "$tmp/err.txt")"
"$domino" plan "${args[@]}" --method decomposed --no-sp >/dev/null 2>"$tmp/err.txt" &&
  fail "--method decomposed --no-sp accepted"
grep -q -- "--method decomposed decomposes sequence parallelism's collectives" "$tmp/err.txt" ||
  fail "--method decomposed --no-sp: $(cat "$tmp/err.txt")"
"$domino" plan "${args[@]}" --chunks 4 >/dev/null 2>"$tmp/err.txt" && fail "--chunks alone accepted"
grep -q -- "--chunks 4 cuts decomposed overlap" "$tmp/err.txt" || fail "--chunks alone: $(cat "$tmp/err.txt")"
# The default search leaves decomposed overlap out and says what it makes of the chosen degrees:
# the best plan a decomposed search pinned to them finds (gpt3-13b on 4 DGX H100: tp 2, pp 4).
"$domino" plan >"$tmp/default.txt" || fail "plan failed"
hint=$(grep -A1 "^decomposed collective-matmul overlap, which --strategy all searches too, runs these degrees [0-9.]*x faster:$" \
  "$tmp/default.txt" | sed -n '2s/^  \(.*\) ([0-9.]* ms)$/\1/p')
[[ -n $hint ]] || fail "no decomposed hint: $(cat "$tmp/default.txt")"
chosen=$(awk '$1 == "1" {$1 = ""; print}' "$tmp/default.txt" | sed 's/^ //; s/  .*//')
degrees=$(sed -E 's/ (sp )?distopt.*//; s/^tp ([0-9]+) pp ([0-9]+) dp ([0-9]+) v ([0-9]+) mb ([0-9]+)$/tp=\1,pp=\2,dp=\3,v=\4,mb=\5/' <<<"$chosen")
"$domino" plan --global-batch 16 --strategy decomposed --fix "$degrees,distopt=true" --format json >"$tmp/dec.json" ||
  fail "plan --strategy decomposed --fix $degrees failed"
best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["top"][0]["description"])' "$tmp/dec.json")
[[ $hint == "$best" ]] || fail "decomposed hint '$hint', pinned search '$best' (degrees $degrees)"
"$domino" plan --format json | python3 -c 'import json,sys; d=json.load(sys.stdin)["decomposed"]; assert d["gain"] > 1 and d["description"] == sys.argv[1], d' "$hint" ||
  fail "--format json: decomposed differs from the table's"
# Not where the search had decomposed overlap, a strategy that limits the slicing, or a stack
# whose software runs none (DeepSpeed-Domino).
"$domino" plan --stack deepspeed-domino >"$tmp/ds.txt" || fail "plan --stack deepspeed-domino failed"
grep -Eq "^ +1  tp [2-9]" "$tmp/ds.txt" || fail "deepspeed-domino's plan has no TP: the check below checks nothing"
! grep -q "runs these degrees" "$tmp/ds.txt" || fail "decomposed hint for deepspeed-domino"
"$domino" plan --strategy all >"$tmp/all.txt" || fail "plan --strategy all failed"
! grep -q "runs these degrees" "$tmp/all.txt" || fail "decomposed hint under --strategy all"
"$domino" plan --strategy row --format json | python3 -c 'import json,sys; assert json.load(sys.stdin)["decomposed"] is None' ||
  fail "decomposed hint under --strategy row"
# --top 3: three plans in the table, the chosen one and two runners-up in the file.
ranked=$(grep -Ec "^ +[0-9]+  tp " "$tmp/m.txt")
runners=$(awk '/^  runners_up:/{r=1; next} r && /^    - /{n++} END{print n+0}' "$tmp/m.yaml")
[[ $ranked == 3 && $runners == 2 ]] || fail "--top 3: $ranked ranked, $runners runners-up"
"$domino" plan "${args[@]}" --top 1 --out "$tmp/top1.yaml" >/dev/null || fail "plan --top 1 failed"
grep -q "^  runners_up: \[\]$" "$tmp/top1.yaml" || fail "--top 1 wrote runners-up"
# A pinned pipeline its split cannot cut names the split's rule.
"$domino" plan --model llama3-8b --cluster dgx-h100:2 --seq-len 8192 --micro-batch 1 \
  --global-batch 32 --pp 4 --pipeline-split ends >/dev/null 2>"$tmp/err.txt" &&
  fail "pp 4 cutting 34 units accepted"
grep -q "no plan fits: .* rejected; first: tp .* pp 4 .*" "$tmp/err.txt" ||
  fail "the split's rule not said: $(cat "$tmp/err.txt")"

# --timeout keeps the best plan found so far, and says so.
"$domino" plan --model gpt-530b --cluster dgx-a100:640 --global-batch 2520 --seq-len 2048 \
  --timeout 0.2 --out "$tmp/t.yaml" >"$tmp/t.txt" || fail "plan --timeout failed"
grep -q "stopped at --timeout 0.2 s: the best plan found so far" "$tmp/t.txt" || fail "no timeout note"
grep -q "stopped_at_timeout_s: 0.2" "$tmp/t.yaml" || fail "the plan does not record the timeout"
# --memory-headroom leaves that much of each GPU free, says so and records it.
"$domino" plan --model gpt3-2.7b --cluster dgx-h100:1 --memory-headroom 60 --out "$tmp/h.yaml" \
  >"$tmp/h.txt" || fail "plan --memory-headroom failed"
grep -q "60 GiB per GPU left free" "$tmp/h.txt" || fail "no headroom note"
grep -q "memory_headroom_gib: 60" "$tmp/h.yaml" || fail "the plan does not record the headroom"
python3 - "$tmp/h.txt" <<'PY' || fail "a plan uses more than 79.2 - 60 GiB"
import re, sys
rows = [l for l in open(sys.argv[1]) if re.match(r"^\s*(\d+|base)\s+tp ", l)]
assert rows and all(float(l.split()[-1]) <= 79.2 - 60 for l in rows), rows
PY
"$domino" plan --model gpt3-2.7b --cluster dgx-h100:1 --memory-headroom -1 >/dev/null 2>&1 &&
  fail "a negative headroom was taken"
"$domino" sweep --vary nodes=1,2,4,8 --vary seq_len=512,1024,2048 --timeout 0.01 \
  --out "$tmp/partial.csv" >"$tmp/p.txt" || fail "sweep --timeout failed"
grep -q "stopped at --timeout" "$tmp/p.txt" || fail "sweep did not say it stopped"

# A sweep of two keys writes one row per point and strategy, and tools/plot draws it.
"$domino" sweep --model gpt3-2.7b --cluster dgx-h100:1 --seq-len 1024 --micro-batch 8 \
  --vary nodes=1,2 --vary network_GBps=25,50 --out "$tmp/s.csv" >/dev/null || fail "sweep failed"
head -1 "$tmp/s.csv" | grep -q "^nodes,network_GBps,strategy,plan,iteration_ms" || fail "CSV header"
rows=$(($(wc -l <"$tmp/s.csv") - 1))
((rows == 16)) || fail "expected 4 points x 4 strategies, got $rows rows"
# On more threads the points give the same CSV, and of two bad points the first is reported.
"$domino" sweep --model gpt3-2.7b --cluster dgx-h100:1 --seq-len 1024 --micro-batch 8 \
  --vary nodes=1,2 --vary network_GBps=25,50 --jobs 3 --out "$tmp/s3.csv" >"$tmp/s3.txt" ||
  fail "sweep --jobs 3 failed"
grep -Eq "^wrote .*s3.csv \(4 points in [0-9]+\.[0-9]{2} s on 3 threads\)" "$tmp/s3.txt" ||
  fail "sweep's summary: $(cat "$tmp/s3.txt")"
cmp -s "$tmp/s.csv" "$tmp/s3.csv" || fail "sweep --jobs 3 wrote another CSV"
# (Node counts past the cluster's bound fail as their points are built; an unknown model is
# refused before any point.)
for jobs in 1 4; do
  "$domino" sweep --vary nodes=1,300000,400000 --vary seq_len=512,1024 --jobs $jobs \
    --out "$tmp/bad.csv" >/dev/null 2>"$tmp/err.txt" && fail "a sweep of too many nodes passed"
  grep -q "^domino sweep: nodes=300000, seq_len=512: cluster 'dgx-h100:300000'" "$tmp/err.txt" ||
    fail "--jobs $jobs: not the first bad point: $(cat "$tmp/err.txt")"
  [[ ! -e "$tmp/bad.csv" ]] || fail "a failed sweep wrote its CSV"
done
"$domino" sweep --vary model=gpt3-2.7b,nosuch1 --out "$tmp/bad.csv" >/dev/null 2>"$tmp/err.txt" &&
  fail "a sweep of an unknown model passed"
grep -q "^domino sweep: --vary model=gpt3-2.7b,nosuch1: unknown model 'nosuch1'" "$tmp/err.txt" ||
  fail "an unknown model is not refused before the points: $(cat "$tmp/err.txt")"
# plan --help says what the search does where simulate's defaults would apply.
help=$("$domino" plan --help) || fail "plan --help"
for said in "--tp INT.*default: searched" "--virtual-stages .*default: searched: every count v" \
  "--pipeline-split .*default: layers, and ends for an interleaved candidate" \
  "--global-batch .*never searched"; do
  # One line per option: CLI11 wraps a long description onto lines of its own.
  grep -Eq -- "^ +$said" <<<"$(awk '/^  -/ { if (o) print o; o = $0; next } { o = o " " $0 }
                                    END { print o }' <<<"$help")" ||
    fail "plan --help lacks /$said/"
done
# NVLink's bandwidth moves every collective inside a node, NVLink SHARP's all-reduce too (it
# reduces in the switches over the same links): on one DGX-H100 at tp 8 the baseline's exposed
# TP comm shrinks at each step from 225 to 450 to 900 GB/s.
"$domino" sweep --model gpt3-13b --cluster dgx-h100:1 --tp 8 --vary nvlink_GBps=225,450,900 \
  --out "$tmp/nv.csv" >/dev/null || fail "sweep of NVLink bandwidths failed"
python3 - "$tmp/nv.csv" <<'PY' || fail "NVLink's bandwidth does not move the TP all-reduces"
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["strategy"] == "baseline"]
exposed = [float(r["exposed_comm_ms"]) for r in rows]
assert [r["nvlink_GBps"] for r in rows] == ["225", "450", "900"], rows
assert exposed[0] > exposed[1] > exposed[2], exposed
PY
# The precision is a key too: fp8's GEMMs shorten the ideal; an unknown type names the point.
"$domino" sweep --model gpt3-2.7b --cluster dgx-h100:1 --seq-len 1024 --micro-batch 8 \
  --vary precision=bf16,fp8 --out "$tmp/p.csv" >/dev/null || fail "sweep of precisions failed"
python3 - "$tmp/p.csv" <<'PY' || fail "the fp8 point's ideal is not below bf16's"
import csv, sys
ideal = {r["precision"]: float(r["ideal_ms"]) for r in csv.DictReader(open(sys.argv[1]))
         if r["strategy"] == "ideal"}
assert sorted(ideal) == ["bf16", "fp8"] and ideal["fp8"] < ideal["bf16"], ideal
PY
"$domino" sweep --vary precision=bf16,fp4 --out "$tmp/x.csv" >/dev/null 2>"$tmp/err.txt" &&
  fail "precision fp4 accepted"
grep -q "vary precision=bf16,fp4: expected bf16, fp16 or fp8, got 'fp4'" "$tmp/err.txt" ||
  fail "precision fp4 not named: $(cat "$tmp/err.txt")"
# A point that decomposes its collectives: the baseline is Megatron's (nothing decomposed) and
# the best search takes decomposed overlap in; method both sweeps too (it needs row split 2).
"$domino" sweep --model gpt3-13b --cluster dgx-h100:1 --micro-batch 4 --sp --method both \
  --row-split 2 --scope inter-layer --vary seq_len=1024 --out "$tmp/both.csv" >"$tmp/both.txt" ||
  fail "sweep of a method-both plan failed"
grep -q "(1 point in" "$tmp/both.txt" || fail "one point said as: $(cat "$tmp/both.txt")"
python3 - "$tmp/both.csv" <<'PY' || fail "a decomposed point's baseline or best is wrong"
import csv, sys
rows = {r["strategy"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert rows["baseline"]["plan"] == "tp 8 pp 1 dp 1 mb 4 sp p 1 q 1 none", rows["baseline"]["plan"]
assert rows["ideal"]["plan"] == rows["baseline"]["plan"]
assert "decomposed" in rows["best"]["plan"], rows["best"]["plan"]
assert float(rows["best"]["iteration_ms"]) < float(rows["baseline"]["iteration_ms"])
PY
"$domino" sweep --vary bandwidth=1 --out "$tmp/x.csv" >/dev/null 2>"$tmp/err.txt" && fail "bad key"
grep -q "unknown key 'bandwidth'" "$tmp/err.txt" || fail "bad key not named"
[[ ! -e "$tmp/x.csv" ]] || fail "a failed sweep wrote its CSV"
"$src/tools/plot" "$tmp/s.csv" --out "$tmp/s.png" >/dev/null || fail "plot failed"
[[ $(head -c 4 "$tmp/s.png" | od -An -c | tr -d ' ') == "211PNG" ]] || fail "not a PNG"
# A study of three keys is drawn a slice at a time; what is not a sweep CSV gets one line.
printf 'name: three\ngrid:\n  nodes: [1, 2]\n  seq_len: [512, 1024]\n  precision: [bf16, fp8]\nfixed: {model: gpt3-2.7b, micro_batch: 8}\n' \
  >"$tmp/three.yaml"
"$domino" sweep --study "$tmp/three.yaml" --out "$tmp/three.csv" >/dev/null ||
  fail "sweep of three keys failed"
"$src/tools/plot" "$tmp/three.csv" --out "$tmp/three.png" >/dev/null 2>"$tmp/err.txt" &&
  fail "plot drew three keys on two axes"
grep -q "varies 3 keys (nodes, seq_len, precision)" "$tmp/err.txt" || fail "plot: $(cat "$tmp/err.txt")"
"$src/tools/plot" "$tmp/three.csv" --where precision=fp8 --out "$tmp/three.png" >/dev/null ||
  fail "plot --where failed"
printf 'a,b\n1,2\n' >"$tmp/n.csv"
head -2 "$tmp/s.csv" | sed 's/,[0-9.]*,[0-9.]*,[0-9.]*,/,,,,/' >"$tmp/e.csv"
for bad in "$tmp/n.csv" "$tmp/e.csv"; do
  "$src/tools/plot" "$bad" --out "$tmp/x.png" >/dev/null 2>"$tmp/err.txt" && fail "plot took $bad"
  [[ $(wc -l <"$tmp/err.txt") == 1 ]] && ! grep -q Traceback "$tmp/err.txt" ||
    fail "plot of $bad: $(cat "$tmp/err.txt")"
done
"$src/tools/plot" "$tmp/s.csv" --out "$tmp/no/s.png" >/dev/null 2>"$tmp/err.txt" &&
  fail "plot wrote into a missing folder"
grep -q "folder .*no does not exist" "$tmp/err.txt" || fail "plot: $(cat "$tmp/err.txt")"
echo "plan and sweep cli ok"
