#!/usr/bin/python3
"""The bad-input catalogue: every case must end with one clear line on stderr naming the problem,
a non-zero exit code, and no output file. Usage:
  bad_inputs.py DOMINO            check every case (CTest)
  bad_inputs.py DOMINO --doc F    also write the catalogue page F (docs/bad-inputs.md)
  bad_inputs.py DOMINO --check-doc F   fail when F differs from what --doc would write
"""
import os
import re
import subprocess
import sys
import tempfile

GOOD_MODEL = """name: m
layers: 4
hidden: 256
heads: 8
ffn: 1024
vocab: 1000
seq_len: 128
activation: gelu
norm: layernorm
"""
GOOD_NODE = """name: n
gpu: h100-sxm
gpus_per_node: 8
nvlink: {GBps_per_direction: 450, efficiency: 0.81}
nvls: false
nics: 8
network: {GBps_per_direction: 50, efficiency: 0.93}
"""
PLAN = """model: gpt3-13b
cluster: dgx-h100:1
training: {seq_len: 1024, micro_batch: 4, global_batch: 4}
parallel: {tp: 8, pp: 1, dp: 1}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
"""

def model(**changes):
    text = GOOD_MODEL
    for key, value in changes.items():
        text = re.sub(rf"^{key}: .*$", f"{key}: {value}", text, flags=re.M)
    return text

# (name, what it shows, files {name: text}, argv, stderr pattern, output that must not appear)
CASES = [
    ("malformed YAML", "an unclosed flow sequence", {"m.yaml": "name: [m\n"},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:\d+:\d+: invalid YAML", None),
    ("wrong type", "a word where a number goes", {"m.yaml": model(hidden="wide")},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:3:\d+: hidden: .*integer", None),
    ("unknown key", "a misspelt key, with the nearest valid one", {"m.yaml": GOOD_MODEL + "hiden: 5\n"},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:10:\d+: hiden: .*hidden", None),
    ("missing key", "a required key left out", {"m.yaml": GOOD_MODEL.replace("heads: 8\n", "")},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:\d+:\d+: heads: missing", None),
    ("zero size", "hidden: 0", {"m.yaml": model(hidden="0")},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:3:\d+: hidden: must be", None),
    ("negative size", "layers: -4", {"m.yaml": model(layers="-4")},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:2:\d+: layers: must be", None),
    ("huge model", "10^7 layers (FLOP and byte counts would overflow)", {"m.yaml": model(layers="10000000")},
     ["simulate", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1"], r"layers: must be between", None),
    ("huge cluster", "10^9 nodes", {}, ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100:1000000000"],
     r"dgx-h100:1000000000.*(at most|between)", None),
    ("NaN in YAML", "efficiency: .nan", {"n.yaml": GOOD_NODE.replace("efficiency: 0.81", "efficiency: .nan")},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1"], r"n\.yaml:4:\d+: nvlink\.efficiency", None),
    ("infinity in YAML", "GBps_per_direction: .inf", {"n.yaml": GOOD_NODE.replace("GBps_per_direction: 50", "GBps_per_direction: .inf")},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1"], r"n\.yaml:7:\d+: network\.GBps_per_direction", None),
    ("zero bandwidth", "a link of 0 GB/s", {"n.yaml": GOOD_NODE.replace("GBps_per_direction: 450", "GBps_per_direction: 0")},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1"], r"n\.yaml:4:\d+: nvlink\.GBps_per_direction: must be", None),
    ("negative latency", "step_latency_us: -1", {"n.yaml": GOOD_NODE.replace("efficiency: 0.93}", "efficiency: 0.93, step_latency_us: -1}")},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1"], r"n\.yaml:7:\d+: network\.step_latency_us", None),
    ("shape not divisible", "hidden 250 over 8 heads", {"m.yaml": model(hidden="250")},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:\d+:\d+: hidden: .*divisible by heads", None),
    ("impossible tp", "tp 3 with 64 heads", {}, ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100:1:3", "--tp", "3"],
     r"parallel\.tp: tp \(3\) must divide the model's heads \(64\)", None),
    ("GPU count", "tp*pp*dp that is not the cluster", {}, ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100:2", "--tp", "8", "--dp", "1"],
     r"must equal the cluster's 16 GPUs", None),
    ("row split", "row_split that does not divide the micro-batch", {"p.yaml": PLAN.replace("row_split: 2", "row_split: 3")},
     ["simulate", "--plan", "{tmp}/p.yaml"], r"p\.yaml:5:\d+: overlap\.row_split: .*must divide micro_batch", None),
    ("plan for another model", "a plan's tp that the overriding model cannot take", {"p.yaml": PLAN},
     ["simulate", "--plan", "{tmp}/p.yaml", "--model", "llama2-13b", "--cluster", "dgx-h100:2", "--tp", "16"],
     r"tp \(16\) must divide the model's heads \(40\)", None),
    ("unknown model", "a model that is neither in the catalog nor a file", {}, ["simulate", "--model", "gpt3-14b", "--cluster", "dgx-h100:1"],
     r"gpt3-14b", None),
    ("does not fit", "a plan over the GPU's memory", {}, ["simulate", "--model", "gpt3-175b", "--cluster", "dgx-h100:1", "--report", "{tmp}/r.yaml"],
     r"does not fit: .* GiB", "r.yaml"),
    ("unwritable output", "a report under a missing directory", {}, ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/no/such/dir/r.yaml"],
     r"no/such/dir/r\.yaml", "no/such/dir/r.yaml"),
    ("existing output", "an existing file without --force", {"r.yaml": "keep me\n"},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/r.yaml"], r"r\.yaml.*exists.*--force", None),
    ("bad --fix", "a pin that is not KEY=VALUE", {}, ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--fix", "tp"],
     r"--fix: 'tp' is not KEY=VALUE", None),
    ("bad --vary", "an unknown sweep key", {}, ["sweep", "--vary", "bandwidth=1,2", "--out", "{tmp}/s.csv"],
     r"unknown key 'bandwidth'", "s.csv"),
    ("bad study", "a study with an unknown grid key", {"s.yaml": "name: s\ngrid:\n  gpus: [1, 2]\n"},
     ["sweep", "--study", "{tmp}/s.yaml", "--out", "{tmp}/s.csv"], r"s\.yaml:3:\d+: grid\.gpus: unknown key", "s.csv"),
    ("bad profile", "a profile with a negative time", {"h.yaml": "device: cpu\nbackend: cpu\ncompute:\n  - [qkv, -1]\n"},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--hardware-profile", "{tmp}/h.yaml"], r"h\.yaml:4:\d+: compute", None),
    ("plan is a directory", "a directory given as the plan", {}, ["simulate", "--plan", "{tmp}"], r"(directory|not a file|File does not exist)", None),
    ("missing GPU", "the CUDA backend on a machine without a GPU", {}, ["execute", "--backend", "cuda", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1"],
     r"(GPU|CUDA)", None),
    ("missing GPU (calibrate)", "GPU calibration on a machine without a GPU", {}, ["calibrate", "--backend", "cuda", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--out", "{tmp}/p.yaml"],
     r"(GPU|CUDA)", "p.yaml"),
    ("emulate on the CPU", "emulated collectives without the CUDA backend", {}, ["execute", "--comm", "emulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1"],
     r"--comm emulate needs --backend cuda", None),
]


def run_case(domino, case):
    name, _, files, argv, pattern, output = case
    with tempfile.TemporaryDirectory() as tmp:
        for fname, text in files.items():
            with open(os.path.join(tmp, fname), "w") as f:
                f.write(text)
        args = [a.replace("{tmp}", tmp) for a in argv]
        try:
            r = subprocess.run([domino] + args, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return f"{name}: did not finish in 60 s", None
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        message = lines[0].replace(tmp, "TMP") if lines else ""
        problems = []
        if r.returncode == 0:
            problems.append("exit code 0")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr")
        if not re.search(pattern, r.stderr):
            problems.append(f"message does not match /{pattern}/")
        if output and os.path.exists(os.path.join(tmp, output)):
            problems.append(f"{output} was written")
        if "Traceback" in r.stderr or r.returncode < 0:
            problems.append("crashed")
        if problems:
            return f"{name}: " + "; ".join(problems) + f"\n    stderr: {r.stderr.strip()}", None
        return None, (r.returncode, message)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    domino = sys.argv[1]
    failures, rows = [], []
    for case in CASES:
        failure, result = run_case(domino, case)
        if failure:
            failures.append(failure)
        else:
            rows.append((case, result))
    for f in failures:
        print("FAIL " + f)
    doc = ["# Bad inputs and what domino says\n",
           "Each case below is run by `tests/tools/bad_inputs.py` (CTest `tools.bad_inputs`): it must end",
           "with exactly one line on stderr naming the file, line, key and rule where there is one, a",
           "non-zero exit code, and no output file. `TMP` stands for the test's temporary directory.",
           "Regenerate with `tests/tools/bad_inputs.py build/tools/domino --doc docs/bad-inputs.md`.\n",
           f"{len(CASES)} cases.\n",
           "| case | input | command | exit | message |", "| --- | --- | --- | ---: | --- |"]
    for (name, what, _, argv, _, _), (code, message) in rows:
        cmd = "domino " + " ".join(a.replace("{tmp}", "TMP") for a in argv)
        doc.append(f"| {name} | {what} | `{cmd}` | {code} | `{message.replace('|', '/')}` |")
    text = "\n".join(doc) + "\n"
    if "--doc" in sys.argv:
        with open(sys.argv[sys.argv.index("--doc") + 1], "w") as f:
            f.write(text)
    if "--check-doc" in sys.argv:
        path = sys.argv[sys.argv.index("--check-doc") + 1]
        with open(path) as f:
            if f.read() != text and not failures:
                failures.append(f"{path} is out of date: regenerate it with --doc")
                print("FAIL " + failures[-1])
    if failures:
        sys.exit(1)
    print(f"bad inputs ok: {len(CASES)} cases")


if __name__ == "__main__":
    main()
