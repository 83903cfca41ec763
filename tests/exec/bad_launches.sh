#!/bin/bash
# Bad launches of `domino execute` must exit non-zero within seconds, with exactly one line from
# domino naming the problem. Usage: bad_launches.sh DOMINO MPIEXEC SOURCE_DIR
set -u
domino=$1 mpiexec=$2 src=$3
tiny=$src/models/examples/tiny-gpt.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect NAME PATTERN COMMAND...: COMMAND fails, and its output has one "domino execute:" line
# matching PATTERN.
expect() {
  local name=$1 pattern=$2
  shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  local lines
  lines=$(grep -c '^domino execute:' <<<"$out")
  if [[ $rc -eq 0 || $rc -eq 124 || $lines -ne 1 ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit $rc, $lines domino line(s), wanted /$pattern/:"
    sed 's/^/    /' <<<"$out"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(grep '^domino execute:' <<<"$out")"
  fi
}

flags=(--model "$tiny" --cluster dgx-h100:1:4 --tp 4 --seq-len 16 --micro-batch 12)
expect "too few ranks" "parallel.tp is 4, so it runs on 4 ranks.*but 2 rank" \
  "$mpiexec" -np 2 --oversubscribe "$domino" execute "${flags[@]}"
expect "too many ranks" "but 4 rank" \
  "$mpiexec" -np 4 --oversubscribe "$domino" execute --model "$tiny" --cluster dgx-h100:1:2 \
  --tp 2 --seq-len 16 --micro-batch 12
expect "a 3D plan on too few ranks" \
  "parallel.tp 2 x pp 2 x dp 2 = 8 ranks run a whole step, but 4 rank.*mpirun -np 8" \
  "$mpiexec" -np 4 --oversubscribe "$domino" execute --model "$tiny" --cluster dgx-h100:1:8 \
  --tp 2 --pp 2 --dp 2 --seq-len 16 --micro-batch 4 --global-batch 16
expect "no launcher for a tp 4 plan" "but 1 rank(s) were launched (no launcher)" \
  "$domino" execute "${flags[@]}"
expect "missing plan" "$tmp/missing.yaml: cannot open" \
  "$mpiexec" -np 2 --oversubscribe "$domino" execute "$tmp/missing.yaml"
printf 'model: tiny\ntraining: [\n' >"$tmp/broken.yaml"
expect "unreadable plan" "broken.yaml:.*invalid YAML" \
  "$mpiexec" -np 2 --oversubscribe "$domino" execute "$tmp/broken.yaml"
mkdir "$tmp/dir.yaml"
expect "plan is a directory" "dir.yaml" "$domino" execute "$tmp/dir.yaml"
expect "no plan at all" "no plan" "$domino" execute
expect "a catalog model is too big for the CPU" "GiB per rank" \
  "$domino" execute --model gpt3-13b --cluster dgx-h100:1:1 --tp 1
expect "torchrun variables disagree with the plan" "torchrun" \
  env WORLD_SIZE=3 RANK=0 "$domino" execute "${flags[@]}"
# Ranks given different plans or options (once collectives of different sizes: a corrupted heap,
# then a hang until --timeout).
two=(--model "$tiny" --cluster dgx-h100:1:2 --tp 2 --seq-len 16 --micro-batch 2)
expect "ranks given different plans" \
  "rank 1 was given another plan or other options than rank 0 (rank 0: 'overlap: {row_split: 1" \
  "$mpiexec" --oversubscribe -np 1 "$domino" execute "${two[@]}" : \
  -np 1 "$domino" execute "${two[@]}" --row-split 2
expect "ranks given different iterations" "iterations: 3.*iterations: 5" \
  "$mpiexec" --oversubscribe -np 1 "$domino" execute "${two[@]}" --iterations 3 : \
  -np 1 "$domino" execute "${two[@]}" --iterations 5
exit $((failures > 0))
