#!/bin/bash
# tools/gpu-check run through on the fake GPU (domino_fake_gpu: the CUDA backend over
# fake_cuda_ops.cc, which times nothing and computes nothing) with a stand-in nvidia-smi: every
# command line of the check parses and runs within the check's budget, and the check writes what
# it promises (gpu-check.md ending with its summary, profile.yaml, clocks.csv, reports.tgz). The
# numeric checks against the CPU reference fail here, as a check that differs fails (exit 1),
# never as a usage error (exit 2). Usage: gpu_check_dry_run.sh SOURCE_DIR DOMINO_FAKE_GPU
set -euo pipefail
src=$1 domino=$2
trap 'echo "gpu_check_dry_run: failed at line $LINENO" >&2' ERR
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bundle" "$tmp/bin"
cp "$domino" "$tmp/bundle/domino"
printf '#!/bin/sh\necho "fake GPU: no GPU unit test runs here"\n' >"$tmp/bundle/exec_gpu_test"
cat >"$tmp/bin/nvidia-smi" <<'SMI'
#!/bin/bash
# The queries tools/gpu-check makes, answered as an H200's driver would.
args="$*"
if [[ $args == *-lms* ]]; then  # the sampler: a header, then a line every half second
  echo "timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], power.limit [W], temperature.gpu, clocks_event_reasons.active"
  while true; do
    echo "$(date '+%Y/%m/%d %H:%M:%S.000'), 1980, 3201, 120.5, 700.00, 40, 0x0000000000000000"
    sleep 0.5
  done
elif [[ $args == -L ]]; then
  echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
elif [[ $args == *--query-gpu=driver_version* ]]; then
  echo "580.65.06"
elif [[ $args == *--query-gpu=clocks_event_reasons.active* ]]; then
  printf 'clocks_event_reasons.active\n0x0000000000000000\n'
elif [[ $args == *--query-gpu=name* ]]; then
  printf 'name, memory.total [MiB], driver_version, clocks.max.sm [MHz]\nNVIDIA H200, 143771 MiB, 580.65.06, 1980 MHz\n'
else
  echo "nvidia-smi stand-in: unexpected query: $args" >&2
  exit 2
fi
SMI
chmod +x "$tmp/bundle/exec_gpu_test" "$tmp/bin/nvidia-smi"
start=$SECONDS
PATH="$tmp/bin:$PATH" GPU_BUNDLE="$tmp/bundle" OUT="$tmp/out" bash "$src/tools/gpu-check" \
  2>"$tmp/steps.txt"
elapsed=$((SECONDS - start))
out="$tmp/out"
log="$out/gpu-check.md"
# Every step ran (none skipped for want of time) and every step but the numeric checks passed.
if grep -v -E '^gpu-check: (.*): exit [0-9]+$|^gpu-check: wrote ' "$tmp/steps.txt"; then
  echo "unexpected lines from gpu-check (above)"
  exit 1
fi
steps=$(grep -c ': exit ' "$tmp/steps.txt")
while IFS= read -r line; do
  title=${line#gpu-check: }
  title=${title%: exit *}
  rc=${line##*: exit }
  if [[ $title == check\ * ]]; then
    [[ $rc == 0 || $rc == 1 ]] || { echo "$line: a check may differ on a fake GPU, not fail to run"; sed -n "/## $title\$/,/^(exit/p" "$log"; exit 1; }
  elif [[ $rc != 0 ]]; then
    echo "$line"
    sed -n "/## $title\$/,/^(exit/p" "$log"
    exit 1
  fi
done < <(grep ': exit ' "$tmp/steps.txt")
# The steps the check has: the GPU, versions, the GPU unit tests, 29 numeric checks (6 for each
# of four models, and the dropouts: two models in fp32 and bf16, and whole steps), calibrate, and
# six per strategy for three strategies.
((steps == 3 + 29 + 1 + 3 * 6)) || { echo "$steps steps ran"; cat "$tmp/steps.txt"; exit 1; }
# The layers ran on the catalog's node of the GPU nvidia-smi names (an H200: HGX H200), and an
# H100 SXM would be a DGX H100's; a GPU the catalog lacks has no node.
grep -q "^Predictions for the catalog node hgx-h200\.$" "$log"
grep -q -- "--cluster hgx-h200:5" "$log"
[[ $(bash "$src/tools/gpu-check" --node-for "NVIDIA H100 80GB HBM3") == dgx-h100 ]]
[[ $(bash "$src/tools/gpu-check" --node-for "NVIDIA H200") == hgx-h200 ]]
[[ -z $(bash "$src/tools/gpu-check" --node-for "NVIDIA H100 PCIe") ]]
[[ -z $(bash "$src/tools/gpu-check" --node-for "NVIDIA L40S") ]]
# The numeric checks ran the CUDA backend and compared it (the fake computes nothing: they differ).
grep -q "DIFFERS" "$log"
# tools/torch-kernels ran, or the log says why not (this machine has no GPU for PyTorch).
grep -q "^## torch kernels" "$log"
# What the check promises to write.
grep -q "^kernel_launch_us: " "$out/profile.yaml"
grep -q '^  - \["loss|' "$out/profile.yaml"  # the model's ends are calibrated too
(($(wc -l <"$out/clocks.csv") >= 2))
tar tzf "$out/reports.tgz" >"$tmp/reports.txt"
for name in baseline row2 row4; do
  for kind in predicted calibrated measured graph; do
    grep -q "reports/$kind-$name.yaml$" "$tmp/reports.txt" || { echo "no $kind-$name.yaml"; cat "$tmp/reports.txt"; exit 1; }
  done
done
# The summary closes the log, with the fake's figures and each strategy's row filled in.
grep -qE "^Measured dense GEMM peak [0-9.]+ TFLOP/s" "$log" || { tail -40 "$log"; exit 1; }
grep -qE '^\| row2 \| [0-9.]+ \| [0-9.]+ \|' "$log" || { tail -40 "$log"; exit 1; }
echo "gpu-check dry run ok: $steps steps in $elapsed s"
