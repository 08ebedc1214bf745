"""The site builds strictly, every sbatch file passes shellcheck and is executed somewhere, and
the built pages hold together: links go where they say, titles match the sidebar, the search
index holds prose, every step page shows its change once."""
import json
import re
import shutil
import subprocess
import sys
import zipfile
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
SBATCH = sorted(ROOT.glob("slurm/*.sbatch"))


def test_mkdocs_build_strict(site_dir):
    html = (site_dir / "01-ddp" / "index.html").read_text()
    assert "torch.distributed.run" in html  # the sbatch file, included by snippet
    assert '<span class="gi">+rank, local_rank, world_size, device = setup_distributed(' in html  # generated diff
    assert "<!-- diff" not in html and "<!-- output" not in html  # every directive expanded


def test_every_marker_is_expanded_wherever_it_stands(site_dir):
    """A marker indented in a list item or an admonition is expanded like one at the margin, and
    its text stays in the item (a marker left in the HTML as a comment hides its output); no page
    of the built site holds a marker of the project's kinds."""
    sys.path.insert(0, str(ROOT / "tools"))
    from site_build.markers import LEFT_OVER

    left = {p.relative_to(site_dir).as_posix(): LEFT_OVER.findall(p.read_text())
            for p in sorted(site_dir.rglob("*.html"))}
    assert not {p: m for p, m in left.items() if m}, "markers left in the built pages"
    indented = [(page, m.group(1)) for page in sorted((ROOT / "docs").glob("*.md"))
                for m in re.finditer(r"^[ \t]+<!-- (output \S+ \S+|diff \S+ \S+) -->", page.read_text(), re.M)]
    assert indented, "no indented marker left to check: keep this test's example in mind"
    for page, marker in indented:
        built = (site_dir / page.stem / "index.html").read_text()
        if marker.startswith("diff"):
            a, b = marker.split()[1:]
            assert f"+++ {b}" in page_text(built), (page.name, marker)
        else:
            nb, tag = marker.split()[1:]
            cell = next(c for c in json.loads((ROOT / nb).read_text())["cells"] if tag in c["metadata"].get("tags", []))
            # a stream's text, or a displayed Markdown table (its last row, read as the rendered table)
            shown = "\n".join("".join(o.get("text", "")) or "".join(o.get("data", {}).get("text/markdown", ""))
                               for o in cell["outputs"])
            last = shown.strip().splitlines()[-1]
            if last.startswith("|"):
                last = re.sub(r"[*`|]", " ", last)
            assert " ".join(last.split())[:60] in " ".join(page_text(built).split()), (page.name, marker, last)


def page_text(built):
    """A built page's text, without tags (what a reader sees, hidden parts included)."""
    return unescape(re.sub(r"<[^>]+>", "", built))


def test_mkdocs_hook_fails_on_a_missing_tag(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import mkdocs_hooks

    class Cfg:
        config_file_path = str(ROOT / "mkdocs.yml")

    class Page:
        class file:
            src_path = "x.md"

    with pytest.raises(SystemExit, match="expected one cell tagged 'nope'"):
        mkdocs_hooks.on_page_markdown("<!-- output notebooks/01-ddp.ipynb nope -->", Page, Cfg, None)
    with pytest.raises(SystemExit, match="No such file"):
        mkdocs_hooks.on_page_markdown("<!-- diff code/nope.py code/01_ddp.py -->", Page, Cfg, None)
    out = mkdocs_hooks.on_page_markdown("<!-- diff code/01_single.py code/01_ddp.py -->", Page, Cfg, None)
    assert out.startswith("```diff\n--- code/01_single.py\n+++ code/01_ddp.py")
    with pytest.raises(SystemExit, match="no such fact"):
        mkdocs_hooks.on_page_markdown("`<!-- fact nope -->`", Page, Cfg, None)
    port = mkdocs_hooks.on_page_markdown("`MASTER_PORT=<!-- fact port -->`", Page, Cfg, None)
    assert port == f"`MASTER_PORT={mkdocs_hooks.facts(ROOT)['port']}`" and "SLURM_JOB_ID" in port


@pytest.mark.parametrize("path", SBATCH, ids=lambda p: p.name)
def test_shellcheck(path):
    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck missing: apt-get install shellcheck (make test installs it)")
    r = subprocess.run(["shellcheck", "--shell=bash", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


# A notebook that prints a placeholder for a value that varies (re.sub(r"pid \d+", "pid N", ...))
PLACEHOLDER_CALL = re.compile(r"""(?:re\.sub\(r?(?:"[^"]*"|'[^']*'),|\.replace\([^,()]+,)\s*r?("[^"]*"|'[^']*')""")


def test_masked_values_are_explained_where_they_appear(site_dir):
    """Every notebook output in which the notebook replaced a varying value by a placeholder
    (epoch E, job-JOBID, pid N, <pid>, ...) gets the hook's one-line note, on the step page that
    includes it and on the notebook page; an output without placeholders gets none (squeue's
    own JOBID column is no placeholder)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import mkdocs_hooks

    assert "<code>E</code> (the epoch)" in mkdocs_hooks.masked_note("stopped in epoch E after batch B of 15")
    assert mkdocs_hooks.masked_note("   JOBID PARTITION     NAME     USER ST") == ""
    cells = []
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            for repl in PLACEHOLDER_CALL.findall("".join(cell["source"])):
                if re.search(r"\b[A-Z]\b|JOBID|<[a-z ]+>|\.\.\./", re.sub(r"\\\d", " ", repl)):
                    text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
                    cells.append(nb.name)
                    assert mkdocs_hooks.masked_note(text), f"{nb.name}: {repl} printed, not explained:\n{text[:300]}"
                    tag = (cell["metadata"].get("tags") or [None])[0]
                    if tag:
                        shown = mkdocs_hooks.output(ROOT, f"notebooks/{nb.name}", tag)
                        assert shown.startswith('<p class="masked-note">'), (nb.name, tag)
    assert {"09-reliability.ipynb", "11-debugging.ipynb"} <= set(cells), cells
    page = ('<div class="jp-OutputArea-output"><pre>stopped in epoch E after batch B of 15</pre></div>'
            '<div class="jp-OutputArea-output"><pre>epoch 1 loss 0.5</pre></div>')
    out = mkdocs_hooks.NOTEBOOK_OUTPUT.sub(mkdocs_hooks.note_masks, page)
    assert out.count('class="masked-note"') == 1 and out.index("masked-note") < out.index("epoch E")
    for built in ["09-reliability", "notebooks/09-reliability", "11-debugging", "notebooks/11-debugging"]:
        assert 'class="masked-note"' in (site_dir / built / "index.html").read_text(), built


def test_every_step_says_how_to_give_the_project_and_what_python_needs(site_dir):
    """Every step page (and Your own script) has `<!-- account NN -->` before its first batch
    script, in the section that shows it; the box the hook makes there gives --account and
    SBATCH_ACCOUNT, and names the packages the step's scripts import."""
    sys.path.insert(0, str(ROOT / "tools"))
    import mkdocs_hooks

    pages = sorted((ROOT / "docs").glob("[0-9][0-9]-*.md")) + [ROOT / "docs" / "your-own-script.md"]
    for page in pages:
        text = page.read_text()
        key = page.stem[:2] if page.stem[:2].isdigit() else "own-script"
        mark = text.find(f"<!-- account {key} -->\n")
        first = text.find('--8<-- "slurm/')
        assert 0 <= mark < first, f"{page.name}: no <!-- account {key} --> before its first batch script"
        assert not re.search(r"^## ", text[mark:first], re.M), f"{page.name}: the mark is in another section"
    box = {k: mkdocs_hooks.account(ROOT, k) for k in ["01", "06", "07", "08", "09"]}
    assert all("--account=project_<number>" in b and "SBATCH_ACCOUNT" in b for b in box.values())
    assert "**scikit-learn**" in box["01"] and "deepspeed" not in box["01"].split("**Python.**")[1].split("Roihu's")[0]
    for k, package in [("06", "deepspeed"), ("07", "lightning"), ("08", "accelerate"), ("09", "lightning")]:
        assert f"**{package}**" in box[k], (k, package)
    setup = "run-on-your-cluster.md#" if (ROOT / "docs" / "run-on-your-cluster.md").exists() else "clusters.md)"
    assert f"]({setup}" in box["01"]
    built = (site_dir / "06-deepspeed" / "index.html").read_text()
    assert "SBATCH_ACCOUNT" in built and "import torch, numpy, deepspeed, sklearn" in built


def test_sbatch_lines_fit_80_characters():
    """Batch scripts are read on the page in a column of about 80 characters: wrap
    comments and long commands (`\\`), move long explanations into the page."""
    long = [f"{p.name}:{n}: {len(line)} characters" for p in SBATCH
            for n, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 80]
    assert not long, "sbatch lines over 80 characters:\n" + "\n".join(long)


@pytest.mark.parametrize("path", SBATCH, ids=lambda p: p.name)
def test_srun_gets_the_cpus_sbatch_asked_for(path):
    """Since Slurm 22.05 srun no longer inherits --cpus-per-task: without SRUN_CPUS_PER_TASK a
    site that binds tasks to cores may run all of torchrun's processes on one core.
    The local cluster does not bind (task/none), so the job outputs cannot show it: check here."""
    text = path.read_text()
    first_srun = re.search(r"^srun ", text, re.M)
    if first_srun:
        export = text.find('export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"')
        assert 0 <= export < first_srun.start(), f"{path.name}: srun without SRUN_CPUS_PER_TASK"


def submitted_by_notebooks():
    found = set()
    for nb in ROOT.glob("notebooks/*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            # submit(), or start() + wait_job() with the output asserted in the same cell
            found |= set(re.findall(r"(?:submit|start)\(\s*[\"'](slurm/[\w.-]+\.sbatch)", "".join(cell["source"])))
            if cell["cell_type"] == "code":  # plain sbatch, shown as the reader types it (run("sbatch ..."))
                found |= set(re.findall(r"run\(\s*[\"']sbatch (slurm/[\w.-]+\.sbatch)", "".join(cell["source"])))
                # a sweep of jobs of one file (step 14: run("python code/14_sweep.py --sbatch FILE ..."))
                found |= set(re.findall(r"run\(\s*[\"']python code/\d\d_sweep\.py --sbatch (slurm/[\w.-]+\.sbatch)",
                                        "".join(cell["source"])))
    for test in ROOT.glob("tests/test_*.py"):  # a test that submits a file and checks its output
        found |= set(re.findall(r"submit\(\s*[\"'](slurm/[\w.-]+\.sbatch)", test.read_text()))
    return found


def test_every_sbatch_file_is_executed_by_the_tests():
    """Each sbatch file is submitted by a notebook (nbval compares the job's output) or by
    tests/test_sbatch.py (which checks its output)."""
    from test_sbatch import EXPECTED
    run = submitted_by_notebooks() | set(EXPECTED)
    missing = [p.relative_to(ROOT).as_posix() for p in SBATCH if p.relative_to(ROOT).as_posix() not in run]
    assert not missing, f"never submitted in the tests: {missing}"
    assert all((ROOT / p).exists() for p in run)


def test_every_step_has_its_four_files():
    steps = {p.name[:2] for p in ROOT.glob("docs/[0-9][0-9]-*.md")}
    assert steps
    for n in steps:
        assert list(ROOT.glob(f"notebooks/{n}-*.ipynb")), f"step {n}: no notebook"
        assert list(ROOT.glob(f"code/{n}_*.py")), f"step {n}: no script"
        assert list(ROOT.glob(f"slurm/{n}-*.sbatch")), f"step {n}: no sbatch file"


# --- The built site as a reader meets it -----------------------------------------------------

class _Text(HTMLParser):
    """Text of the elements a test asks for, outside code; and every heading, link and title."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.paragraphs, self.headings, self.links = [], [], {}, []
        self.toc, self.title, self.active, self._buf = [], "", [], {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.stack.append((tag, attrs))
        key = len(self.stack)
        cls = attrs.get("class") or ""
        if tag == "p" and not self._inside("pre", "code"):
            self._buf[key] = ("p", [])
        elif re.fullmatch(r"h[1-6]", tag) and "id" in attrs and self._inside("article"):
            self._buf[key] = ("h", [attrs["id"]])
        elif tag == "a" and self._inside("article") and "href" in attrs and "headerlink" not in cls \
                and "anchor-link" not in cls:
            self._buf[key] = ("a", [attrs["href"]])
        elif tag == "a" and "md-nav__link" in cls and self._inside_class("md-nav--secondary") \
                and attrs.get("href", "").startswith("#"):
            self._buf[key] = ("toc", [attrs["href"][1:]])
        elif tag == "title":
            self._buf[key] = ("title", [])
        elif "md-nav__link--active" in cls and self._inside_class("md-nav--primary"):
            self._buf[key] = ("active", [])

    def _inside(self, *tags):
        return any(t in tags for t, _ in self.stack[:-1])

    def _inside_class(self, cls):
        return any(cls in (a.get("class") or "") for _, a in self.stack[:-1])

    def handle_endtag(self, tag):
        while self.stack:
            key = len(self.stack)
            open_tag, _ = self.stack.pop()
            if key in self._buf:
                kind, parts = self._buf.pop(key)
                head, text = (parts[0], "".join(parts[1:])) if kind in ("h", "a", "toc") else (None, "".join(parts))
                text = re.sub(r"\s+", " ", text.replace("¶", "")).strip() if kind != "p" else text
                if kind == "p":
                    self.paragraphs.append(text)
                elif kind == "h":
                    self.headings[head] = text
                elif kind == "a":
                    self.links.append((head, text))
                elif kind == "toc":
                    self.toc.append((head, text))
                elif kind == "title":
                    self.title = text
                elif kind == "active":
                    self.active.append(text)
            if open_tag == tag:
                break

    def handle_data(self, data):
        for kind, parts in self._buf.values():
            parts.append(data)


def built_pages(site_dir):
    """{url: parsed page} of every page of the site."""
    pages = {}
    for path in sorted(site_dir.rglob("index.html")):
        url = path.parent.relative_to(site_dir).as_posix()
        parsed = _Text()
        parsed.feed(path.read_text())
        pages["" if url == "." else url + "/"] = parsed
    return pages


def test_links_go_to_the_step_they_name(site_dir):
    """'step 3' goes to step 3, and no step page sends a reader to Home's table of steps instead
    of to the step it means."""
    wrong = []
    for url, page in built_pages(site_dir).items():
        for href, text in page.links:
            target = urljoin("/" + url, href)
            if urlparse(href).netloc:
                continue
            named = re.search(r"\bstep (\d+)\b", text, re.I)
            if named and not re.match(rf"/(notebooks/)?{int(named.group(1)):02d}-", target):
                wrong.append(f"{url}: [{text}] -> {target}")
            if url and target.startswith("/#"):
                wrong.append(f"{url}: [{text}] -> Home's {target} (link the page it means)")
    assert not wrong, wrong


def test_no_raw_list_markers(site_dir):
    """A list item that Markdown did not recognise shows up as '- ' inside a paragraph."""
    raw = [f"{url}: {line.strip()[:80]!r}" for url, page in built_pages(site_dir).items()
           for p in page.paragraphs for line in p.splitlines() if re.match(r"\s*([-*+]|\d+\.) \S", line)]
    assert not raw, raw


def test_table_of_contents_names_every_heading(site_dir):
    """Each entry of a page's table of contents reads like the heading it points to (a
    heading in code format too, not a bare number such as '3.')."""
    wrong = []
    for url, page in built_pages(site_dir).items():
        for anchor, text in page.toc:
            if anchor not in page.headings:
                wrong.append(f"{url}: #{anchor} has no heading")
            elif text != page.headings[anchor]:
                wrong.append(f"{url}: {text!r} for the heading {page.headings[anchor]!r}")
    assert not wrong, wrong


def test_titles_and_sidebar_labels_agree(site_dir):
    """A page's title, its sidebar label, its section's label and its row in Home's table say the
    same: the page's first heading."""
    import yaml
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = built_pages(site_dir)
    first_heading = {}
    wrong = []
    for url, page in pages.items():
        h1 = next(iter(page.headings.values()), "")
        first_heading[url] = h1
        if not url or url == "404/":
            continue
        if page.title != f"{h1} - {config['site_name']}":
            wrong.append(f"{url}: <title> {page.title!r}, heading {h1!r}")
        if page.active and page.active[:1] != [h1]:  # (a page not in the navigation has none)
            wrong.append(f"{url}: sidebar says {page.active[:1]}, heading {h1!r}")

    def url_of(src):
        return src[:-3 if src.endswith(".md") else -6] + "/"

    def check(entries, part=None):
        for entry in entries:
            (label, value), = entry.items() if isinstance(entry, dict) else [(None, entry)]
            if isinstance(value, list) and part is None and any(isinstance(e, dict) for e in value):
                check(value, part=label)  # a part of the navigation (it collapses): named freely
            elif isinstance(value, list):  # a step's section: its label is its first page's heading
                first = value[0] if isinstance(value[0], str) else next(iter(value[0].values()))
                if label != first_heading.get(url_of(first)):
                    wrong.append(f"section {label!r} holds {first_heading.get(url_of(first))!r}")
                wrong.extend(f"{label}: {e} has its own label" for e in value if isinstance(e, dict))
            elif label and value != "index.md":
                wrong.append(f"{value}: labelled {label!r} in mkdocs.yml")

    check(config["nav"])
    for href, text in pages[""].links:
        target = urlparse(urljoin("/", href))
        target = target.path.strip("/") + "/" if not target.fragment else None
        if target and re.match(r"\d\d-", target) and text != first_heading.get(target):
            wrong.append(f"Home links {target} as {text!r}, its heading is {first_heading.get(target)!r}")
    assert not wrong, wrong


def test_next_links_walk_the_steps_in_order(site_dir):
    """The footer's Next link, followed from Home, visits every page of the navigation once, the
    numbered steps in order (the navigation's parts do not reorder them)."""
    import yaml
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def sources(entries):
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from sources(value) if isinstance(value, list) else [value]

    in_nav = ["" if s == "index.md" else s.rsplit(".", 1)[0] + "/" for s in sources(config["nav"])]
    url, seen = "", []
    while url is not None and url not in seen:
        seen.append(url)
        html = (site_dir / url / "index.html").read_text()
        nxt = re.search(r'<a[^>]*href="([^"]*)"[^>]*class="md-footer__link md-footer__link--next"', html) \
            or re.search(r'<a[^>]*class="md-footer__link md-footer__link--next"[^>]*href="([^"]*)"', html)
        url = urlparse(urljoin("/" + url, nxt.group(1))).path.lstrip("/") if nxt else None
    assert seen == in_nav, f"Next walks {seen}, the navigation lists {in_nav}"
    numbered = [int(u[:2]) for u in seen if re.match(r"\d\d-", u)]
    assert numbered == sorted(numbered), f"steps by Next: {numbered}"
    for u in seen:  # a step's file number is the number in its title
        if re.match(r"\d\d-", u):
            title = re.search(r"<h1[^>]*>(.*?)</h1>", (site_dir / u / "index.html").read_text(), re.S)
            assert title and re.match(rf"{int(u[:2])}\. ", re.sub("<[^>]+>", "", title.group(1))), (
                f"{u}: its title does not carry the number {int(u[:2])}")


def test_copy_buttons_copy_what_a_fresh_clone_runs(site_dir):
    """No copy button copies a command that runs a script under runs/, which a notebook wrote and
    neither the repository nor the download holds: those
    blocks have no copy button (class no-copy); the others copy their commands (data-copy)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from site_build.code_blocks import RUNS_SCRIPT
    copying, without = [], []
    for page in sorted(site_dir.rglob("*.html")):
        name = page.parent.relative_to(site_dir).as_posix()
        for cls, attrs in re.findall(r'<div class="([^"]*\bhighlight\b[^"]*)"([^>]*)>', page.read_text()):
            copied = unescape(m.group(1)) if (m := re.search(r'data-copy="([^"]*)"', attrs)) else ""
            if "no-copy" in cls.split():
                without.append(name)
            elif RUNS_SCRIPT.search(copied):
                copying.append(f"{name}: {copied[:100]!r}")
    assert not copying, f"{len(copying)} copy buttons copy a command that runs a script under runs/: {copying}"
    assert len(without) >= 10, without  # (the blocks of steps 5, 13, your own script, ... that do)


def test_search_index_holds_prose_not_code(site_dir):
    """Search results show prose; a search opens the step's page, not its notebook."""
    docs = json.loads((site_dir / "search" / "search_index.json").read_text())["docs"]
    assert len(docs) > 20
    assert not [d["location"] for d in docs if d["location"].startswith("notebooks/")]
    assert not [d["location"] for d in docs if "<pre>" in d["text"] or "Copied!" in d["text"]]
    for step in ROOT.glob("docs/[0-9][0-9]-*.md"):
        assert any(d["location"].startswith(step.stem + "/") for d in docs), step.name


def test_header_links_to_the_repository_archive(site_dir):
    """Every page's header links to the Repository page, which offers every file as a .zip."""
    sys.path.insert(0, str(ROOT / "tools"))
    import mkdocs_hooks
    for path in [site_dir / "index.html", site_dir / "01-ddp" / "index.html"]:
        header = re.search(r"<header.*?</header>", path.read_text(), re.S).group(0)
        href = re.search(r'<a href="([^"]+)"[^>]*data-repository-link', header).group(1)
        assert urljoin("/" + path.parent.relative_to(site_dir).as_posix() + "/", href) == "/repository/"
    page = (site_dir / "repository" / "index.html").read_text()
    text = lambda html: re.sub(r"<[^>]+>", "", html)  # noqa: E731 (a name may be split in spans)
    listed = [text(n) for n in re.findall(r"<li>(?:<a [^>]*>)?<code>(.*?)</code>", page)]
    with zipfile.ZipFile(site_dir / mkdocs_hooks.ARCHIVE) as z:
        assert sorted(z.namelist()) == sorted(f"ddp-tutorial/{n}" for n in listed)  # the page lists the archive
        assert z.read("ddp-tutorial/mkdocs.yml") == (ROOT / "mkdocs.yml").read_bytes()
    assert {"README.md", "mkdocs.yml", "code/01_ddp.py", "slurm/01-ddp.sbatch"} <= set(listed)


# A step's page shows its script's change once, as a diff from the script it builds on, and the
# whole script only collapsed. Pages whose script builds on no earlier one, and why:
STANDALONE = {"10": "a benchmark of the model and input pipelines, not a change to a training script",
              "16": "a measurement of each layout's bytes per rank on a model of its own, not a change to "
                    "a training script"}


@pytest.mark.parametrize("page", sorted(ROOT.glob("docs/[0-9][0-9]-*.md")), ids=lambda p: p.name)
def test_step_page_shows_its_change_once(page):
    num, md = page.name[:2], page.read_text()
    diffs = re.findall(r"^<!-- diff (\S+) (\S+) -->$", md, re.M)
    if num in STANDALONE:
        assert not diffs, f"{page.name}: remove it from STANDALONE"
        script = re.search(rf'--8<-- "(code/{num}_\w+\.py)"', md).group(1)
    else:
        assert len(diffs) == 1, f"{page.name}: one diff, from the script the step builds on: {diffs}"
        (base, script), = diffs
        assert script.startswith(f"code/{num}_"), f"{page.name}: the diff's new file is this step's script"
        assert re.match(r"code/(\d\d)_", base) and base[5:7] <= num, f"{page.name}: builds on {base}?"
        prose = md.replace(f"<!-- diff {base} {script} -->", "")
        assert f"`{base}`" in prose, f"{page.name}: say in words which file the step builds on (`{base}`)"
    collapsed = re.search(rf'^\?\?\? note "The whole script: `{re.escape(script)}`"\n\n    ```\w+\n'
                          rf'    --8<-- "{re.escape(script)}"\n', md, re.M)
    assert collapsed, f'{page.name}: the whole {script} in a collapsed ??? note "The whole script: `{script}`"'
    assert md.count(f'--8<-- "{script}"') == 1, f"{page.name}: {script} shown in full more than once"


def test_repository_page_links_every_file(site_dir):
    """A reader can fetch one batch script or script: every tracked file of code/,
    slurm/ and notebooks/ is linked from the Repository page, and the link opens that file in
    the built site; the folders read as a tree (one heading each, no repeated root heading)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import mkdocs_hooks
    page = (site_dir / "repository" / "index.html").read_text()
    links = dict((re.sub(r"<[^>]+>", "", name), href)  # a long name is split in spans where it may break
                 for href, name in re.findall(r'<li><a href="([^"]+)"><code>(.*?)</code></a>', page))
    tracked = [n for n in mkdocs_hooks.repository_files(ROOT) if re.match(r"(code|slurm|notebooks)/", n)]
    assert len(tracked) > 40
    wrong = []
    for name in tracked:
        if name not in links:
            wrong.append(f"{name}: not linked")
            continue
        target = (site_dir / "repository" / links[name]).resolve()
        if not target.is_file() or target.read_bytes() != (ROOT / name).read_bytes():
            wrong.append(f"{name}: {links[name]} is not that file in the site")
    assert not wrong, wrong
    headings = re.findall(r"<h3 [^>]*>(.*?)<a class=\"headerlink\"", page)
    assert len(headings) == len(set(headings)), headings
    assert "The repository&#x27;s root" not in page and "The repository's root" not in page


def test_notebook_pages_share_their_css(site_dir):
    """mkdocs-jupyter's ~580 KB of CSS is one shared file, not inlined into each notebook page."""
    pages = sorted((site_dir / "notebooks").glob("*/index.html"))
    assert pages
    for path in pages:
        text = path.read_text()
        inline = sum(len(m) for m in re.findall(r"<style[^>]*>(.*?)</style>", text, re.S))
        assert inline < 20_000, f"{path.parent.name}: {inline} bytes of inline CSS"
        for href in re.findall(r'<link rel="stylesheet" href="([^"]+)"', text):
            if not href.startswith("http"):
                assert (path.parent / href).resolve().is_file(), f"{path.parent.name}: {href} missing"


def test_notebook_pages_leave_the_set_up_cell_to_the_download(site_dir):
    """A notebook page reads as a lesson. Each notebook's first code cell (imports, the
    helpers from tools/jobs.py; it prints nothing) is tagged 'harness', which mkdocs.yml's
    remove_tag_config leaves out of the page; the downloaded notebook keeps it."""
    for nb in sorted(ROOT.glob("notebooks/*.ipynb")):
        cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        first = cells[0]
        assert "harness" in first["metadata"].get("tags", []), f"{nb.name}: tag its set-up cell 'harness'"
        assert not first["outputs"], f"{nb.name}: the hidden set-up cell prints something"
        assert not any("harness" in c["metadata"].get("tags", []) for c in cells[1:]), nb.name
        page = (site_dir / "notebooks" / nb.stem / "index.html").read_text()
        assert "../tools" not in page, f"{nb.name}: its set-up cell is still on the page"


def test_file_names_and_flags_stay_whole():
    """The hook keeps a file name whole in a table or a heading (an extension of 6 letters too:
    `.sbatch` stays with its name); inline code keeps a flag or a file name
    whole on a wide screen (.tok) and breaks a path after its folders' '/' only."""
    sys.path.insert(0, str(ROOT / "tools"))
    from site_build.wrapping import inline_code, keep_whole

    cell = keep_whole("slurm/05-multinode-torchrun-lumi.sbatch")
    assert re.sub(r"(<[^>]+>)+", "|", cell).strip("|") == "slurm/|05-multinode-torchrun-lumi.sbatch", cell
    code = inline_code("<p>Use <code>--ntasks-per-node=1</code> with <code>slurm/05-multinode-torchrun.sbatch</code></p>")
    flag, path = re.findall(r"<code>(.*?)</code>", code)
    assert "<wbr>" not in flag and flag.count('class="brk"') == 2, flag  # --ntasks-|per-|node=1 on a phone only
    assert path.count("<wbr>") == 1 and "<wbr><span class=\"nobr\">05-" in path, path
    assert inline_code("<pre><code>--ntasks-per-node=1 --account=project_2001234</code></pre>").count("tok") == 0


def test_every_step_page_links_its_notebook():
    """A reader finds the notebook that runs the page's commands from the page."""
    pages = sorted((ROOT / "docs").glob("[0-9][0-9]-*.md")) + [ROOT / "docs" / f"{p}.md" for p in ("your-own-script", "take-home")]
    missing = [p.name for p in pages if (ROOT / "notebooks" / f"{p.stem}.ipynb").exists()
               and f"](notebooks/{p.stem}.ipynb" not in p.read_text()]
    assert not missing, f"pages without a link to their notebook: {missing}"


# Figures still without their cell's "alt" metadata: none left.
ALT_PENDING = set()


def test_every_image_is_described(site_dir):
    """Every image says what it shows, for a reader who cannot see it: no
    empty alt, no cell tag (`alt="table"`), no mkdocs-jupyter default; a chart drawn for a page
    opens at full size with one tap."""
    bad = []
    for page in sorted(site_dir.rglob("*.html")):
        name = page.parent.relative_to(site_dir).as_posix()
        if name.startswith(("files", "assets")) or name in ALT_PENDING:
            continue
        for alt in re.findall(r'<img\b[^>]*?\balt="([^"]*)"', page.read_text()) + \
                [""] * len(re.findall(r"<img\b(?![^>]*\balt=)[^>]*>", page.read_text())):
            if len(alt) < 40 or alt.startswith("No description"):
                bad.append((name, alt[:60]))
    assert not bad, f"images without a description: {bad}"
    built = (site_dir / "03-lr-scaling" / "index.html").read_text()
    assert re.search(r'<a class="chart" href="\.\./03-lr-scaling-seeds\.png"[^>]*><img ', built)
