#!/usr/bin/python3
"""The bad-input catalogue: every case must end with one clear line on stderr naming the problem,
a non-zero exit code, no output file, and every file it was given unchanged (a symlink still a
symlink, a FIFO still a FIFO). Hostile inputs that must work (GOOD_CASES) and a sweep stopped by
SIGINT are checked too. Usage:
  bad_inputs.py DOMINO            check every case (CTest)
  bad_inputs.py DOMINO --doc F    also write the catalogue page F (docs/bad-inputs.md)
  bad_inputs.py DOMINO --check-doc F   fail when F differs from what --doc would write
"""
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import time

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
GPU = """name: g
sms: 132
memory_GB: 80
hbm_GBps: 3350
peak_tflops: {fp32: 67, tf32: 494, bf16: 989, fp16: 989, fp8: 1979}
"""
NODE_OF_G = GOOD_NODE.replace("gpu: h100-sxm", "gpu: g.yaml")
CLUSTER = "node: dgx-h100\nnodes: 2\n"
REPORT = """model: gpt3-2.7b
cluster: dgx-h100:1
parallel: {{tp: 8}}
predicted: {{iteration_ms: 10}}
timeline:
  ops:
    - [{op}, gemm, 0, 10]
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
    ("quoted number", 'layers: "4" (a string in YAML, not a number)', {"m.yaml": model(layers='"4"')},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:2:\d+: layers: expected an integer, got the string '4'", None),
    ("quoted switch", "tied_embeddings: 'true' (a string, not a boolean)",
     {"m.yaml": GOOD_MODEL + "tied_embeddings: 'true'\n"},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:10:\d+: tied_embeddings: expected true or false, got the string 'true'",
     None),
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
    ("pipeline split", "an ends split that pp x virtual stages do not cut",
     {"p.yaml": PLAN.replace("parallel: {tp: 8, pp: 1, dp: 1}",
                             "parallel: {tp: 4, pp: 2, dp: 1, virtual_stages: 4, pipeline_split: ends}")},
     ["simulate", "--plan", "{tmp}/p.yaml"],
     r"p\.yaml:4:\d+: parallel\.pipeline_split: pipeline_split ends counts 42 units", None),
    ("fsdp", "fully sharded data parallelism without the distributed optimizer",
     {"p.yaml": PLAN.replace("parallel: {tp: 8, pp: 1, dp: 1}", "parallel: {tp: 4, pp: 1, dp: 2}")
                    .replace("global_batch: 4}", "global_batch: 8}") + "memory: {fsdp: true}\n"},
     ["simulate", "--plan", "{tmp}/p.yaml"],
     r"p\.yaml:6:\d+: memory\.fsdp: fsdp shards the optimizer state as well", None),
    ("reduce-scatter pieces", "--rs-chunks 3 that does not divide a micro-batch's 4096 tokens", {},
     ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100:1", "--seq-len", "1024", "--micro-batch", "4",
      "--sp", "--method", "decomposed", "--rs-chunks", "3"],
     r"overlap\.rs_chunks: rs_chunks \(3\) must divide the tokens of a row slice", None),
    ("row split", "row_split that does not divide the micro-batch", {"p.yaml": PLAN.replace("row_split: 2", "row_split: 3")},
     ["simulate", "--plan", "{tmp}/p.yaml"], r"p\.yaml:5:\d+: overlap\.row_split: .*must divide micro_batch", None),
    ("plan for another model", "a plan's tp that the overriding model cannot take", {"p.yaml": PLAN},
     ["simulate", "--plan", "{tmp}/p.yaml", "--model", "llama2-13b", "--cluster", "dgx-h100:2", "--tp", "16"],
     r"tp \(16\) must divide the model's heads \(40\)", None),
    ("unknown model", "a model that is neither in the catalog nor a file", {}, ["simulate", "--model", "gpt3-14b", "--cluster", "dgx-h100:1"],
     r"gpt3-14b", None),
    ("does not fit", "a plan over the GPU's memory", {}, ["simulate", "--model", "gpt3-175b", "--cluster", "dgx-h100:1", "--report", "{tmp}/r.yaml"],
     r"does not fit at seq \d+ and micro-batch \d+: .* GiB", "r.yaml"),
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
    ("bad validation row", "a GEMM row measuring an iteration time",
     {"t.yaml": "rows:\n  - id: a\n    category: gemm\n    source: s\n"
                "    gemm: {gpu: h100-sxm, dtype: bf16, m: 1, n: 1, k: 1}\n"
                "    measured: {iteration_s: 1}\n"},
     ["validate", "--table", "{tmp}/t.yaml", "--csv", "{tmp}/v.csv"],
     r"t\.yaml:6:\d+: rows\[0\]\.measured\.iteration_s: a gemm row cannot measure iteration_s", "v.csv"),
    ("layer row on many GPUs", "a layer row whose plan spans 8 GPUs",
     {"t.yaml": "rows:\n  - id: a\n    category: layer\n    source: s\n"
                "    plan: {model: gpt3-2.7b, cluster: dgx-h100:1}\n"
                "    measured: {ms: 1}\n"},
     ["validate", "--table", "{tmp}/t.yaml", "--csv", "{tmp}/v.csv"],
     r"t\.yaml:5:\d+: rows\[0\]\.plan: a layer row's plan runs on one GPU \(tp, cp, pp and dp 1\), not tp 8", "v.csv"),
    ("unknown validation row", "a --row no row's id is or begins with", {},
     ["validate", "--row", "mcore09", "--csv", "{tmp}/v.csv"],
     r"--row mcore09: no row of .*measurements\.yaml has this id or begins with it", "v.csv"),
    ("--explain as JSON", "row explanations asked of the JSON output", {},
     ["validate", "--row", "mcore08", "--explain", "--format", "json"],
     r"--explain prints text after the table: use it with --format table", None),
    ("--row outside --category", "a series of end-to-end rows asked among the GEMM rows", {},
     ["validate", "--row", "mcore08", "--category", "gemm", "--csv", "{tmp}/v.csv"],
     r"no row of .* is both of --category gemm and of --row mcore08", "v.csv"),
    ("--check of some rows", "the category guards asked of a few rows", {},
     ["validate", "--row", "mcore08", "--check"],
     r"--check judges whole categories: use it without --row", None),
    ("--fit of some rows", "the GEMM fit asked of a few rows", {},
     ["validate", "--fit", "--row", "mamf"],
     r"--fit takes every gemm row and prints its own tables: use it without --row", None),
    ("--fit of another category", "the GEMM fit asked of the collective rows", {},
     ["validate", "--fit", "--category", "collective"],
     r"--fit fits the GEMM model on the gemm rows: use --category gemm or none", None),
    ("bad profile", "a profile with a negative time", {"h.yaml": "device: cpu\nbackend: cpu\ncompute:\n  - [qkv, -1]\n"},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--hardware-profile", "{tmp}/h.yaml"], r"h\.yaml:4:\d+: compute", None),
    ("plan is a directory", "a directory given as the plan", {}, ["simulate", "--plan", "{tmp}"], r"(directory|not a file|File does not exist)", None),
    ("missing GPU", "the CUDA backend on a machine without a GPU", {}, ["execute", "--backend", "cuda", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1"],
     r"(GPU|CUDA)", None),
    ("missing GPU (calibrate)", "GPU calibration on a machine without a GPU", {}, ["calibrate", "--backend", "cuda", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--out", "{tmp}/p.yaml"],
     r"(GPU|CUDA)", "p.yaml"),
    ("bad --gemm-shapes", "a GEMM shape that is not MxNxK", {},
     ["calibrate", "--backend", "cuda", "--gemm-shapes", "8192x8192", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--out", "{tmp}/p.yaml"],
     r"--gemm-shapes: '8192x8192' is not MxNxK", "p.yaml"),
    ("--soak on the CPU", "a GPU soak asked of the CPU backend", {},
     ["calibrate", "--soak", "30", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--out", "{tmp}/p.yaml"],
     r"--soak, --gemm-shapes and --fp8-gemms measure a GPU: they need --backend cuda", "p.yaml"),
    ("--fp8-gemms alone", "fp8 GEMMs asked for with nothing to repeat in fp8", {},
     ["calibrate", "--backend", "cuda", "--fp8-gemms", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--out", "{tmp}/p.yaml"],
     r"--fp8-gemms repeats the soak and the GEMM shapes in fp8: give --soak or --gemm-shapes", "p.yaml"),
    # Hardening, round 2 (issue 17): flags go through the plan file's bounds; nothing hangs,
    # crashes or clobbers.
    ("GPU without bf16", "peak_tflops.bf16: 0 (an older GPU); once a hang",
     {"g.yaml": GPU.replace("bf16: 989", "bf16: 0"), "n.yaml": NODE_OF_G},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1"], r"precision: the g has no bf16 peak", None),
    ("GPU without bf16 (plan)", "the same GPU searched; once a hang",
     {"g.yaml": GPU.replace("bf16: 989", "bf16: 0"), "n.yaml": NODE_OF_G},
     ["plan", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1", "--out", "{tmp}/p.yaml"], r"^domino plan: precision: the g has no bf16 peak", "p.yaml"),
    ("fp8 recipe without fp8 (plan)", "--fp8-recipe on a bf16 plan: said once, not as every candidate's rejection", {},
     ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--fp8-recipe", "current", "--out", "{tmp}/p.yaml"],
     r"^domino plan: training.fp8_recipe: an fp8 recipe needs precision fp8 \(the plan's is bf16\)", "p.yaml"),
    ("softmax of flash attention (plan)", "--softmax on a plan whose attention keeps the scores on chip: said once", {},
     ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--softmax", "scale-softmax", "--out", "{tmp}/p.yaml"],
     r"^domino plan: training.softmax: says which kernels unfused attention runs over the scores; the plan's attention is flash", "p.yaml"),
    ("fp8 cast without fp8", "--fp8-cast on a bf16 plan", {},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--fp8-cast", "linear"],
     r"training.fp8_cast: says how fp8 inputs are cast and needs precision fp8 \(the plan's is bf16\)", None),
    ("MLP dropout without dropout", "training.mlp_dropout on a plan that runs no dropout (megatron-core's default)",
     {"p.yaml": PLAN.replace("global_batch: 4}", "global_batch: 4, mlp_dropout: false}")},
     ["simulate", "--plan", "{tmp}/p.yaml"],
     r"p\.yaml:3:\d+: training\.mlp_dropout: says whether the MLP's hidden dropout runs, and the plan runs no dropout \(training\.dropout unset: stack megatron-core has none\)", None),
    ("fp8 on A100", "a precision the GPU lacks; once priced as bf16 under an fp8 label", {},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-a100:1", "--precision", "fp8"], r"precision: the a100.* has no fp8 peak", None),
    ("huge virtual stages", "--virtual-stages 2^30; once SIGFPE", {},
     ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100:4", "--pp", "4", "--virtual-stages", "1073741824"],
     r"--virtual-stages: must be between 1 and 1024, got 1073741824", None),
    ("huge virtual stages (2^31-1)", "--virtual-stages 2147483647; once an abort", {},
     ["simulate", "--virtual-stages", "2147483647"], r"--virtual-stages: must be between 1 and 1024", None),
    ("huge global batch", "--global-batch 10^9; once bad_alloc", {},
     ["simulate", "--global-batch", "1000000000"], r"--global-batch: must be between 1 and 16777216", None),
    ("too much work", "--global-batch 10^7: 625,000 micro-batches; once 8 GB and rising", {},
     ["simulate", "--global-batch", "10000000"], r"training\.global_batch: 625000 micro-batch\(es\) .* layer passes", None),
    ("zero tp flag", "--tp 0", {}, ["simulate", "--tp", "0"], r"--tp: must be a positive integer, got 0", None),
    ("zero threads", "--jobs 0", {}, ["plan", "--jobs", "0"], r"--jobs: must be a positive integer, got 0", None),
    ("octal-looking flag", "--tp 010 (once read as octal 8)", {},
     ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100:4", "--tp", "010"], r"--tp: expected a decimal integer without leading zeros", None),
    ("empty --model", "--model '' (once the default model)", {}, ["simulate", "--model", ""], r"--model: must not be empty", None),
    ("NaN timeout", "--timeout nan", {}, ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--timeout", "nan"],
     r"--timeout: expected a finite number, got 'nan'", None),
    ("NaN tolerance", "--tolerance nan on execute", {}, ["execute", "{tmp}/none.yaml", "--tolerance", "nan"],
     r"--tolerance: expected a finite number, got 'nan'", None),
    ("mistyped command", "a command name one letter off", {}, ["simulat"],
     r"unknown command 'simulat' \(did you mean 'simulate'\?\)", None),
    ("a stray comma in --fix", "--fix tp=8, (once the empty item ignored; --vary refuses it)", {},
     ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--fix", "tp=8,"],
     r"--fix: 'tp=8,' has an empty item", None),
    ("pinned twice", "--fix tp=8,tp=4", {}, ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--fix", "tp=8,tp=4"],
     r"--fix: tp is pinned twice", None),
    ("pin and flag", "--fix tp=8 with --tp 4", {}, ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--fix", "tp=8", "--tp", "4"],
     r"--fix tp=8 and --tp pin the same dimension", None),
    ("pin that cannot fit", "--fix tp=3 on 32 GPUs", {}, ["plan", "--fix", "tp=3"],
     r"tp pinned to 3: it must divide the cluster's 32 GPUs", None),
    ("empty sweep value", "--vary nodes=1,,2", {}, ["sweep", "--vary", "nodes=1,,2", "--out", "{tmp}/s.csv"],
     r"--vary nodes=1,,2: an empty value", "s.csv"),
    ("sweep to a FIFO", "--out names a FIFO, with --force", {"f": ("fifo",)},
     ["sweep", "--vary", "nodes=1", "--out", "{tmp}/f", "--force"], r"f: not a regular file", None),
    ("tiny bandwidth", "a link of 1e-300 GB/s (times of 300 digits)",
     {"n.yaml": GOOD_NODE.replace("GBps_per_direction: 50", "GBps_per_direction: 1e-300")},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1"], r"n\.yaml:7:\d+: network\.GBps_per_direction: must be at least 0\.001", None),
    ("tiny swept bandwidth", "--vary network_GBps=1e-300", {},
     ["sweep", "--vary", "network_GBps=1e-300", "--out", "{tmp}/s.csv"], r"network_GBps=1e-300: expected a bandwidth from 0\.001", "s.csv"),
    ("second YAML document", "a model file with a second document after ---", {"m.yaml": GOOD_MODEL + "---\nname: other\n"},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:10:1: invalid YAML: a second document", None),
    ("a YAML merge key", "a model file merging its sizes, <<: {layers: 4, hidden: 256} (once 'layers: missing required key')",
     {"m.yaml": GOOD_MODEL.replace("layers: 4\nhidden: 256\n", "<<: {layers: 4, hidden: 256}\n")},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:2:1: <<: YAML merge keys are not supported; write the keys out", None),
    ("unclosed quote", "a model file whose name's quote is never closed", {"m.yaml": GOOD_MODEL.replace("name: ", 'name: "', 1)},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:1:7: invalid YAML: a quoted string that is never closed", None),
    ("SMs below comm CTAs", "sms: 1 with the default comm_ctas (16)",
     {"g.yaml": GPU.replace("sms: 132", "sms: 1"), "n.yaml": NODE_OF_G},
     ["hardware", "{tmp}/n.yaml"], r"n\.yaml:2:\d+: gpu: the GPU's 1 SMs cannot hold a collective's 16 CTAs", None),
    ("unrelated reports", "compare of two reports that share no op",
     {"a.yaml": REPORT.format(op="qkv"), "b.yaml": REPORT.replace("predicted", "measured").format(op="other")},
     ["compare", "{tmp}/a.yaml", "{tmp}/b.yaml"], r"share no op \(0 of 1 predicted ops", None),
    ("report onto a symlink", "--report names a symlink, with --force", {"t.yaml": "keep me\n", "r.yaml": ("symlink", "t.yaml")},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/r.yaml", "--force"],
     r"r\.yaml: is a symbolic link", None),
    ("report onto a FIFO", "--report names a FIFO, with --force", {"r.yaml": ("fifo",)},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/r.yaml", "--force"],
     r"r\.yaml: not a regular file", None),
    ("one output unwritable", "--report fine, --trace under a missing directory", {},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/r.yaml", "--trace", "{tmp}/no/t.json"],
     r"no/t\.json: folder", "r.yaml"),
    ("one file, two outputs", "--report and --trace the same file", {},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/x", "--trace", "{tmp}/x"],
     r"x: given for two outputs", "x"),
    ("one file by two names", "simulate --report z --trace-iteration ./z (once found after the simulation, exit 1)", {},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/z", "--trace-iteration", "{tmp}/./z"],
     r"z: given for two outputs; each output needs its own file", "z"),
    ("plan and JSON on stdout", "plan --out - --format json (once exit 1, where validate's --csv - said 2)", {},
     ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--out", "-", "--format", "json"],
     r"--format json prints its document on stdout: give --out a file, not -", None),
    ("emulate on the CPU", "emulated collectives without the CUDA backend", {}, ["execute", "--comm", "emulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1"],
     r"--comm emulate needs --backend cuda", None),
    ("a value on a switch's negation", "--no-sp=99999999999999999999999 (CLI11 read it as a number and threw)", {},
     ["simulate", "--no-sp=99999999999999999999999"],
     r"--no-sp takes no value: give --no-sp, or --sp=false", None),
    ("an empty value after '='", "--sp= (once read as --sp, on)", {},
     ["simulate", "--sp="], r"--sp= gives an empty value: give a value after '=', or leave the flag out", None),
    ("a switch given 2", "--ignore-memory=2 (once read as on; every switch takes true or false)", {},
     ["simulate", "--model", "gpt3-175b", "--cluster", "dgx-h100:1", "--ignore-memory=2", "--report", "{tmp}/r.yaml"],
     r"--ignore-memory: expected true or false \(or 1/0, yes/no\), got '2'", "r.yaml"),
    ("an output under a file", "--report FILE/x (once 'folder FILE does not exist')", {"m.yaml": GOOD_MODEL},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/m.yaml/x"],
     r"m\.yaml/x: .*m\.yaml is not a folder", None),
    ("a huge value in a short-flag cluster", "-hh-no-sp=99999999999999999999999 (CLI11 converts the value with stoll)", {},
     ["simulate", "-hh-no-sp=99999999999999999999999"],
     r"the command line cannot be read: a flag's value is out of range", None),
    ("sequence that CP cannot split", "--cp 3 with seq_len 1000 (2 cp = 6 chunks)", {},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1:6", "--tp", "2", "--cp", "3", "--seq-len", "1000"],
     r"parallel\.cp: context parallelism cuts each sequence into 2\*cp = 6 chunks .*2\*cp must divide seq_len \(1000\)", None),
    ("3D plan without its ranks", "a tp 2 x pp 2 x dp 2 plan's whole step on one rank", {},
     ["execute", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--tp", "2", "--pp", "2", "--dp", "2"],
     r"tp 2 x pp 2 x dp 2 = 8 ranks run a whole step, but 1 rank\(s\) were launched \(no launcher\); launch with `mpirun -np 8", None),
    # Round 3: switches, exit codes.
    ("no plan fits", "5,128 GPUs (8 x 641) for a global batch of 2,520: exit 3",
     {}, ["plan", "--model", "gpt-530b", "--cluster", "dgx-a100:641", "--global-batch", "2520", "--seq-len", "2048", "--out", "{tmp}/p.yaml"],
     r"no plan fits: \d+ candidates rejected; first: .*must divide global_batch \(2520\)", "p.yaml"),
    ("switch given a value", "--sp true (--sp is a switch: --sp, --no-sp or --sp=false)", {},
     ["simulate", "--sp", "true"], r"simulate: true: no such plan file \(a switch takes no value: --sp, --no-sp or --sp=false\)", None),
    ("switch and its negation", "--sp --no-sp", {}, ["simulate", "--sp", "--no-sp"], r"--sp: given 2 times \(as --sp or --no-sp\); give it once", None),
    ("an option given twice", "--model twice", {}, ["plan", "--model", "gpt3-2.7b", "--model", "gpt3-13b"],
     r"--model: given 2 times; give it once", None),
    ("two plans to simulate", "simulate a.yaml --plan b.yaml (PLAN is --plan: give it once)",
     {"a.yaml": PLAN, "b.yaml": PLAN.replace("row_split: 2", "row_split: 1")},
     ["simulate", "{tmp}/a.yaml", "--plan", "{tmp}/b.yaml"], r"give the plan once: as PLAN or as --plan, not both", None),
    # Machine-readable output (docs/json.md): the formats a command prints are listed.
    ("unknown --format", "--format yaml (table or json)", {}, ["simulate", "--format", "yaml"],
     r"--format: yaml not in \{table,json\}", None),
    # Round 4: reports of two plans, outputs, flags a run ignored, table rows.
    ("reports of two plans", "compare of a prediction of one plan and a measurement of another (once compared)",
     {"a.yaml": REPORT.format(op="qkv"),
      "b.yaml": REPORT.replace("predicted", "measured").replace("parallel: {{tp: 8}}", "parallel: {{tp: 4, dp: 2}}").format(op="qkv")},
     ["compare", "{tmp}/a.yaml", "{tmp}/b.yaml"], r"reports of different plans \(global_batch 16 and 32; tp 8 and 4; dp 1 and 2\)", None),
    ("reports of two models", "compare of reports whose models differ only in the MLP's activation and the heads' width, and whose recompute differs (once compared)",
     {"m.yaml": GOOD_MODEL, "s.yaml": GOOD_MODEL.replace("activation: gelu", "activation: swiglu") + "head_dim: 64\n",
      "a.yaml": REPORT.replace("model: gpt3-2.7b", "model: m.yaml").format(op="qkv"),
      "b.yaml": REPORT.replace("predicted", "measured").replace("model: gpt3-2.7b", "model: s.yaml")
                      .replace("parallel: {{tp: 8}}", "parallel: {{tp: 8}}\nmemory: {{recompute: full}}").format(op="qkv")},
     ["compare", "{tmp}/a.yaml", "{tmp}/b.yaml"],
     r"reports of different plans \(model\.head_dim 32 and 64; model\.activation gelu and swiglu; recompute none and full\)", None),
    ("reports swapped", "compare given the measurement first",
     {"a.yaml": REPORT.format(op="qkv"), "b.yaml": REPORT.replace("predicted", "measured").format(op="qkv")},
     ["compare", "{tmp}/b.yaml", "{tmp}/a.yaml"], r"b\.yaml holds a measurement and .*a\.yaml a prediction: give the predicted report first", None),
    ("infinite op time", "a report's op that ends at .inf (once -nan% in the table)",
     {"a.yaml": REPORT.format(op="qkv"), "b.yaml": REPORT.replace("predicted", "measured").replace("0, 10]", "0, .inf]").format(op="qkv")},
     ["compare", "{tmp}/a.yaml", "{tmp}/b.yaml"], r"b\.yaml:7:\d+: timeline\.ops: start_us and end_us are microseconds .* finite", None),
    ("a measured report cut short", "compare of a measured report whose timeline lists 1 of the 3 ops it declares (once read as a timeline of 1 op)",
     {"a.yaml": REPORT.format(op="qkv"),
      "b.yaml": REPORT.replace("predicted", "measured").replace("  ops:", "  op_count: 3\n  ops:").format(op="qkv")},
     ["compare", "{tmp}/a.yaml", "{tmp}/b.yaml"],
     r"b\.yaml:6:\d+: timeline\.op_count: 3 ops declared, 1 listed in timeline\.ops: the file was cut short", None),
    ("negative measured time", "measured: {iteration_ms: -1}",
     {"a.yaml": REPORT.format(op="qkv"), "b.yaml": REPORT.replace("predicted: {{iteration_ms: 10}}", "measured: {{iteration_ms: -1}}").format(op="qkv")},
     ["compare", "{tmp}/a.yaml", "{tmp}/b.yaml"], r"b\.yaml:4:\d+: measured\.iteration_ms: must be", None),
    ("execute's two outputs in one file", "--report and --trace the same file (once the report was lost)", {"m.yaml": GOOD_MODEL},
     ["execute", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--seq-len", "16", "--micro-batch", "2",
      "--report", "{tmp}/x", "--trace", "{tmp}/x"], r"x: given for two outputs", "x"),
    ("execute's second output unwritable", "--report fine, --trace under a missing directory (once the report was written)", {"m.yaml": GOOD_MODEL},
     ["execute", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--seq-len", "16", "--micro-batch", "2",
      "--report", "{tmp}/r.yaml", "--trace", "{tmp}/no/t.json"], r"no/t\.json: folder", "r.yaml"),
    ("empty output path", "--report '' (once nothing written, exit 0)", {"m.yaml": GOOD_MODEL},
     ["execute", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--report", ""], r"--report: must not be empty", None),
    ("octal-looking seed", "--seed 010 (once the seed 8)", {"m.yaml": GOOD_MODEL},
     ["execute", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--seed", "010"],
     r"--seed: expected a decimal integer without leading zeros", None),
    ("NaN soak", "calibrate --soak nan (once accepted)", {},
     ["calibrate", "--soak", "nan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--out", "{tmp}/p.yaml"],
     r"--soak: expected a finite number, got 'nan'", "p.yaml"),
    ("calibrate without --out", "a missing --out (once a bad input, exit 1)", {},
     ["calibrate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1"], r"--out is required", None),
    ("profile over its model", "calibrate --out naming its own --model, with --force (once replaced the model)",
     {"m.yaml": GOOD_MODEL},
     ["calibrate", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--seq-len", "16", "--micro-batch", "2",
      "--out", "{tmp}/m.yaml", "--force"], r"m\.yaml: is also an input of this command", None),
    ("calibrate given two plans", "calibrate PLAN --plan OTHER (once the positional one, silently)",
     {"m.yaml": GOOD_MODEL, "a.yaml": "model: m.yaml\ncluster: dgx-h100:1:1\n", "b.yaml": "model: m.yaml\ncluster: dgx-h100:1:1\n"},
     ["calibrate", "{tmp}/a.yaml", "--plan", "{tmp}/b.yaml", "--out", "{tmp}/p.yaml"],
     r"give the plan once: as PLAN or as --plan, not both", "p.yaml"),
    ("study value given twice", "a study's grid listing nodes 1 twice (once two identical points)",
     {"s.yaml": "name: s\ngrid:\n  nodes: [1, 1]\n"},
     ["sweep", "--study", "{tmp}/s.yaml", "--out", "{tmp}/s.csv"], r"s\.yaml:3:14: grid\.nodes: '1' is given twice", "s.csv"),
    ("study precision unknown", "a study's grid with precision fp32 (once named as a --precision flag, no line)",
     {"s.yaml": "name: s\ngrid:\n  precision: [bf16, fp32]\n"},
     ["sweep", "--study", "{tmp}/s.yaml", "--out", "{tmp}/s.csv"], r"s\.yaml:3:\d+: grid\.precision: expected bf16, fp16 or fp8, got 'fp32'", "s.csv"),
    ("flag under a study's fixed", "--micro-batch 8 beside a study that fixes micro_batch 4 (once the flag was dropped)",
     {"s.yaml": "name: s\ngrid:\n  nodes: [1, 2]\nfixed:\n  micro_batch: 4\n"},
     ["sweep", "--study", "{tmp}/s.yaml", "--micro-batch", "8", "--out", "{tmp}/s.csv"],
     r"--micro-batch 8 and .*s\.yaml's fixed\.micro_batch \(4\) set the same thing: give one", "s.csv"),
    ("a CUDA flag on the CPU", "--device 3 with the CPU backend (once ignored)", {"m.yaml": GOOD_MODEL},
     ["execute", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--device", "3"],
     r"--device sets up a CUDA run: it needs --backend cuda", None),
    ("--steps of a model run", "--steps 5 where the extent is the model (once ignored)", {"m.yaml": GOOD_MODEL},
     ["execute", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--seq-len", "16", "--steps", "5"],
     r"--steps counts the training steps of --extent step; this run's extent is model", None),
    ("CSV over the table", "validate --csv naming its own --table, with --force (once replaced the table)",
     {"t.yaml": "rows:\n  - {id: a, category: gemm, source: s, gemm: {gpu: h100-sxm, dtype: bf16, m: 4096, n: 4096, k: 4096}, measured: {tflops: 700}}\n"},
     ["validate", "--table", "{tmp}/t.yaml", "--csv", "{tmp}/t.yaml", "--force"], r"t\.yaml: is also an input of this command", None),
    ("CSV and JSON on stdout", "validate --csv - --format json (once CSV then JSON on stdout)", {},
     ["validate", "--row", "mamf", "--csv", "-", "--format", "json"], r"--csv - and --format json would both write stdout", None),
    ("fit on one source", "validate --fit of a table whose gemm rows share one source (once fitted on nothing)",
     {"t.yaml": "rows:\n  - {id: a, category: gemm, source: s, gemm: {gpu: h100-sxm, dtype: bf16, m: 4096, n: 4096, k: 4096}, measured: {tflops: 700}}\n"},
     ["validate", "--table", "{tmp}/t.yaml", "--fit"], r"it needs gemm rows of two sources at least", None),
    ("fractional GEMM size", "a gemm row with m: 4096.5 (once accepted)",
     {"t.yaml": "rows:\n  - {id: a, category: gemm, source: s, gemm: {gpu: h100-sxm, dtype: bf16, m: 4096.5, n: 4096, k: 4096}, measured: {tflops: 700}}\n"},
     ["validate", "--table", "{tmp}/t.yaml"], r"t\.yaml:2:\d+: rows\[0\]\.gemm\.m: must be a whole number", None),
    ("collective on one GPU", "a collective row on dgx-h100:1:1 (once predicted 0 GB/s)",
     {"t.yaml": "rows:\n  - {id: a, category: collective, source: s, collective: {cluster: 'dgx-h100:1:1', op: all-reduce, bytes: 1048576}, measured: {busbw_GBps: 100}}\n"},
     ["validate", "--table", "{tmp}/t.yaml"], r"rows\[0\]\.collective\.cluster: a collective runs over two GPUs at least", None),
    ("tiny measurement", "measured: {tflops: 1e-300} (once an error of 300 digits)",
     {"t.yaml": "rows:\n  - {id: a, category: gemm, source: s, gemm: {gpu: h100-sxm, dtype: bf16, m: 4096, n: 4096, k: 4096}, measured: {tflops: 1e-300}}\n"},
     ["validate", "--table", "{tmp}/t.yaml"], r"rows\[0\]\.measured\.tflops: must be", None),
    ("error inside a row's plan", "a row plan's row_split that does not divide its micro-batch: the table's own line (once the dumped plan's)",
     {"t.yaml": "rows:\n  - id: a\n    category: end-to-end\n    source: s\n    plan:\n      model: gpt3-2.7b\n"
                "      cluster: dgx-h100:1\n      training: {seq_len: 1024, micro_batch: 2, global_batch: 2}\n"
                "      overlap: {row_split: 3}\n    measured: {iteration_s: 1}\n"},
     ["validate", "--table", "{tmp}/t.yaml"], r"t\.yaml:9:\d+: rows\[0\]\.plan\.overlap\.row_split: row_split \(3\) must divide", None),
    ("layers past 16 bits", "32,768 layers (ops index layers in 16 bits; once absurd times with dp 2)", {"m.yaml": model(layers="32768")},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:2:\d+: layers: must be between 1 and 32767", None),
    ("a newline in a model name", "name: \"x\\nrm -rf\" (once written raw into exported comments)",
     {"m.yaml": GOOD_MODEL.replace("name: m", 'name: "x\\nrm -rf"')},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:1:\d+: name: must not hold control characters", None),
    ("tiny HBM", "a GPU file with hbm_GBps: 1e-300 (once times of 300 digits)",
     {"g.yaml": GPU.replace("hbm_GBps: 3350", "hbm_GBps: 1e-300"), "n.yaml": NODE_OF_G},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1"], r"g\.yaml:4:\d+: hbm_GBps: must be at least 0\.001", None),
    ("a bad GPU file shown", "hardware of a GPU file with sms: 0 (once 'node: missing required key')",
     {"g.yaml": GPU.replace("sms: 132", "sms: 0")},
     ["hardware", "{tmp}/g.yaml"], r"g\.yaml:2:\d+: sms: must be a positive integer", None),
    ("plan over its model", "plan --out naming its own --model file, with --force (once a plan naming itself)",
     {"m.yaml": GOOD_MODEL},
     ["plan", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1", "--out", "{tmp}/m.yaml", "--force"],
     r"m\.yaml: is also an input of this command", None),
    ("execute trace over its model", "execute --trace naming its own --model file, with --force",
     {"m.yaml": GOOD_MODEL},
     ["execute", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--trace", "{tmp}/m.yaml", "--force"],
     r"m\.yaml: is also an input of this command", None),
    ("row split pinned out of range", "--fix p=17 (once 'no plan fits' for another reason)", {},
     ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--fix", "p=17"], r"--fix: p=17: must be between 1 and 16, got 17", None),
    ("hexadecimal sweep value", "--vary nodes=0x1 (once one node)", {},
     ["sweep", "--vary", "nodes=0x1", "--out", "{tmp}/s.csv"], r"--vary nodes=0x1: expected a positive decimal integer, got .0x1.", "s.csv"),
    ("swept and fixed", "a study that grids nodes and fixes them too (once the fixed value dropped)",
     {"s.yaml": "name: s\ngrid:\n  nodes: [1]\nfixed: {nodes: 2}\n"},
     ["sweep", "--study", "{tmp}/s.yaml", "--out", "{tmp}/s.csv"], r"s\.yaml:4:\d+: fixed\.nodes: the grid varies it too", "s.csv"),
    ("sweep without --out", "a missing --out (once a bad input, exit 1)", {},
     ["sweep", "--vary", "nodes=1"], r"--out is required", None),
    ("a NUL escaped", "a backslash before a NUL byte in a quoted name (once a message of two lines)",
     {"m.yaml": GOOD_MODEL.replace("name: m", 'name: "x\\\x00y"')},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:1:\d+: invalid YAML: control character \\x00", None),
    ("NCCL's CTAs without NCCL", "--min-ctas on the CUDA backend with --comm mpi (once ignored)", {},
     ["execute", "--backend", "cuda", "--min-ctas", "3", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1"],
     r"--min-ctas sets NCCL's CTAs: it needs --comm nccl", None),
    ("a misspelt key of an inline model", "a plan whose model: mapping says kv_head (once dropped silently)",
     {"p.yaml": "model: {name: m, layers: 2, hidden: 64, heads: 8, kv_head: 2, ffn: 256, vocab: 1024, seq_len: 16, "
                "activation: gelu, norm: layernorm}\ncluster: dgx-h100:1:2\n"},
     ["simulate", "{tmp}/p.yaml"], r"p\.yaml:1:\d+: model\.kv_head: unknown key \(did you mean 'kv_heads'\?\)", None),
    ("a number past a double", "a config.json with rope_theta 1e400 (once a 'command line' error, exit 2)",
     {"config.json": '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, '
                     '"intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16, "rope_theta": 1e400}\n'},
     ["models", "{tmp}/config.json"], r"config\.json:1:\d+: invalid JSON: number overflow parsing '1e400'", None),
    ("report over its model", "simulate --report naming its own --model file, with --force (once replaced it)",
     {"m.yaml": GOOD_MODEL},
     ["simulate", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:1", "--report", "{tmp}/m.yaml", "--force"],
     r"m\.yaml: is also an input of this command", None),
    ("sweep over a varied model", "sweep --out naming a model its --vary reads, with --force (once replaced it)",
     {"m.yaml": GOOD_MODEL},
     ["sweep", "--cluster", "dgx-h100:1:1", "--seq-len", "16", "--micro-batch", "2", "--vary", "model={tmp}/m.yaml",
      "--out", "{tmp}/m.yaml", "--force"], r"m\.yaml: is also an input of this command", None),
    ("trace over a node's GPU", "simulate --trace naming the GPU file its node file names, with --force (once replaced it)",
     {"g.yaml": GPU, "n.yaml": NODE_OF_G},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1", "--trace", "{tmp}/g.yaml", "--force"],
     r"g\.yaml: is also an input of this command", None),
    ("an empty plan path", "simulate '' (once the default plan, silently)", {},
     ["simulate", ""], r"plan_file: must not be empty", None),
    ("a study's fixed key twice", "fixed: seq_len given twice (once the last kept)",
     {"s.yaml": "name: s\ngrid: {micro_batch: [1]}\nfixed:\n  seq_len: 16\n  seq_len: 32\n"},
     ["sweep", "--study", "{tmp}/s.yaml", "--out", "{tmp}/s.csv"], r"s\.yaml:4:\d+: fixed\.seq_len: given twice", "s.csv"),
    ("a study of an unknown model", "grid model: [nosuch] (once an error without the file's line)",
     {"s.yaml": "name: s\ngrid:\n  model: [nosuch]\n"},
     ["sweep", "--study", "{tmp}/s.yaml", "--out", "{tmp}/s.csv"], r"s\.yaml:3:\d+: grid\.model: unknown model 'nosuch'", "s.csv"),
    ("a profile op twice", "a hardware profile timing one op twice (once the last kept)",
     {"h.yaml": "device: cpu\nbackend: cpu\ncompute:\n"
                "  - [\"act|m=0|n=0|k=0|seqs=0|seq=0|heads=0|kv=0|dim=0|bytes=16\", 1]\n"
                "  - [\"act|m=0|n=0|k=0|seqs=0|seq=0|heads=0|kv=0|dim=0|bytes=16\", 2]\n"},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--hardware-profile", "{tmp}/h.yaml"],
     r"h\.yaml:5:\d+: compute: .* is given twice", None),
    ("a profile op of no kind", "a hardware profile signature 'zzz' (once accepted)",
     {"h.yaml": "device: cpu\nbackend: cpu\ncompute:\n  - [zzz, 1]\n"},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--hardware-profile", "{tmp}/h.yaml"],
     r"h\.yaml:4:\d+: compute: unknown op function 'zzz'", None),
    ("an op class of no kind", "a report timeline's op of class 'quantum' (once accepted)",
     {"r.yaml": REPORT.format(op="qkv"), "s.yaml": REPORT.format(op="qkv").replace(", gemm,", ", quantum,")},
     ["compare", "{tmp}/r.yaml", "{tmp}/s.yaml"], r"s\.yaml:7:\d+: timeline\.ops: unknown op class 'quantum'", None),
    ("a newline in a value", "an activation holding a newline (once a message of two lines)",
     {"m.yaml": GOOD_MODEL.replace("activation: gelu", 'activation: "gelu\\nfoo"')},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:8:\d+: activation: unknown value 'gelu\\nfoo'", None),
    ("an unknown precision", "--precision fp4 (once exit 1, where a flag value out of its range is a usage error)", {},
     ["simulate", "--precision", "fp4", "--report", "{tmp}/r.yaml"],
     r"--precision: unknown value 'fp4' \(expected bf16 \| fp16 \| fp8\)", "r.yaml"),
    ("a config key twice", "a Hugging Face config.json with num_hidden_layers twice (once the first kept)",
     {"config.json": '{"model_type": "llama", "num_hidden_layers": 2, "num_hidden_layers": 3, "hidden_size": 64, '
                     '"num_attention_heads": 8, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16}\n'},
     ["models", "{tmp}/config.json"], r"config\.json:1:\d+: num_hidden_layers: given twice", None),
    ("a config null of no meaning", "a Hugging Face config.json whose hidden_act is null (once SwiGLU, silently)",
     {"config.json": '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, '
                     '"intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16, "hidden_act": null}\n'},
     ["models", "{tmp}/config.json"], r"config\.json:1:\d+: hidden_act: expected an activation's name, got null", None),
    ("a report cut before its timeline", "compare of a measured report whose copy ended at its figures (once compared as a plan)",
     {"a.yaml": REPORT.format(op="qkv"),
      "b.yaml": "# domino execute report (rank 0)\nreport: execute\n" + REPORT.replace("predicted", "measured").format(op="qkv").split("timeline:")[0]},
     ["compare", "{tmp}/a.yaml", "{tmp}/b.yaml"],
     r"b\.yaml:2:9: report: execute, but no timeline: block follows: the file was cut short", None),
    ("a window over no layer", "a model whose sliding window starts at its last layer, which attends in full",
     {"m.yaml": GOOD_MODEL + "window: {tokens: 64, first_layer: 3, full_every: 2}\n"},
     ["models", "{tmp}/m.yaml"], r"m\.yaml:10:\d+: window: covers no layer: every layer would attend in full", None),
    ("a CP comm type without CP", "parallel.cp_comm in a plan whose cp is 1",
     {"p.yaml": PLAN.replace("parallel: {tp: 8, pp: 1, dp: 1}", "parallel: {tp: 8, pp: 1, dp: 1, cp_comm: a2a}")},
     ["simulate", "{tmp}/p.yaml"],
     r"p\.yaml:4:\d+: parallel\.cp_comm: cp_comm \(a2a\) says how context parallelism communicates, and the plan's cp is 1", None),
    ("a2a over heads CP cannot split", "--cp-comm a2a with one key/value head a TP rank (Llama 3 8B at tp 8)", {},
     ["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--tp", "8", "--cp", "2", "--cp-comm", "a2a", "--seq-len", "8192"],
     r"parallel\.cp_comm: a2a scatters each tensor-parallel rank's heads over the CP group: cp \(2\) must divide its 4 query heads and 1 key/value heads", None),
    ("the ring over a window", "--cp-comm p2p for a windowed model on megatron-core, whose Transformer Engine refuses it",
     {"m.yaml": GOOD_MODEL + "window: 8\n"},
     ["simulate", "--model", "{tmp}/m.yaml", "--cluster", "dgx-h100:1:4", "--tp", "2", "--cp", "2", "--cp-comm", "p2p", "--seq-len", "16"],
     r"parallel\.cp_comm: Transformer Engine's p2p ring refuses a sliding window, and the model's window of 8 tokens covers \d+ of its \d+ layers: cp_comm a2a", None),
    ("a CP comm type for a search without CP", "plan --cp 1 --cp-comm a2a", {},
     ["plan", "--cp", "1", "--cp-comm", "a2a", "--out", "{tmp}/p.yaml"],
     r"--cp-comm a2a says how context parallelism communicates, and cp is pinned to 1", "p.yaml"),
    ("a2a groups without a2a+p2p", "parallel.cp_a2a in a plan whose cp_comm is all_gather",
     {"p.yaml": PLAN.replace("parallel: {tp: 8, pp: 1, dp: 1}", "parallel: {tp: 2, cp: 4, cp_comm: all_gather, cp_a2a: 2, pp: 1, dp: 1}")},
     ["simulate", "{tmp}/p.yaml"],
     r"p\.yaml:4:\d+: parallel\.cp_a2a: cp_a2a \(2\) sizes the a2a groups of a2a\+p2p; the plan's cp_comm is all_gather", None),
    ("a2a groups that leave no ring", "--cp-comm a2a+p2p --cp-a2a 4 with cp 4", {},
     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--tp", "2", "--cp", "4", "--cp-comm", "a2a+p2p", "--cp-a2a", "4", "--seq-len", "8192"],
     r"parallel\.cp_a2a: a2a\+p2p: cp_a2a \(4\) must divide cp \(4\) and leave a ring of at least 2", None),
    ("CP too large for the host", "execute of a plan whose context-parallel attention core would take minutes on the host (where it runs)", {},
     ["execute", "--model", "llama3-8b", "--cluster", "dgx-h100:1:2", "--cp", "2", "--seq-len", "8192", "--micro-batch", "1"],
     r"the plan: context parallelism's attention core runs on the host \(exec/cp_attention\.h\), and this plan's takes 275 GFLOP a layer and micro-batch there, over 50", None),
    ("CP in a layer stack", "execute --extent layers of a plan with context parallelism (its attention spans the CP group's steps)", {},
     ["execute", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1:4", "--tp", "2", "--cp", "2", "--cp-comm", "a2a", "--seq-len", "16", "--micro-batch", "1", "--extent", "layers"],
     r"context parallelism \(cp 2\) is executed in whole training steps \(--extent step\), not as layers", None),
]

# The exit code of each case (README, `domino --help`): 2 a usage error, 3 no plan fits, 1 any
# other bad input.
USAGE_CASES = {"an empty plan path", "an empty value after '='", "a switch given 2", "an unknown precision", "huge virtual stages", "huge virtual stages (2^31-1)",
               "huge global batch", "zero tp flag", "zero threads", "octal-looking flag", "empty --model",
               "NaN timeout", "NaN tolerance", "mistyped command", "switch given a value",
               "switch and its negation", "an option given twice", "unknown --format", "a value on a switch's negation",
               "a huge value in a short-flag cluster", "--explain as JSON",
               "--check of some rows", "--fit of some rows", "--fit of another category",
               "empty output path", "octal-looking seed", "NaN soak", "calibrate without --out",
               "a CUDA flag on the CPU", "CSV and JSON on stdout", "sweep without --out",
               "NCCL's CTAs without NCCL",
               # Outputs in conflict: two naming one file (or stdout), or one naming an input.
               "one file, two outputs", "one file by two names", "execute's two outputs in one file",
               "plan and JSON on stdout", "profile over its model", "CSV over the table",
               "plan over its model", "execute trace over its model", "report over its model",
               "sweep over a varied model", "trace over a node's GPU"}
NO_PLAN_CASES = {"no plan fits"}


def expected_exit(name):
    return 2 if name in USAGE_CASES else 3 if name in NO_PLAN_CASES else 1


LONG_NAME = "n" * 250 + ".yaml"  # 255 bytes: the longest name a file may have

# Hostile inputs that must work: (name, what, files, steps [(cwd under TMP or "", argv)], checks
# [(file under TMP or "stdout", pattern)]). Every step must exit 0.
GOOD_CASES = [
    ("longest output name", "a 255-byte report name (n...n.yaml: 250 n's); once too long a temporary name", {},
     [("", ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--report", "{tmp}/" + LONG_NAME])],
     [(LONG_NAME, r"^# domino simulate report")]),
    ("sweep keeps GPUs per node", "--cluster dgx-h100:2:4 --vary nodes=1,2 (once dropped the :4)", {},
     [("", ["sweep", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:2:4", "--vary", "nodes=1,2", "--out", "{tmp}/s.csv"])],
     [("s.csv", r"\n1,baseline,tp 4 pp 1 dp 1 "), ("s.csv", r"\n2,baseline,tp 8 pp 1 dp 1 ")]),
    ("sweep a plan's nodes", "--plan P.yaml --vary nodes=1,2 (once 'node name is empty')",
     {"p.yaml": PLAN.replace("gpt3-13b", "gpt3-2.7b")},
     [("", ["sweep", "--plan", "{tmp}/p.yaml", "--vary", "nodes=1,2", "--out", "{tmp}/s.csv"])],
     [("s.csv", r"\n1,baseline,tp 8 "), ("s.csv", r"\n2,infeasible,parallel\.tp: tp\*pp\*dp = 8\*1\*1 = 8 must equal the cluster's 16 GPUs")]),
    ("sweep a cluster file", "a cluster YAML with --vary nodes (once read as a node file)", {"c.yaml": CLUSTER},
     [("", ["sweep", "--model", "gpt3-2.7b", "--cluster", "{tmp}/c.yaml", "--vary", "nodes=1,2", "--out", "{tmp}/s.csv"])],
     [("s.csv", r"\n2,baseline,tp 16 ")]),
    ("node file", "domino hardware NODE.yaml (once 'node: missing required key')", {"n.yaml": GOOD_NODE},
     [("", ["hardware", "{tmp}/n.yaml"])], [("stdout", r"h100-sxm")]),
    ("odd model file names", "a model at 'a: b #[x].yaml', planned, then loaded from another directory",
     {"w/a: b #[x].yaml": GOOD_MODEL, "elsewhere/.keep": ""},
     [("w", ["plan", "--model", "a: b #[x].yaml", "--cluster", "dgx-h100:1", "--out", "p.yaml"]),
      ("elsewhere", ["simulate", "--plan", "{tmp}/w/p.yaml"])],
     [("w/p.yaml", r'model: "/.*/w/a: b #\[x\]\.yaml"'), ("stdout", r"# m on dgx-h100:1")]),
    ("plan on stdout", "plan --out - > p.yaml loads back", {},
     [("", ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--out", "-"]),
      ("", ["simulate", "--plan", "{stdout}"])],
     [("stdout", r"# gpt3-2.7b on dgx-h100:1")]),
    ("--sp as a switch", "--sp alone turns sequence parallelism on (once it wanted a value)", {},
     [("", ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--sp"])],
     [("stdout", r"sequence parallel on")]),
    ("defaults whatever is given", "--model naming the default model keeps every default (once seq 2048, micro-batch 1, global batch 1)", {},
     [("", ["simulate", "--model", "gpt3-13b"])],
     [("stdout", r"seq 1024, micro-batch 16, global batch 16 \(1 micro-batch")]),
    ("sweep with dp", "sweep --dp 2: one micro-batch per DP rank, as simulate (once a global batch of one micro-batch)", {},
     [("", ["sweep", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--dp", "2", "--vary", "seq_len=512", "--out", "{tmp}/s.csv"])],
     [("s.csv", r"\n512,baseline,tp 4 pp 1 dp 2 ")]),
    ("no bf16, fp16 asked", "the GPU without bf16 at fp16", {"g.yaml": GPU.replace("bf16: 989", "bf16: 0"), "n.yaml": NODE_OF_G},
     [("", ["simulate", "--model", "gpt3-2.7b", "--cluster", "{tmp}/n.yaml:1", "--precision", "fp16"])],
     [("stdout", r"iteration")]),
]


def make_files(tmp, files):
    for fname, spec in files.items():
        path = os.path.join(tmp, fname)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(spec, str):
            with open(path, "w") as f:
                f.write(spec)
        elif spec[0] == "symlink":
            os.symlink(spec[1], path)
        elif spec[0] == "fifo":
            os.mkfifo(path)


def changed_files(tmp, files):
    changed = []
    for fname, spec in files.items():
        path = os.path.join(tmp, fname)
        if isinstance(spec, str):
            ok = os.path.isfile(path) and not os.path.islink(path) and open(path).read() == spec
        elif spec[0] == "symlink":
            ok = os.path.islink(path) and os.readlink(path) == spec[1]
        else:
            ok = stat.S_ISFIFO(os.lstat(path).st_mode)
        if not ok:
            changed.append(fname)
    return changed


def run_good_case(domino, case):
    name, _, files, steps, checks = case
    with tempfile.TemporaryDirectory() as tmp:
        make_files(tmp, files)
        stdout = ""
        for cwd, argv in steps:
            if "{stdout}" in argv:
                with open(os.path.join(tmp, "stdout.yaml"), "w") as f:
                    f.write(stdout)
            args = [a.replace("{tmp}", tmp).replace("{stdout}", os.path.join(tmp, "stdout.yaml")) for a in argv]
            try:
                r = subprocess.run([domino] + args, capture_output=True, text=True, timeout=120,
                                   cwd=os.path.join(tmp, cwd))
            except subprocess.TimeoutExpired:
                return f"{name}: did not finish in 120 s"
            if r.returncode != 0:
                return f"{name}: exit code {r.returncode}\n    stderr: {r.stderr.strip()}"
            stdout = r.stdout
        for where, pattern in checks:
            if where == "stdout":
                text = stdout
            else:
                with open(os.path.join(tmp, where)) as f:
                    text = f.read()
            if not re.search(pattern, text):
                return f"{name}: {where} does not match /{pattern}/"
    return None


def check_sigint(domino):
    """A long sweep stopped by SIGINT keeps its finished points, says so in one line, exits 130."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "s.csv")
        sizes = ",".join(str(128 * i) for i in range(1, 101))
        p = subprocess.Popen([domino, "sweep", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1",
                              "--vary", "seq_len=" + sizes,
                              "--vary", "micro_batch=" + ",".join(str(i) for i in range(1, 41)),
                              "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            return "SIGINT: the sweep did not stop within 60 s"
        lines = [l for l in err.splitlines() if l.strip()]
        if p.returncode != 130 or len(lines) != 1 or not re.search(r"stopped by SIGINT after \d+ of 4000 points", err):
            return f"SIGINT: exit {p.returncode}, stderr: {err.strip()}"
        rows = open(out).read().splitlines() if os.path.exists(out) else []
        if len(rows) < 2:
            return "SIGINT: the finished points were not written"
    return None


def check_plan_sigterm(domino):
    """A long search stopped by SIGTERM keeps the best plan found so far, marked partial, says so
    in one line and exits 143, as a sweep does. Its export says it is partial: a warning line and
    a comment line, exit 0."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p.yaml")
        p = subprocess.Popen([domino, "plan", "--model", "gpt-530b", "--cluster", "dgx-a100:640",
                              "--global-batch", "2520", "--seq-len", "2048", "--exhaustive",
                              "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        p.send_signal(signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            return "plan SIGTERM: the search did not stop within 60 s"
        lines = [l for l in err.splitlines() if l.strip()]
        if p.returncode != 143 or len(lines) != 1 or not re.search(
                r"stopped by SIGTERM after \d+ plans simulated: .*p\.yaml holds the best of those \(partial\)", err):
            return f"plan SIGTERM: exit {p.returncode}, stderr: {err.strip()}"
        text = open(out).read() if os.path.exists(out) else ""
        if "stopped_by: SIGTERM  # partial" not in text or not text.startswith("# domino plan"):
            return "plan SIGTERM: the best plan found was not written, marked partial"
        leftovers = [n for n in os.listdir(tmp) if n.startswith(".domino")]
        if leftovers:
            return f"plan SIGTERM: left {', '.join(leftovers)}"
        r = subprocess.run([domino, "export", out, "--to", "megatron"], capture_output=True,
                           text=True, timeout=60)
        said = r.stderr.strip().splitlines()
        if r.returncode != 0 or len(said) != 1 or not re.search(
                r"^domino export: warning: .*p\.yaml: the best plan of a `domino plan` search "
                r"stopped by SIGTERM", said[0]):
            return f"export of a partial plan: exit {r.returncode}, stderr: {r.stderr.strip()}"
        if not re.match(r"# [^\n]*\n# partial: the best plan of a `domino plan` search stopped by "
                        r"SIGTERM, before it covered its space", r.stdout):
            return f"export of a partial plan: no '# partial:' second line: {r.stdout[:300]!r}"
    return None


def check_stdout_full(domino):
    """Output that never reaches stdout (here a full disk) fails the run in one line, exit 1."""
    if not os.path.exists("/dev/full"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        make_files(tmp, {"p.yaml": PLAN})
        for argv in (["models"], ["export", os.path.join(tmp, "p.yaml"), "--to", "nemo"],
                     ["simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1",
                      "--format", "json"]):
            with open("/dev/full", "w") as full:
                r = subprocess.run([domino] + argv, stdout=full, stderr=subprocess.PIPE, text=True,
                                   timeout=60)
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            if r.returncode != 1 or len(lines) != 1 or not re.search(
                    rf"^domino {argv[0]}: stdout: ", r.stderr):
                return f"stdout on a full disk ({argv[0]}): exit {r.returncode}, stderr: {r.stderr.strip()}"
    return None


def run_case(domino, case):
    name, _, files, argv, pattern, output = case
    with tempfile.TemporaryDirectory() as tmp:
        make_files(tmp, files)
        args = [a.replace("{tmp}", tmp) for a in argv]
        try:
            r = subprocess.run([domino] + args, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return f"{name}: did not finish in 60 s", None
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        message = lines[0].replace(tmp, "TMP") if lines else ""
        problems = []
        if r.returncode != expected_exit(name):
            problems.append(f"exit code {r.returncode}, not {expected_exit(name)}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr")
        if not re.search(pattern, r.stderr):
            problems.append(f"message does not match /{pattern}/")
        if output and os.path.lexists(os.path.join(tmp, output)):
            problems.append(f"{output} was written")
        changed = changed_files(tmp, files)
        if changed:
            problems.append(f"changed {', '.join(changed)}")
        leftovers = [n for n in os.listdir(tmp) if n.startswith(".domino")]
        if leftovers:
            problems.append(f"left {', '.join(leftovers)}")
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
    for case in GOOD_CASES:
        failure = run_good_case(domino, case)
        if failure:
            failures.append(failure)
    for check in (check_sigint, check_plan_sigterm, check_stdout_full):
        failure = check(domino)
        if failure:
            failures.append(failure)
    for f in failures:
        print("FAIL " + f)
    doc = ["# Bad inputs and what domino says\n",
           "Each case below is run by `tests/tools/bad_inputs.py` (CTest `tools.bad_inputs`): it must end",
           "with exactly one line on stderr naming the file, line, key and rule where there is one, a",
           "non-zero exit code, and no output file. `TMP` stands for the test's temporary directory.",
           "The exit code is checked too: 1 bad input, 2 a usage error (unknown command or flag, a flag",
           "value out of its range, a switch given a value other than true or false, outputs in",
           "conflict: two naming one file or stdout, or one naming an input of the command), 3 no plan",
           "fits; 128 + N for a run stopped by signal N (below).",
           "Regenerate with `tests/tools/bad_inputs.py build/tools/domino --doc docs/bad-inputs.md`.\n",
           f"{len(CASES)} cases.\n",
           "| case | input | command | exit | message |", "| --- | --- | --- | ---: | --- |"]
    for (name, what, _, argv, _, _), (code, message) in rows:
        cmd = "domino " + " ".join(shlex.quote(a.replace("{tmp}", "TMP")) for a in argv)
        doc.append(f"| {name} | {what} | `{cmd}` | {code} | `{message.replace('|', '/')}` |")
    doc += ["", "## Hostile inputs that must work", "",
            "Run by the same test: every step exits 0 and its output matches.", "",
            f"{len(GOOD_CASES)} cases, and a sweep of 4,000 points stopped by SIGINT after 1.5 s: it writes "
            "the points it finished, says `stopped by SIGINT after N of 4000 points: FILE holds those "
            "(partial)` and exits 130 (128 + the signal). Likewise a search of Megatron-Turing NLG 530B "
            "on 5,120 A100s (`--exhaustive`) stopped by SIGTERM after 1.5 s writes the best plan found "
            "so far with `stopped_by: SIGTERM  # partial` in its `search:` block, says `stopped by "
            "SIGTERM after N plans simulated: FILE holds the best of those (partial)` and exits 143. "
            "A command whose stdout is a full disk (`/dev/full`: `models`, `export`, `simulate "
            "--format json`) says `domino COMMAND: stdout: ...` and exits 1.", "",

            "| case | input | commands |", "| --- | --- | --- |"]
    for name, what, _, steps, _ in GOOD_CASES:
        cmds = "; ".join((f"cd TMP/{cwd} && " if cwd else "") + "domino " +
                         " ".join(shlex.quote(a.replace("{tmp}", "TMP").replace("{stdout}", "STDOUT")
                                              .replace(LONG_NAME, "n...n.yaml")) for a in argv)
                         for cwd, argv in steps)
        doc.append(f"| {name} | {what} | `{cmds.replace('|', '/')}` |")
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
        # The README quotes the counts: they must be the catalogue's.
        readme = os.path.join(os.path.dirname(os.path.abspath(path)), os.pardir, "README.md")
        with open(readme) as f:
            said = re.search(r"lists (\d+) cases.*?and (\d+) hostile inputs", f.read(), re.S)
        if not said or (int(said[1]), int(said[2])) != (len(CASES), len(GOOD_CASES)):
            failures.append(f"README.md says {said and said.group(0)!r}; the catalogue has "
                            f"{len(CASES)} cases and {len(GOOD_CASES)} hostile inputs that must work")
            print("FAIL " + failures[-1])
    if failures:
        sys.exit(1)
    print(f"bad inputs ok: {len(CASES)} cases")


if __name__ == "__main__":
    main()
