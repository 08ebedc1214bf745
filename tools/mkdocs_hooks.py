"""MkDocs hook: pages show generated diffs, executed outputs and facts read from the code.

In a page's Markdown:
    <!-- diff code/01_single.py code/01_ddp.py -->      a unified diff of the two real files
    <!-- output notebooks/01-ddp.ipynb compare -->      the stored outputs of the notebook cell
                                                       tagged `compare` (nbval checks they are
                                                       what the code prints today), after a
                                                       one-line note when they show placeholders
                                                       (`epoch E`, `job-JOBID`: see MASKS)
    <!-- fact port -->                                 (inline, also inside `code`) a shared
                                                       fact read from the file that defines it,
                                                       see FACTS; tests/test_consistency.py
                                                       checks that no page states another value
    <!-- repository -->                               the list of the repository's files, with
                                                       a link to all of them as one .zip
    <!-- account 06 -->                                before a step's batch scripts: how to
                                                       give your project number, what its jobs'
                                                       Python must import (read from the scripts
                                                       slurm/06-*.sbatch run) and how to add it
    <!-- gpu-status 01 -->                             whether `make gpu-check` (tools/gpu_check.py)
                                                       ran step 01's scripts on a GPU: device, date,
                                                       what passed and failed, read from
                                                       benchmarks/gpu-*.json; "not yet measured"
                                                       while no such file exists
A missing file, tag, fact or empty output fails the build (mkdocs build --strict in the tests).

After rendering, every page gets what a reader needs from the built HTML:
- code blocks are left out of the search index (results show prose, not code dumps), except
  the error lines of outputs, indexed as an invisible section right before the output (a pasted
  error message finds the step that shows and explains it);
- outputs, table cells and headings wrap between words only: a flag or a file name stays whole;
- an idea diagram (docs/images/*.svg) becomes a figure at its natural size, which scrolls
  sideways on a phone, linked to the SVG so that a tap opens it on its own;
- a copy button on a block with `$ ` command lines copies the commands, without the prompt
  and without the output;
- notebook pages lose their cell-tag chips, get a table of contents and a title built from
  their rendered headings (Markdown's own left out headings in `code`), and stay out of the
  search index, so that a search opens the step's page, not its notebook.
After the build: the repository as one .zip and as single files (site/files/, linked from the
Repository page), and the CSS that mkdocs-jupyter inlines into each notebook page moved into
shared files (one copy instead of 580 KB per notebook page).
"""
import difflib
import hashlib
import html
import json
import os
import re
import stat
import subprocess
import zipfile
from html.parser import HTMLParser
from pathlib import Path

from mkdocs.structure.toc import get_toc

DIRECTIVE = re.compile(r"^<!-- (diff|output) (\S+) (\S+) -->$", re.M)
FACT = re.compile(r"<!-- fact ([\w-]+) -->")
REPOSITORY = re.compile(r"^<!-- repository -->$", re.M)
GPU_STATUS = re.compile(r"^<!-- gpu-status (\w+) -->$", re.M)
ACCOUNT = re.compile(r"^<!-- account ([\w-]+) -->$", re.M)
ARCHIVE = "ddp-tutorial.zip"  # written next to the site's index.html

# Facts several pages state, each read from the one file that defines it.
FACTS = {
    # the global batch every step trains with: step 1's --batch-size default
    "batch": ("code/01_ddp.py", r'"--batch-size", type=int, default=(\d+)'),
    # the data set every step trains on: load_dataset's default
    "dataset": ("code/ddp_helpers.py", r'def load_dataset\(name="(\w+)"'),
    # the rendezvous port of a multi-node job, derived from the job id
    "port": ("slurm/05-multinode-torchrun.sbatch", r"^RDZV_PORT=(.+)$"),
}


def facts(root):
    """{name: value} of FACTS, read from the files now."""
    out = {}
    for name, (path, pattern) in FACTS.items():
        m = re.search(pattern, (Path(root) / path).read_text(), re.M)
        if not m:
            raise ValueError(f"fact {name!r}: {pattern!r} not found in {path}")
        out[name] = m.group(1)
    return out


def _diff(root, a, b):
    old, new = (root / a).read_text().splitlines(), (root / b).read_text().splitlines()
    lines = difflib.unified_diff(old, new, fromfile=a, tofile=b, n=2, lineterm="")
    return "```diff\n" + "\n".join(lines) + "\n```"


# Values that change from run to run (where a signal lands, process and job ids) are printed by
# the notebooks as placeholders, so that nbval can compare the rest of the output (issue 24).
# Where an output shows one, a one-line note before it says what each stands for.
MASKS = [  # (the placeholder in its context, the placeholder, what it stands for)
    (r"\bepoch E\b", "E", "the epoch"),
    (r"\bafter batch B\b|\bB of \d+ batches", "B", "the batch"),
    (r"\bS steps\b", "S", "the steps done"),
    (r"\bpid N\b", "N", "a process id"),
    (r"\bPID <pid>", "<pid>", "a process id"),
    (r"job-JOBID\b", "JOBID", "the Slurm job's number"),
    (r"<job id>", "<job id>", "the Slurm job's number"),
    (r"<run id>_", "<run id>", "torchrun's run id"),
    (r"<run id>_<random>|<job id>_<random>", "<random>", "a name torchrun picks at random"),
    (r"\.\.\./(site-packages|code)/", "...", "the start of a path on this machine"),
]


def masked_note(text):
    """The note for an output that shows placeholders ('' when it shows none)."""
    found = {}  # what it stands for: its placeholders
    for pattern, shown, meaning in MASKS:
        if re.search(pattern, text) and shown not in found.setdefault(meaning, []):
            found[meaning].append(shown)
    found = {m: p for m, p in found.items() if p}
    if not found:
        return ""
    items = "; ".join(" or ".join(f"<code>{html.escape(p)}</code>" for p in shown) + f" ({meaning})"
                      for meaning, shown in found.items())
    return ('<p class="masked-note">Placeholders for values that differ from run to run (or machine '
            f"to machine), so that the tests can compare the rest of this output: {items}.</p>")


def _output(root, notebook, tag):
    cells = [c for c in json.loads((root / notebook).read_text())["cells"]
             if tag in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{notebook}: expected one cell tagged {tag!r}, found {len(cells)}")
    parts, stream = [], ""
    for out in cells[0].get("outputs", []) + [{}]:  # {}: the end, which flushes the last text
        data = out.get("data", {})
        if out.get("output_type") == "stream":  # consecutive pieces of text are one block, as nbval
            stream += "".join(out["text"])      # compares them: a cell prints in many pieces
            continue
        stream = re.sub(r"^.*\r(?=[^\n])", "", stream, flags=re.M)  # a line rewritten in place: its last form
        if stream.strip():
            parts.append("```text\n" + stream.strip("\n").rstrip() + "\n```")
        stream = ""
        if "image/png" in data:  # a computed figure, embedded as it was drawn
            parts.append(f'<img alt="{tag}" src="data:image/png;base64,{data["image/png"].strip()}">')
        elif "text/markdown" in data:
            parts.append("".join(data["text/markdown"]))
        elif "text/plain" in data:
            parts.append("```text\n" + "".join(data["text/plain"]).rstrip() + "\n```")
    if not parts:
        raise ValueError(f"{notebook}: the cell tagged {tag!r} has no output: run the notebook")
    note = masked_note("".join("".join(o.get("text", "")) for o in cells[0].get("outputs", [])))
    return "\n\n".join(([note] if note else []) + parts)


def repository_files(root):
    """The repository's files, as git tracks them (every file when git is not there)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
        names = [n for n in out.stdout.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "site", "runs", "logs", "data", ".cache", "__pycache__"}
        names = [p.relative_to(root).as_posix() for p in sorted(root.rglob("*"))
                 if (p.is_file() or p.is_symlink()) and not skip & set(p.relative_to(root).parts)]
    return sorted(n for n in names if (root / n).exists() or (root / n).is_symlink())


FILES = "files"  # the site's copy of every tracked file (on_post_build), one link each


def _repository(root):
    """Every file, linked to its copy in the site, under one heading per top-level folder (what the
    folder holds, from README.md's table); subfolders are nested lists."""
    # raw HTML links: the files are copied after the build, MkDocs cannot check Markdown links to them
    about = dict(re.findall(r"^\| `([\w.-]+)/` \| (.+?) \|$", (root / "README.md").read_text(), re.M))
    rows = [f'Everything below in one file: <a href="../{ARCHIVE}" download>{ARCHIVE}</a>. '
            "Or open one file from the lists: each name links to that file.", ""]
    groups = {}
    for name in repository_files(root):
        groups.setdefault(name.split("/")[0] if "/" in name else "", []).append(name)
    for top in sorted(groups, key=lambda t: (t != "", t.lower())):
        rows += ["", f"### `{top}/`" if top else "### Top level", ""]
        if top in about:
            rows += [about[top][0].upper() + about[top][1:] + ".", ""]
        shown = set()
        for name in groups[top]:
            parts = name.split("/")
            for depth in range(1, len(parts) - 1):  # a subfolder: a list item of its own
                sub = "/".join(parts[:depth + 1]) + "/"
                if sub not in shown:
                    shown.add(sub)
                    rows.append("    " * (depth - 1) + f"- **{sub}**")
            indent = "    " * max(0, len(parts) - 2)
            if (root / name).is_symlink():
                rows.append(f"{indent}- `{name}` (a symbolic link to {(root / name).readlink()})")
            else:
                rows.append(f'{indent}- <a href="../{FILES}/{name}"><code>{name}</code></a>')
    return "\n".join(rows)


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


# What a step's jobs import beyond torch and numpy (which every script needs: ddp_helpers), read
# from the scripts its batch files run: import name -> package name.
PACKAGES = {"sklearn": "scikit-learn", "deepspeed": "deepspeed", "lightning": "lightning",
            "accelerate": "accelerate"}
CSC = "https://docs.csc.fi"
LAIF = "https://github.com/lumi-ai-factory/laifs-container-recipes/blob/main/recipes/lumi-multitorch"
LUMI_AI_GUIDE = "https://github.com/Lumi-supercomputer/LUMI-AI-Guide/tree/main/02-setting-up-environment"


def step_needs(root, key, page=None):
    """(the step's Roihu batch file, its scripts, the packages they need beyond torch and numpy).
    The batch file named like the page (slurm/11-debugging.sbatch for 11-debugging.md) is the one
    to show, else the shortest Roihu one."""
    files = sorted(root.glob(f"slurm/{key}-*.sbatch")) + sorted(root.glob(f"slurm/{key}.sbatch"))
    if not files:
        raise ValueError(f"no batch script slurm/{key}-*.sbatch")
    default = next((f for f in files if f.stem == page), None) or min(
        (f for f in files if not re.search(r"-(lumi|generic|launcher)$", f.stem)), key=lambda f: len(f.name))
    scripts = sorted({s for f in files if not f.stem.endswith("-generic")
                      for s in re.findall(r"\bcode/\w+\.py", f.read_text())})
    needs = set()
    for s in scripts:
        text = (root / s).read_text()
        needs |= {PACKAGES[m] for m in re.findall(r"^\s*(?:import|from) (\w+)", text, re.M) if m in PACKAGES}
        if "load_dataset(" in text:  # the digits: the file scikit-learn ships (ddp_helpers.py)
            needs.add("scikit-learn")
    return default.relative_to(root).as_posix(), scripts, sorted(needs)


def account(root, key, page=None):
    """The box before a step's batch scripts: the reader's project, and what the job's Python
    must provide (read from the scripts) and how to add what is missing."""
    sbatch, scripts, needs = step_needs(root, key, page)
    imports = ", ".join(["torch", "numpy"] + [{"scikit-learn": "sklearn"}.get(n, n) for n in needs])
    if (root / "docs" / "run-on-your-cluster.md").exists():  # the setup per cluster (issue 26)
        setup = ("`make cluster-env` makes such an environment for you: [Run the notebooks on your "
                 "cluster](run-on-your-cluster.md#1-one-setup-on-a-login-node).")
    else:
        setup = "Each cluster's lines: [Roihu, LUMI and any Slurm site](clusters.md)."
    named = " and ".join(f"`{s}`" for s in scripts)
    what = ["torch", "numpy"] + [f"**{n}**" + (" (the digits data)" if n == "scikit-learn" else "")
                                 for n in needs]
    what = ", ".join(what[:-1]) + " and " + what[-1]
    return f"""!!! info "Before you submit: your project, and what the job's Python needs"

    **Your project.** The scripts name an example project (`project_2001234` on Roihu,
    `project_462000000` on LUMI), which the real clusters refuse ("Invalid account"). Give yours
    when you submit, or once per shell: sbatch reads `SBATCH_ACCOUNT`, a command-line option wins
    over it, and both win over the `#SBATCH` line (Slurm's
    [sbatch manual](https://slurm.schedmd.com/sbatch.html#SECTION_INPUT-ENVIRONMENT-VARIABLES)).

    ```bash
    sbatch --account=project_<number> {sbatch}
    export SBATCH_ACCOUNT=project_<number>   # or this, once per shell
    ```

    **Python.** This step's jobs run {named}, which import {what}. Check the job's environment
    before a long run:

    ```bash
    module load python-pytorch                 # Roihu
    python -c "import {imports}"
    singularity run "$SIF" python -c "import {imports}"  # LUMI
    ```

    Roihu's `python-pytorch` (PyTorch 2.10) is the module CSC's own DeepSpeed and Lightning
    examples load ([CSC: multi-GPU and multi-node ML]({CSC}/support/tutorials/ml-multi/)); CSC
    does not list its packages, `pip list` shows them ([CSC: PyTorch]({CSC}/apps/pytorch/)).
    LUMI's `lumi-multitorch-full` images add DeepSpeed, Accelerate and Lightning to PyTorch
    ([their recipe's package list]({LAIF}/lumi-multitorch-vars.yaml)); neither names
    scikit-learn.

    ??? note "Add what is missing: a virtual environment on top of the module or container"

        With `--system-site-packages` the environment keeps everything the module or the
        container has and adds only what you install, in the project's application folder
        (Roihu's `/projappl`, LUMI's `/project`; [CSC's Python guide]({CSC}/support/tutorials/python-usage-guide/#installing-python-packages-to-existing-modules);
        [the LUMI AI Guide]({LUMI_AI_GUIDE}) does the same inside the container).
        Roihu's GPU nodes are aarch64 (Grace), its CPU nodes x86-64: make the environment on a
        Roihu-GPU login node or in a short `gputest` job, so that compiled packages match (CSC's
        guide keeps separate user package folders per architecture). {setup}

        ```bash
        # Roihu, once:
        module purge; module load python-pytorch
        python3 -m venv --system-site-packages /projappl/project_<number>/ddp-venv
        /projappl/project_<number>/ddp-venv/bin/pip install scikit-learn  # what is missing
        # in the batch script, after `module load python-pytorch`:
        source /projappl/project_<number>/ddp-venv/bin/activate

        # LUMI, once (SIF as in the batch script):
        singularity exec "$SIF" bash -c 'python -m venv --system-site-packages \\
            /project/project_<number>/ddp-venv &&
            /project/project_<number>/ddp-venv/bin/pip install scikit-learn'
        # in the batch script, the training command inside the container becomes:
        #   singularity run "$SIF" bash -c \\
        #     'source /project/project_<number>/ddp-venv/bin/activate && python ...'
        ```"""


def on_page_markdown(markdown, page, config, files):
    root = Path(config.config_file_path).parent

    def expand(m):
        kind, a, b = m.groups()
        try:
            return _diff(root, a, b) if kind == "diff" else _output(root, a, b)
        except (OSError, ValueError) as e:
            raise SystemExit(f"{page.file.src_path}: {m.group(0)}: {e}")

    def fact(m):
        try:
            return facts(root)[m.group(1)]
        except KeyError:
            raise SystemExit(f"{page.file.src_path}: {m.group(0)}: no such fact, see FACTS in {__file__}")

    markdown = REPOSITORY.sub(lambda m: _repository(root), markdown)
    markdown = GPU_STATUS.sub(lambda m: gpu_status(root, m.group(1)), markdown)
    try:
        markdown = ACCOUNT.sub(lambda m: account(root, m.group(1), Path(page.file.src_path).stem), markdown)
    except ValueError as e:
        raise SystemExit(f"{page.file.src_path}: <!-- account -->: {e}")
    return FACT.sub(fact, DIRECTIVE.sub(expand, markdown))


# --- after rendering -------------------------------------------------------------------------

CODE_BLOCK = re.compile(r'<div class="([^"]*\bhighlight\b[^"]*)">(<pre>.*?</pre>)</div>', re.S)
CELL_TAGS = re.compile(r'<div class="celltoolbar">\s*<div class="button_container tags_button_container">'
                       r'.*?</div>\s*</div>\s*', re.S)


def _commands(pre):
    """The commands of a block's `$ ` lines, without the prompt (continuation lines included)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", pre))
    cmds, going_on = [], False
    for line in text.splitlines():
        if line.startswith("$ ") or going_on:
            cmds.append(line[2:] if line.startswith("$ ") and not going_on else line)
            going_on = line.endswith("\\")
    return "\n".join(cmds)


# A pasted error message finds the page that shows it: the error lines of an output block are
# indexed as a search section of their own (Material's index: a heading and its text), titled
# with the block's first error line and placed right before the block, so that a result opens
# the page at the error. The section is invisible (class search-only, aria-hidden: the block
# shows the same lines); code itself stays out of the index.
ERROR_LINE = re.compile(r"error|exception|\bSIG[A-Z]+\d?\b|invalid|refused|denied|timed out|"
                        r"not set|mutually exclusive|failed|abort", re.I)


def _error_lines(pre, most=8):
    """The block's lines that name an error, without prompts and repeats (at most `most`)."""
    lines = []
    for line in html.unescape(re.sub(r"<[^>]+>", "", pre)).splitlines():
        line = re.sub(r"^\[(rank|default)?\d+\]:?\s*", "", line.strip())  # torchrun's rank labels
        if line and not line.startswith("$ ") and ERROR_LINE.search(line) and line[:300] not in lines:
            lines.append(line[:300])
    return lines[:most]


def _error_section(lines, seen):
    """The invisible search section for these error lines ('' when none, or all indexed already)."""
    lines = [line for line in lines if line not in seen]
    if not lines:
        return ""
    seen.update(lines)
    anchor = "error-" + hashlib.sha256(lines[0].encode()).hexdigest()[:8]
    esc = [html.escape(line, quote=False) for line in lines]
    return (f'<div class="search-only" aria-hidden="true"><h6 id="{anchor}">{esc[0]}</h6>'
            + "\n".join(esc[1:]) + "</div>")  # (plain text: no paragraph of the page)


def _code_block(m, seen):
    cls, pre = m.groups()
    extra = " data-search-exclude"  # code in the index made every result a code dump
    cmds = _commands(pre)
    if cmds:  # Material's copy button copies the closest data-copy instead of the block's text
        extra += f' data-copy="{html.escape(cmds)}"'
    found = ""
    if "language-text" in cls:  # an output: it wraps at spaces (reading.css), never inside a token
        found = _error_section(_error_lines(pre), seen)  # (in source code 'error' is code)
        pre = _keep_whole(pre)
    return f'{found}<div class="{cls}"{extra}>{pre}</div>'


# Long lines wrap at spaces only. Chromium also breaks after '-', '/' and brackets
# (--ntasks-|per-node, slurm/05-|multinode.sbatch), so every token holding such a character is
# kept whole (reading.css: .nobr). A long token that is not a flag may break after a separator
# (nn.SyncBatchNorm.|convert_sync_batchnorm(model), DEBUG=|DETAIL), a path after a '/' only
# (slurm/retired/|mahti-05-multinode-torchrun.sbatch): never inside a flag or a file's name.
TOKEN = re.compile(r"[^\s<>]*[^\w\s<>][^\s<>]*")
HTML_TAG = re.compile(r"(<[^>]+>)")
KEEP_WHOLE = [  # (opening tag, content, closing tag) of what wraps between words only
    re.compile(r'(<t[dh]\b[^>]*>)(.*?)(</t[dh]>)', re.S),
    re.compile(r'(<div class="[^"]*\bjp-OutputArea-output\b[^"]*"[^>]*>\s*<pre>)(.*?)(</pre>)', re.S),
]
HEADING = re.compile(r'(<h[1-3]\b[^>]*>)(.*?)(</h[1-3]>)', re.S)


def _keep_whole(fragment):
    def token(m):
        t = m.group(0)
        if len(t) < 2 or re.fullmatch(r"&#?\w+;", t):  # (an entity alone: the heading's ¶)
            return t
        if len(t) > 20 and not t.startswith("-"):  # a long token, not a flag, may break after a
            path = re.search(r"\.\w{1,5}\W*$", t)    # separator; a path between its folders only
            pieces = re.split(r"(?<=/)(?=\w)" if path else r"(?<=[.,=;:|/(])(?=\w)", t)
            return "<wbr>".join(f'<span class="nobr">{p}</span>' for p in pieces)
        return f'<span class="nobr">{t}</span>'

    parts = HTML_TAG.split(fragment)
    for i in range(0, len(parts), 2):  # text between tags; the tags stay as they are
        parts[i] = TOKEN.sub(token, parts[i])
    return "".join(parts)


def _wrap_between_words(content):
    for pattern in KEEP_WHOLE:
        content = pattern.sub(lambda m: m.group(1) + _keep_whole(m.group(2)) + m.group(3), content)
    return HEADING.sub(lambda m: m.group(1) + _keep_whole(m.group(2)) + m.group(3), content)


class _Headings(HTMLParser):
    """(level, id, inner HTML without the ¶ link, text) of every h1-h3 with an id."""

    def __init__(self, source):
        super().__init__(convert_charrefs=True)
        self.found, self._open, self._html, self._text, self._skip = [], None, [], [], 0
        self._source = source

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("h1", "h2", "h3") and "id" in attrs and self._open is None:
            self._open, self._html, self._text = (int(tag[1]), attrs["id"]), [], []
        elif self._open and tag == "a" and "anchor-link" in (attrs.get("class") or ""):
            self._skip += 1
        elif self._open and not self._skip:
            self._html.append(self.get_starttag_text())

    def handle_endtag(self, tag):
        if self._open and tag == f"h{self._open[0]}":
            self.found.append((*self._open, "".join(self._html).strip(), "".join(self._text).strip()))
            self._open = None
        elif self._open and tag == "a" and self._skip:
            self._skip -= 1
        elif self._open and not self._skip:
            self._html.append(f"</{tag}>")

    def handle_data(self, data):
        if self._open and not self._skip:
            self._html.append(html.escape(data, quote=False))
            self._text.append(data)


def _notebook_toc(content):
    """Title and table of contents from the headings the notebook page really shows."""
    parser = _Headings(content)
    parser.feed(content)
    title, tokens, stack = None, [], []
    for level, id_, inner, text in parser.found:
        if level == 1:
            title = title or text
        token = {"level": level, "id": id_, "name": inner, "children": []}
        while stack and stack[-1]["level"] >= level:
            stack.pop()
        (stack[-1]["children"] if stack else tokens).append(token)
        stack.append(token)
    return title, get_toc(tokens)


# An idea diagram (docs/images/*.svg, tools/diagrams.py) is drawn for the 688 px column. On a
# phone a shrunk figure's 13 px text would be 7 px: the figure keeps its natural size and scrolls
# sideways in its own box, and a tap opens the SVG alone (the browser zooms it).
DIAGRAM = re.compile(r'<p>\s*(<img\b[^>]*\bsrc="([^"]*\bimages/[\w.-]+\.svg)"[^>]*>)\s*</p>')


def _diagram(m):
    img, src = m.groups()
    return (f'<figure class="diagram"><a href="{src}" title="Open the figure on its own">{img}</a>'
            '<figcaption class="diagram-hint">Scroll the figure sideways, or tap it to open it '
            'on its own.</figcaption></figure>')


def on_page_content(content, page, config, files):
    content = DIAGRAM.sub(_diagram, content)
    seen = set()  # error lines indexed on this page
    content = CODE_BLOCK.sub(lambda m: _code_block(m, seen), content)
    if page.file.src_uri.endswith(".ipynb"):
        content = CELL_TAGS.sub("", content)
        title, page.toc = _notebook_toc(content)
        if title:
            page.title = title
        page.meta = {**(page.meta or {}), "search": {"exclude": True}}
        return NOTEBOOK_OUTPUT.sub(_note_masks, _wrap_between_words(content))
    return _wrap_between_words(content)


NOTEBOOK_OUTPUT = re.compile(r'(<div class="[^"]*\bjp-OutputArea-output\b[^"]*"[^>]*>)(\s*<pre>.*?</pre>)', re.S)


def _note_masks(m):
    """A notebook page's output that shows placeholders gets the same note as the step pages."""
    return m.group(1) + masked_note(html.unescape(re.sub(r"<[^>]+>", "", m.group(2)))) + m.group(2)


def _copy_files(root, site_dir):
    """Each tracked file as site/files/<path>, so that a reader can fetch one (Repository page)."""
    for name in repository_files(root):
        if not (root / name).is_symlink():
            target = site_dir / FILES / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((root / name).read_bytes())


NOTEBOOK_CSS = re.compile(r'<style(?: type="text/css")?>((?:(?!</style>).){2000,})</style>', re.S)


def _share_notebook_css(site_dir):
    """mkdocs-jupyter inlines the same ~580 KB of CSS into every notebook page: each such block
    becomes one shared file, linked where the block was (same order, same cascade)."""
    folder = site_dir / "assets" / "notebook-css"
    for page in site_dir.rglob("*.html"):
        text = page.read_text()
        if "jupyter-wrapper" not in text:
            continue

        def link(m):
            css = m.group(1)
            name = hashlib.sha256(css.encode()).hexdigest()[:16] + ".css"
            folder.mkdir(parents=True, exist_ok=True)
            if not (folder / name).exists():
                (folder / name).write_text(css)
            href = os.path.relpath(folder / name, page.parent).replace(os.sep, "/")
            return f'<link rel="stylesheet" href="{href}">'

        page.write_text(NOTEBOOK_CSS.sub(link, text))


def on_post_build(config):
    """The whole repository as one .zip in the site (the Repository page links to it), each file
    on its own, and the notebook pages' shared CSS in files of its own."""
    root = Path(config.config_file_path).parent
    _copy_files(root, Path(config.site_dir))
    _share_notebook_css(Path(config.site_dir))
    with zipfile.ZipFile(Path(config.site_dir) / ARCHIVE, "w", zipfile.ZIP_DEFLATED) as z:
        for name in repository_files(root):
            path = root / name
            info = zipfile.ZipInfo(f"ddp-tutorial/{name}", date_time=(2020, 1, 1, 0, 0, 0))
            if path.is_symlink():  # docs/notebooks -> ../notebooks, restored by unzip
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                z.writestr(info, str(path.readlink()))
            else:
                info.external_attr = (stat.S_IFREG | (0o755 if path.stat().st_mode & 0o111 else 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, path.read_bytes())
