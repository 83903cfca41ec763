#!/bin/bash
# The CPU loop: calibrate on the CPU backend -> simulate with the profile -> execute on the CPU ->
# compare; the median per-op error must be under 25%. Usage: calibrate_loop.sh DOMINO MPIEXEC SRC
set -euo pipefail
domino=$1 mpiexec=$2 src=$3
# Keep the output short (ctest shows only the first KiB of it) and say where a failure happened.
trap 'echo "calibrate_loop: failed at line $LINENO" >&2' ERR
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--model "$src/models/examples/tiny-llama.yaml" --cluster dgx-h100:1:2 --tp 2 --seq-len 16
       --micro-batch 12 --row-split 2 --scope inter-layer)
# One pass of the loop; prints "RAW FACTOR NORMALIZED": the median per-op error, the machine's
# speed factor (the median measured / predicted op time) and the median per-op error once the
# prediction is scaled by it.
loop() {
  "$mpiexec" -np 2 --oversubscribe "$domino" calibrate "${flags[@]}" --out "$tmp/profile.yaml" \
    --force >/dev/null
  grep -q "^contention: false" "$tmp/profile.yaml"
  grep -q "^  - \[allreduce, 2, " "$tmp/profile.yaml"
  grep -q '^  - \["loss|' "$tmp/profile.yaml"  # the model's ends are measured too
  "$domino" simulate "${flags[@]}" --hardware-profile "$tmp/profile.yaml" --report "$tmp/p.yaml" \
    --force >/dev/null
  "$mpiexec" -np 2 --oversubscribe "$domino" execute "${flags[@]}" --iterations 7 \
    --report "$tmp/m.yaml" --force >/dev/null
  "$domino" compare "$tmp/p.yaml" "$tmp/m.yaml" --format json | python3 -c '
import json, statistics, sys
d = json.load(sys.stdin)
ops = [o for o in d["ops"] if o["predicted_us"] > 0 and o["measured_us"] > 0]
factor = statistics.median(o["measured_us"] / o["predicted_us"] for o in ops)
normalized = statistics.median(abs(o["predicted_us"] * factor / o["measured_us"] - 1) for o in ops)
raw = 100 * d["median_op_error"]
print(f"{raw:.1f} {factor:.3f} {100 * normalized:.1f}")'
}
# Microsecond CPU kernels on a shared 2-vCPU machine: the machine's speed drifts between
# processes (six calibrations in a row here timed the same tiny GEMM at 124-222 us), so the
# calibration and the execution, two processes apart, may run at different speeds. The loop
# judges the profile's per-op costs after removing one machine-wide factor, which must stay
# within 0.5-2x (a profile off by more is wrong, not noisy): median per-op error under 25%. A
# burst of noise can still spoil one pass, so up to three are allowed; a real modelling error
# fails all three.
for attempt in 1 2 3; do
  read -r raw factor error <<<"$(loop)"
  [[ -n $error ]] || { "$domino" compare "$tmp/p.yaml" "$tmp/m.yaml"; echo "no median per-op error printed"; exit 1; }
  python3 -c "import sys; sys.exit(0 if float('$error') < 25 and 0.5 <= float('$factor') <= 2 else 1)" && break
  echo "pass $attempt: median per-op error $error% at a speed factor of $factor (unscaled $raw%) is not under 25%"
  if [[ $attempt == 3 ]]; then "$domino" compare "$tmp/p.yaml" "$tmp/m.yaml" | sed -n '/op class/,$p'; exit 1; fi
done
# --out - writes the profile alone to stdout (what it says goes to stderr), and it loads back.
"$domino" calibrate "${flags[@]}" --out - 2>"$tmp/said.txt" >"$tmp/stdout.yaml"
grep -q "^wrote -: " "$tmp/said.txt"
if grep -q "^wrote" "$tmp/stdout.yaml"; then echo "calibrate --out - wrote its summary to stdout"; exit 1; fi
"$domino" simulate "${flags[@]}" --hardware-profile "$tmp/stdout.yaml" >"$tmp/table.txt"
# The table says what the profile priced: the compute ops of this plan's micro-batch that the
# executor runs (not the copies around attention that the stack's kernels add).
grep -q "^# op times from $tmp/stdout.yaml (measured on cpu, cpu backend): 114 of the 122 compute ops" "$tmp/table.txt"
# A profile of another model prices none of a plan's ops, and says so on stderr.
"$domino" simulate --model gpt3-2.7b --cluster dgx-h100:1 --hardware-profile "$tmp/stdout.yaml" \
  2>"$tmp/err.txt" >/dev/null
grep -q "warning: $tmp/stdout.yaml measured none of this plan's [0-9]* compute ops" "$tmp/err.txt"
# A profile that is not one is refused with its line.
printf 'device: cpu\nbackend: cpu\ncompute:\n  - [qkv, -3]\n' >"$tmp/bad.yaml"
if "$domino" simulate "${flags[@]}" --hardware-profile "$tmp/bad.yaml" 2>"$tmp/err.txt"; then
  echo "a bad profile was accepted"; exit 1
fi
grep -q "bad.yaml:4:.*compute" "$tmp/err.txt"
echo "calibration loop ok: median per-op error $error% at a speed factor of $factor (unscaled $raw%)"
