"""The five collectives, on tensors small enough to check by eye.

Rank r starts from [1, 2, 3, 4] x 10^r (with 2 ranks: [1, 2, 3, 4] and
[10, 20, 30, 40]). For each collective rank 0 prints every rank's tensor before
and after, in rank order, and every rank asserts what it holds against the same
sums computed by hand: broadcast, all-gather, reduce-scatter, all-to-all, and
all-reduce, which equals a reduce-scatter then an all-gather.

    torchrun --standalone --nproc_per_node=2 code/collectives.py
"""
import torch
import torch.distributed as dist

from ddp_helpers import cleanup, print0, setup_distributed

# nccl + GPU, or gloo + CPU
rank, local_rank, world, device = setup_distributed()
print0(f"{world} ranks, backend {dist.get_backend()}, device {device.type}")

# Every rank's starting tensor, known to every rank, to check results against.
start = [torch.arange(1, 2 * world + 1, device=device) * 10**r
         for r in range(world)]
total = sum(start)  # the element-wise sum over ranks
x = start[rank].clone()


def show(name, before, after, expected):
    """Assert this rank's result, then print every rank's before -> after
    from rank 0."""
    assert torch.equal(after, expected), (
        f"{name}: rank {rank} holds {after.tolist()}, "
        f"expected {expected.tolist()}")
    rows = [None] * world
    dist.all_gather_object(rows, (before.tolist(), after.tolist()))
    print0(name)
    for r, (b, a) in enumerate(rows):
        print0(f"  rank {r}: {b} -> {a}")


# broadcast: rank 0's tensor overwrites everyone's (the initial weights in DDP)
t = x.clone()
dist.broadcast(t, src=0)
show("broadcast from rank 0", x, t, start[0])

# all-gather: every rank contributes a piece, every rank gets all pieces in
# rank order
piece = x[:2].clone()
gathered = torch.empty(2 * world, dtype=x.dtype, device=device)
dist.all_gather_into_tensor(gathered, piece)
show("all-gather", piece, gathered, torch.cat([s[:2] for s in start]))

# reduce-scatter: sum over ranks, rank j keeps only the j-th piece of the sum
mine = torch.empty(2, dtype=x.dtype, device=device)
dist.reduce_scatter_tensor(mine, x)
show("reduce-scatter (sum)", x, mine, total.chunk(world)[rank])

# all-to-all: rank j sends its i-th piece to rank i (a transpose of pieces
# across ranks)
swapped = torch.empty_like(x)
dist.all_to_all_single(swapped, x)
show("all-to-all", x, swapped,
     torch.cat([s.chunk(world)[rank] for s in start]))

# all-reduce: the whole sum on every rank (DDP's gradients)
summed = x.clone()
dist.all_reduce(summed)
show("all-reduce (sum)", x, summed, total)

# ... which is a reduce-scatter followed by an all-gather of the summed pieces
both = torch.empty_like(x)
dist.all_gather_into_tensor(both, mine)
show("reduce-scatter, then all-gather", mine, both, summed)
print0("every rank holds what each line claims (asserted)")

cleanup()  # dist.barrier(), then dist.destroy_process_group()
