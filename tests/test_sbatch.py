"""sbatch files that no notebook submits: submitted unchanged to the local cluster here, as the
cluster's ordinary user, from that user's copy of the repository (conftest.py), as the notebooks do.

EXPECTED maps a file to regular expressions its job output must match. Files a notebook
submits are checked there (nbval compares the job's output), see test_sbatch_files.py.
"""
import re

import pytest

from conftest import stored_output
from practice_cluster.cluster_user import submit_as_cluster_user


def _stored_losses():
    """The epoch losses that notebooks/01-ddp.ipynb stored for code/01_single.py (one source of
    truth: the jobs below must print the same digits, on the same pinned CPU path)."""
    text = stored_output("01-ddp.ipynb", "single")
    return [re.escape(x) for x in re.findall(r"^epoch \d loss (\d\.\d{4})$", text, re.M)]


L = _stored_losses()
EXPECTED = {
    # Step 1 on LUMI (AI Factory container, 8 GCDs) and on any Slurm site (your own virtualenv):
    # the same losses as the Roihu job that notebooks/01-ddp.ipynb submits.
    "slurm/01-ddp-lumi.sbatch": [
        r"^8 processes, backend gloo, device cpu, batch 96 = 8 x 12$", rf"^epoch 0 loss {L[0]}$", rf"^epoch 4 loss {L[4]}$"],
    "slurm/01-ddp-generic.sbatch": [
        r"^4 processes, backend gloo, device cpu, batch 96 = 4 x 24$", rf"^epoch 0 loss {L[0]}$", rf"^epoch 4 loss {L[4]}$"],
    # Step 5: one world across both nodes, and the losses of `code/01_single.py --epochs 2`
    # (notebooks/05-multinode.ipynb asserts those equal the single process's).
    "slurm/05-multinode-torchrun-lumi.sbatch": [
        r"^16 processes on 2 nodes, started by torchrun$", rf"^epoch 0 loss {L[0]}$", rf"^epoch 1 loss {L[1]}$"],
    "slurm/05-multinode-srun-lumi.sbatch": [
        r"^16 processes on 2 nodes, started by srun$", rf"^epoch 0 loss {L[0]}$", rf"^epoch 1 loss {L[1]}$"],
    # Step 6: DeepSpeed ZeRO-2 trains what DDP trains (the losses of code/01_ddp.py, see
    # notebooks/06-deepspeed.ipynb) and shards SGD's momentum over the ranks.
    "slurm/06-deepspeed-launcher.sbatch": [
        r"^4 processes, backend \w+, device \w+, ZeRO stage 2, batch 96 = 4 x 24 x 1 accumulation steps$",
        rf"^epoch 0 loss {L[0]}$", rf"^epoch 1 loss {L[1]}$", r"^optimizer state per rank: (14,544, ){3}14,544 bytes$"],
    # The take-home script on two LUMI nodes (notebooks/take-home.ipynb submits the Roihu one with
    # a signal and a requeue): 16 ranks, the learning rate from the global batch, each image once.
    "slurm/take-home-lumi.sbatch": [
        r"^16 processes, backend gloo, device cpu, batch 96 = 16 x 6, lr 0\.0500$", r"^epoch 4 loss 0\.09\d\d$",
        r"^test accuracy 0\.8889 \(320/360\)$"],
    # Step 15 on two LUMI nodes: one mesh (dp 2 nodes, tp 8 GCDs per node), the losses of the
    # 2 x 2 run that notebooks/15-two-dimensions.ipynb shows, asserted by the script against one process.
    "slurm/15-two-dimensions-lumi.sbatch": [
        r"^16 processes, mesh \(dp 2, tp 8\), backend gloo, device cpu, batch 96 = 2 x 48, data over dp$",
        r"^step 7 loss 1\.5127\d\d, one process 1\.5127\d\d$",
        r"^each TP group read one batch: True; the weights TP does not split stayed equal in the group: True$"],
    # Step 14 on LUMI (notebooks/14-profiling.ipynb submits the Roihu files): the traces of the
    # three variants, and one point of the scaling sweep alone (no GPU there: tiny sizes).
    "slurm/14-profiling-lumi.sbatch": [
        r"^2 processes, backend gloo, device cpu$",
        r"^no-sync: bucket_cap_mb default, 4 micro-batch\(es\) per step, 3 steps traced: no-sync/rank0\.\.1\.json$"],
    "slurm/14-scaling-lumi.sbatch": [
        r"^no GPU visible: tiny sizes",
        r"^4 processes on 1 node\(s\), backend gloo, device cpu: strong \(global batch 48\) and weak \(48 per process\), "
        r"5 steps each$"],
    # A script without a DataLoader on two nodes: four ranks draw four different first batches
    # (the check compares a hash of each rank's first input), the accumulation split over them.
    "slurm/own-tokens.sbatch": [
        r"^4 processes, backend gloo, device cpu, global batch 64 = 4 x 2 x 8 windows of 32 tokens$",
        r"^ddp_check: world    ok      4 processes on 2 nodes \(torchrun\)",
        r"^ddp_check: shards   ok      each of 4 ranks drew its own first batch",
        r"^ddp_check: batch    ok      global batch 64 = 4 x 2 x 8",
        r"^loss \S+ -> \S+; first batches of the 4 ranks: 4 distinct$"],
    # Step 16 on one LUMI node (notebooks/16-memory.ipynb submits the Roihu file): every layout's
    # bytes per rank equal the formula's plus the padding, and checkpointing keeps the gradients.
    "slurm/16-memory-lumi.sbatch": [
        r"^4 processes, backend gloo, device cpu, model 3,159,050 parameters \(6 blocks of width 256\)$",
        r"^fsdp2-tp: mesh \(dp 2, tp 2\); the share of parameters tensor parallel does not split "
        r"\(norms, down\.bias, head\): replicated = 0\.002272$",
        r"^every row: measured = formula \+ the padding computed from the shards' shapes$",
        r"^the same gradients with and without checkpointing: True$",
        r"^FSDP2 with checkpointed blocks: the same gradient shards: True$"],
    "slurm/06-deepspeed-lumi.sbatch": [
        r"^8 processes, backend \w+, device \w+, ZeRO stage 2, batch 96 = 8 x 12 x 1 accumulation steps$",
        rf"^epoch 0 loss {L[0]}$", rf"^epoch 1 loss {L[1]}$", r"^optimizer state per rank: (7,272, ){7}7,272 bytes$"],
}


# A file for any site names no project: the practice cluster, like Roihu and LUMI, refuses a job
# without one (tools/practice_cluster/config.py, NO_PROJECT), so the test gives it, as a reader would.
OPTIONS = {"slurm/01-ddp-generic.sbatch": ["--account=project_2001234"]}


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_sbatch_job(cluster, path):
    out = submit_as_cluster_user(path, *OPTIONS.get(path, []))
    for pattern in EXPECTED[path]:
        assert re.search(pattern, out, re.M), f"{path}: no match for {pattern!r} in:\n{out}"
