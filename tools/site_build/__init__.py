"""The site's build steps, one concern per module; tools/mkdocs_hooks.py wires them into MkDocs.

Markers a page's Markdown may hold (expanded before rendering):
    outputs.py      <!-- diff A B -->, <!-- output NOTEBOOK TAG -->
    facts.py        <!-- fact NAME -->
    repository.py   <!-- repository -->
    account.py      <!-- account NN -->
    gpu_status.py   <!-- gpu-status NN -->
After rendering: code_blocks.py (copy buttons, search), search.py (the error index),
wrapping.py (wrap between words), diagrams.py, masks.py (placeholder notes),
notebook_pages.py; after the build: repository.py (files, .zip), notebook_css.py, figures.py
(embedded figures as files; charts compacted, linked, classed), unused_css.py.
"""
