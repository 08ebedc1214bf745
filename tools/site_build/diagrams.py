"""Figures. An idea diagram (docs/images/*.svg, tools/diagrams.py) is drawn for the 688 px column. On a
phone a shrunk figure's 13 px text would be 7 px: the figure keeps its natural size and scrolls
sideways in its own box, and a tap opens the SVG alone (the browser zooms it)."""
import re

DIAGRAM = re.compile(r'<p>\s*(<img\b[^>]*\bsrc="([^"]*\bimages/[\w.-]+\.svg)"[^>]*>)\s*</p>')


def diagram(m):
    img, src = m.groups()
    return (f'<figure class="diagram"><a href="{src}" title="Open the figure on its own">{img}</a>'
            '<figcaption class="diagram-hint">Scroll the figure sideways, or tap it to open it '
            'on its own.</figcaption></figure>')


# A chart (docs/*.png, drawn by a notebook) shrinks to the column; a tap opens it at full size.
CHART = re.compile(r'<p>\s*(<img\b[^>]*\bsrc="([^"]+\.png)"[^>]*>)\s*</p>')


def chart(m):
    img, src = m.groups()
    return f'<p><a class="chart" href="{src}" title="Open the chart at full size">{img}</a></p>'
