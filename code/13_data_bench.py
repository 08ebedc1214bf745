"""Data for many ranks, measured: how fast one rank's DataLoader delivers
images, (1) from many small files or from one packed file, (2) with 0, 1, 2,
... loader workers when every image also costs some CPU work (a resize, as
image pipelines do). One process, no GPU."""
import argparse
import json
import os
import time
import warnings

import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from data_loading import DigitFiles, DigitZip, prepare_digits

p = argparse.ArgumentParser()
p.add_argument("--data-dir", default="runs/13-bench",
               help="prepared here first if empty")
p.add_argument("--workers", default="0,1,2,4",
               help="loader workers to try, comma-separated")
p.add_argument("--resize", type=int, default=96,
               help="pixels: each image resized, the CPU work per image")
p.add_argument("--epochs", type=int, default=2,
               help="passes over the data; the first one is not timed")
p.add_argument("--loader-batch", type=int, default=32,
               help="images per batch of the loader (no training here)")
p.add_argument("--out", help="write the results here as JSON")
args = p.parse_args()
# PyTorch warns when the workers outnumber this process's cores (it counts them
# with os.sched_getaffinity too): here more workers than cores is the point of
# the run.
warnings.filterwarnings("ignore", message="This DataLoader will create")


class Resized(Dataset):
    def __init__(self, data, size):
        self.data, self.size = data, size

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        x, y = self.data[i]
        return F.interpolate(x[None], size=(self.size, self.size),
                             mode="bicubic")[0], y


def images_per_s(data, workers):
    loader = DataLoader(data, batch_size=args.loader_batch, shuffle=True,
                        num_workers=workers, persistent_workers=workers > 0)
    seconds = []
    # the first pass starts the workers and opens the files
    for epoch in range(args.epochs):
        start = time.perf_counter()
        images = sum(len(y) for _, y in loader)
        seconds.append(time.perf_counter() - start)
    assert images == len(data)
    # the best later pass: the least disturbed by other work
    return images / min(seconds[1:])


packed = os.path.join(args.data_dir, "digits-train.zip")
if not os.path.exists(packed):
    prepare_digits(args.data_dir)
files = DigitFiles(os.path.join(args.data_dir, "files", "train"))
zipped = DigitZip(packed)
print(f"the same {len(files)} images: {len(files)} files of "
      f"{os.path.getsize(files.paths[0])} bytes, "
      f"or 1 file of {os.path.getsize(packed):,} bytes")
results = []
# reading only
for name, data in [("many small files", files), ("one packed file", zipped)]:
    rate = images_per_s(data, 0)
    results.append({"test": "read", "data": name, "workers": 0,
                    "images_per_s": rate})
    print(f"read only, {name:16}, 0 workers: {rate:10,.0f} images/s")
# reading + CPU work per image
for workers in map(int, args.workers.split(",")):
    rate = images_per_s(Resized(zipped, args.resize), workers)
    results.append({"test": "resize", "data": "one packed file",
                    "workers": workers, "images_per_s": rate})
    print(f"read + resize to {args.resize} px, {workers} workers: "
          f"{rate:10,.0f} images/s")
if args.out:
    with open(args.out, "w") as f:
        json.dump({"cores": len(os.sched_getaffinity(0)), "images": len(files),
                   "resize": args.resize, "results": results}, f, indent=1)
