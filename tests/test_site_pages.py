"""The built site as a reader meets it: links go where they say, the table of contents and the
titles match the headings and the sidebar, Next walks the steps in order, copy buttons copy what
a fresh clone runs, every step page shows its change once and links its notebook, every image is
described."""
import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent


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


def test_sidebar_labels_keep_flags_whole(site_dir):
    """No label of the navigation or the table of contents breaks inside a flag or a name with
    '-' (--|local-rank, x86-|64): each such token is a .nobr (tools/site_build/wrapping.py)."""
    from site_build.wrapping import NAV_LABEL
    broken = set()
    for path in sorted(site_dir.rglob("index.html")):
        kept_whole_removed = re.sub(r'<span class="nobr">[^<]*</span>', "", path.read_text())
        for m in NAV_LABEL.finditer(kept_whole_removed):
            broken.update(re.findall(r"\S*\w-\w\S*", re.sub(r"<[^>]+>", "", m.group(2))))
    assert not broken, f"labels that may break after a '-': {sorted(broken)[:10]}"


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


# A step's page shows its script's change once, as a diff from the script it builds on, and the
# whole script only collapsed. A long diff may be collapsed too, where the page shows the change
# in parts beside the text that explains each (step 15: ??? note "The whole change
# from ..."). Pages whose script builds on no earlier one, and why:
STANDALONE = {"10": "a benchmark of the model and input pipelines, not a change to a training script",
              "16": "a measurement of each layout's bytes per rank on a model of its own, not a change to "
                    "a training script"}


@pytest.mark.parametrize("page", sorted(ROOT.glob("docs/[0-9][0-9]-*.md")), ids=lambda p: p.name)
def test_step_page_shows_its_change_once(page):
    num, md = page.name[:2], page.read_text()
    diffs = re.findall(r"^<!-- diff (\S+) (\S+) -->$", md, re.M)
    collapsed_diff = re.search(r'^\?\?\? note "The whole change from [^"\n]*"\n\n    <!-- diff (\S+) (\S+) -->$', md, re.M)
    if collapsed_diff:
        assert not diffs, f"{page.name}: the change shown twice, collapsed and open"
        diffs = [collapsed_diff.groups()]
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
    from site_build.wrapping import inline_code, keep_whole

    cell = keep_whole("slurm/05-multinode-torchrun-lumi.sbatch")
    assert re.sub(r"(<[^>]+>)+", "|", cell).strip("|") == "slurm/|05-multinode-torchrun-lumi.sbatch", cell
    code = inline_code("<p>Use <code>--ntasks-per-node=1</code> with <code>slurm/05-multinode-torchrun.sbatch</code></p>")
    flag, path = re.findall(r"<code>(.*?)</code>", code)
    assert "<wbr>" not in flag and flag.count('class="brk"') == 2, flag  # --ntasks-|per-|node=1 on a phone only
    assert path.count("<wbr>") == 1 and "<wbr><span class=\"nobr\">05-" in path, path
    assert inline_code("<pre><code>--ntasks-per-node=1 --account=project_2001234</code></pre>").count("tok") == 0
    name = "<code>nn.SyncBatchNorm.convert_sync_batchnorm(model)</code>"  # a code name: whole in prose,
    prose, cell = inline_code(f"<p>{name}</p>"), inline_code(f"<table><tr><td>{name}</td></tr></table>")
    assert "<wbr>" not in prose and 'class="tok"' in prose, prose      # breaking on a phone only;
    assert cell.count("<wbr>") == 3 and 'class="tok"' not in cell, cell  # in a table cell on any screen


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
