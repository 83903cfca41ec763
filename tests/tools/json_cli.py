#!/usr/bin/python3
"""`--format json` of one command (docs/json.md): the binary exits 0, its stdout is one JSON
document and nothing else, stderr is empty, and the document's keys, types and figures are
checked, against the text output or a hand-computed answer where there is one. Prints
"json COMMAND ok". Usage: json_cli.py DOMINO COMMAND (plan, simulate, validate, compare, models,
hardware)
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

DOMINO = None
NUMBER = (int, float)


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def run(*args, cwd=None):
    """Runs domino; returns (exit code, stdout, stderr)."""
    r = subprocess.run([DOMINO, *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def document(*args, schema, cwd=None):
    """Runs domino ARGS --format json and returns its one document."""
    code, out, err = run(*args, "--format", "json", cwd=cwd)
    check(code == 0, f"{' '.join(args)}: exit {code}: {err.strip()}")
    check(err == "", f"{' '.join(args)}: stderr is not empty: {err.strip()}")
    try:
        doc = json.loads(out)  # the whole of stdout: one document, nothing before or after it
    except json.JSONDecodeError as e:
        raise Failure(f"{' '.join(args)}: stdout is not one JSON document: {e}")
    check(isinstance(doc, dict), "the document is not an object")
    check(list(doc)[:2] == ["schema", "domino_version"], f"first keys {list(doc)[:2]}")
    check(doc["schema"] == schema, f"schema {doc['schema']!r}, not {schema!r}")
    check(re.fullmatch(r"\d+\.\d+\.\d+", doc["domino_version"]), "domino_version")
    return doc


def text(*args):
    code, out, err = run(*args)
    check(code == 0, f"{' '.join(args)}: exit {code}: {err.strip()}")
    return out


def typed(obj, types, where):
    """Checks that obj has each key of `types` with a value of that type."""
    for key, kind in types.items():
        check(key in obj, f"{where}: no {key!r}")
        value = obj[key]
        ok = isinstance(value, kind) and not (kind in (int, NUMBER) and isinstance(value, bool))
        check(ok, f"{where}.{key}: {value!r} is not {kind}")


FIGURES = {k: NUMBER for k in ("iteration_ms", "ideal_ms", "exposed_comm_ms", "hidden_comm_fraction",
                               "tokens_per_s", "tflops_per_gpu", "mfu", "memory_gib_per_gpu")}


def check_plan_keys(plan, where):
    typed(plan, {"model": (str, dict), "cluster": str, "stack": str, "precision": str,
                 "training": dict, "parallel": dict, "overlap": dict, "memory": dict}, where)
    typed(plan["training"], {"seq_len": int, "micro_batch": int, "global_batch": int}, where)
    typed(plan["parallel"], {"tp": int, "cp": int, "pp": int, "dp": int, "sequence_parallel": bool,
                             "virtual_stages": int, "pipeline_split": str, "overlap_p2p": bool,
                             "placement": str}, where)
    typed(plan["overlap"], {"row_split": int, "col_split": int, "scope": str, "method": str,
                            "chunks": int, "copy_engine": bool}, where)
    typed(plan["memory"], {"recompute": str, "distributed_optimizer": bool, "optimizer_dtype": str},
          where)


def check_loads_back(plan, predicted, where):
    """A plan object of a document, written to a file as it is, is a plan `simulate` takes, and
    predicts what the document says."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "plan.json")
        with open(path, "w") as f:
            json.dump(plan, f)
        back = document("simulate", path, schema="domino.simulate/1")
    check(back["plan"] == plan, f"{where}: simulate reads the plan back as {back['plan']}")
    check(back["predicted"]["iteration_ms"] == predicted["iteration_ms"],
          f"{where}: simulate predicts {back['predicted']['iteration_ms']} ms, the document "
          f"{predicted['iteration_ms']}")


def figure(pattern, out):
    """A number from the text output."""
    match = re.search(pattern, out, re.M)
    check(match, f"text output has no /{pattern}/")
    return float(match.group(1))


def test_plan():
    args = ["plan", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--top", "3"]
    doc = document(*args, schema="domino.plan/1")
    check_plan_keys(doc["plan"], "plan")
    p = doc["plan"]["parallel"]
    check(p["tp"] * p["pp"] * p["dp"] == 8, "tp*pp*dp is not the cluster's 8 GPUs")
    typed(doc["predicted"], FIGURES, "predicted")
    typed(doc["problem"], {"model": str, "cluster": str, "gpus": int, "seq_len": int,
                           "global_batch": int}, "problem")
    check(doc["problem"]["model"] == "gpt3-2.7b" and doc["problem"]["gpus"] == 8, "problem")
    typed(doc["search"], {"objective": str, "evaluated": int, "rejected": int, "pruned": int,
                          "seconds": NUMBER, "plans_per_s": NUMBER, "timed_out": bool,
                          "partial": bool}, "search")
    check(doc["search"]["evaluated"] > 0 and doc["search"]["partial"] is False, "search")
    check(doc["search"]["stopped_by"] is None, "stopped_by of a finished search")
    check(doc["search"]["memory_headroom_gib"] == 0, "memory_headroom_gib without --memory-headroom")
    top = doc["top"]
    check(1 <= len(top) <= 3, f"{len(top)} plans in top with --top 3")
    check([t["rank"] for t in top] == list(range(1, len(top) + 1)), "ranks")
    for t in top:
        check_plan_keys(t["plan"], f"top[{t['rank']}].plan")
        typed(t["predicted"], FIGURES, f"top[{t['rank']}].predicted")
    check(top[0]["plan"] == doc["plan"] and top[0]["predicted"] == doc["predicted"],
          "top[0] is not the chosen plan")
    speeds = [t["predicted"]["tokens_per_s"] for t in top]
    check(speeds == sorted(speeds, reverse=True), f"top not ranked by tokens/s: {speeds}")
    if doc["baseline"] is not None:
        check(doc["baseline"]["plan"]["overlap"]["row_split"] == 1, "baseline is sliced")
    for g in doc["gains"]:
        typed(g, {"dimension": str, "gain": NUMBER, "best": dict}, "gains")
        check(abs(g["gain"] - doc["baseline"]["predicted"]["iteration_ms"] /
                  g["best"]["predicted"]["iteration_ms"]) < 1e-9, f"gain of {g['dimension']}")
    check("rejections" not in doc, "rejections without --explain")
    # The text output says the same: its rank-1 row.
    out = text(*args)
    check(figure(r"^\s+1\s+.*?\s(\d+\.\d\d)\s+\d+\.\d\d\s+[\d.]+%", out) ==
          round(doc["predicted"]["iteration_ms"], 2), "iteration ms differs from the table's")
    # The plan YAML goes to --out, the document to stdout; --out - would put both on stdout.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.yaml")
        code, out, err = run(*args, "--format", "json", "--out", path)
        check(code == 0 and json.loads(out)["plan"] == doc["plan"], "--out FILE with json")
        check(open(path).read().startswith("# domino plan"), "--out FILE not written")
        check(err.strip() == f"wrote {path}", f"stderr with --out: {err.strip()}")
        code, out, err = run(*args, "--format", "json", "--out", "-")
        check(code == 2 and out == "" and len(err.strip().splitlines()) == 1,
              f"--out - with json: exit {code}, stdout {out[:40]!r}")
    doc = document(*args, "--explain", schema="domino.plan/1")
    check(all(isinstance(r, str) for r in doc["rejections"]), "rejections")
    # Every plan object loads back: Domino's slicing, decomposed overlap on copy engines, fp8,
    # an interleaved pipeline.
    for extra in ([], ["--strategy", "all", "--fix", "tp=8,sp=true", "--copy-engine"],
                  ["--precision", "fp8", "--fix", "pp=2,v=8"]):
        doc = document(*args, *extra, schema="domino.plan/1")
        where = " ".join(["plan", *extra])
        for t in doc["top"]:
            check_loads_back(t["plan"], t["predicted"], f"{where}: top[{t['rank']}]")
        if doc["baseline"] is not None:
            check_loads_back(doc["baseline"]["plan"], doc["baseline"]["predicted"],
                             f"{where}: baseline")
        for g in doc["gains"]:
            check_loads_back(g["best"]["plan"], g["best"]["predicted"], f"{where}: {g['dimension']}")
    # An inline model keeps the keys a model file may add: head_dim, positions.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "inline.yaml")
        with open(path, "w") as f:
            f.write("model: {name: inl, layers: 4, hidden: 1024, heads: 8, kv_heads: 2, "
                    "head_dim: 256, ffn: 4096, vocab: 32000, seq_len: 2048, activation: swiglu, "
                    "norm: layernorm, positions: rotary, bias: false, tied_embeddings: false}\n"
                    "cluster: dgx-h100:1:2\ntraining: {seq_len: 2048, micro_batch: 2, "
                    "global_batch: 2}\nparallel: {tp: 2}\n")
        doc = document("simulate", path, schema="domino.simulate/1")
        check(doc["plan"]["model"]["head_dim"] == 256 and
              doc["plan"]["model"]["positions"] == "rotary", "inline model keys")
        check_loads_back(doc["plan"], doc["predicted"], "simulate of an inline model")
        # A dropout after the attention only says so, and loads back.
        drop = os.path.join(tmp, "drop.yaml")
        with open(drop, "w") as f:
            f.write("model: gpt3-2.7b\ncluster: dgx-h100:1\ntraining: {seq_len: 2048, "
                    "micro_batch: 2, global_batch: 16, dropout: true, mlp_dropout: false}\n"
                    "parallel: {tp: 8}\n")
        doc = document("simulate", drop, schema="domino.simulate/1")
        check(doc["plan"]["training"]["dropout"] is True and
              doc["plan"]["training"]["mlp_dropout"] is False, "mlp_dropout in the JSON plan")
        check_loads_back(doc["plan"], doc["predicted"], "simulate with mlp_dropout false")
    # And simulate's, with the settings a plan may leave to its stack set otherwise.
    for extra in (["--cuda-graphs"], ["--stack", "megatron-2021", "--precision", "fp16"]):
        doc = document("simulate", "--model", "gpt3-2.7b", "--cluster", "dgx-h100:1", "--dp", "8",
                       "--micro-batch", "2", *extra, schema="domino.simulate/1")
        check_loads_back(doc["plan"], doc["predicted"], " ".join(["simulate", *extra]))


def test_simulate():
    args = ["simulate", "--model", "gpt3-175b", "--cluster", "dgx-a100:8", "--tp", "8", "--pp", "8",
            "--micro-batch", "1", "--global-batch", "64", "--seq-len", "2048", "--recompute", "full",
            "--virtual-stages", "3"]
    doc = document(*args, schema="domino.simulate/1")
    check(doc["mode"] == "predict", "mode")
    check_plan_keys(doc["plan"], "plan")
    check(doc["plan"]["parallel"]["virtual_stages"] == 3 and
          doc["plan"]["memory"]["recompute"] == "full", "plan does not say what was asked")
    typed(doc["resolved"], {"model": str, "cluster": str, "gpus": int, "gpu": str, "stack": str,
                            "micro_batches": int}, "resolved")
    check(doc["resolved"]["gpus"] == 64 and doc["resolved"]["micro_batches"] == 64, "resolved")
    typed(doc["predicted"], FIGURES, "predicted")
    typed(doc, {"mfu_full_attention": NUMBER, "tp_comm_ms": NUMBER, "cp_comm_ms": NUMBER, "dp_comm_ms": NUMBER,
                "serial_ms": NUMBER, "ops_per_micro_batch": int}, "simulate")
    check(sorted(doc["busy_ms"]) == sorted(["gemm", "attention", "elementwise", "tp-comm",
                                            "other-comm"]), f"busy_ms keys {list(doc['busy_ms'])}")
    typed(doc["busy_ms"], {k: NUMBER for k in doc["busy_ms"]}, "busy_ms")
    parts = ["compute_ms", "exposed_tp_ms", "bubble_ms", "exposed_pp_ms", "exposed_dp_ms",
             "optimizer_ms"]
    typed(doc["breakdown"], {"critical_stage": int, **{k: NUMBER for k in parts}}, "breakdown")
    iteration = doc["predicted"]["iteration_ms"]
    total = sum(doc["breakdown"][k] for k in parts)
    check(abs(total - iteration) < 1e-6 * iteration, f"breakdown adds to {total}, not {iteration}")
    out = text(*args)
    check(figure(r"^iteration\s+([\d.]+) ms", out) == round(iteration, 2),
          "iteration ms differs from the table's")

    doc = document("simulate", "--compare-strategies", schema="domino.simulate/1")
    check(doc["mode"] == "compare_strategies" and "breakdown" not in doc, "compare mode")
    rows = doc["strategies"]
    check(rows and rows[0]["strategy"] == "baseline (Megatron)", "first strategy")
    check(rows[0]["speedup_vs_baseline"] == 1, "baseline's speedup")
    for r in rows:
        typed(r, {"strategy": str, "plan": dict, "predicted": dict, "comm_share": NUMBER,
                  "speedup_vs_baseline": NUMBER}, r["strategy"])
        typed(r["predicted"], FIGURES, r["strategy"])
        check(abs(r["speedup_vs_baseline"] - rows[0]["predicted"]["iteration_ms"] /
                  r["predicted"]["iteration_ms"]) < 1e-9, f"{r['strategy']}: speedup")
    for s in doc["skipped"]:
        typed(s, {"strategy": str, "key": str, "rule": str}, "skipped")
    out = text("simulate", "--compare-strategies")
    check(len(rows) + len(doc["skipped"]) == 15, "strategies and skipped are not the 15")
    check(out.count("\nskipped ") == len(doc["skipped"]), "skipped differs from the text's")
    check(figure(r"^row p=2 \(DeepSpeed-Domino\)\s+([\d.]+)", out) ==
          round(next(r for r in rows if r["strategy"].startswith("row p=2 (D"))["predicted"]
                ["iteration_ms"], 2), "row p=2 differs from the table's")
    # The report to a file, the document to stdout; a report on stdout is refused.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.yaml")
        document("simulate", "--report", path, schema="domino.simulate/1")
        check(open(path).read().startswith("# domino simulate report"), "--report not written")
        code, out, err = run("simulate", "--report", "-", "--format", "json")
        check(code == 2 and out == "", f"--report - with json: exit {code}")


def test_validate():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "v.csv")
        doc = document("validate", "--csv", path, schema="domino.validate/1")
        with open(path) as f:
            expected = list(csv.DictReader(f))
    typed(doc, {"table": str, "rows": list, "summary": list, "excluded": list}, "validate")
    check(doc["category"] is None, "category without --category")
    check(len(doc["rows"]) == len(expected) > 0, "rows differ from the CSV's")
    for row, want in zip(doc["rows"], expected):
        typed(row, {"id": str, "category": str, "source": str, "configuration": str, "unit": str,
                    "measured": NUMBER, "predicted": NUMBER, "error": NUMBER,
                    "gemm_share": NUMBER, "gemm_factor_to_close": NUMBER}, row["id"])
        check(abs(row["gemm_factor_to_close"] - float(want["gemm_factor_to_close"])) < 1e-4,
              f"{row['id']}: gemm_factor_to_close")
        share, factor = row["gemm_share"], row["gemm_factor_to_close"]
        if row["category"] in ("end-to-end", "layer"):
            check(0 < share < 1 and factor > 0, f"{row['id']}: gemm_share {share}, factor {factor}")
            # The predicted time with the GEMMs' share scaled by the factor is the measurement.
            check(abs(row["predicted"] * (1 + (factor - 1) * share) / row["measured"] - 1) < 1e-9,
                  f"{row['id']}: gemm_factor_to_close does not close the gap")
        if row["category"] == "end-to-end":
            # A published run ran: its plan fits in its GPUs' memory.
            typed(row, {"memory_gib": NUMBER, "capacity_gib": NUMBER}, row["id"])
            check(0 < row["memory_gib"] <= row["capacity_gib"], f"{row['id']}: does not fit")
        else:
            if row["category"] != "layer":
                check(share == 0 and factor == 0, f"{row['id']}: a GEMM share outside end-to-end")
            check(row["memory_gib"] is None and row["capacity_gib"] is None,
                  f"{row['id']}: memory outside end-to-end")
        for key in ("id", "category", "source", "configuration", "unit"):
            check(row[key] == want[key], f"{row['id']}: {key} {row[key]!r} vs CSV {want[key]!r}")
        check(abs(row["error"] - float(want["error"])) < 1e-6, f"{row['id']}: error")
        check(abs(row["error"] - (row["predicted"] / row["measured"] - 1)) < 1e-9,
              f"{row['id']}: error is not predicted / measured - 1")
        check(row["unresolved"] is None or (isinstance(row["unresolved"], str) and
                                            row["unresolved"]), f"{row['id']}: unresolved")
    unresolved = [r["id"] for r in doc["rows"] if r["unresolved"]]
    check("mcore08-gpt-32b-384gpu" in unresolved and "mlm21-t1-gpt-1.7b" not in unresolved,
          f"unresolved rows {unresolved}")
    categories = {r["category"] for r in doc["rows"]}
    check({s["category"] for s in doc["summary"]} == categories, "summary categories")
    for s in doc["summary"]:
        typed(s, {"category": str, "rows": int, "mean_abs_error": NUMBER, "max_abs_error": NUMBER,
                  "worst_id": str, "target": dict, "target_met": bool, "guard": dict,
                  "guard_met": bool}, s["category"])
        errors = [abs(r["error"]) for r in doc["rows"] if r["category"] == s["category"]]
        check(s["rows"] == len(errors), f"{s['category']}: rows")
        check(abs(s["max_abs_error"] - max(errors)) < 1e-12, f"{s['category']}: max")
        check(abs(s["mean_abs_error"] - sum(errors) / len(errors)) < 1e-9, f"{s['category']}: mean")
        guard = s["guard"]
        check(s["guard_met"] == (s["mean_abs_error"] <= guard["mean_abs_error"] and
                                 s["max_abs_error"] <= guard["max_abs_error"]), "guard_met")
    for e in doc["excluded"]:
        typed(e, {"what": str, "source": str, "reason": str}, "excluded")
    fit = doc["memory_fit"]
    typed(fit, {"rows": int, "over": list, "fullest_id": str, "fullest_gib": NUMBER,
                "fullest_capacity_gib": NUMBER}, "memory_fit")
    ends = [r for r in doc["rows"] if r["category"] == "end-to-end"]
    fullest = max(ends, key=lambda r: r["memory_gib"] / r["capacity_gib"])
    check(fit["rows"] == len(ends) and fit["over"] == [] and fit["fullest_id"] == fullest["id"] and
          fit["fullest_gib"] == fullest["memory_gib"], f"memory_fit {fit}")
    grouped = 0
    for g in doc["gemm_gap"]:
        typed(g, {"source": str, "precision": str, "rows": int, "mean_error": NUMBER,
                  "mean_abs_error": NUMBER, "gemm_share": list, "gemm_factor_to_close": list},
              "gemm_gap")
        members = [r for r in doc["rows"]
                   if r["category"] == "end-to-end" and r["id"].split("-")[0] == g["source"]
                   and f" {g['precision']} " in r["configuration"]]
        factors = [r["gemm_factor_to_close"] for r in members]
        check(len(factors) == g["rows"], f"gemm_gap {g['source']} {g['precision']}: rows")
        errors = [r["error"] for r in members]
        check(abs(g["mean_error"] - sum(errors) / len(errors)) < 1e-12 and
              abs(g["mean_abs_error"] - sum(map(abs, errors)) / len(errors)) < 1e-12,
              f"gemm_gap {g['source']} {g['precision']}: mean errors")
        check(g["gemm_factor_to_close"] == [min(factors), max(factors)],
              f"gemm_gap {g['source']} {g['precision']}: range")
        grouped += g["rows"]
    check(grouped == sum(r["category"] == "end-to-end" for r in doc["rows"]),
          "gemm_gap leaves out end-to-end rows")
    by_id = {r["id"]: r for r in doc["rows"]}
    paired = 0
    for g in doc["fp8_pairs"]:
        typed(g, {"source": str, "model": str, "pairs": int, "measured_speedup": list,
                  "predicted_speedup": list, "bf16_gemm_factor": list}, "fp8_pairs")
        lo, hi = g["measured_speedup"]
        check(1 <= lo <= hi, f"fp8_pairs {g['source']} {g['model']}: measured range")
        paired += g["pairs"]
    # The built-in table's DGX Cloud series name each pair's rows alike but for the precision; a
    # pair's layouts are the same (v25.04's Llama 3.1 70B runs fp8 on other degrees).
    twins = [i for i in by_id if "-bf16-" in i and i.replace("-bf16-", "-fp8-") in by_id and
             by_id[i]["configuration"].replace(" bf16 ", " fp8 ") ==
             by_id[i.replace("-bf16-", "-fp8-")]["configuration"]]
    check(paired == len(twins) > 0, f"fp8_pairs: {paired} pairs, {len(twins)} twin ids")
    doc = document("validate", "--category", "gemm", schema="domino.validate/1")
    check(doc["gemm_gap"] == [] and doc["fp8_pairs"] == [] and doc["memory_fit"] is None,
          "gemm_gap and memory_fit without end-to-end rows")
    check(doc["category"] == "gemm" and {r["category"] for r in doc["rows"]} == {"gemm"},
          "--category gemm")
    check(doc["row_filter"] is None, "row_filter without --row")
    doc = document("validate", "--row", "mcore08", "--row", "mlm21-t1-gpt-1.7b",
                   schema="domino.validate/1")
    check(doc["row_filter"] == ["mcore08", "mlm21-t1-gpt-1.7b"], "row_filter")
    ids = [r["id"] for r in doc["rows"]]
    check(len(ids) == 10 and all(i.startswith("mcore08-") for i in ids[1:]) and
          ids[0] == "mlm21-t1-gpt-1.7b", f"--row picked {ids}")
    # --fit: the GEMM model's constants fitted on the gemm rows, each source left out once.
    fit = document("validate", "--fit", schema="domino.validate-fit/1")
    gemm_rows = [r for r in expected if r["category"] == "gemm"]
    check(fit["rows"] == len(gemm_rows) > 0, "--fit: rows are not the gemm rows")
    catalog_error = sum(abs(float(r["error"])) for r in gemm_rows) / len(gemm_rows)
    check(abs(fit["catalog_mean_abs_error"] - catalog_error) < 1e-5,
          "--fit: the catalog's error is not validate's")
    check(fit["fitted_mean_abs_error"] <= fit["catalog_mean_abs_error"], "--fit: worse than catalog")
    for c in (fit["catalog"], fit["fitted"]):
        typed(c, {"efficiency": list, "gemm_tile_overhead_k": NUMBER, "gemm_fixed_us": NUMBER},
              "--fit constants")
        for e in c["efficiency"]:
            typed(e, {"precision": str, "key": str, "gpus": list, "value": NUMBER}, "efficiency")
    sources = fit["leave_one_source_out"]
    check(sum(s["rows"] for s in sources) == fit["rows"], "--fit: sources do not cover the rows")
    held_out = sum(s["held_out_mean_abs_error"] * s["rows"] for s in sources) / fit["rows"]
    check(abs(held_out - fit["held_out_mean_abs_error"]) < 1e-9, "--fit: held-out mean")
    for s in sources:
        typed(s, {"label": str, "source": str, "rows": int, "held_out": dict}, s["label"])


# Two reports of the same three ops: a prediction where the all-reduce runs under fc1, and a
# measurement where the three run in turn; each figure below is hand-computed.
REPORT = """model: gpt3-2.7b
cluster: dgx-h100:1
parallel: {{tp: 8}}
{block}:
  iteration_ms: {iteration}
  ideal_ms: 8
  exposed_comm_ms: 2
  hidden_comm_fraction: {hidden}
  tokens_per_s: 1000
timeline:
  ops:
    - [qkv, gemm, 0, {a}]
    - [tp.allreduce L0 mb0 fwd, tp-comm, {a}, {b}]
    - [fc1, gemm, {c}, {d}]
"""


def test_compare():
    with tempfile.TemporaryDirectory() as tmp:
        p, m, bare = (os.path.join(tmp, n) for n in ("p.yaml", "m.yaml", "bare.yaml"))
        with open(p, "w") as f:
            f.write(REPORT.format(block="predicted", iteration=10, hidden=0.5, a=10, b=30, c=10,
                                  d=30))
        with open(m, "w") as f:
            f.write(REPORT.format(block="measured", iteration=12.5, hidden=0.25, a=8, b=33, c=33,
                                  d=53))
        with open(bare, "w") as f:
            f.write(REPORT.split("timeline:")[0].format(block="measured", iteration=12.5,
                                                         hidden=0.25))
        doc = document("compare", p, m, schema="domino.compare/1")
        check(doc["predicted"] == {"path": p, "model": "gpt3-2.7b"}, "predicted")
        check(doc["measured"]["path"] == m, "measured")
        it = doc["figures"]["iteration_ms"]
        check(it["predicted"] == 10 and it["measured"] == 12.5 and abs(it["error"] + 0.2) < 1e-12,
              f"iteration_ms {it}")
        check(doc["figures"]["ideal_ms"]["error"] == 0, "ideal_ms error")
        hidden = doc["figures"]["hidden_comm_fraction"]
        check("error" not in hidden and abs(hidden["difference"] - 0.25) < 1e-12, "hidden")
        check(doc["timelines"] is True and doc["matched_ops"] == 3 and
              doc["unmatched_predicted_ops"] == 0, "matched ops")
        ops = {o["label"]: o for o in doc["ops"]}
        check([o["label"] for o in doc["ops"]] == ["qkv", "tp.allreduce L0 mb0 fwd", "fc1"],
              "ops not in the predicted report's order")
        for label, p_us, m_us, error in (("qkv", 10, 8, 0.25), ("tp.allreduce L0 mb0 fwd", 20, 25, -0.2),
                                         ("fc1", 20, 20, 0)):
            o = ops[label]
            check(o["predicted_us"] == p_us and o["measured_us"] == m_us and
                  abs(o["error"] - error) < 1e-12, f"{label}: {o}")
        check(abs(doc["median_op_error"] - 0.2) < 1e-12 and doc["median_op_error_ops"] == 3,
              "median per-op error")
        classes = {c["op_class"]: c for c in doc["op_classes"]}
        check(classes["gemm"]["predicted_us"] == 30 and classes["gemm"]["measured_us"] == 28,
              "gemm class")
        stack = doc["layer_stack"]
        length = stack["length_ms"]
        check(abs(length["predicted"] - 0.03) < 1e-12 and abs(length["measured"] - 0.053) < 1e-12,
              f"layer stack {length}")
        # Predicted: 1 - (30 - 30 compute) / 20 comm; measured: 1 - (53 - 28) / 25.
        hidden = stack["hidden_fraction"]
        check(abs(hidden["predicted"] - 1) < 1e-12 and abs(hidden["measured"]) < 1e-12 and
              abs(hidden["difference"] - 1) < 1e-12, f"layer stack hidden {hidden}")
        check(not any("holds a" in n for n in doc["notes"]),
              f"notes of a prediction against a measurement: {doc['notes']}")
        # Without a timeline, the figures only.
        doc = document("compare", p, bare, schema="domino.compare/1")
        check(doc["timelines"] is False and "ops" not in doc and doc["matched_ops"] == 0,
              "a report without a timeline")
        # Two predictions, or two measurements, compare too, and a note says what each holds.
        doc = document("compare", p, p, schema="domino.compare/1")
        check(doc["notes"] == [f"{p} holds a prediction, not a measurement: the measured column "
                               "is its predicted figures"], f"two predictions: {doc['notes']}")
        doc = document("compare", m, m, schema="domino.compare/1")
        check(doc["notes"] == [f"{m} holds a measurement, not a prediction: the predicted column "
                               "is its measured figures"], f"two measurements: {doc['notes']}")
        check(f"# note: {p} holds a prediction" in text("compare", p, p), "the table's note")


def test_models():
    doc = document("models", schema="domino.models/1")
    names = [m["name"] for m in doc["models"]]
    listed = [line.split()[0] for line in text("models").splitlines()[2:] if line.strip()
              and not line.startswith("GFLOP")]
    check(names == listed, f"models {names} differ from the table's {listed}")
    for m in doc["models"]:
        typed(m, {"name": str, "layers": int, "hidden": int, "heads": int, "kv_heads": int,
                  "ffn": int, "vocab": int, "seq_len": int, "activation": str, "norm": str,
                  "bias": bool, "tied_embeddings": bool, "head_dim": int, "positions": str,
                  "parameters": dict, "training_flops_per_token": NUMBER}, m["name"])
        check(m["head_dim"] * m["heads"] == m["hidden"], f"{m['name']}: head_dim")
    gpt = next(m for m in doc["models"] if m["name"] == "gpt3-13b")
    check(12.8e9 < gpt["parameters"]["total"] < 12.9e9, "gpt3-13b parameters")
    check(gpt["parameters"]["layers"] == 40 * gpt["parameters"]["per_layer"], "per layer")
    doc = document("models", "llama3-8b", schema="domino.models/1")
    m = doc["model"]
    check(m["name"] == "llama3-8b" and m["kv_heads"] == 8 and m["activation"] == "swiglu", "llama3")
    layer = m["layer_ops"]
    check(layer["sequences"] == 1 and layer["seq_len"] == m["seq_len"] and layer["tp"] == 1,
          "layer_ops shape")
    for op in layer["ops"]:
        typed(op, {"name": str, "kind": str, "fwd_flops": NUMBER, "bwd_flops": NUMBER,
                   "fwd_bytes": NUMBER, "row_parallel": bool}, op["name"])
        check(op["kind"] in ("gemm", "attention", "elementwise"), f"{op['name']}: kind")
        check((op["m"] is not None) == (op["kind"] == "gemm"), f"{op['name']}: m")
        if op["kind"] == "gemm":
            check(op["fwd_flops"] == 2 * op["m"] * op["n"] * op["k"], f"{op['name']}: FLOPs")


def test_hardware():
    doc = document("hardware", schema="domino.hardware/1")
    gpus = {g["name"]: g for g in doc["gpus"]}
    nodes = {n["name"]: n for n in doc["nodes"]}
    check({"h100-sxm", "a100-sxm-80gb"} <= set(gpus) and "dgx-h100" in nodes, "catalog")
    for g in gpus.values():
        typed(g, {"sms": int, "memory_GB": NUMBER, "hbm_GBps": NUMBER, "peak_tflops": dict,
                  "kernel_launch_us": NUMBER}, g["name"])
        check(sorted(g["peak_tflops"]) == sorted(["fp32", "tf32", "bf16", "fp16", "fp8"]), "peaks")
    check(gpus["a100-sxm-80gb"]["peak_tflops"]["fp8"] is None, "a100 fp8 is not null")
    check(gpus["h100-sxm"]["peak_tflops"]["bf16"] > 0, "h100 bf16")
    n = nodes["dgx-h100"]
    typed(n, {"gpu": dict, "gpus_per_node": int, "nvlink": dict, "nvls": bool, "nics": int,
              "network": dict, "contention": dict}, "dgx-h100")
    check(n["gpu"]["name"] == "h100-sxm" and n["gpus_per_node"] == 8, "dgx-h100")
    check(n["node_network_GBps"] == n["nics"] * n["network"]["GBps_per_direction"], "node network")
    check(document("hardware", "h100-sxm", schema="domino.hardware/1")["gpu"] == gpus["h100-sxm"],
          "one GPU differs from the list's")
    check(document("hardware", "dgx-h100", schema="domino.hardware/1")["node"] == n,
          "one node differs from the list's")
    cluster = document("hardware", "dgx-h100:4:2", schema="domino.hardware/1")["cluster"]
    check(cluster["name"] == "dgx-h100:4:2" and cluster["nodes"] == 4 and
          cluster["gpus_per_node"] == 2 and cluster["total_gpus"] == 8 and cluster["node"] == n,
          f"cluster {cluster['name']}")


TESTS = {"plan": test_plan, "simulate": test_simulate, "validate": test_validate,
         "compare": test_compare, "models": test_models, "hardware": test_hardware}


def main():
    global DOMINO
    if len(sys.argv) != 3 or sys.argv[2] not in TESTS:
        sys.exit(__doc__)
    DOMINO, command = sys.argv[1], sys.argv[2]
    try:
        TESTS[command]()
    except Failure as e:
        print(f"FAIL json {command}: {e}")
        sys.exit(1)
    print(f"json {command} ok")


if __name__ == "__main__":
    main()
