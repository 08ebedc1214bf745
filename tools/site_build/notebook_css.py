"""mkdocs-jupyter inlines the same ~580 KB of CSS into every notebook page: after the build each
such block becomes one shared file (one copy instead of 580 KB per notebook page)."""
import hashlib
import os
import re

NOTEBOOK_CSS = re.compile(r'<style(?: type="text/css")?>((?:(?!</style>).){2000,})</style>', re.S)


def share_notebook_css(site_dir):
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
