"""Who uses the practice cluster: one file per holder in the state folder's holders/, so that a
test run which started the cluster does not stop it under a hand that began using it meanwhile
(`python -m practice_cluster start` from another shell). The last holder to let go stops it.

A holder's file holds its process id when it has one that lives as long as its use (a pytest
run): once that process has gone, the holder is stale and counts no more. A hand has no such
process (the command exits once the cluster is up): its file is empty and counts until
`python -m practice_cluster stop`.
"""
import os
from pathlib import Path

HAND = "hand"  # the command line's holder: one for every hand


def folder(state):
    return Path(state) / "holders"


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False


def hold(state, name, pid=None):
    """Count `name` as a holder (again: once), for as long as process `pid` lives (None: until it lets go)."""
    folder(state).mkdir(parents=True, exist_ok=True)
    (folder(state) / name).write_text(f"{pid}\n" if pid else "")


def holders(state):
    """The holders that count: those without a process, and those whose process lives."""
    found = []
    for p in sorted(folder(state).glob("*")):
        pid = p.read_text().strip()
        if not pid or alive(int(pid)):
            found.append(p.name)
    return found


def let_go(state, name):
    """`name` holds the cluster no more; return the holders left."""
    (folder(state) / name).unlink(missing_ok=True)
    return holders(state)
