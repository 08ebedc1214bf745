"""Where `make test`'s time goes: per-file durations from a JUnit report.

    .venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --junitxml=/tmp/suite.xml
    .venv/bin/python benchmarks/suite_time.py /tmp/suite.xml "17:58" "2 cores, quiet machine" [vmstat.log]

vmstat.log (optional): `vmstat -t 2` over the run; then how busy the cores were while it ran.

Writes benchmarks/suite-time.json and benchmarks/suite-time.md: each file's summed test time
(a notebook's cells, a test file's tests), the longest first, the longest single items, and the
wall time given.
"""
import datetime
import html
import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = 15


def breakable(name):
    """A test's name as text that may wrap after `_` and `[` (`<wbr>`): the longest names are wider
    than the page, and neither code nor a word wraps inside itself."""
    text = html.escape(name)
    for c in ("[", "_"):
        text = text.replace(c, c + "<wbr>")
    return text


def busy(suite, vmstat_log):
    """The cores' mean busy share (us + sy) in the vmstat samples taken while the run (the
    report's <testsuite>) lasted, and the run's seconds."""
    start = datetime.datetime.fromisoformat(suite.get("timestamp")).timestamp()
    end = start + float(suite.get("time"))
    shares = []
    for line in Path(vmstat_log).read_text().splitlines():
        f = line.split()
        if len(f) >= 19 and f[0].isdigit():  # ... us sy id wa st DATE TIME (UTC, vmstat -t)
            t = datetime.datetime.fromisoformat(f"{f[-2]}T{f[-1]}+00:00").timestamp()
            if start <= t <= end:
                shares.append(int(f[12]) + int(f[13]))
    return sum(shares) / len(shares), end - start


def main(report, wall, where, vmstat_log=None):
    per_file, count, items = defaultdict(float), defaultdict(int), []
    root = ET.parse(report).getroot()
    for case in root.iter("testcase"):
        name = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        if "ipynb" in case.get("classname", ""):  # "notebooks.09-reliability.ipynb": the notebook's path
            name = case.get("classname").split("::")[0].replace("notebooks.", "notebooks/", 1)
        per_file[name] += float(case.get("time", 0))
        count[name] += 1
        items.append((float(case.get("time", 0)), f"{name}::{case.get('name')}"))
    items.sort(reverse=True)
    rows = sorted(per_file.items(), key=lambda kv: -kv[1])
    total = sum(per_file.values())
    cpu = None
    if vmstat_log:
        share, seconds = busy(root.find("testsuite"), vmstat_log)
        cpu = {"busy_percent": round(share, 1), "core_seconds_used": round(os.cpu_count() * seconds * share / 100)}
    (ROOT / "benchmarks" / "suite-time.json").write_text(json.dumps(
        {"wall": wall, "where": where, "summed_seconds": round(total), "files": {k: round(v, 1) for k, v in rows},
         "items": dict(count),
         "longest_items": {k: round(v, 1) for v, k in items[:TOP]}, "cpu": cpu}, indent=1) + "\n")
    # (the first line plain text: the site's test finds an included file by its first line)
    busy_line = (f" The {os.cpu_count()} cores were busy {cpu['busy_percent']:.0f}% of the run (vmstat every 2 s): about "
                 f"{cpu['core_seconds_used']:,} core-seconds." if cpu else "")
    md = [f"make test: {wall} wall time ({where}); {total / 60:.1f} minutes of tests summed over the two "
          f"workers.{busy_line} Per file, the longest first:", "", "| file | items | seconds |", "|---|---:|---:|"]
    md += [f"| `{k}` | {count[k]} | {v:.0f} |" for k, v in rows]
    md += ["", f"The {TOP} longest items (a notebook's cell counts its code cells from 0):", "",
           "| file | item | seconds |", "|---|---|---:|"]
    md += [f"| `{f}` | {breakable(test)} | {v:.0f} |" for v, (f, _, test) in
           ((v, k.partition("::")) for v, k in items[:TOP])]
    (ROOT / "benchmarks" / "suite-time.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main(*sys.argv[1:5])
