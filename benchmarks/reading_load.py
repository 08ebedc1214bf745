"""How much a reader reads: words per page, in the order of mkdocs.yml's navigation.

Reads the Markdown sources and the notebooks, not the built site: no build is needed, and each
page's markers are resolved as the build resolves them (tools/site_build): `<!-- output NOTEBOOK
TAG -->` becomes the stored outputs of that notebook cell, `<!-- account NN -->`,
`<!-- gpu-status NN -->` and `<!-- fact NAME -->` the text they stand for; `<!-- repository -->`
(the list of the repository's files, looked up rather than read) counts nothing.

What is counted, per page:
- main line: prose words of headings, paragraphs, lists, tables, open admonitions (`!!!`, and
  `???+`, which opens expanded) and content tabs (`=== "..."`: every tab counts, as if a reader
  read each one); words in inline code count, as they are read in the sentence;
- collapsed: prose words inside collapsed boxes (`??? `), apart;
- outputs: words of included outputs (output markers; on a notebook page, the cells' stream and
  display outputs), with those inside collapsed boxes apart;
- code is not prose: fenced blocks, snippets (`--8<--`, even of a text file), `<!-- diff -->`;
- figures: images (`![...]`, `<img>`), and the image outputs of included cells and of notebook
  pages.
A word is a whitespace-separated token with a letter or a digit in it. A notebook page's Markdown
cells are prose, its code cells code, its set-up cell (tagged `harness`, left off the page) nothing.

Then two paths: the core path (Home through the multi-node step, 05-multinode.md, along the
navigation) and the walk along "Next" from Home to the first multi-node batch file a reader can
copy (the first included slurm/*.sbatch asking for --nodes=2 or more), counted up to that include.
The budgets (main-line prose) are shown with what each page is over by; tests/test_reading_load.py
holds them, and at least FIGURES figures on the teaching pages.
Then what a reader downloads: each page's cold weight, measured on the built site (the script
builds it, `mkdocs build --strict`, unless --site names a build), as a browser with an empty cache
fetches it at 1280 px: the page's HTML and every file it loads (its <img>, stylesheets, icon and
scripts and the search worker; the search index waits for the reader's first search), each
once; "sent" is the same with the text files gzipped, as a server that compresses sends them
(PNGs as they are). And the search index, the whole site and the .zip of the repository.
Writes benchmarks/reading-load.md and benchmarks/reading-load.json.

    python benchmarks/reading_load.py          # about a minute (the build); no torch
    python benchmarks/reading_load.py --site site   # measures that build instead
"""
import argparse
import functools
import gzip
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from site_build.account import ACCOUNT, account  # noqa: E402
from site_build.facts import FACT, facts  # noqa: E402
from site_build.gpu_status import GPU_STATUS, gpu_status  # noqa: E402
from site_build.markers import expand  # noqa: E402
from site_build.outputs import DIRECTIVE, output  # noqa: E402
from site_build.repository import ARCHIVE, REPOSITORY  # noqa: E402

# Budgets of main-line prose words. A teaching page is a page with a notebook of its name (the
# four files of a step, and the unnumbered pages built the same way).
HOME, QUICK_START, CORE_PATH, TEACHING = 600, 1_000, 12_000, 3_000
FIGURES = 25  # on the teaching pages (their Markdown pages, not the notebook pages)
CORE_END = "05-multinode.md"
# An assumption, for a reader on a phone: Lighthouse's mobile profile ("Slow 4G"), 1.6 Mbit/s down
# (its 150 ms round trips not counted).
PHONE_MBIT_S = 1.6

ADMONITION = re.compile(r'^(\?\?\?\+?|!!!)\s+([\w-]+)(?:\s+"(.*)")?\s*$')
TAB = re.compile(r'^===\+?\s+"(.*)"\s*$')
FENCE = re.compile(r"^(`{3,}|~{3,})")
SNIPPET = re.compile(r'--8<--\s+"([^"]+)"')
SENTINEL = "\x00"  # a resolved output or diff marker, on its own line, until the walk reaches it


@dataclass
class Counts:
    main: int = 0
    collapsed: int = 0
    outputs: int = 0
    outputs_collapsed: int = 0
    figures: int = 0
    code_lines: int = 0  # counted, not written: an edit of a script would make the table stale
    snippets: list = field(default_factory=list)  # (files included, main-line words before each)
    unexecuted: list = field(default_factory=list)  # output markers whose cell has no output yet

    def add(self, other):
        for k in ("main", "collapsed", "outputs", "outputs_collapsed", "figures", "code_lines"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.snippets += other.snippets
        self.unexecuted += other.unexecuted


def words(text):
    """Words of a piece of Markdown or HTML prose: links keep their text, images and tags go."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)(\{[^}]*\})?", " ", text)  # images: figures, not words
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)            # [text](url): the text
    text = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", text)           # [text][ref]
    text = re.sub(r"\{[#.:][^}]*\}", " ", text)                       # attribute lists
    text = re.sub(r"<[^>]+>", " ", text)                              # HTML tags
    text = re.sub(r"&\w+;", " ", text)
    return sum(1 for t in re.split(r"[\s|]+", text) if re.search(r"[^\W_]", t))


def images(text):
    return len(re.findall(r"!\[[^\]]*\]\([^)]*\)", text)) + len(re.findall(r"<img\b", text))


def indentation(line):
    line = line.expandtabs(4)
    return len(line) - len(line.lstrip(" "))


def multinode(root, path):
    """Whether an included batch file asks for two nodes or more."""
    if not re.match(r"slurm/[^/]+\.sbatch$", path) or not (root / path).exists():
        return False
    m = re.search(r"^#SBATCH\s+(?:--nodes[= ]|-N\s*)(\d+)", (root / path).read_text(), re.M)
    return bool(m) and int(m.group(1)) >= 2


def included_output(root, notebook, tag, counts, collapsed):
    """An output marker: the words and figures of the stored outputs, as the build shows them."""
    try:
        shown = output(root, notebook, tag)
    except ValueError:  # a new notebook not executed yet: nothing to count (the build would fail)
        counts.unexecuted.append(f"{notebook} {tag}")
        return
    counts.figures += images(shown)
    text = re.sub(r"^\s*```\w*\s*$", "", re.sub(r"<img\b[^>]*>", " ", shown), flags=re.M)
    n = words(text)
    counts.outputs += n
    counts.outputs_collapsed += n if collapsed else 0


def snippet(root, line, counts):
    """An included file (`--8<-- "path"`, `"path:section"`, `"path:first:last"`): code, as many
    lines as the part included."""
    for spec in SNIPPET.findall(line):
        path, *part = spec.split(":")
        counts.snippets.append((path, counts.main))
        lines = (root / path).read_text().splitlines() if (root / path).is_file() else [spec]
        if len(part) == 1:  # a section between `--8<-- [start:name]` and `--8<-- [end:name]`
            marks = [i for i, s in enumerate(lines) if re.search(rf"--8<-- \[(start|end):{part[0]}\]", s)]
            lines = lines[marks[0] + 1:marks[-1]] if len(marks) == 2 else lines
        elif len(part) == 2 and all(p.isdigit() for p in part):
            lines = lines[int(part[0]) - 1:int(part[1])]
        counts.code_lines += len(lines)


def resolve(root, markdown):
    """The page's markers as the build expands them (tools/mkdocs_hooks.py); output and diff
    markers become sentinel lines that the walk counts where they stand."""
    # the repository's file list is looked up, not read; counted, every new file would change it
    markdown = expand(REPOSITORY, markdown, lambda m: "")
    markdown = expand(GPU_STATUS, markdown, lambda m: gpu_status(root, m.group(2)))
    markdown = expand(ACCOUNT, markdown, lambda m: account(root, m.group(2)))
    known = facts(root) if FACT.search(markdown) else {}
    markdown = FACT.sub(lambda m: known[m.group(1)], markdown)
    markdown = DIRECTIVE.sub(lambda m: f"{m.group(1)}{SENTINEL}{m.group(2)} {m.group(3)} {m.group(4)}", markdown)
    return re.sub(r"<!--.*?-->", "", markdown, flags=re.S)  # comments are not read


def count_markdown(markdown, root=ROOT):
    """Counts of one page's Markdown (markers resolved against root's notebooks and files)."""
    counts = Counts()
    boxes = []  # (content indentation, collapsed) of the admonitions and tabs the line is in
    fence = None  # (fence characters) while in a fenced block
    for line in resolve(root, markdown).splitlines():
        if fence:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            elif SNIPPET.search(line):
                snippet(root, line, counts)
            else:
                counts.code_lines += 1
            continue
        if not line.strip():
            continue
        indent, body = indentation(line), line.strip()
        while boxes and indent < boxes[-1][0]:
            boxes.pop()
        collapsed = any(c for _, c in boxes)
        if m := FENCE.match(body):
            fence = m.group(1)
            continue
        if body.startswith(SENTINEL):
            kind, a, b = body[1:].split()
            if kind == "output":
                included_output(root, a, b, counts, collapsed)
            else:
                counts.code_lines += len((root / a).read_text().splitlines())
            continue
        if SNIPPET.search(body):
            snippet(root, body, counts)
            continue
        title = None
        if m := ADMONITION.match(body):
            boxes.append((indent + 4, m.group(1) == "???"))
            title = m.group(3) if m.group(3) is not None else m.group(2)  # no title: the type's
        elif m := TAB.match(body):
            boxes.append((indent + 4, False))
            title = m.group(1)
        text = body if title is None else title
        inside = collapsed or (title is not None and boxes[-1][1])
        counts.figures += images(text)
        if inside:
            counts.collapsed += words(text)
        else:
            counts.main += words(text)
    return counts


def count_notebook(path, root=ROOT):
    """A notebook page: Markdown cells as prose, stream and display outputs as output words."""
    counts = Counts()
    for cell in json.loads(path.read_text())["cells"]:
        if "harness" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell["cell_type"] == "markdown":
            counts.add(count_markdown("".join(cell["source"]), root))
            continue
        counts.code_lines += len("".join(cell.get("source", "")).splitlines())
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if out.get("output_type") == "stream":
                counts.outputs += words("".join(out["text"]))
            elif out.get("output_type") == "error":
                counts.outputs += words(re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.get("traceback", []))))
            elif "text/markdown" in data:
                counts.outputs += words("".join(data["text/markdown"]))
            elif "text/plain" in data and not any(k.startswith("image/") for k in data):
                counts.outputs += words("".join(data["text/plain"]))
            counts.figures += sum(1 for k in data if k.startswith("image/"))
    return counts


def nav_pages(config):
    """The navigation's files in order."""
    def walk(entries):
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from walk(value) if isinstance(value, list) else [value]
    return list(walk(config["nav"]))


def budget(src, root):
    if src == "index.md":
        return HOME
    if re.search(r"quick-?start", src):
        return QUICK_START
    if src.endswith(".md") and (root / "notebooks" / f"{Path(src).stem}.ipynb").exists():
        return TEACHING
    return None


def measure(root=ROOT):
    config = yaml.safe_load((root / "mkdocs.yml").read_text())
    pages = []
    for src in nav_pages(config):
        path = root / "docs" / src
        c = count_notebook(path, root) if src.endswith(".ipynb") else count_markdown(path.read_text(), root)
        b = budget(src, root)
        pages.append({"page": src, "main": c.main, "collapsed": c.collapsed, "outputs": c.outputs,
                      "outputs_collapsed": c.outputs_collapsed, "figures": c.figures,
                      "budget": b,
                      "over_by": max(0, c.main - b) if b else None, "_snippets": c.snippets,
                      **({"unexecuted": c.unexecuted} if c.unexecuted else {})})
    totals = {k: sum(p[k] for p in pages) for k in
              ("main", "collapsed", "outputs", "outputs_collapsed", "figures")}
    totals["teaching_figures"] = sum(p["figures"] for p in pages if p["budget"] == TEACHING)

    names = [p["page"] for p in pages]
    core = pages[:names.index(CORE_END) + 1] if CORE_END in names else pages
    core_path = {"from": names[0], "to": core[-1]["page"], "pages": len(core),
                 "main": sum(p["main"] for p in core),
                 "outputs": sum(p["outputs"] - p["outputs_collapsed"] for p in core),
                 "budget": CORE_PATH}
    core_path["over_by"] = max(0, core_path["main"] - CORE_PATH)

    walk, main, outs = None, 0, 0
    for i, p in enumerate(pages):
        hit = next(((f, before) for f, before in p["_snippets"] if multinode(root, f)), None)
        if hit:
            walk = {"page": p["page"], "batch_file": hit[0], "pages": i + 1, "main": main + hit[1]}
            break
        main += p["main"]
    for p in pages:
        del p["_snippets"]
    return {"source": "Markdown sources and the notebooks' stored outputs (benchmarks/reading_load.py)",
            "pages": pages, "totals": totals, "core_path": core_path,
            "to_first_multinode_batch_file": walk,
            "budgets": {"home": HOME, "quick_start": QUICK_START, "core_path": CORE_PATH,
                        "teaching_page": TEACHING, "teaching_figures": FIGURES}}


# --- What a reader downloads: measured on the built site ----------------------------------------

class _Loads(HTMLParser):
    """The URLs a page makes the browser fetch: <img src>, <link rel=stylesheet|icon href>,
    <script src>, and from Material's configuration the search worker. Not the search index: it is
    fetched on the reader's first search (overrides/main.html; tests/browser/test_search.py checks
    that a page's first visit does not request it), and reported on its own below."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.urls, self._config = [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        rel = (a.get("rel") or "").split()
        if tag in ("img", "script") and a.get("src"):
            self.urls.append(a["src"])
        elif tag == "link" and {"stylesheet", "icon"} & set(rel) and a.get("href"):
            self.urls.append(a["href"])
        self._config = tag == "script" and a.get("id") == "__config"

    def handle_data(self, data):
        if self._config:
            config = json.loads(data)
            if config.get("search"):
                self.urls.append(config["search"])
            self._config = False


def loads(site, page):
    """The files of the site that a cold visit of the page fetches, the page first, each once."""
    parser = _Loads()
    parser.feed(page.read_text())
    files = [page]
    for url in parser.urls:
        if url.startswith(("data:", "http:", "https:", "//")):
            continue  # counted in the HTML, or not the site's
        path = unquote(urlparse(url).path)
        f = (site / path.lstrip("/") if path.startswith("/") else page.parent / path).resolve()
        if f.is_file() and f not in files:
            files.append(f)
    return files


@functools.lru_cache(maxsize=None)
def sent(path):
    """The bytes a compressing server sends for the file (gzip; a PNG is sent as it is)."""
    data = Path(path).read_bytes()
    return len(data) if Path(path).suffix == ".png" else len(gzip.compress(data, 6, mtime=0))


def cold_weight(site, page):
    """(bytes, bytes sent gzipped) of a cold visit of the page."""
    files = loads(Path(site).resolve(), Path(page).resolve())
    return sum(f.stat().st_size for f in files), sum(sent(f) for f in files)


def built_page(site, src):
    """The built HTML of a page of the navigation (use_directory_urls: x.md is x/index.html)."""
    stem = Path(src).with_suffix("")
    return Path(site) / (stem.parent if stem.name == "index" else stem) / "index.html"


def kb(n):
    return round(n / 1000)


def weights(site, pages):
    """Each page's cold weight, the heaviest page and what it costs a phone, and the sizes of the
    search index, of the whole site and of its .zip."""
    site = Path(site)
    per_page = {}
    for src in pages:
        raw, gz = cold_weight(site, built_page(site, src))
        per_page[src] = {"cold_kb": kb(raw), "sent_kb": kb(gz)}
    heaviest = max(per_page, key=lambda s: per_page[s]["cold_kb"])
    seconds = lambda k: round(k * 1000 * 8 / (PHONE_MBIT_S * 1e6), 1)  # noqa: E731
    index = site / "search" / "search_index.json"
    archive = site / ARCHIVE
    return per_page, {
        "heaviest": {"page": heaviest, **per_page[heaviest],
                     "phone_seconds": seconds(per_page[heaviest]["cold_kb"]),
                     "phone_seconds_sent": seconds(per_page[heaviest]["sent_kb"])},
        "phone_mbit_s": PHONE_MBIT_S,
        "search_index_kb": kb(index.stat().st_size), "search_index_sent_kb": kb(sent(index)),
        "site_mb": round(sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 1e6, 1),
        "archive_mb": round(archive.stat().st_size / 1e6, 1) if archive.exists() else None}


def build_site(out):
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"mkdocs build --strict failed:\n{r.stderr[-3000:]}")


def f(v):
    return "" if v is None else f"{v:,}"


def markdown(result):
    rows = ["| page | main-line prose | collapsed | outputs (collapsed) | figures | budget / over by "
            "| cold KB (sent) |",
            "|---|--:|--:|--:|--:|---|--:|"]
    for p in result["pages"]:
        b = "" if p["budget"] is None else f"{p['budget']:,} / " + (f"**{p['over_by']:,}**" if p["over_by"] else "within")
        rows.append(f"| `{p['page']}` | {f(p['main'])} | {f(p['collapsed'])} | {f(p['outputs'])} "
                    f"({f(p['outputs_collapsed'])}) | {f(p['figures'])} | {b} "
                    f"| {f(p.get('cold_kb'))} ({f(p.get('sent_kb'))}) |")
    t = result["totals"]
    rows.append(f"| **all {len(result['pages'])} pages** | {f(t['main'])} | {f(t['collapsed'])} | "
                f"{f(t['outputs'])} ({f(t['outputs_collapsed'])}) | {f(t['figures'])} | | |")
    core, walk = result["core_path"], result["to_first_multinode_batch_file"]
    over = lambda d: f"over by {d['over_by']:,}" if d["over_by"] else "within it"  # noqa: E731
    quick = [p for p in result["pages"] if p["budget"] == QUICK_START]
    lines = [
        "# Reading load",
        "",
        "What a reader reads, page by page in the navigation's order. Generated by",
        "`python benchmarks/reading_load.py` from the Markdown sources and the notebooks' stored",
        "outputs, and from the built site for the weights (its docstring says what counts as what);",
        "tests/test_reading_load.py fails when this file is not what the sources give today, and when a",
        "page is over its budget (main-line prose words) or the teaching pages hold fewer figures than",
        "their minimum.",
        "",
        "- **main-line prose**: headings, paragraphs, lists, tables, open admonitions and content tabs",
        "  (every tab counted); **collapsed**: inside `???` boxes; **outputs**: words of included",
        "  outputs, those in collapsed boxes in brackets; code (fences, snippets, diffs) is not prose.",
        "- **cold KB**: what a first visit of the page downloads at 1280 px, in KB of 1,000 bytes,",
        "  measured on the built site: the HTML and every file it loads (images, stylesheets, scripts,",
        "  the search worker; the search index comes with the first search, below); **sent**: the same",
        "  with the text gzipped, as a compressing server sends it.",
        "",
        *rows,
        "",
        "## Totals",
        "",
        f"- **Core path** ({core['from']} through {core['to']}, {core['pages']} pages of the navigation): "
        f"{core['main']:,} words of main-line prose, budget {core['budget']:,}: {over(core)}; "
        f"plus {core['outputs']:,} words of outputs shown open.",
    ]
    unexecuted = [f"`{u}`" for p in result["pages"] for u in p.get("unexecuted", [])]
    if unexecuted:
        lines.append(f"- **Not counted**, the cells have no stored output yet (execute their notebooks): "
                     f"{', '.join(unexecuted)}.")
    if walk:
        lines.append(f"- **To the first multi-node batch file** (`{walk['batch_file']}`, on `{walk['page']}`, "
                     f"page {walk['pages']} along Next): {walk['main']:,} words of main-line prose.")
    else:
        lines.append("- **To the first multi-node batch file**: no page includes one.")
    b = result["budgets"]
    lines.append(f"- **Home**: budget {b['home']:,}; **quick start**: budget {b['quick_start']:,}"
                 + ("" if quick else " (no quick-start page in the navigation yet)")
                 + f"; **every teaching page** (a page with a notebook of its name): {b['teaching_page']:,}.")
    lines.append(f"- **Figures on the teaching pages**: {t['teaching_figures']}, at least {b['teaching_figures']}.")
    if d := result.get("download"):
        h = d["heaviest"]
        lines += [
            "",
            "## Download",
            "",
            f"- **Search index** (`search/search_index.json`, fetched once, when the reader first opens "
            f"search): {d['search_index_kb']:,} KB ({d['search_index_sent_kb']:,} KB gzipped).",
            f"- **Whole site**: {d['site_mb']:,} MB"
            + (f"; **the repository's .zip** ({ARCHIVE}): {d['archive_mb']:,} MB." if d["archive_mb"] is not None else "."),
            f"- **Heaviest page**, `{h['page']}`: {h['cold_kb']:,} KB on a first visit ({h['sent_kb']:,} KB sent "
            f"gzipped). On a phone at {d['phone_mbit_s']:g} Mbit/s (an assumption: Lighthouse's mobile profile, "
            f"round trips not counted) that is {h['phone_seconds']:g} s of download, {h['phone_seconds_sent']:g} s "
            f"from a server that compresses.",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--site", type=Path, help="a build of the site to measure (default: build one)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = measure()
    with tempfile.TemporaryDirectory() as tmp:
        site = args.site or Path(tmp) / "site"
        if not args.site:
            build_site(site)
        per_page, result["download"] = weights(site, [p["page"] for p in result["pages"]])
    for p in result["pages"]:
        p.update(per_page[p["page"]])
    (args.out / "reading-load.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "reading-load.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
