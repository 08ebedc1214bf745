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


def keep_whole(fragment):
    def token(m):
        t = m.group(0)
        if len(t) < 2 or re.fullmatch(r"&#?\w+;", t):  # (an entity alone: the heading's ¶)
            return t
        if len(t) > 20 and not t.startswith("-"):  # a long token, not a flag, may break after a
            path = re.search(r"\.\w{1,5}\W*$", t)    # separator; a path between its folders only
            pieces = re.split(r"(?<=/)(?=\w)" if path else r"(?<=[.,=;:|/(])(?=\w)", t)
            return "<wbr>".join(f'<span class="nobr">{p}</span>' for p in pieces)
        return f'<span class="nobr">{t}</span>'

    parts = HTML_TAG.split(fragment)
    for i in range(0, len(parts), 2):  # text between tags; the tags stay as they are
        parts[i] = TOKEN.sub(token, parts[i])
    return "".join(parts)


def wrap_between_words(content):
    for pattern in KEEP_WHOLE:
        content = pattern.sub(lambda m: m.group(1) + keep_whole(m.group(2)) + m.group(3), content)
    return HEADING.sub(lambda m: m.group(1) + keep_whole(m.group(2)) + m.group(3), content)
