"""`<!-- gpu-status NN -->`: whether `make gpu-check` (tools/gpu_check.py) ran step NN's scripts on a
GPU: device, date, what passed and failed, read from benchmarks/gpu-*.json; "not yet measured"
while no such file exists."""
import json
from pathlib import Path

from .markers import block_marker

GPU_STATUS = block_marker(r"gpu-status (\w+)")  # groups: indentation, step


def gpu_status(root, step, results=None):
    """An admonition: did `make gpu-check` run this step's scripts on a GPU, and did they pass?

    `results`: the results files (default benchmarks/gpu-*.json, smoke runs left out). Without
    one, or without an entry of this step in them, the honest 'not yet measured'."""
    stored = results is None  # the repository's own files (step 10: its benchmark's reports too)
    results = sorted(Path(root).glob("benchmarks/gpu-*.json")) if stored else results
    blocks = []
    for path in results:
        rep = json.loads(Path(path).read_text())
        entries = [e for e in rep.get("entries", []) if e.get("step") == step]
        if rep.get("smoke") or not entries:
            continue
        by = {s: [e for e in entries if e["status"] == s] for s in ("pass", "fail", "skip")}
        names = lambda es: ", ".join(f"`{e['name']}`" for e in es)  # noqa: E731
        why = lambda es: "; ".join(f"`{e['name']}`: {e['reason'].replace('`', '')[:200]}" for e in es)  # noqa: E731
        date = max(e["date"] for e in entries)
        where = (f"{rep['device']} ({rep['gpus']} GPU{'s' * (rep['gpus'] != 1)}, driver {rep['driver']}, "
                 f"torch {rep['torch']})")
        if by["fail"]:
            title = f"GPU check on {rep['device']}, {date}: {len(by['pass'])} of {len(entries)} paths passed"
            body = [f"`make gpu-check` ran this step's scripts on {where}. Failed: {why(by['fail'])}."]
            kind = "warning"
        elif by["pass"]:
            title, kind = f"Ran on a GPU: {rep['device']}, {date}", "success"
            body = [f"`make gpu-check` ran this step's scripts on {where}, with nccl and CUDA: "
                    f"{names(by['pass'])} passed."]
        else:
            title, kind = "GPU results: not yet measured", "note"
            body = [f"`make gpu-check` on {where} skipped this step's scripts."]
        if by["skip"]:
            body.append(f"Not run there: {why(by['skip'])}.")
        body.append(f"Every figure with its command: `benchmarks/{Path(path).name}`. The scripts' outputs "
                    f"shown on this page come from the CPU runs that the tests repeat.")
        blocks.append(f'!!! {kind} "{title}"\n\n    ' + " ".join(body))
    if step == "10" and stored:  # code/10_benchmark.py's own reports (benchmarks/*.json): the ladder, run on its own
        reports = [(q, json.loads(q.read_text())) for q in sorted(Path(root).glob("benchmarks/*.json"))]
        runs = [(q, r) for q, r in reports if r.get("results") and "device" in r and "entries" not in r
                and not r.get("smoke")]
        if runs:
            devices = ", ".join(dict.fromkeys(f"{r['device']} (torch {r['torch']})" for _, r in runs))
            blocks.append(f'!!! success "Ran on a GPU: {devices}"\n\n    `code/10_benchmark.py` ran its ladder on '
                          f"one GPU: {', '.join(f'`benchmarks/{q.name}`' for q, _ in runs)}. "
                          "[GPU results](#gpu-results) shows every row; the other outputs on this page come "
                          "from the CPU runs that the tests repeat.")
    if not blocks:
        return ('!!! note "GPU results: not yet measured"\n\n    No GPU has run this step\'s scripts yet: '
                "every output on this page comes from CPU runs (gloo). One command runs them on a GPU "
                "machine: [`make gpu-check`](10-performance.md#check-every-gpu-path).")
    return "\n\n".join(blocks)
