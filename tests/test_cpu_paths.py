"""Stored outputs on any x86-64 machine.

The notebooks' stored outputs are compared exactly (nbval strict). They hold on another CPU
because every run the notebooks make uses one pinned numeric path (tools/jobs.py
PINNED_CPU_PATH). These tests check both halves: a run made as if on another CPU still prints
the stored digits, and a changed digit in a number the pages show still fails the comparison.
"""
import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
import jobs  # noqa: E402
from conftest import stored_output  # noqa: E402

pytestmark = pytest.mark.skipif(not jobs.pinned_cpu_path(), reason="the pinned path is x86-64's")

# Another CPU, as its libraries would see it: no vectorisation in PyTorch's own kernels, oneDNN
# and MKL held to SSE4, two threads. A reader's shell might set these; a machine might choose them.
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
             "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "MKL_CBWR": "AUTO", "OMP_NUM_THREADS": "2"}


def stored_run(notebook, tag, command):
    """What run(command) printed in that cell: from its '$ command' line to the next '$ ' line."""
    text = stored_output(notebook, tag)
    start = text.index(f"$ {command}\n")
    end = text.find("\n$ ", start + 1)
    return text[start + len(command) + 3: None if end < 0 else end + 1]


@pytest.mark.parametrize("notebook,tag,command", [
    ("01-ddp.ipynb", "single", "python code/01_single.py --save runs/01-single.pt"),
    ("09-reliability.ipynb", "full",
     "torchrun --standalone --nproc_per_node=2 code/09_reliability.py --checkpoint runs/09-full.pt"),
])
def test_another_cpu_prints_the_stored_digits(notebook, tag, command, monkeypatch, capsys):
    """run(), as a notebook calls it, in an environment that chooses another CPU path: the same
    losses, accuracy and weights' SHA-256 as stored (on the unpinned path: other digits)."""
    for name, value in OTHER_CPU.items():
        monkeypatch.setenv(name, value)
    (ROOT / "runs" / "09-full.pt").unlink(missing_ok=True)
    out = jobs.run(command)
    capsys.readouterr()
    expected = stored_run(notebook, tag, command)
    assert re.search(r"loss \d\.\d{4}", expected)
    assert out == expected, f"{command} on another CPU path:\n{out}\nstored:\n{expected}"


def sanitizers():
    """tests/sanitize.cfg as nbval reads it: (regex, replacement) pairs."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "tests" / "sanitize.cfg")
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def sanitize(text, rules):
    for regex, replacement in rules:
        text = regex.sub(replacement, text)
    return text


# The numbers the pages teach: losses, accuracies, weights' digests, max |Δparam|, percentages.
CLAIMS = re.compile(r"(?:loss|accuracy) \d+\.\d+|sha256 [0-9a-f]{8,}|\b\d(?:\.\d+)?e-\d\d\b|\b\d+(?:\.\d+)?%")


def test_a_changed_digit_in_a_taught_number_is_not_masked():
    """Every loss, accuracy, digest, Δparam and percentage in every stored output: with its last
    digit changed, the output still differs after nbval's sanitizers (none hides a taught number)."""
    rules, checked, hidden = sanitizers(), 0, []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", ""))
                for m in CLAIMS.finditer(text):
                    i = max(j for j in range(m.start(), m.end()) if text[j].isdigit() or text[j] in "abcdef")
                    changed = text[:i] + ("1" if text[i] == "0" else "0") + text[i + 1:]
                    checked += 1
                    if sanitize(changed, rules) == sanitize(text, rules):
                        hidden.append(f"{path.name}: {m.group()}")
    assert checked > 200, checked
    assert not hidden, f"masked by tests/sanitize.cfg: {hidden[:10]}"


def test_nbval_fails_on_a_changed_digit(tmp_path):
    """End to end: a copy of step 1's single-process cell with one digit of a loss changed fails
    under nbval strict with the project's sanitizers, and names the line."""
    nb = json.loads((ROOT / "notebooks" / "01-ddp.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    cell = next(c for c in code if "single" in c["metadata"].get("tags", []))
    text = cell["outputs"][-1]["text"]
    text = "".join(text) if isinstance(text, list) else text
    told = "(local runs" not in "".join("".join(o.get("text", "")) for o in cell["outputs"])
    first = dict(code[0], outputs=[], source=f"import sys; sys.path.insert(0, {str(ROOT / 'tools')!r})\n"
                 f"import jobs; from jobs import run; jobs._told = {told}")
    m = re.search(r"epoch 2 loss (\d\.\d+)", text)
    wrong = m.group(1)[:-1] + ("1" if m.group(1)[-1] == "0" else "0")
    cell = json.loads(json.dumps(cell))
    cell["outputs"][-1]["text"] = text.replace(m.group(0), f"epoch 2 loss {wrong}")
    nb["cells"] = [first, cell]
    (tmp_path / "copy.ipynb").write_text(json.dumps(nb))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "--nbval",
                        "--nbval-current-env", "--nbval-sanitize-with", str(ROOT / "tests" / "sanitize.cfg"),
                        "copy.ipynb"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout[-3000:]
    assert "Cell outputs differ" in r.stdout, r.stdout[-3000:]  # nbval's diff shows both lines:
    assert f"loss {wrong}" in r.stdout and f"loss {m.group(1)}" in r.stdout, r.stdout[-3000:]
