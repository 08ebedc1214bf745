"""Column-aligned output keeps its columns: `squeue`, `sacct`, `sinfo`, step 2's
equal/DIFFERENT table, step 3's sweep. Their lines do not wrap (.columns, reading.css: the block
scrolls on its own where they are wider); messages in the same block keep wrapping at spaces.
A line is a table row when it has a gap of two or more spaces inside and its last field is short
(not a sentence), next to another such line; sacct's ---- rule under its header counts too."""
import html
import re

GAP = re.compile(r"\S {2,}\S")
RULE = re.compile(r"^ *-{3,}[- ]*$")
DIFF = re.compile(r"^([-+](?![-+])|@@)")  # a line of a diff is code: "+    x = 1  # y"
CODE = re.compile(r"(<code\b[^>]*>)(.*)(</code>)", re.S)
OUTPUT_PRE = re.compile(r'(<div class="[^"]*\bjp-OutputArea-output\b[^"]*"[^>]*>\s*<pre>)(.*?)(</pre>)', re.S)


def _row(line):
    if line.startswith("$ ") or DIFF.match(line) or not GAP.search(line):
        return False
    return len(re.split(r" {2,}", line.strip())[-1].split()) <= 6  # a field, not a sentence


def columnar(lines):
    """The indexes of the lines that are table rows (groups with at least two rows)."""
    found, group = set(), []
    for i, line in enumerate(lines + [""]):
        if _row(line) or (group and RULE.match(line)):
            group.append(i)
            continue
        if sum(_row(lines[j]) for j in group) >= 2:
            found.update(group)
        group = []
    return found


def keep_columns(fragment):
    """The HTML lines of a block that are table rows, wrapped in one .columns span per group."""
    lines = fragment.split("\n")
    rows = columnar([html.unescape(re.sub(r"<[^>]+>", "", line)) for line in lines])
    out = []
    for i, line in enumerate(lines):
        if i in rows:  # (a <wbr> of wrapping.py breaks a line even in white-space: pre)
            line = line.replace("<wbr>", "")
        if i in rows and i - 1 not in rows:
            line = '<span class="columns">' + line
        if i in rows and i + 1 not in rows:
            line += "</span>"
        out.append(line)
    return "\n".join(out)


def in_code(pre):
    """keep_columns on the text of a `<pre><code>` block."""
    return CODE.sub(lambda m: m.group(1) + keep_columns(m.group(2)) + m.group(3), pre, count=1)


def in_notebook_outputs(content):
    return OUTPUT_PRE.sub(lambda m: m.group(1) + keep_columns(m.group(2)) + m.group(3), content)
