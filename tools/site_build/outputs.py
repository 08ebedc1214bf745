"""`<!-- diff A B -->` and `<!-- output NOTEBOOK TAG -->`: a unified diff of two real files, and the
stored outputs of the notebook cell tagged TAG (nbval checks they are what the code prints today),
after a one-line note when they show placeholders (masks.py)."""
import difflib
import html
import json
import re

from .markers import block_marker
from .masks import masked_note

DIRECTIVE = block_marker(r"(diff|output) (\S+) (\S+)")  # groups: indentation, kind, a, b


def diff(root, a, b):
    old, new = (root / a).read_text().splitlines(), (root / b).read_text().splitlines()
    lines = difflib.unified_diff(old, new, fromfile=a, tofile=b, n=2, lineterm="")
    return "```diff\n" + "\n".join(lines) + "\n```"


def image_alts(cell):
    """What the cell's figures show, for a reader who cannot see them: the cell's metadata "alt",
    one text, or a list of texts in the order of the figures (a fresh list on each call)."""
    alt = cell.get("metadata", {}).get("alt", [])
    return [alt] if isinstance(alt, str) else list(alt)


def output(root, notebook, tag):
    cells = [c for c in json.loads((root / notebook).read_text())["cells"]
             if tag in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{notebook}: expected one cell tagged {tag!r}, found {len(cells)}")
    parts, stream, alts = [], "", image_alts(cells[0])
    for out in cells[0].get("outputs", []) + [{}]:  # {}: the end, which flushes the last text
        data = out.get("data", {})
        if out.get("output_type") == "stream":  # consecutive pieces of text are one block, as nbval
            stream += "".join(out["text"])      # compares them: a cell prints in many pieces
            continue
        stream = re.sub(r"^.*\r(?=[^\n])", "", stream, flags=re.M)  # a line rewritten in place: its last form
        if stream.strip():
            parts.append("```text\n" + stream.strip("\n").rstrip() + "\n```")
        stream = ""
        if "image/png" in data:  # a computed figure, embedded as it was drawn, described by the cell
            alt = html.escape(alts.pop(0) if alts else tag)
            parts.append(f'<img alt="{alt}" src="data:image/png;base64,{data["image/png"].strip()}">')
        elif "text/markdown" in data:
            parts.append("".join(data["text/markdown"]))
        elif "text/plain" in data:
            parts.append("```text\n" + "".join(data["text/plain"]).rstrip() + "\n```")
    if not parts:
        raise ValueError(f"{notebook}: the cell tagged {tag!r} has no output: run the notebook")
    note = masked_note("".join("".join(o.get("text", "")) for o in cells[0].get("outputs", [])))
    return "\n\n".join(([note] if note else []) + parts)
