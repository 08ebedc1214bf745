"""Code blocks after rendering: out of the search index (results show prose, not code dumps),
except the error lines of outputs (search.py); a copy button on a block with `$ ` command lines
copies the commands, without the prompt and without the output, unless a command runs a script
under runs/ (one a notebook wrote: a fresh clone has none), where the block has no copy button;
outputs wrap between words."""
import html
import re

from .columns import in_code
from .search import error_lines, error_section
from .wrapping import keep_whole

# a script that a notebook wrote under runs/ (runs/mistakes/no-sampler.py, runs/05-pitfall-expand.sh)
RUNS_SCRIPT = re.compile(r"(?<![\w/.-])runs/\S+\.(?:py|sh|sbatch)\b")
CODE_BLOCK = re.compile(r'<div class="([^"]*\bhighlight\b[^"]*)">(<pre>.*?</pre>)</div>', re.S)


def _commands(pre):
    """The commands of a block's `$ ` lines, without the prompt (continuation lines included)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", pre))
    cmds, going_on = [], False
    for line in text.splitlines():
        if line.startswith("$ ") or going_on:
            cmds.append(line[2:] if line.startswith("$ ") and not going_on else line)
            going_on = line.endswith("\\")
    return "\n".join(cmds)


def code_block(m, seen):
    cls, pre = m.groups()
    extra = " data-search-exclude"  # code in the index made every result a code dump
    cmds = _commands(pre)
    if cmds and RUNS_SCRIPT.search(cmds):  # what it copies would not run in a fresh clone
        cls += " no-copy"  # (Material leaves out the copy button inside .no-copy)
    elif cmds:  # Material's copy button copies the closest data-copy instead of the block's text
        extra += f' data-copy="{html.escape(cmds)}"'
    found = ""
    if "language-text" in cls:  # an output: it wraps at spaces (reading.css), never inside a token
        found = error_section(error_lines(pre), seen)  # (in source code 'error' is code)
        pre = in_code(keep_whole(pre))  # table rows keep their columns (columns.py)
    return f'{found}<div class="{cls}"{extra}>{pre}</div>'
