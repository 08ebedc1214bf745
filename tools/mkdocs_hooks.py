"""MkDocs hooks: pages show generated diffs, executed outputs and facts read from the code.

This file only wires the pieces of tools/site_build/ into MkDocs; each concern has its module:

    <!-- diff code/01_single.py code/01_ddp.py -->   outputs.py: a unified diff of the two files
    <!-- output notebooks/01-ddp.ipynb compare -->   outputs.py: the stored outputs of the cell
                                                    tagged `compare` (nbval checks them), after a
                                                    note on placeholders (masks.py: MASKS)
    <!-- fact port -->                              facts.py (inline, also inside `code`): FACTS
    <!-- repository -->                             repository.py: every file, and the .zip
    <!-- account 06 -->                             account.py: --account and the job's Python
    <!-- gpu-status 01 -->                          gpu_status.py: what `make gpu-check` measured

A missing file, tag, fact or empty output fails the build (mkdocs build --strict in the tests).
Block markers may stand indented (list items, admonitions): markers.py.
After rendering: code_blocks.py (copy buttons; code out of the search index), search.py (error
lines of outputs indexed with their page), columns.py (table rows in outputs keep their
columns), wrapping.py (a flag or a file name stays whole),
diagrams.py, masks.py and notebook_pages.py (notebook pages). After the build: repository.py
(site/files/ and the .zip), notebook_css.py (mkdocs-jupyter's CSS in shared files) and
unused_css.py (their rules that match nothing left out), figures.py (embedded figures as files;
every chart compacted, opening at full size on a tap, dark in the dark scheme).
"""
from pathlib import Path

from site_build.account import ACCOUNT, account
from site_build.code_blocks import CODE_BLOCK, code_block
from site_build.columns import in_notebook_outputs
from site_build.diagrams import CHART, DIAGRAM, chart, diagram
from site_build.facts import FACT, facts
from site_build.figures import figures
from site_build.gpu_status import GPU_STATUS, gpu_status
from site_build.markers import expand
from site_build.masks import NOTEBOOK_OUTPUT, masked_note, note_masks
from site_build.notebook_css import share_notebook_css
from site_build.notebook_pages import CELL_TAGS, describe_images, notebook_toc
from site_build.outputs import DIRECTIVE, diff, output
from site_build.repository import ARCHIVE, REPOSITORY, copy_files, repository_files, repository_page, write_archive
from site_build.search import notebook_errors
from site_build.unused_css import prune_notebook_css
from site_build.wrapping import nav_labels, wrap_between_words

# what the tests import from here, besides the hooks
__all__ = ["ARCHIVE", "FACT", "NOTEBOOK_OUTPUT", "account", "facts", "gpu_status", "masked_note",
           "note_masks", "output", "repository_files"]
_output = output  # (tests/test_debugging.py's name)


def on_page_markdown(markdown, page, config, files):
    root = Path(config.config_file_path).parent

    def diff_or_output(m):
        kind, a, b = m.group(2, 3, 4)
        try:
            return diff(root, a, b) if kind == "diff" else output(root, a, b)
        except (OSError, ValueError) as e:
            raise SystemExit(f"{page.file.src_path}: {m.group(0)}: {e}")

    def fact(m):
        try:
            return facts(root)[m.group(1)]
        except KeyError:
            raise SystemExit(f"{page.file.src_path}: {m.group(0)}: no such fact, see FACTS in tools/site_build/facts.py")

    # a block marker's text takes its place, indented as it is (in a list item, an admonition)
    markdown = expand(REPOSITORY, markdown, lambda m: repository_page(root))
    markdown = expand(GPU_STATUS, markdown, lambda m: gpu_status(root, m.group(2)))
    try:
        markdown = expand(ACCOUNT, markdown, lambda m: account(root, m.group(2), Path(page.file.src_path).stem))
    except ValueError as e:
        raise SystemExit(f"{page.file.src_path}: <!-- account -->: {e}")
    return FACT.sub(fact, expand(DIRECTIVE, markdown, diff_or_output))


def on_page_content(content, page, config, files):
    content = CHART.sub(chart, DIAGRAM.sub(diagram, content))
    seen = set()  # error lines indexed on this page
    content = CODE_BLOCK.sub(lambda m: code_block(m, seen), content)
    if page.file.src_uri.endswith(".ipynb"):  # a notebook page: the search opens its step's page
        content = describe_images(CELL_TAGS.sub("", content), Path(page.file.abs_src_path))
        title, page.toc = notebook_toc(content)
        if title:
            page.title = title
        page.meta = {**(page.meta or {}), "search": {"exclude": True}}
        return NOTEBOOK_OUTPUT.sub(note_masks, in_notebook_outputs(wrap_between_words(content)))
    root = Path(config.config_file_path).parent
    return wrap_between_words(content) + notebook_errors(root, page.file.src_path, seen)


def on_post_page(output, page, config):
    return nav_labels(output)


def on_post_build(config):
    """The whole repository as one .zip in the site (the Repository page links to it), each file
    on its own, the notebook pages' shared CSS in files of its own, and the pages' figures as files."""
    root, site_dir = Path(config.config_file_path).parent, Path(config.site_dir)
    copy_files(root, site_dir)
    share_notebook_css(site_dir)
    figures(site_dir)
    prune_notebook_css(site_dir)
    write_archive(root, site_dir)
