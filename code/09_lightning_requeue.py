"""Step 9, Lightning's own answer: SLURMEnvironment(auto_requeue=True). Start
it with srun.

On Slurm's warning signal (USR1) Lightning saves hpc_ckpt_<n>.ckpt in
--root-dir on every rank and rank 0 runs `scontrol requeue $SLURM_JOB_ID`.
When the requeued job starts, fit() finds the newest hpc_ckpt and resumes from
it. Step 7's script otherwise.
"""
import argparse
import logging
import signal
import warnings
from datetime import timedelta

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup,
                         load_dataset, per_rank_batch, weights_fingerprint)

for name in ("lightning.pytorch", "lightning.fabric"):  # quiet, as in step 7
    logging.getLogger(name).setLevel(logging.WARNING)
warnings.filterwarnings("ignore", ".*LeafSpec")

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--devices", type=int, default=1,
               help="processes per node: = --ntasks-per-node under srun")
p.add_argument("--num-nodes", type=int, default=1)
p.add_argument("--root-dir", required=True,
               help="Lightning writes and finds hpc_ckpt_<n>.ckpt here")
p.add_argument("--save", help="write the trained weights here (rank 0)")
args = p.parse_args()


class LitConvNet(L.LightningModule):
    def __init__(self, image_size, lr):
        super().__init__()
        self.model, self.lr = ConvNet(image_size=image_size), lr

    def on_train_start(self):
        resumed = (f", resumed from {self.trainer.ckpt_path.split('/')[-1]}"
                   if self.trainer.ckpt_path else "")
        self.print(f"{self.trainer.world_size} processes, "
                   f"backend {torch.distributed.get_backend()}, "
                   f"epoch {self.current_epoch}, "
                   f"{self.trainer.global_step} steps done{resumed}",
                   flush=True)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def on_train_epoch_end(self):
        self.print(f"epoch {self.current_epoch} "
                   f"loss {self.trainer.callback_metrics['loss']:.4f} "
                   f"({self.trainer.global_step} steps done)", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


# auto_requeue=True is the default whenever Lightning detects Slurm; written
# out here.
slurm = SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)
trainer = L.Trainer(accelerator="auto", devices=args.devices,
                    num_nodes=args.num_nodes, plugins=[slurm],
                    strategy=DDPStrategy(timeout=timedelta(seconds=300)),
                    default_root_dir=args.root_dir,
                    max_epochs=args.epochs, logger=False,
                    enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
batch = per_rank_batch(args.batch_size, trainer.world_size)
L.seed_everything(args.seed, verbose=False)
train, test = load_dataset("digits")
lit = LitConvNet(train[0][0].shape[-1], args.lr)
# finds an hpc_ckpt by itself
trainer.fit(lit, DataLoader(train, batch_size=batch, shuffle=True))
lit.to(trainer.strategy.root_device)

assert_replicas_equal(lit.model)
if trainer.is_global_zero:
    print(f"weights sha256 {weights_fingerprint(lit.model)}")
    print(f"test accuracy {accuracy(lit.model, test, lit.device):.4f}")
    if args.save:
        torch.save(lit.model.state_dict(), args.save)
cleanup()
