"""The error search index. A pasted error message finds the page that shows it: the error lines of
an output block are indexed as a search section of their own (Material's index: a heading and its
text), titled with the block's first error line and placed right before the block, so that a
result opens the page at the error. The section is invisible (class search-only, aria-hidden: the
block shows the same lines); code itself stays out of the index (code_blocks.py)."""
import hashlib
import html
import json
import re
from pathlib import Path

ERROR_LINE = re.compile(r"error|exception|\bSIG[A-Z]+\d?\b|invalid|refused|denied|timed out|"
                        r"not set|mutually exclusive|failed|abort|(?-i:\bPROBLEM\b)", re.I)


def error_lines(pre, most=8):
    """The block's lines that name an error, without prompts and repeats (at most `most`)."""
    lines = []
    for line in html.unescape(re.sub(r"<[^>]+>", "", pre)).splitlines():
        line = re.sub(r"^\[(rank|default)?\d+\]:?\s*", "", line.strip())  # torchrun's rank labels
        if line and not line.startswith("$ ") and ERROR_LINE.search(line) and line[:300] not in lines:
            lines.append(line[:300])
    return lines[:most]


def error_section(lines, seen):
    """The invisible search section for these error lines ('' when none, or all indexed already)."""
    lines = [line for line in lines if line not in seen]
    if not lines:
        return ""
    seen.update(lines)
    anchor = "error-" + hashlib.sha256(lines[0].encode()).hexdigest()[:8]
    esc = [html.escape(line, quote=False) for line in lines]
    return (f'<div class="search-only" aria-hidden="true"><h6 id="{anchor}">{esc[0]}</h6>'
            + "\n".join(esc[1:]) + "</div>")  # (plain text: no paragraph of the page)


def notebook_errors(root, page_src, seen):
    """The step's notebook (notebooks/<page>.ipynb) is out of the index (a search opens the step's
    page): the error and PROBLEM lines its executed cells print, and the page does not show, are
    indexed on the page instead, as one invisible section at its end."""
    notebook = Path(root) / "notebooks" / (Path(page_src).stem + ".ipynb")
    if not notebook.exists():
        return ""
    text = "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                     for c in json.loads(notebook.read_text())["cells"] for o in c.get("outputs", []))
    return error_section(error_lines(html.escape(text), most=40), seen)
