"""Measurement only (benchmarks/process_starts.py), never in the tests: with this folder on
PYTHONPATH every Python process writes one line at its exit to $PROCESS_STARTS_DIR (default
/work/pystarts; a folder every user may write, not under /tmp, which a LUMI node has of its own):
pid, start time, seconds alive, CPU seconds, whether it imported torch, the test that started it
(PYTEST_CURRENT_TEST, inherited), its command."""
import atexit
import os
import sys
import time

_t0 = time.time()


def _log():
    try:
        import resource
        r = resource.getrusage(resource.RUSAGE_SELF)
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
        line = "\t".join([str(os.getpid()), f"{_t0:.2f}", f"{time.time() - _t0:.2f}", f"{r.ru_utime + r.ru_stime:.2f}",
                          "torch" if "torch" in sys.modules else "-", test, " ".join(sys.argv[:3])[:200].replace("\t", " ")])
        folder = os.environ.get("PROCESS_STARTS_DIR", "/work/pystarts")
        with open(f"{folder}/{os.getpid()}-{int(_t0 * 1000)}.tsv", "w") as f:
            f.write(line + "\n")
    except Exception:
        pass


atexit.register(_log)
