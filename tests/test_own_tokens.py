"""code/own_tokens.py, a GPT-style loop (no loader, per-rank seeds, gradient accumulation), run as
its docstring says: two gloo processes under torchrun, with code/ddp_check.py's lines."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from jobs import without_gloo_lines  # noqa: E402  (gloo's lines interleave with the script's)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return tmp_path_factory.mktemp("tokens") / "tokens.bin"  # the first run writes it


def torchrun(tokens, *args):
    """The lines of a 2-process run (gloo's connection lines left out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node=2",
           "code/own_tokens.py", "--data", str(tokens), *args]
    done = subprocess.run(cmd, cwd=ROOT, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return without_gloo_lines(done.stdout).splitlines()


def first_and_last_loss(said):  # the summary: "loss 4.8830 -> 1.3053; first batches ..."
    return map(float, said[-1].split(";")[0].removeprefix("loss ").split(" -> "))


def test_each_rank_draws_its_own_batches_and_the_loss_falls(tokens):
    said = torchrun(tokens, "--check")
    assert said[0] == ("2 processes, backend gloo, device cpu, global batch 64 = 2 x 4 x 8 "
                       "windows of 32 tokens"), said
    first, last = first_and_last_loss(said)
    assert last < 0.5 * first, said  # from about ln(128) to what the next character leaves open
    assert said[-1].endswith("first batches of the 2 ranks: 2 distinct"), said
    check = [line for line in said if line.startswith("ddp_check:")]
    assert "ddp_check: shards   ok      each of 2 ranks drew its own first batch (a hash of each rank's first training input)" in check
    assert "ddp_check: batch    ok      global batch 64 = 2 x 4 x 8 (ranks x micro-batches per optimizer step x micro-batch)" in check
    assert "ddp_check: replicas ok      all 2 copies of the model are equal after 1 step(s)" in check
    assert not [line for line in check if "PROBLEM" in line or "warning" in line], check


def test_one_seed_on_every_rank_is_a_problem(tokens):
    """--same-seed: both ranks draw the same windows, twice the work for one rank's data. The run
    completes, its loss falls too: only the check says so."""
    said = torchrun(tokens, "--check", "--same-seed", "--steps", "10")
    first, last = first_and_last_loss(said)
    assert last < first and said[-1].endswith("first batches of the 2 ranks: 1 distinct"), said
    assert ("ddp_check: shards   PROBLEM all 2 ranks' first batches are equal: every rank trains on "
            "the same data, 2 times the work. Give each rank its own seed (seed + rank) or its own "
            "part of the data") in said, said


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
