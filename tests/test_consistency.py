"""Pages, notebooks, scripts and batch scripts agree on the facts several of them state.

Each fact has one source, the file that defines it (FACTS in tools/site_build/facts.py: the port
formula of the multi-node batch script, step 1's global batch, load_dataset's default data
set). Pages can print a fact with `<!-- fact NAME -->`; these tests find every other place
that states one and fail when it says something else.
"""
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
from mkdocs_hooks import FACT, facts  # noqa: E402

FACTS = facts(ROOT)


def pages():
    """(name, prose) of every page and every notebook's Markdown cells, facts expanded."""
    for p in sorted((ROOT / "docs").glob("*.md")):
        yield p.relative_to(ROOT).as_posix(), FACT.sub(lambda m: FACTS[m.group(1)], p.read_text())
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(p.read_text())["cells"]
        yield p.relative_to(ROOT).as_posix(), "\n\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def sources():
    """(name, text) of every file that may state the port formula: pages, notebooks (code and
    outputs too), batch scripts, scripts, tools and the top-level documents."""
    yield from pages()
    for pattern in ["notebooks/*.ipynb", "slurm/*.sbatch", "code/*.py", "tools/*.py", "*.md"]:
        for p in sorted(ROOT.glob(pattern)):
            yield p.relative_to(ROOT).as_posix(), p.read_text()


def paragraphs(text):
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


PORT = re.compile(r"(\d+)\s*\+\s*\$?\{?SLURM_JOB_ID\}?\s*%\s*(\d+)")


def test_the_facts_are_read_from_their_sources():
    assert FACTS["batch"].isdigit() and FACTS["dataset"] and PORT.search(FACTS["port"]), FACTS


def test_one_port_formula():
    """Every port derived from the job id uses the batch script's formula."""
    want = PORT.search(FACTS["port"]).groups()
    found = {}
    for name, text in sources():
        for m in PORT.finditer(text):
            found.setdefault(m.groups(), set()).add(name)
        for m in re.finditer(r"SLURM_JOB_ID\s*%\s*(\d+)", text):  # any other shape of the formula
            if m.group(1) != want[1]:
                found.setdefault(("?", m.group(1)), set()).add(name)
    wrong = {f"{a} + SLURM_JOB_ID % {b}": sorted(names) for (a, b), names in found.items() if (a, b) != want}
    assert not wrong, f"port formula differs from {FACTS['port']} (slurm/05-multinode-torchrun.sbatch): {wrong}"
    assert want in found


# Phrases that state the tutorial's global batch (step 3's sweep names other global batches
# as "384 = 4x48x2", which none of these match).
BATCH_CLAIMS = [
    r"\b(?:the )?tutorial'?s (?:global )?batch(?: size)?(?: of| is| =)? (\d+)",
    r"\bglobal batch(?: size)?(?: of| is| =)? (\d+)",
    r"\bbatch(?:es)? of (\d+) images",
    r"\b(\d+),? as in every step",
    r"\bof the (\d+) images of every batch",
]


def test_one_global_batch_in_the_pages():
    wrong = []
    for name, text in pages():
        for pattern in BATCH_CLAIMS:
            for m in re.finditer(pattern, text, re.I):
                if m.group(1) != FACTS["batch"]:
                    wrong.append(f"{name}: {m.group(0)!r}")
    assert not wrong, f"the tutorial's global batch is {FACTS['batch']} (code/01_ddp.py): {wrong}"


def test_one_global_batch_in_the_scripts():
    """Every training script's --batch-size (the global batch) and the ds_config default to it."""
    defaults = {}
    for p in sorted((ROOT / "code").glob("*.py")):
        for m in re.finditer(r'"--batch-size",[^)]*?default="?(\d+)', p.read_text()):
            defaults[p.name] = m.group(1)
    assert "01_ddp.py" in defaults
    ds = json.loads((ROOT / "code" / "06_ds_config.json").read_text())
    defaults["06_ds_config.json"] = str(ds["train_batch_size"])
    wrong = {k: v for k, v in defaults.items() if v != FACTS["batch"]}
    assert not wrong, f"global batch {FACTS['batch']} expected: {wrong}"


def test_one_data_set():
    """The scripts train on load_dataset's default, and a page that names another data set
    says in the same paragraph that it is not the tutorial's (names the tutorial's too)."""
    literal = [f"{p.name}: {m.group(0)}" for p in sorted((ROOT / "code").glob("*.py"))
               for m in re.finditer(r'load_dataset\("(\w+)"', p.read_text()) if m.group(1) != FACTS["dataset"]]
    assert not literal, literal
    others = {"digits": r"\bMNIST\b|\bCIFAR|\bImageNet\b"}[FACTS["dataset"]]
    wrong = [f"{name}: {para.strip()[:120]!r}" for name, text in pages() for para in paragraphs(text)
             if re.search(others, para) and not re.search(rf"\b{FACTS['dataset']}\b", para)]
    assert not wrong, f"another data set named without saying the tutorial's is {FACTS['dataset']}: {wrong}"


@pytest.mark.parametrize("claim, text", [
    ("port", "MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))"),
    ("batch", "the script uses the linear rule from the tutorial's batch of 100."),
    ("dataset", "1. **DataLoader**: torchvision's `MNIST` class, one PIL image per sample."),
])
def test_each_check_fails_on_a_contradiction(monkeypatch, claim, text):
    """The checks above can fail: each one catches a sentence that contradicts the fact."""
    monkeypatch.setattr(sys.modules[__name__], "pages", lambda: iter([("docs/x.md", text)]))
    monkeypatch.setattr(sys.modules[__name__], "sources", lambda: iter([("docs/x.md", text)]))
    check = {"port": test_one_port_formula, "batch": test_one_global_batch_in_the_pages,
             "dataset": test_one_data_set}[claim]
    with pytest.raises(AssertionError):
        check()


# What a run itself prints (its error, a rank's line, a traceback): a cell shows such lines before
# "(exit code N)", never after it (there it reads as the code of the next command).
RUN_OUTPUT = ("error:", "stopped in epoch", "DataLoader worker", "[rank", "Traceback", "RuntimeError",
              "ValueError", "srun: error", "torch.distributed")


def exit_code_before_its_output(text):
    """Lines "(exit code N)" directly followed by a line that the run itself printed."""
    lines = text.splitlines()
    return [f"{a} / {b[:60]}" for a, b in zip(lines, lines[1:])
            if re.fullmatch(r"\(exit code -?\d+\)", a) and b.lstrip().startswith(RUN_OUTPUT)]


def test_exit_code_comes_after_the_output_it_describes():
    bad = []
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
            bad += [f"{nb.name} cell {i}: {b}" for b in exit_code_before_its_output(text)]
    assert not bad, bad
    # what the check finds: the old order of step 9's cells
    assert exit_code_before_its_output("$ torchrun ...\n(exit code 1)\nerror: batch size 95 is not divisible\n")
    assert not exit_code_before_its_output("$ torchrun ...\nerror: batch size 95\n(exit code 1)\n$ next\n")


# A number of this project's issue tracker means nothing in a fork or a download: code, tests and
# pages say why in the present instead. A citation of another project's tracker names that project
# right before the number ("pytorch/pytorch issue N", "laifs-container-recipes issues N", Lightning's)
# or links to it.
ISSUE_NUMBER = re.compile(r"(?<![a-z])issues?[ _]#?\d+", re.IGNORECASE)  # (and in a name: issue_N)
CITATION_BEFORE = re.compile(r"(https?://\S+|[\w.-]+/[\w.-]+|laifs[\w-]*|pytorch|lightning's)\W*$", re.IGNORECASE)
OWN_FILES = {".py", ".sh", ".sbatch", ".md", ".in", ".toml", ".yml", ".yaml", ".js", ".css", ".cfg", ".ini"}


def own_issue_numbers(text):
    """Lines of `text` that name an issue by number, less citations of other projects' trackers;
    a number on the line after "issue" counts too (the lines joined, less a comment's marks)."""
    hits = []
    joined = re.sub(r"\b(issues?)[ \t]*\n[ \t]*(?:#|//|\*)?[ \t]*(?=#?\d)", r"\1 ", text, flags=re.IGNORECASE)
    for line in joined.splitlines():
        for m in ISSUE_NUMBER.finditer(line):
            before, after = line[:m.start()], line[m.end():]
            cited = (CITATION_BEFORE.search(before) or re.search(r"https?://", before)
                     or re.match(r"\]\(https?://", after))
            if not cited:
                hits.append(line.strip())
    return hits


def project_files():
    for p in sorted(ROOT.iterdir()):
        if p.is_file() and (p.suffix in OWN_FILES or p.name == "Makefile"):
            yield p
    for folder in ["code", "tools", "tests", "slurm", "benchmarks", "docs"]:
        for p in sorted((ROOT / folder).rglob("*")):
            if p.is_file() and (p.suffix in OWN_FILES or p.name == "Makefile"):
                yield p


def test_no_issue_numbers_of_this_project():
    bad = [f"{p.relative_to(ROOT)}: {line[:100]}" for p in project_files()
           for line in own_issue_numbers(p.read_text(errors="replace"))]
    assert not bad, f"{len(bad)} references to this project's issues by number: {bad}"
    # what the check finds, and what it leaves: citations of other projects' trackers
    for own in ["# an old comment (issue %d, item 2)", "Issue %d N2: the position", "(`x.py`, issue %d)",
                "(issues %d and 41)", "see issue #%d", "def test_what_issue_%d_found():", "(issue\n    # %d, item 4)"]:
        assert own_issue_numbers(own % 41), own
    for cited in ["(pytorch/pytorch issue %d)", "laifs-container-recipes issues %d and 30", "laifs #%d",
                  "Lightning's issue %d (open)", "[Issue %d](https://github.com/o/r/issues/28)",
                  "see https://github.com/o/r/issues/28 (issue %d)", "PyTorch issue %d"]:
        assert not own_issue_numbers(cited % 28), cited


def test_notebooks_store_no_execution_timestamps():
    """tools/execute_notebooks.py records no timing: a re-run with the same outputs is no diff."""
    stamped = [f"{nb.name} cell {i}" for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))
               for i, cell in enumerate(json.loads(nb.read_text())["cells"]) if "execution" in cell.get("metadata", {})]
    assert not stamped, stamped


def test_code_lines_fit_the_page_column():
    """The pages show code/*.py in a column of about 80 characters at 1280 px (a diff adds one
    character): every line is at most 79, except lines of pytorch/examples' mnist script, which
    code/mnist_main.py copies as it is and the scripts derived from it keep."""
    code = ROOT / "code"
    upstream = set((code / "mnist_main.py").read_text().splitlines())
    long = [f"{f.name}:{i}: {len(line)}" for f in sorted(code.glob("*.py")) if f.name != "mnist_main.py"
            for i, line in enumerate(f.read_text().splitlines(), 1) if len(line) > 79 and line not in upstream]
    assert not long, long
