"""The reading-load measure (benchmarks/reading_load.py): the committed table is what the sources
give today, and small pages are counted as its docstring says."""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
import reading_load  # noqa: E402


def test_committed_table_is_what_the_sources_give(tmp_path, site_dir):
    """A page, a notebook's stored output or the navigation changed: run
    `python benchmarks/reading_load.py` and commit its two files. (Measured on the suite's one
    build of the site.)"""
    reading_load.main(["--out", str(tmp_path), "--site", str(site_dir)])
    for name in ("reading-load.md", "reading-load.json"):
        assert (tmp_path / name).read_text() == (ROOT / "benchmarks" / name).read_text(), (
            f"benchmarks/{name} is stale: run python benchmarks/reading_load.py")


def test_rows_follow_the_navigation():
    import yaml
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    result = json.loads((ROOT / "benchmarks" / "reading-load.json").read_text())
    assert [p["page"] for p in result["pages"]] == reading_load.nav_pages(config)
    assert result["core_path"]["to"] == reading_load.CORE_END


def test_budgets_hold():
    """Home, the quick start, the core path and every teaching page within their budgets of
    main-line prose; pictures on the teaching pages. Over budget: move edge cases, history and
    practice-cluster detail into a collapsed box or Troubleshooting, or say it in fewer words."""
    result = reading_load.measure()
    over = [f"{p['page']}: {p['main']:,} words, budget {p['budget']:,}" for p in result["pages"]
            if p["budget"] and p["over_by"]]
    core = result["core_path"]
    if core["over_by"]:
        over.append(f"core path to {core['to']}: {core['main']:,} words, budget {core['budget']:,}")
    assert not over, over
    quick = [p["page"] for p in result["pages"] if p["budget"] == reading_load.QUICK_START]
    assert quick == [result["pages"][1]["page"]], "the quick start is the page after Home"
    assert result["totals"]["teaching_figures"] >= reading_load.FIGURES, result["totals"]
    walk = result["to_first_multinode_batch_file"]
    assert walk and walk["pages"] <= 2, f"the first two-node batch file comes on page {walk}"


def notebook(cells):
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.fixture
def root(tmp_path):
    png = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
           "metadata": {}}
    (tmp_path / "nb.ipynb").write_text(notebook([
        {"cell_type": "code", "source": "import x", "metadata": {"tags": ["harness"]}, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "never shown on the page"}]},
        {"cell_type": "markdown", "source": "## A cell heading\n\nfour words of prose", "metadata": {}},
        {"cell_type": "code", "source": "run()\nshow()", "metadata": {"tags": ["demo"]}, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "rank 0: [1, 2]\n"},
            {"output_type": "stream", "name": "stdout", "text": "alpha beta\n"}, png]},
    ]))
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "two.sbatch").write_text("#!/bin/bash\n#SBATCH --nodes=2\nsrun true\n")
    (tmp_path / "slurm" / "one.sbatch").write_text("#!/bin/bash\n#SBATCH --nodes=1\nsrun true\n")
    return tmp_path


PAGE = '''# Title here

One two `three`, [four](x.md).

??? note "Hidden box"

    five six seven

    <!-- output nb.ipynb demo -->

!!! tip "Open box"

    eight nine

    ??? example "Nested and hidden"

        ten

=== "Tab one"

    eleven twelve

```python
x = 1  # no prose here
y = 2
```

| a | b |
|---|---|
| 1 | c |

```bash
--8<-- "slurm/one.sbatch"
```

<!-- a comment nobody reads -->
![a figure of something](images/x.svg)

<!-- output nb.ipynb demo -->

Last words.

--8<-- "slurm/two.sbatch"
'''


def test_each_kind_of_text_goes_to_its_column(root):
    c = reading_load.count_markdown(PAGE, root)
    # Title here 2, One two three four 4, Open box 2, eight nine 2, Tab one 2, eleven twelve 2,
    # the table's a b 1 c 4, Last words 2 (numbers are words; code, comments and images are not)
    assert c.main == 2 + 4 + 2 + 2 + 2 + 2 + 4 + 2
    assert c.collapsed == 2 + 3 + 3 + 1  # Hidden box, five six seven, Nested and hidden, ten
    assert c.outputs == 2 * 6 and c.outputs_collapsed == 6  # rank 0: [1, 2] alpha beta, twice
    assert c.figures == 1 + 2  # the ![...] and the included cell's image, twice
    assert c.code_lines == 2 + 3 + 3  # the fence's lines and the two included files
    # each include, with the main-line words before it: all but "Last words", then all
    assert c.snippets == [("slurm/one.sbatch", c.main - 2), ("slurm/two.sbatch", c.main)]


def test_a_notebook_page(root):
    c = reading_load.count_notebook(root / "nb.ipynb", root)
    assert (c.main, c.outputs, c.figures, c.code_lines) == (3 + 4, 6, 1, 2)  # harness cell: nothing


def test_multinode_batch_files(root):
    assert reading_load.multinode(root, "slurm/two.sbatch")
    assert not reading_load.multinode(root, "slurm/one.sbatch")
    assert not reading_load.multinode(root, "code/two.py")
