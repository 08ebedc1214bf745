"""sbatch files that no notebook submits: submitted unchanged to the local cluster here.

EXPECTED maps a file to regular expressions its job output must match. Files a notebook
submits are checked there (nbval compares the job's output), see test_site.py.
"""
import re

import pytest

from jobs import submit

EXPECTED = {
}


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_sbatch_job(cluster, path):
    out = submit(path)
    for pattern in EXPECTED[path]:
        assert re.search(pattern, out, re.M), f"{path}: no match for {pattern!r} in:\n{out}"
