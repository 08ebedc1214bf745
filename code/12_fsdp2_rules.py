"""Step 12: what FSDP2 asks of a training script, shown on a sharded ConvNet:
each mistake with the error it really raises, then the way that works.
    torchrun --standalone --nproc_per_node=2 code/12_fsdp2_rules.py"""
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode

from ddp_helpers import ConvNet, cleanup, print0, setup_distributed


def sharded_convnet(reshard_after_forward=True):
    torch.manual_seed(0)
    net = ConvNet().to(device)
    for block in net.features:
        if isinstance(block, nn.Conv2d):
            fully_shard(block, reshard_after_forward=reshard_after_forward)
    # the root: backward needs it again at once
    return fully_shard(net, reshard_after_forward=False)


def error(fn):
    try:
        fn()
    except (AttributeError, RuntimeError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return "no error"


# CommDebugMode (it counts the collectives in 5.) makes the model's output
# look like a view to FSDP
warnings.filterwarnings("ignore",
                        r"FSDP2-wrapped module \(\w+\) returned a view tensor",
                        UserWarning)
# torch 2.10 warns that a full backward hook fires while no input needs a
# gradient (ours never do).
warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
rank, local_rank, world_size, device = setup_distributed()
x = torch.randn(48, 1, 8, 8, device=device)
y = torch.randint(0, 10, (48,), device=device)

# 1. The optimizer comes after fully_shard, which replaces every parameter by
# a DTensor shard.
torch.manual_seed(0)
net = ConvNet().to(device)
early = torch.optim.Adam(net.parameters(), lr=0.01)  # wrong: before sharding
for block in net.features:
    if isinstance(block, nn.Conv2d):
        fully_shard(block)
fully_shard(net)
# full_tensor(): all ranks gather the whole weight
start = net.fc.weight.full_tensor()
F.cross_entropy(net(x), y).backward()
early.step()
stepped = any(p is q for p in net.parameters()
              for q in early.param_groups[0]["params"])
print0(f"1. optimizer made before fully_shard: "
       f"steps the model's parameters: {stepped}, "
       f"changed the weights: "
       f"{not torch.equal(start, net.fc.weight.full_tensor())}")

# 2. There is no wrapper, so no .module: the model object itself is the FSDP
# module.
print0(f"2. net.module -> {error(lambda: net.module)}")

# 3. Outside forward a parameter is this rank's shard (a DTensor), not the
# weight.
w = net.fc.weight
print0(f"3. net.fc.weight is a {type(w).__name__} {list(w.shape)}; "
       f"rank 0 holds {list(w.to_local().shape)}")
h = torch.randn(4, 128, device=device)
print0(f"   h @ net.fc.weight.T -> {error(lambda: h @ net.fc.weight.T)}")
# gather every weight the root manages, as forward does; reshard() frees them
net.unshard()
print0(f"   after net.unshard(): {type(net.fc.weight).__name__} "
       f"{list(net.fc.weight.shape)}, "
       f"h @ net.fc.weight.T -> {list((h @ net.fc.weight.T).shape)}")
net.reshard()

# 4. Call the root, model(x): its hooks gather its weights. net.forward(x) or
# net.fc(h) skip them.
print0(f"4. net.forward(x) -> {error(lambda: net.forward(x))}")
print0(f"   net(x) -> {list(net(x).shape)}")

# 5. reshard_after_forward: free each block's gathered weights after forward
#    (and gather them again in backward), or keep them until backward.
#    Measured over one training step.
for reshard in (True, False):
    model = sharded_convnet(reshard)
    with CommDebugMode() as comm:
        out = model(x)
        kept = sum(p.numel() * p.element_size() for p in model.parameters()
                   if not isinstance(p, DTensor))
        F.cross_entropy(out, y).backward()
    gathers = sum(n for op, n in comm.get_comm_counts().items()
                  if "allgather" in str(op))
    print0(f"5. reshard_after_forward={reshard}: "
           f"gathered weights kept after forward {kept:,} bytes, "
           f"all-gathers per step {gathers}")
cleanup()
