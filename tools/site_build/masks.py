"""Placeholders in outputs: values that change from run to run (where a signal lands, process and
job ids) are printed by the notebooks as placeholders, so that nbval can compare the rest of the
output. Where an output shows one, a one-line note before it says what each stands for
(on a step page: outputs.py; on a notebook page: note_masks)."""
import html
import re

MASKS = [  # (the placeholder in its context, the placeholder, what it stands for)
    (r"\bepoch E\b", "E", "the epoch"),
    (r"\bafter batch B\b|\bB of \d+ batches", "B", "the batch"),
    (r"\bS steps\b", "S", "the steps done"),
    (r"\bpid N\b", "N", "a process id"),
    (r"\bPID <pid>", "<pid>", "a process id"),
    (r"job-JOBID\b", "JOBID", "the Slurm job's number"),
    (r"<job id>", "<job id>", "the Slurm job's number"),
    (r"<run id>_", "<run id>", "torchrun's run id"),
    (r"<run id>_<random>|<job id>_<random>", "<random>", "a name torchrun picks at random"),
    (r"\.\.\./(site-packages|code)/", "...", "the start of a path on this machine"),
]


def masked_note(text):
    """The note for an output that shows placeholders ('' when it shows none)."""
    found = {}  # what it stands for: its placeholders
    for pattern, shown, meaning in MASKS:
        if re.search(pattern, text) and shown not in found.setdefault(meaning, []):
            found[meaning].append(shown)
    found = {m: p for m, p in found.items() if p}
    if not found:
        return ""
    items = "; ".join(" or ".join(f"<code>{html.escape(p)}</code>" for p in shown) + f" ({meaning})"
                      for meaning, shown in found.items())
    return ('<p class="masked-note">Placeholders for values that differ from run to run (or machine '
            f"to machine), so that the tests can compare the rest of this output: {items}.</p>")


NOTEBOOK_OUTPUT = re.compile(r'(<div class="[^"]*\bjp-OutputArea-output\b[^"]*"[^>]*>)(\s*<pre>.*?</pre>)', re.S)


def note_masks(m):
    """A notebook page's output that shows placeholders gets the same note as the step pages."""
    return m.group(1) + masked_note(html.unescape(re.sub(r"<[^>]+>", "", m.group(2)))) + m.group(2)
