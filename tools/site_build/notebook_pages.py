"""Notebook pages lose their cell-tag chips and get a table of contents and a title built from
their rendered headings (Markdown's own left out headings in `code`)."""
import html
import json
import re
from html.parser import HTMLParser

from mkdocs.structure.toc import get_toc

from .outputs import image_alts

DEFAULT_ALT = 'alt="No description has been provided for this image"'  # mkdocs-jupyter's


def describe_images(content, notebook):
    """The notebook's figures keep the description their cell gives (metadata "alt", outputs.py),
    in the order the page shows them; a figure without one keeps mkdocs-jupyter's default."""
    alts = [a for c in json.loads(notebook.read_text())["cells"] for a in
            (image_alts(c) + [None] * 99)[:sum("image/png" in o.get("data", {}) for o in c.get("outputs", []))]]
    parts = content.split(DEFAULT_ALT)
    return parts[0] + "".join((f'alt="{html.escape(a)}"' if a else DEFAULT_ALT) + p
                              for a, p in zip(alts + [None] * len(parts), parts[1:]))


CELL_TAGS = re.compile(r'<div class="celltoolbar">\s*<div class="button_container tags_button_container">'
                       r'.*?</div>\s*</div>\s*', re.S)


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


def notebook_toc(content):
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
