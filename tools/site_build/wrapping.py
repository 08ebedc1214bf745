"""Outputs, table cells and headings wrap between words only: a flag or a file name stays whole.

Long lines wrap at spaces only. Chromium also breaks after '-', '/' and brackets
(--ntasks-|per-node, slurm/05-|multinode.sbatch), so every token holding such a character is
kept whole (reading.css: .nobr). A long token that is not a flag may break after a separator
(nn.SyncBatchNorm.|convert_sync_batchnorm(model), DEBUG=|DETAIL), a path after a '/' only
(slurm/retired/|mahti-05-multinode-torchrun.sbatch): never inside a flag or a file's name.
"""
import re

TOKEN = re.compile(r"[^\s<>]*[^\w\s<>][^\s<>]*")
HTML_TAG = re.compile(r"(<[^>]+>)")
KEEP_WHOLE = [  # (opening tag, content, closing tag) of what wraps between words only
    re.compile(r'(<t[dh]\b[^>]*>)(.*?)(</t[dh]>)', re.S),
    re.compile(r'(<div class="[^"]*\bjp-OutputArea-output\b[^"]*"[^>]*>\s*<pre>)(.*?)(</pre>)', re.S),
]
HEADING = re.compile(r'(<h[1-3]\b[^>]*>)(.*?)(</h[1-3]>)', re.S)


def keep_whole(fragment, skip_code=False):
    """Each token of the fragment's text in a .nobr (a long one in pieces); `skip_code`: leave
    inline `<code>` to inline_code()."""
    def token(m):
        t = m.group(0)
        if len(t) < 2 or re.fullmatch(r"&#?\w+;", t):  # (an entity alone: the heading's ¶)
            return t
        if len(t) > 20 and not t.startswith("-"):  # a long token, not a flag, may break after a
            path = re.search(r"\.\w{1,8}\W*$", t)    # separator; a path between its folders only
            pieces = re.split(r"(?<=/)(?=\w)" if path else r"(?<=[.,=;:|/(])(?=\w)", t)
            return "<wbr>".join(f'<span class="nobr">{p}</span>' for p in pieces)
        return f'<span class="nobr">{t}</span>'

    parts, in_code = HTML_TAG.split(fragment), False
    for i in range(0, len(parts), 2):  # text between tags; the tags stay as they are
        if not in_code:
            parts[i] = TOKEN.sub(token, parts[i])
        if i + 1 < len(parts) and skip_code and re.match(r"</?code\b", parts[i + 1]):
            in_code = not parts[i + 1].startswith("</")
    return "".join(parts)


# Inline code in prose and tables (`--ntasks-per-node=1`, `slurm/05-multinode.sbatch`,
# `nn.SyncBatchNorm.convert_sync_batchnorm(model)`): a token longer than SHORT is a .tok, whole on
# a wide screen but for a path's '/' (reading.css); on a phone it may break between its pieces
# only. In a table cell a long name that is not a flag or a file's may break between its pieces
# on any screen, so that the table keeps to the column. Pieces end after a '-' that follows a letter or digit (never inside `--`), after a '/',
# before a '.' that starts a name's part (code/01_ddp|.py), after ',', '(', '[' or '='
# (--signals-to-handle=|SIGTERM,|SIGINT: a value list, never inside a name).
INLINE_CODE = re.compile(r"(<code\b[^>]*>)(.*?)(</code>)", re.S)
NOT_INLINE = re.compile(r"(<pre\b.*?</pre>|<h[1-6]\b.*?</h[1-6]>)", re.S)  # blocks; headings: keep_whole
PIECE = re.compile(r"(?<=[A-Za-z0-9]-)(?=\w)|(?<=/)(?=[^\s/])|(?<=[\w)])(?=\.[A-Za-z_])"
                   r"|(?<=[,(\[=])(?=[^\s,)\]]{3})")  # (not node=|1)
FLAG_OR_FILE = re.compile(r"-.*|[\w.~$&;/-]*\w\.[A-Za-z]\w{0,7}|[^(=]*/[^(=]*")
CELL = re.compile(r"(<t[dh]\b.*?</t[dh]>)", re.S)
SHORT = 16


def _code_token(m, in_table=False):
    t = m.group(0)
    if len(t) <= SHORT:
        return f'<span class="nobr">{t}</span>'
    pieces = [f'<span class="nobr">{p}</span>' for p in PIECE.split(t)]
    if in_table and not FLAG_OR_FILE.fullmatch(t):
        return "<wbr>".join(pieces)
    # A path may break after a '/' on any screen (<wbr>): between folders, not inside a name. The
    # other pieces only on a phone (.brk: a zero-width space as CSS content there, which a copy of
    # the code leaves out; a <wbr> would break even in nowrap).
    return '<span class="tok">' + "".join(
        p + ("" if i == len(pieces) - 1 else "<wbr>" if p.endswith('/</span>') else '<span class="brk"></span>')
        for i, p in enumerate(pieces)) + "</span>"


def inline_code(content):
    """Every inline `<code>` outside code blocks and headings, its tokens as _code_token makes them."""
    def code_in(in_table):
        def code(m):
            parts = HTML_TAG.split(m.group(2))
            for i in range(0, len(parts), 2):
                parts[i] = re.sub(r"[^\s<>]+", lambda t: _code_token(t, in_table), parts[i])
            return m.group(1) + "".join(parts) + m.group(3)
        return code

    pieces = NOT_INLINE.split(content)
    for i in range(0, len(pieces), 2):
        cells = CELL.split(pieces[i])  # (odd: a table cell)
        pieces[i] = "".join(INLINE_CODE.sub(code_in(j % 2 == 1), c) for j, c in enumerate(cells))
    return "".join(pieces)


def wrap_between_words(content):
    content = inline_code(content)
    for pattern in KEEP_WHOLE:
        content = pattern.sub(lambda m: m.group(1) + keep_whole(m.group(2), skip_code=True) + m.group(3), content)
    return HEADING.sub(lambda m: m.group(1) + keep_whole(m.group(2)) + m.group(3), content)


# The sidebar's labels (the table of contents repeats the headings): Chromium breaks them after a
# '-' too (--|local-rank, x86-|64), so their tokens are kept whole as the headings' are.
NAV_LABEL = re.compile(r'(<a\b[^>]*class="md-nav__link[^"]*"[^>]*>\s*<span class="md-ellipsis">)(.*?)(</span>)', re.S)


def nav_labels(output):
    return NAV_LABEL.sub(lambda m: m.group(1) + keep_whole(m.group(2)) + m.group(3), output)
