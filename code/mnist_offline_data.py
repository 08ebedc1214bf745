"""MNIST's file format with scikit-learn's handwritten digits in it: data that
ships offline.

pytorch/examples' mnist/main.py downloads MNIST; the practice cluster and the
tests cannot. This writes the four files torchvision.datasets.MNIST reads (idx
format, 28 x 28 bytes per image) from the 1,797 8 x 8 digits that come with
scikit-learn, scaled to 20 x 20 and centred as in MNIST: 1,497 training and 300
test images.

    python code/mnist_offline_data.py     # writes data/MNIST/raw/ (once)
"""
import struct
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

root = Path(sys.argv[1] if len(sys.argv) > 1 else "data") / "MNIST" / "raw"
files = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
if all((root / f).exists() for pair in files.values() for f in pair):
    # written before
    print(f"{root}: 1497 training and 300 test images, 28 x 28")
    sys.exit(0)
digits = load_digits()
# 1,797 x 1 x 8 x 8
x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16
x = F.pad(F.interpolate(x, size=20, mode="bilinear", align_corners=False),
          (4, 4, 4, 4))
# 1,797 x 28 x 28
images = (x.clamp(0, 1) * 255).round().to(torch.uint8).squeeze(1)
labels = torch.tensor(digits.target, dtype=torch.uint8)
root.mkdir(parents=True, exist_ok=True)
for split, part in (("train", slice(0, 1497)), ("test", slice(1497, None))):
    img, lab = images[part], labels[part]
    (root / files[split][0]).write_bytes(
        struct.pack(">IIII", 2051, len(img), 28, 28) + img.numpy().tobytes())
    (root / files[split][1]).write_bytes(
        struct.pack(">II", 2049, len(lab)) + lab.numpy().tobytes())
print(f"{root}: 1497 training and {len(images) - 1497} test images, 28 x 28")
