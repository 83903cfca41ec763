#!/bin/bash
# tools/gpu-check-summary reads a gpu-check log: here one made of real CPU outputs in gpu-check's
# sections. Usage: gpu_check_summary.sh DOMINO SOURCE_DIR
set -euo pipefail
domino=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--model "$src/models/examples/tiny-gpt.yaml" --cluster dgx-h100:1:1 --tp 1 --seq-len 16
       --micro-batch 12 --global-batch 12 --row-split 2 --scope inter-layer)
"$domino" simulate "${flags[@]}" --report "$tmp/p.yaml" >/dev/null
section() { printf '\n## %s\n\n```\n$ command\n' "$1"; }
{
  printf '# domino gpu-check\n'
  section "GPU"
  printf 'name, memory.total [MiB], driver_version, clocks.max.sm [MHz]\nNVIDIA H100 80GB HBM3, 81559 MiB, 580.65.06, 1980 MHz\n```\n'
  printf '\nPredictions for the catalog node dgx-h100.\n'
  section "calibrate"
  printf 'dense GEMM 771.4 TFLOP/s, HBM 4210 GB/s (device-to-device copy)\n'
  printf "kernel launch 2.31 us one by one, 0.84 us from a CUDA graph (the model's 4 and 1 for h200-sxm)\n"
  # The soak and GEMM tables as calibrate prints them (tools/table.cc: two spaces between
  # columns, numbers right-aligned).
  cat <<'TABLES'
soak second  8192^3 bf16 TFLOP/s  vs first second  8192^3 fp8 TFLOP/s  vs first second
-----------  -------------------  ---------------  ------------------  ---------------
          1                790.2            +0.0%              1402.0            +0.0%
         30                741.9            -6.1%              1301.5            -7.2%

GEMM m x n x k   type  measured TFLOP/s  model TFLOP/s (h200-sxm)  model error  published TFLOP/s
---------------  ----  ----------------  ------------------------  -----------  ----------------------
2048x2048x13312  bf16             780.1                     800.1        +2.6%  794.5 (mamf-h200-bf16)
 1024x1024x1024  bf16             310.0                     290.5        -6.3%  -
1280x4096x12032  fp8             1400.0                    1283.5        -8.3%  1453.4 (mamf-h200-fp8)
TABLES
  printf '```\n'
  section "row2: measured (emulated collectives)"
  "$domino" execute "${flags[@]}" --report "$tmp/m.yaml"
  printf '```\n'
  section "row2: predicted vs measured"
  "$domino" compare "$tmp/p.yaml" "$tmp/m.yaml"
  printf '```\n'
} >"$tmp/log.md"
cat >"$tmp/clocks.csv" <<'CSV'
timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], power.limit [W], temperature.gpu, clocks_event_reasons.active
2026/12/02 10:00:00.000, 1980, 3201, 120.5, 700.00, 40, 0x0000000000000000
2026/12/02 10:00:00.500, 1755, 3201, 699.1, 700.00, 71, 0x0000000000000004
2026/12/02 10:00:01.000, 1650, 3201, 700.2, 700.00, 75, 0x0000000000000004
CSV
python3 "$src/tools/gpu-check-summary" "$tmp/log.md" "$tmp/clocks.csv" >"$tmp/summary.md"
grep -qx "GPU: NVIDIA H100 80GB HBM3 (81559 MiB); predictions for the catalog node dgx-h100" \
  "$tmp/summary.md" || { cat "$tmp/summary.md"; exit 1; }
grep -q "^Measured dense GEMM peak 771.4 TFLOP/s, HBM 4210 GB/s" "$tmp/summary.md"
grep -qx "Kernel launch overhead (chains of empty kernels): 2.31 us launched one by one, 0.84 us from a CUDA graph; the catalog's estimates are 4 and 1 us." \
  "$tmp/summary.md" || { cat "$tmp/summary.md"; exit 1; }
# The soak and shape tables come back as Markdown, every cell in place.
grep -qx '| 30 | 741.9 | -6.1% | 1301.5 | -7.2% |' "$tmp/summary.md" || { cat "$tmp/summary.md"; exit 1; }
grep -qx '| 2048x2048x13312 | bf16 | 780.1 | 800.1 | +2.6% | 794.5 (mamf-h200-bf16) |' "$tmp/summary.md"
grep -qx '| 1024x1024x1024 | bf16 | 310.0 | 290.5 | -6.3% | - |' "$tmp/summary.md"
grep -qx '| 1280x4096x12032 | fp8 | 1400.0 | 1283.5 | -8.3% | 1453.4 (mamf-h200-fp8) |' "$tmp/summary.md"
grep -q '^SM clock over the check (3 samples): min 1650, median 1755, max 1980 MHz; power up to 700.2 W of a 700.0 W limit; throttle reasons seen: 0x0000000000000000, 0x0000000000000004.' \
  "$tmp/summary.md" || { cat "$tmp/summary.md"; exit 1; }
# row2: the stack's predicted and measured length and hidden fraction, the iteration and the GEMMs'
# TFLOP/s are numbers; what the log lacks (calibrated, CUDA graph, other strategies) is "-".
grep -qE '^\| row2 \| [0-9.]+ \| - \| [0-9.]+ \| [0-9.]+ \| - \| [0-9.]+ \| [0-9.]+ \| - \| [0-9.]+ \|$' \
  "$tmp/summary.md" || { cat "$tmp/summary.md"; exit 1; }
grep -q '^| baseline | - | - | - | - | - | - | - | - | - |$' "$tmp/summary.md"
echo "gpu-check summary ok"
