"""Step 12: a DCP checkpoint (written by any number of ranks) -> one plain
state_dict file, evaluated in one process. No torchrun, no process group:
    python code/12_fsdp2_convert.py CHECKPOINT OUT.pt"""
import argparse
import os
import warnings

import torch
import torch.distributed.checkpoint as dcp

from ddp_helpers import ConvNet, accuracy, load_dataset

p = argparse.ArgumentParser()
p.add_argument("checkpoint",
               help="a folder written by code/12_fsdp2.py --save")
p.add_argument("out", help="the plain state_dict file to write")
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
args = p.parse_args()
# dcp.load(no_dist=True) still warns that there is no process group: that is
# the point here
warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
if not os.path.isfile(os.path.join(args.checkpoint, ".metadata")):
    raise SystemExit(f"error: {args.checkpoint} is not a DCP checkpoint "
                     f"(it has no .metadata file)")

train, test = load_dataset(args.dataset, args.data_dir)
model = ConvNet(image_size=train[0][0].shape[-1])
# what to read: the model's tensors, whole; not the optimizer
state = {"model": model.state_dict()}
# one process reads every rank's shards
dcp.load(state, checkpoint_id=args.checkpoint, no_dist=True)
torch.save(state["model"], args.out)
# an ordinary state_dict: any script can load it
model.load_state_dict(torch.load(args.out))
print(f"{args.checkpoint} -> {args.out}: {len(state['model'])} tensors, "
      f"{sum(t.numel() for t in state['model'].values()):,} weights, "
      f"test accuracy {accuracy(model, test, 'cpu'):.4f}")
