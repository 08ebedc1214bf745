"""Step 13: the digits as a data set usually arrives (a file per image, or one
zip), and the cores each rank's loader workers may use.

Scripts import it as `from data_loading import ...`; it sits next to them in
code/.
"""
import os
import socket
import time
import zipfile

import torch
import torch.distributed as dist

from ddp_helpers import load_dataset


# --8<-- [start:packed]
def prepare_digits(data_dir, slow=0.0):
    """Write the digits as a real data set usually arrives, one small file per
    image (files/train/00000_5.f32: index, label; 64 float32 pixels), and the
    same files packed into one uncompressed zip per split (digits-train.zip,
    digits-test.zip). Each is written under a temporary name and renamed when
    complete: a reader never finds half a file. `slow`: seconds to wait first
    (a large data set to unpack). Returns the paths of the two zips."""
    time.sleep(slow)
    splits = dict(zip(("train", "test"), load_dataset("digits")))
    paths = []
    for split, data in splits.items():
        folder = os.path.join(data_dir, "files", split)
        os.makedirs(folder, exist_ok=True)
        packed = os.path.join(data_dir, f"digits-{split}.zip")
        partial = f"{packed}.partial-{os.getpid()}"
        # stored: read without unpacking
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as z:
            for i, (x, y) in enumerate(data):
                name = f"{split}/{i:05d}_{int(y)}.f32"
                z.writestr(name, x.numpy().tobytes())
                with open(os.path.join(data_dir, "files", name), "wb") as f:
                    f.write(x.numpy().tobytes())
        os.replace(partial, packed)  # atomic: the whole file appears at once
        paths.append(packed)
    return paths


def _sample(raw, name):
    """(1x8x8 image, label) from one file's bytes and its name
    (..._<label>.f32)."""
    return (torch.frombuffer(bytearray(raw), dtype=torch.float32)
            .view(1, 8, 8), int(name[-5]))


class DigitFiles(torch.utils.data.Dataset):
    """One file per image: an open() and a read() per sample (on Lustre: a
    metadata request to the shared servers for each one)."""

    def __init__(self, folder):
        self.paths = sorted(os.path.join(folder, n)
                            for n in os.listdir(folder))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return _sample(f.read(), self.paths[i])


class DigitZip(torch.utils.data.Dataset):
    """The same images from one zip file: opened once per process (each loader
    worker opens its own handle), then a seek and a read per sample."""

    def __init__(self, path):
        self.path, self.zip, self.pid = path, None, None
        # fails here, in the main process, for a bad file
        with zipfile.ZipFile(path) as z:
            self.names = sorted(z.namelist())

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        # first use in this process: a handle of its own
        if self.pid != os.getpid():
            self.zip, self.pid = zipfile.ZipFile(self.path), os.getpid()
        return _sample(self.zip.read(self.names[i]), self.names[i])
# --8<-- [end:packed]


# --8<-- [start:cores]
def cores_per_rank():
    """(cores this rank may use, cores it sees, ranks sharing them) from the
    CPU affinity, not from SLURM_CPUS_PER_TASK. Ranks on one node that see the
    same cores share them: one torchrun per node without binding gives all of
    its processes the task's cores."""
    mine = (socket.gethostname(), sorted(os.sched_getaffinity(0)))
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    sharing = everyone.count(mine)
    return max(1, len(mine[1]) // sharing), len(mine[1]), sharing
# --8<-- [end:cores]
