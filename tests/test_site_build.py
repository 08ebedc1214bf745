"""The site builds strictly and its hook does its work: every marker expanded, a missing tag or
file stops the build, masked values and the account box explained, prose in the search index,
every file of the repository on its page and in the archive, one shared CSS file."""
import json
import re
import zipfile
from html import unescape
from pathlib import Path
from urllib.parse import urljoin

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mkdocs_build_strict(site_dir):
    html = (site_dir / "01-ddp" / "index.html").read_text()
    assert "torch.distributed.run" in html  # the sbatch file, included by snippet
    assert '<span class="gi">+rank, local_rank, world_size, device = setup_distributed(' in html  # generated diff
    assert "<!-- diff" not in html and "<!-- output" not in html  # every directive expanded


def test_every_marker_is_expanded_wherever_it_stands(site_dir):
    """A marker indented in a list item or an admonition is expanded like one at the margin, and
    its text stays in the item (a marker left in the HTML as a comment hides its output); no page
    of the built site holds a marker of the project's kinds."""
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


# A notebook that prints a placeholder for a value that varies (re.sub(r"pid \d+", "pid N", ...))
PLACEHOLDER_CALL = re.compile(r"""(?:re\.sub\(r?(?:"[^"]*"|'[^']*'),|\.replace\([^,()]+,)\s*r?("[^"]*"|'[^']*')""")


def test_masked_values_are_explained_where_they_appear(site_dir):
    """Every notebook output in which the notebook replaced a varying value by a placeholder
    (epoch E, job-JOBID, pid N, <pid>, ...) gets the hook's one-line note, on the step page that
    includes it and on the notebook page; an output without placeholders gets none (squeue's
    own JOBID column is no placeholder)."""
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
    import mkdocs_hooks

    pages = sorted((ROOT / "docs").glob("[0-9][0-9]-*.md")) + [ROOT / "docs" / "your-own-script.md"]
    for page in pages:
        text = page.read_text()
        key = page.stem[:2] if page.stem[:2].isdigit() else "own-script"
        mark = text.find(f"<!-- account {key} -->\n")
        first = text.find('--8<-- "slurm/')
        assert 0 <= mark < first, f"{page.name}: no <!-- account {key} --> before its first batch script"
        assert not re.search(r"^## ", text[mark:first], re.M), f"{page.name}: the mark is in another section"
    box = {k: mkdocs_hooks.account(ROOT, k) for k in ["01", "06", "07", "08", "09", "13"]}
    assert all("--account=project_<number>" in b and "SBATCH_ACCOUNT" in b for b in box.values())
    assert "**scikit-learn**" in box["01"] and "deepspeed" not in box["01"].split("**Python.**")[1].split("Roihu's")[0]
    # step 13 reads the digits through a module of its own (data_loading.py), which the box follows
    for k, package in [("06", "deepspeed"), ("07", "lightning"), ("08", "accelerate"), ("09", "lightning"),
                       ("13", "scikit-learn")]:
        assert f"**{package}**" in box[k], (k, package)
    setup = "run-on-your-cluster.md#" if (ROOT / "docs" / "run-on-your-cluster.md").exists() else "clusters.md)"
    assert f"]({setup}" in box["01"]
    built = (site_dir / "06-deepspeed" / "index.html").read_text()
    assert "SBATCH_ACCOUNT" in built and "import torch, numpy, deepspeed, sklearn" in built


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


def test_repository_page_links_every_file(site_dir):
    """A reader can fetch one batch script or script: every tracked file of code/,
    slurm/ and notebooks/ is linked from the Repository page, and the link opens that file in
    the built site; the folders read as a tree (one heading each, no repeated root heading)."""
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


def test_columns_keep_table_rows_not_diff_lines():
    """Output lines that are table rows keep their columns (tools/site_build/columns.py); lines of
    a diff, whose code may hold two spaces before a comment, and messages stay wrapping."""
    from site_build.columns import columnar
    sacct = ["JobID           JobName      State ExitCode",
             "------------ ---------- ---------- --------",
             "867859       own-script  COMPLETED      0:0",
             "867859.batch      batch  COMPLETED      0:0"]
    assert columnar(sacct) == {0, 1, 2, 3}
    diff = ["-    sampler.set_epoch(epoch)  # new order",
            "+    pass  # the mistake",
            "@@ -64 +64 @@"]
    assert columnar(diff) == set()
    messages = ["ddp_check: world    ok      2 processes on 1 node (torchrun), not in a Slurm job",
                "ddp_check: threads  ok      1 thread per process (OMP_NUM_THREADS=1), 1 core each"]
    assert columnar(messages) == set()
