"""code/own_tokens.py, a GPT-style loop (no loader, per-rank seeds, gradient accumulation): its
resume. Its two-process runs with code/ddp_check.py's lines are the your-own-script notebook's
cells `tokens` and `tokens-same-seed`, which assert their claims there."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return tmp_path_factory.mktemp("tokens") / "tokens.bin"  # the first run writes it


def one_process(tokens, *args):
    """The lines of a 1-process run, started as torchrun would start it (no agent: cheaper)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "code/own_tokens.py", "--data", str(tokens), "--steps", "6",
                           "--accumulation", "1", "--every", "1", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return {int(line.split()[1]): line for line in done.stdout.splitlines() if line.startswith("step ")}


@pytest.fixture(scope="module")
def whole(tokens):
    return one_process(tokens)  # the uninterrupted run


@pytest.mark.parametrize("rng, resumed_as", [("before-prefetch", "continues"), ("at-stop", "skips one"),
                                             ("none", "starts over")])
def test_a_resume_continues_the_data_only_with_the_state_before_the_prefetch(tokens, whole, tmp_path, rng,
                                                                             resumed_as):
    """The generator is the data order: a checkpoint after step 2 (steps 0-2 done) with each
    rank's state from before the prefetch resumes exactly (the same batches and losses); the
    state at the stop is past the prefetched batch (one batch skipped); no state replays the data
    from the first batch. Every step here is one batch (--accumulation 1), named by its hash."""
    ckpt = str(tmp_path / "tokens.pt")
    stopped = one_process(tokens, "--checkpoint", ckpt, "--stop-after", "3", "--rng", rng)
    assert sorted(stopped) == [0, 1, 2] and all(stopped[s] == whole[s] for s in stopped), stopped
    resumed = one_process(tokens, "--checkpoint", ckpt)
    assert sorted(resumed) == [3, 4, 5], resumed
    batch = {s: line.split("batch ")[1].split()[0] for s, line in whole.items()}
    got = resumed[3].split("batch ")[1].split()[0]
    if resumed_as == "continues":
        assert [resumed[s] for s in (3, 4, 5)] == [whole[s] for s in (3, 4, 5)], (resumed, whole)
    elif resumed_as == "skips one":
        assert got == batch[4] and resumed[3] != whole[3], (resumed, whole)
    else:
        assert got == batch[0] and resumed[3] != whole[3], (resumed, whole)


def single(tokens, *args):
    """The lines of code/own_tokens_single.py, the one-process script own_tokens.py starts from."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "code/own_tokens_single.py", "--data", str(tokens), "--steps", "6",
                           "--accumulation", "1", "--every", "1", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return {int(line.split()[1]): line for line in done.stdout.splitlines() if line.startswith("step ")}


def test_the_ddp_edit_on_one_process_trains_what_the_single_script_trains(tokens, whole):
    """The page shows the edit as a diff from code/own_tokens_single.py: with one process the
    edited script draws the same batches and prints the same losses (rank 0's seed is the seed)."""
    one = single(tokens)
    assert sorted(one) == sorted(whole) == list(range(6))
    assert all(whole[s] == one[s] + " (rank 0's)" for s in one), (one, whole)


def test_the_single_script_resumes_where_it_stopped(tokens, whole, tmp_path):
    ckpt = str(tmp_path / "single.pt")
    stopped = single(tokens, "--checkpoint", ckpt, "--stop-after", "3")
    resumed = single(tokens, "--checkpoint", ckpt)
    assert sorted(stopped) == [0, 1, 2] and sorted(resumed) == [3, 4, 5]
    assert all(resumed[s] + " (rank 0's)" == whole[s] for s in resumed), (resumed, whole)
