"""The vLLM server flags InferenceX ran each of its silicon_sample.csv rows with.

aiconfigurator-core 0.12.0's ``systems/silicon_sample.csv`` holds 1,116 vLLM rows taken from
SemiAnalysis' InferenceX (``db-dump/...`` records and dated exports, each naming the time it was
``measured=``). InferenceX starts ``vllm serve`` from one script per model, precision and GPU
(``benchmarks/70b_fp8_h100_slurm.sh``, later ``benchmarks/single_node/<model>_<precision>_<gpu>.sh``),
and those scripts set engine flags that change the pool and the step times: ``--kv-cache-dtype
fp8`` (Llama-3.1-70B's, gpt-oss's on B200 and MiniMax-M2.5's later scripts),
``--gpu-memory-utilization``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--block-size``.

For each InferenceX row this reads the script of its model, precision and GPU on InferenceX's
main branch (first parents) at the row's ``measured=`` time (a date without a time: the state
at the start and at the end of that day; a flag whose value differs between the two is left out
and named in ``changed_during_day``) and writes the flags it sets, ``--async-scheduling``
included, to ``bench/inferencex_server_flags.json``, with the script's path and commit. A flag
set twice with different values (a shell branch) is left out and named in ``ambiguous``. A row
whose script was not on main at that time (a run from a branch), or was added to main during
that day (the run may predate it), gets none. A row that names no vLLM version gets the image
its workflow configuration named, where one image is named all day (else
``changed_during_day`` names ``engine_version``). These are the rows' measuring procedure, read from
their source, like the client's length distribution: nothing in them comes from the rows'
measured latencies.

Needs a clone of https://github.com/SemiAnalysisAI/InferenceX (``--repo``); the JSON it writes
is kept in the repository, so ``bench/gpu_accuracy.py`` does not need the clone.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "inferencex_server_flags.json"
#: silicon_sample.csv model -> InferenceX's script-name prefix
ALIASES = {
    "meta-llama/Llama-3.1-70B": "70b",
    "openai/gpt-oss-120b": "gptoss",
    "MiniMaxAI/MiniMax-M2.5": "minimaxm2.5",
    "moonshotai/Kimi-K2.5": "kimik2.5",
}
#: what InferenceX's workflow configuration names each model (``model:``) contains
MODEL_NAMES = {
    "70b": "70B",
    "gptoss": "gpt-oss",
    "minimaxm2.5": "MiniMax-M2.5",
    "kimik2.5": "Kimi-K2.5",
}
#: scripts of other engines or other scenarios beside the plain vLLM one
NOT_VLLM = re.compile(
    r"trt|sglang|mtp|atom|dynamo|agentic|speedbench|power|triattn|deprecated|multi_node|eagle"
)
#: vLLM flag -> PlanRequest field; CLI (``--flag v``, ``--flag=v``) or --config YAML (``flag: v``)
FLAGS = {
    "kv-cache-dtype": "kv_dtype",
    "gpu-memory-utilization": "gpu_memory_utilization",
    "max-num-seqs": "max_num_seqs",
    "max-num-batched-tokens": "max_num_batched_tokens",
    "block-size": "block_size",
}
MEASURED = re.compile(r"measured=(\d{4}-\d\d-\d\d)(T\d\d:\d\d:\d\d(?:\.\d+)?Z)?")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def _value(raw: str) -> Any:
    """A flag's value as the row will use it: a number, a name, or a formula of the row."""
    text = raw.strip().strip("\"'")
    if text == "$CONC":
        return "concurrency"
    formula = re.fullmatch(r"\$\(\(\s*ISL\s*\*\s*(\d+)\s*\)\)", text)
    if formula:
        return f"{formula.group(1)} x isl"
    if re.fullmatch(r"\d+", text):
        return int(text)
    if re.fullmatch(r"\d*\.\d+", text):
        return float(text)
    if re.fullmatch(r"[a-z0-9_]+", text):
        return text
    return {"unparsed": text}


def flags_of(script: str) -> tuple[dict[str, Any], list[str]]:
    """The PlanRequest fields a script's ``vllm serve`` sets, and the flags set ambiguously."""
    lines = [
        line.split(" #")[0] for line in script.splitlines() if not line.lstrip().startswith("#")
    ]
    text = "\n".join(lines)
    found: dict[str, Any] = {}
    ambiguous: list[str] = []
    for flag, field in FLAGS.items():
        pattern = rf"(?:--{flag}[ =]|^\s*{flag}:\s*)(\"[^\"]*\"|'[^']*'|[^\s\\]+)"
        values = {json.dumps(_value(v)) for v in re.findall(pattern, text, flags=re.M)}
        if len(values) == 1:
            found[field] = json.loads(values.pop())
        elif values:
            ambiguous.append(flag)
    switch = re.findall(
        r"(--no-async-scheduling\b|--async-scheduling\b|^\s*async-scheduling:\s*(\w+))",
        text,
        flags=re.M,
    )
    states = {
        not whole.startswith("--no") and (yaml_value or "true").lower() == "true"
        for whole, yaml_value in switch
    }
    if len(states) == 1:
        found["async_scheduling"] = states.pop()
    elif states:
        ambiguous.append("async-scheduling")
    return found, ambiguous


def image_version(repo: Path, commit: str, row: dict[str, str]) -> str | None:
    """The vLLM version of the image InferenceX's workflow configuration named for the row's
    model, precision and GPU at ``commit`` (``vllm/vllm-openai:v0.10.2`` -> ``0.10.2``), or None
    when no single one is named."""
    import yaml

    gpu = row["system"].split("_")[0]
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            image = str(node.get("image", ""))
            if (
                image.startswith("vllm/vllm-openai:v")
                and MODEL_NAMES[ALIASES[row["model_path"]]] in str(node.get("model", ""))
                and str(node.get("precision")) == row["precision"]
                and str(node.get("runner", "")).startswith(gpu)
            ):
                found.add(image.split(":v", 1)[1])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    names = _git(repo, "ls-tree", "-r", "--name-only", commit, ".github").split()
    for name in names:
        if name.endswith((".yml", ".yaml")):
            try:
                walk(yaml.safe_load(_git(repo, "show", f"{commit}:{name}")))
            except yaml.YAMLError:
                continue
    return found.pop() if len(found) == 1 else None


def _script_at(repo: Path, when: str, prefix: str) -> tuple[str, str, str] | None:
    commit = _git(repo, "rev-list", "-1", "--first-parent", f"--before={when}", "HEAD").strip()
    names = _git(repo, "ls-tree", "-r", "--name-only", commit, "benchmarks").split()
    found = sorted(
        n for n in names if n.rsplit("/", 1)[-1].startswith(prefix) and not NOT_VLLM.search(n)
    )
    if not found:
        return None
    # the single_node layout replaced the flat one; where docker and slurm copies both exist
    # they are compared below like any two readings
    return commit, found[-1], "\n".join(_git(repo, "show", f"{commit}:{n}") for n in found)


def row_flags(repo: Path, row: dict[str, str]) -> dict[str, Any] | None:
    alias = ALIASES.get(row["model_path"])
    measured = MEASURED.search(row["silicon_data_source"])
    if alias is None or measured is None:
        return None
    prefix = f"{alias}_{row['precision']}_{row['system'].split('_')[0]}"
    day, time_of_day = measured.group(1), measured.group(2)
    truncated = time_of_day is None or time_of_day.startswith("T00:00:00")
    times = [f"{day}T00:00:00Z", f"{day}T23:59:59Z"] if truncated else [day + time_of_day]
    readings = [(t, _script_at(repo, t, prefix)) for t in times]
    if readings[-1][1] is None:
        return {"script": None, "reason": f"no {prefix} vLLM script on main at {times[-1]}"}
    if readings[0][1] is None:  # on main by the end of the day, not at its start
        return {
            "script": readings[-1][1][1],
            "reason": f"{prefix}'s vLLM script was added to main during {day}: the run may "
            "predate it",
        }
    parsed = [(t, found, *flags_of(found[2])) for t, found in readings if found is not None]
    first = parsed[0]
    # a flag whose value changed during the day is not applied, and named
    keys = {k for p in parsed for k in p[2]}
    changed = {k for k in keys if any(p[2].get(k) != first[2].get(k) for p in parsed[1:])}
    out: dict[str, Any] = {
        "script": first[1][1],
        "commit": "+".join(dict.fromkeys(p[1][0] for p in parsed)),
        "at": "/".join(p[0] for p in parsed),
        "flags": {k: v for k, v in first[2].items() if k not in changed},
        "ambiguous": sorted({a for p in parsed for a in p[3]}),
        "changed_during_day": sorted(changed),
    }
    if not row["backend_version"]:  # the row names no version: the image its workflow ran
        versions = {image_version(repo, found[0], row) for _, found, *_ in parsed}
        if len(versions) == 1 and None not in versions:
            out["engine_version"] = versions.pop()
        elif len(versions - {None}) > 1:
            out["changed_during_day"] = sorted([*changed, "engine_version"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True, help="a clone of SemiAnalysisAI/InferenceX")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    path = resources.files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
    rows = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline=""))
    result: dict[str, Any] = {}
    for row in rows:
        if row["backend"] == "vllm" and row["mode"] == "agg":
            flags = row_flags(args.repo, row)
            if flags is not None:
                result[row["id"]] = flags
    head = _git(args.repo, "rev-parse", "HEAD").strip()
    doc = {
        "what": "vLLM server flags of InferenceX's script for each InferenceX row of "
        "aiconfigurator-core 0.12.0's silicon_sample.csv, on InferenceX's main branch at the "
        "row's measured time (scripts/inferencex_server_flags.py)",
        "source": f"https://github.com/SemiAnalysisAI/InferenceX at {head}",
        "rows": result,
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    applied = sum(1 for v in result.values() if v.get("flags"))
    print(f"{len(result)} rows, {applied} with flags -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
