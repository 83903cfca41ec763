#!/bin/bash
# tools/torch-kernels measures on a GPU machine with PyTorch. Here: its help works without
# PyTorch, and without PyTorch (or a GPU) a run ends in one line and a non-zero exit.
# Usage: torch_kernels.sh SOURCE_DIR
set -u
tool="$1/tools/torch-kernels"
for flag in --gemm-context --memory --contention --layers --duty; do
  python3 "$tool" --help | grep -q -- "$flag" || { echo "no $flag in --help"; exit 1; }
done
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  out="$(python3 "$tool" 2>&1)"
  rc=$?
  [[ $rc -ne 0 ]] || { echo "exit 0 without PyTorch or a GPU"; exit 1; }
  [[ $(printf '%s\n' "$out" | wc -l) -eq 1 ]] || { echo "more than one line: $out"; exit 1; }
fi
# The power clock's fit (--duty) recovers the knee and slope of rates made from them, whatever
# the GEMMs beside a copy ran at.
python3 - "$tool" <<'PY' || { echo "the duty fit does not recover its knee and slope"; exit 1; }
import importlib.machinery, sys
tk = importlib.machinery.SourceFileLoader("torch_kernels", sys.argv[1]).load_module()
rows = [dict(dtype=t, duty=d, tflops=800 * (1 - s * max(0.0, d - k)))
        for t, k, s in (("bf16", 0.6, 0.375), ("fp8", 0.45, 0.5))
        for d in (0.4, 0.6, 0.8, 1.0)]
rows.append(dict(dtype="fp4", error="no such GEMM"))
# The GEMMs beside a copy run at another clock: not part of the fit.
rows.append(dict(dtype="bf16", duty=1.0, beside="copy", tflops=500, copy_GBps=2000))
fits = tk.fit_power_clock(rows)
assert set(fits) == {"bf16", "fp8"}, fits
assert fits["bf16"]["knee"] == 0.6 and fits["bf16"]["slope"] == 0.375, fits["bf16"]
assert fits["fp8"]["knee"] == 0.45 and fits["fp8"]["slope"] == 0.5, fits["fp8"]
assert fits["bf16"]["rms"] == 0
PY
echo "torch-kernels ok"
