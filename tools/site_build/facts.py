"""`<!-- fact NAME -->`: a fact several pages state, read from the one file that defines it.
tests/test_consistency.py fails when a page, notebook or script states another value."""
import re
from pathlib import Path

FACT = re.compile(r"<!-- fact ([\w-]+) -->")

# Facts several pages state, each read from the one file that defines it.
FACTS = {
    # the global batch every step trains with: step 1's --batch-size default
    "batch": ("code/01_ddp.py", r'"--batch-size", type=int, default=(\d+)'),
    # the data set every step trains on: load_dataset's default
    "dataset": ("code/ddp_helpers.py", r'def load_dataset\(name="(\w+)"'),
    # the rendezvous port of a multi-node job, derived from the job id
    "port": ("slurm/05-multinode-torchrun.sbatch", r"^RDZV_PORT=(.+)$"),
}


def facts(root):
    """{name: value} of FACTS, read from the files now."""
    out = {}
    for name, (path, pattern) in FACTS.items():
        m = re.search(pattern, (Path(root) / path).read_text(), re.M)
        if not m:
            raise ValueError(f"fact {name!r}: {pattern!r} not found in {path}")
        out[name] = m.group(1)
    return out
