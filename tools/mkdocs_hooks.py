"""MkDocs hook: pages show generated diffs and executed notebook outputs, never pasted copies.

In a page's Markdown:
    <!-- diff code/01_single.py code/01_ddp.py -->      a unified diff of the two real files
    <!-- output notebooks/01-ddp.ipynb compare -->      the stored outputs of the notebook cell
                                                       tagged `compare` (nbval checks they are
                                                       what the code prints today)
A missing file, tag or empty output fails the build (mkdocs build --strict in the tests).
"""
import difflib
import json
import re
from pathlib import Path

DIRECTIVE = re.compile(r"^<!-- (diff|output) (\S+) (\S+) -->$", re.M)


def _diff(root, a, b):
    old, new = (root / a).read_text().splitlines(), (root / b).read_text().splitlines()
    lines = difflib.unified_diff(old, new, fromfile=a, tofile=b, n=2, lineterm="")
    return "```diff\n" + "\n".join(lines) + "\n```"


def _output(root, notebook, tag):
    cells = [c for c in json.loads((root / notebook).read_text())["cells"]
             if tag in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{notebook}: expected one cell tagged {tag!r}, found {len(cells)}")
    parts = []
    for out in cells[0].get("outputs", []):
        data = out.get("data", {})
        if out.get("output_type") == "stream":
            parts.append("```text\n" + "".join(out["text"]).rstrip() + "\n```")
        elif "image/png" in data:  # a computed figure, embedded as it was drawn
            parts.append(f'<img alt="{tag}" src="data:image/png;base64,{data["image/png"].strip()}">')
        elif "text/markdown" in data:
            parts.append("".join(data["text/markdown"]))
        elif "text/plain" in data:
            parts.append("```text\n" + "".join(data["text/plain"]).rstrip() + "\n```")
    if not parts:
        raise ValueError(f"{notebook}: the cell tagged {tag!r} has no output: run the notebook")
    return "\n\n".join(parts)


def on_page_markdown(markdown, page, config, files):
    root = Path(config.config_file_path).parent

    def expand(m):
        kind, a, b = m.groups()
        try:
            return _diff(root, a, b) if kind == "diff" else _output(root, a, b)
        except (OSError, ValueError) as e:
            raise SystemExit(f"{page.file.src_path}: {m.group(0)}: {e}")

    return DIRECTIVE.sub(expand, markdown)
