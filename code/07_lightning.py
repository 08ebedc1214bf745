"""Step 7: the DDP script of step 1 with PyTorch Lightning. Start it with
torchrun or srun."""
import argparse
import logging
import warnings
from datetime import timedelta

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup,
                         load_dataset, per_rank_batch)

# Quiet: Lightning's banner (GPU/TPU available, a tip, "Initializing
# distributed" per rank), its hint to use srun (we start the processes with
# torchrun on purpose) and a torch deprecation.
for name in ("lightning.pytorch", "lightning.fabric"):
    logging.getLogger(name).setLevel(logging.WARNING)
warnings.filterwarnings("ignore", ".*`srun` command is available|.*LeafSpec")

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--save", help="write the trained weights here (rank 0)")
p.add_argument("--devices", type=int, default=1,
               help="processes per node: = --ntasks-per-node under srun")
p.add_argument("--num-nodes", type=int, default=1)
p.add_argument("--log-dir",
               help="write the logged metrics here as CSV (rank 0)")
args = p.parse_args()


class LitConvNet(L.LightningModule):
    def __init__(self, image_size, lr):
        super().__init__()
        self.model, self.lr = ConvNet(image_size=image_size), lr

    def on_train_start(self):  # the process group exists from here on
        env = type(self.trainer.strategy.cluster_environment).__name__
        self.print(f"{self.trainer.world_size} processes on "
                   f"{self.trainer.num_nodes} node(s) ({env}), "
                   f"backend {torch.distributed.get_backend()}, "
                   f"device {self.device.type}, batch {args.batch_size} = "
                   f"{self.trainer.world_size} x {batch}")

    # Lightning moves the batch and calls backward/step
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        # on_epoch: the mean over the epoch's batches; sync_dist: then the
        # mean over ranks
        self.log("loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def on_train_epoch_end(self):  # self.print: rank 0 only
        self.print(f"epoch {self.current_epoch} "
                   f"loss {self.trainer.callback_metrics['loss']:.4f}")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


# Lightning finds the launcher itself: torchrun's variables, or SLURM_* under
# srun. It checks that devices x num_nodes processes were started (under srun:
# devices = --ntasks-per-node). DDPStrategy(...) is strategy="ddp" with a
# timeout: a rank that never arrives becomes an error.
trainer = L.Trainer(accelerator="auto", devices=args.devices,
                    num_nodes=args.num_nodes,
                    strategy=DDPStrategy(timeout=timedelta(seconds=300)),
                    logger=(CSVLogger(args.log_dir, name="", version="")
                            if args.log_dir else False),
                    max_epochs=args.epochs, log_every_n_steps=1,
                    enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
batch = per_rank_batch(args.batch_size, trainer.world_size)
# the same initial weights; also the sampler's seed
L.seed_everything(args.seed, verbose=False)
train, test = load_dataset(args.dataset, args.data_dir)
# shuffle=True: Lightning swaps in DistributedSampler(shuffle=True,
# seed=args.seed) and calls set_epoch
loader = DataLoader(train, batch_size=batch, shuffle=True)
lit = LitConvNet(train[0][0].shape[-1], args.lr)
trainer.fit(lit, loader)
# fit() ends with the model on the CPU; NCCL needs it on the GPU
lit.to(trainer.strategy.root_device)

sampler = trainer.train_dataloader.sampler  # the one Lightning inserted
assert (isinstance(sampler, DistributedSampler) and sampler.shuffle
        and sampler.seed == args.seed), sampler
assert_replicas_equal(lit.model)
# the model is the same on every rank: evaluate and save once
if trainer.is_global_zero:
    print(f"test accuracy {accuracy(lit.model, test, lit.device):.4f}")
    if args.save:
        torch.save(lit.model.state_dict(), args.save)
cleanup()
