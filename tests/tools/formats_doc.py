#!/usr/bin/python3
"""docs/formats.md kept in step with the parsers and writers it documents.

For every format, the keys are read from the source that parses (or writes) it: each key a
YamlMap getter names (Int, Real, Bool, String, Enum, Map, Raw; every one of them makes the key
known, so these are exactly the keys a file may hold), the values of each Enum's table, and the
names a writer emits (report timeline, sweep CSV header, trace JSON). The check fails
  - naming every key the source accepts that the format's section of the page does not list in
    the first column of one of its tables (values of an enum: anywhere in the section, in
    backquotes), and
  - naming every key a table of the page lists (first column, tables headed `key`, `column` or
    `field`) that the source does not know.
The unknown-key error of the binary gives only the nearest known key, not the list, so the list
comes from the source. With --domino BIN, the page's examples are also loaded by the binary (each
with the command that reads that format), so that none of them is stale.
Usage: formats_doc.py SOURCE_ROOT [--domino BIN]
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
DOC = "docs/formats.md"
# map.Int("key", ...), map->Enum<T>("key", ...): the key every getter names.
GETTER = re.compile(
    r'(?:->|\.)\s*(?:Int|Real|Bool|String|Name|Enum|Map|Raw)\s*(?:<\w+>)?\s*\(\s*"([^"]+)"')
# map.Enum("key", &out, Need::kRequired, kNames);: the table of its values.
ENUM_TABLE = re.compile(
    r'(?:->|\.)\s*Enum\s*(?:<\w+>)?\s*\(\s*"[^"]+"[^;]*?,\s*(k\w+)\s*\)\s*;', re.S)


def read(path):
    with open(f"{ROOT}/{path}", encoding="utf-8") as f:
        return f.read()


def body(path, signature):
    """The text of the function whose definition matches `signature` (a regex), braces included."""
    text = read(path)
    match = re.search(signature, text)
    if not match:
        sys.exit(f"formats_doc: {path}: no function matching /{signature}/ "
                 "(renamed? update the test)")
    start = text.index("{", match.end())
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    sys.exit(f"formats_doc: {path}: unbalanced braces after /{signature}/")


def table_names(path, name):
    """The first string of each {"...", ...} entry of the constexpr table `name` in `path`."""
    text = read(path)
    match = re.search(r"\b" + name + r"\b[^=;{]*(?:=\s*)?\{", text)
    if not match:
        sys.exit(f"formats_doc: {path}: no table {name}")
    end = text.index(";", match.end())
    block = text[match.end():end]
    names = re.findall(r'\{\s*"([^"]+)"', block)
    return names or re.findall(r'"([^"]+)"', block)


def yaml_keys(text):
    """The keys the string literals in `text` write as YAML lines ("  key: {}\\n"), comments off."""
    keys = set()
    for literal in re.findall(r'"((?:[^"\\]|\\.)*)"', text):
        for line in literal.split("\\n"):
            keys |= set(re.findall(r"^\s*(?:- )?(\w+):", line.split("#")[0]))
    return keys


def getters(path, *signatures):
    """(keys, enum values) of the getters in the functions `signatures` of `path`."""
    keys, values = set(), set()
    for signature in signatures:
        text = body(path, signature)
        keys |= set(GETTER.findall(text))
        for table in ENUM_TABLE.findall(text):
            values |= set(table_names(path, table))
    return keys, values


# ---- what each format's source accepts or writes --------------------------------------------


def plan_keys():
    keys, values = getters("planner/plan.cc", r"\nResult<Plan> ParsePlanNode\(",
                           r"\nvoid ReadFigures\(")
    # ReadFigures(root, "predicted", ...): the block's key is an argument.
    keys |= set(re.findall(r'ReadFigures\(\w+, "(\w+)"', read("planner/plan.cc")))
    # ReadOverride(*training, "cross_entropy", ...): a stack override's key is an argument too.
    keys |= set(re.findall(r'ReadOverride\(\*?\w+, "(\w+)"', read("planner/plan.cc")))
    # The search: block `domino plan` writes (tools/cmd_plan.cc PlanYaml): its YAML keys.
    keys |= yaml_keys(body("tools/cmd_plan.cc", r"\nstd::string PlanYaml\("))
    # gains: one key per dimension, {"row", [](const Plan& p) {...}}.
    gains = body("tools/cmd_plan.cc", r"\nstd::vector<DimensionGain> GainsOver\(")
    keys |= set(re.findall(r'\{"(\w+)",\s*\n?\s*\[', gains))
    flow = body("tools/cmd_plan.cc", r"\nstd::string FiguresFlow\(")
    keys |= set(re.findall(r"(\w+): ", flow))
    return keys, values


def report_keys():
    text = body("sim/report.cc", r"\nResult<Report> LoadReport\(")
    keys = set(re.findall(r'\["(\w+)"\]', text))
    writer = body("sim/report.cc", r"\nstd::string TimelineYaml\(")
    keys |= yaml_keys(writer)
    # each entry: [op, class, start_us, end_us]
    keys |= set(re.search(r"\[(\w+), (\w+), (\w+), (\w+)\]", writer).groups())
    classes = body("sim/predict.cc", r"\nstd::string_view OpClassName\(")
    return keys, set(re.findall(r'"([\w-]+)"', classes))


def model_keys():
    return getters("models/model_spec.cc", r"\nModelSpec ReadModel\(", r"\nvoid ReadFeatures\(",
                   r"\nvoid ReadWindow\(")


def hf_keys():
    keys = set()
    for path, signature in (("models/hf_config.cc", r"\nResult<ModelSpec> ParseHfConfig\("),
                            ("models/hf_config.cc", r"\nconst FamilyName\* ReadFamily\("),
                            ("models/hf_config.cc", r"\nActivation ReadActivation\("),
                            ("models/hf_approximations.cc", r"\nvoid AddApproximations\("),
                            ("models/hf_approximations.cc",
                             r"\nstd::optional<std::vector<bool>> ReadLayerTypes\("),
                            ("models/hf_approximations.cc", r"\nvoid AddWindow\(")):
        text = body(path, signature)
        calls = r"(?:config|outer)(?:\.|->)(?:Int|Bool|String|Find|NumberOr)\("
        for call in re.finditer(calls, text):
            # The call's arguments up to its closing parenthesis; keys are its string literals.
            depth, i = 1, call.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            keys |= set(re.findall(r'"(\w+)"', text[call.end():i]))
        for line in re.findall(r"string_view key = [^;]*;", text):
            keys |= set(re.findall(r'"(\w+)"', line))
        # Numbers read by Number(config, "key") and keys of a nested mapping, node["key"].
        keys |= set(re.findall(r'Number\(config,\s*"(\w+)"', text))
        keys |= set(re.findall(r'\["(\w+)"\]', text))
    values = set()
    for entry in re.findall(r'\{"(\w+)", "(\w+)", Family', read("models/hf_config.cc")):
        values |= set(entry)
    values |= set(table_names("models/hf_config.cc", "kGeluNames"))
    values |= set(table_names("models/hf_config.cc", "kSiluNames"))
    return keys, values


def gpu_keys():
    keys, values = getters("hardware/hardware_spec.cc", r"\nResult<GpuSpec> ParseGpu\(")
    keys |= set(table_names("hardware/hardware_spec.cc", "kDtypeNames"))  # peak_tflops.NAME
    return keys, values


def node_keys():
    return getters("hardware/hardware_spec.cc", r"\nResult<NodeSpec> ParseNode\(",
                   r"\nvoid ReadLink\(")


def cluster_keys():
    return getters("hardware/hardware_spec.cc", r"\nResult<ClusterSpec> ParseCluster\(")


def stack_keys():
    return getters("planner/stack.cc", r"\nResult<StackSpec> ParseStack\(")


def profile_keys():
    return getters("planner/profile.cc", r"\nResult<HardwareProfile> ParseProfile\(")


def study_keys():
    keys, values = getters("tools/sweep_study.cc", r"\nResult<Study> ParseStudy\(")
    keys |= set(table_names("tools/sweep_study.cc", "kKeys"))  # grid.KEY, fixed.KEY
    return keys, values


def validation_keys():
    keys, values = getters("sim/validation_table.cc", r"\nResult<ValidationTable> ParseValidationTable\(",
                           r"\nStatus ReadRow\(", r"\nvoid ReadMeasured\(", r"\nbool ReadGpuShape\(")
    keys |= set(table_names("sim/validation_table.cc", "kUnits"))  # measured.UNIT
    return keys, values


def sweep_csv_keys():
    text = body("tools/cmd_sweep.cc", r"\nvoid Run\(")
    header = re.search(r'"(strategy,[^"]*)"\s*\n?\s*"([^"]*)\\n"', text)
    keys = set((header.group(1) + header.group(2)).split(","))
    keys |= set(table_names("tools/sweep_study.cc", "kKeys"))  # the axis columns
    # A point's rows are SweepPoint's.
    point = body("tools/cmd_sweep.cc", r"\nResult<std::string> SweepPoint\(")
    strategies = set(re.findall(r'rows\.push_back\(\{"([\w-]+)"', point))
    strategies |= set(re.findall(r'csv \+= fmt::format\("(\w+),', point))
    if not strategies:
        sys.exit("formats_doc: tools/cmd_sweep.cc: SweepPoint writes no strategy (update the test)")
    return keys, strategies


def trace_keys():
    text = body("sim/trace.cc", r"\nstd::string TraceJson\(")
    keys = set(re.findall(r'\{"(\w+)",', text)) | set(re.findall(r'args\["(\w+)"\]', text))
    values = set(re.findall(r'\{"ph", "(\w)"\}', text))
    return keys, values


# Section heading of docs/formats.md -> its source.
SECTIONS = [
    ("Plan", plan_keys),
    ("Report", report_keys),
    ("Model", model_keys),
    ("Hugging Face config.json", hf_keys),
    ("GPU", gpu_keys),
    ("Node", node_keys),
    ("Cluster", cluster_keys),
    ("Stack", stack_keys),
    ("Hardware profile", profile_keys),
    ("Sweep study", study_keys),
    ("Validation table", validation_keys),
    ("Sweep CSV", sweep_csv_keys),
    ("Perfetto trace JSON", trace_keys),
]


def sections(doc):
    """{heading: text} for every `## ` heading (its `### ` subsections included)."""
    out, name, lines = {}, None, []
    for line in doc.splitlines():
        if line.startswith("## "):
            if name:
                out[name] = "\n".join(lines)
            name = re.sub(r"\s*\(.*$", "", line[3:]).strip().strip("`")
            lines = []
        elif name:
            lines.append(line)
    if name:
        out[name] = "\n".join(lines)
    return out


def table_keys(text):
    """Backquoted names in the first column of the section's key tables, split at dots."""
    keys = set()
    header_first = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header_first = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header_first is None:
            header_first = cells[0].lower()
            continue
        if set(cells[0]) <= set("-: ") or header_first not in ("key", "column", "field"):
            continue
        for token in re.findall(r"`([^`]+)`", cells[0]):
            keys |= {part for part in token.split(".") if part}
    return keys


def code_blocks(text):
    return re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M)


def check_examples(domino, found):
    """Loads each section's example with the binary; returns the failures."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        def write(name, text):
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return path

        tiny_plan, report = code_blocks(found["Report"])[:2]
        tiny = write("tiny-plan.yaml", tiny_plan)
        hf = code_blocks(found["Hugging Face config.json"])[0]
        write("gpt2/config.json", hf)
        runs = [
            ("Plan", ["simulate", "--plan", write("plan.yaml", code_blocks(found["Plan"])[0])]),
            ("Report", ["compare", write("report.yaml", report), write("report2.yaml", report)]),
            ("Model", ["models", write("model.yaml", code_blocks(found["Model"])[0])]),
            ("Hugging Face config.json", ["models", os.path.join(tmp, "gpt2")]),
            ("GPU", ["hardware", write("gpu.yaml", code_blocks(found["GPU"])[0])]),
            ("Node", ["hardware", write("node.yaml", code_blocks(found["Node"])[0])]),
            ("Cluster", ["hardware", write("cluster.yaml", code_blocks(found["Cluster"])[0])]),
            ("Stack", ["simulate", "--plan", tiny, "--stack",
                       write("stack.yaml", code_blocks(found["Stack"])[0])]),
            ("Hardware profile",
             ["simulate", "--plan", tiny, "--hardware-profile",
              write("profile.yaml", code_blocks(found["Hardware profile"])[0])]),
            ("Validation table", ["validate", "--table",
                                  write("table.yaml", code_blocks(found["Validation table"])[0])]),
        ]
        for name, args in runs:
            run = subprocess.run([domino] + args, capture_output=True, text=True, timeout=120)
            if run.returncode != 0:
                last = (run.stderr.strip().splitlines() or ["(no message)"])[-1]
                problems.append(f"{DOC} ## {name}: the example does not load: {last}")
    return problems


def main():
    doc = read(DOC)
    found = sections(doc)
    problems = []
    for name, source in SECTIONS:
        if name not in found:
            problems.append(f"{DOC}: no section '## {name}'")
            continue
        keys, values = source()
        if not keys:
            problems.append(f"{name}: no key found in the source (the test's patterns are stale)")
        listed = table_keys(found[name])
        quoted = set(re.findall(r"`([^`]+)`", found[name]))
        quoted |= {word for q in quoted for word in re.split(r"[\s|,./\[\]{}:]+", q)}
        for key in sorted(keys - listed):
            problems.append(f"{DOC} ## {name}: key '{key}' is accepted by the parser "
                            "but not listed")
        for value in sorted(values - quoted):
            problems.append(f"{DOC} ## {name}: value '{value}' is accepted but not named")
        for key in sorted(listed - keys):
            problems.append(f"{DOC} ## {name}: key '{key}' is listed but the parser "
                            "does not know it")
    if "--domino" in sys.argv and not problems:
        problems += check_examples(sys.argv[sys.argv.index("--domino") + 1], found)
    for line in problems:
        print(line, flush=True)
    if problems:
        sys.exit(f"formats_doc: {len(problems)} problem(s)")
    print("formats doc ok")


if __name__ == "__main__":
    main()
