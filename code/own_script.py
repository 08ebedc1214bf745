"""A plain single-GPU training script, like one you may have: nothing from this
tutorial in it.

A small classifier for scikit-learn's handwritten digits (they ship with
scikit-learn: nothing to download). The page "Your own script" turns it into
DDP with the fewest changes possible.

    python code/own_script.py \
        --save runs/own_model.pt
"""
import argparse

import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=96)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--save", help="write the trained weights here")
args = parser.parse_args()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)

digits = load_digits()  # 1,797 images of 8 x 8 pixels, values 0..16
x = torch.tensor(digits.data, dtype=torch.float32) / 16
y = torch.tensor(digits.target)
train, test = (TensorDataset(x[:1500], y[:1500]),
               TensorDataset(x[1500:], y[1500:]))
loader = DataLoader(train, batch_size=args.batch_size, shuffle=True)

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(),
                      nn.Linear(128, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
print(f"device {device.type}, batch {args.batch_size}")

for epoch in range(args.epochs):
    total = 0.0
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"epoch {epoch} loss {total / len(loader):.4f}")

with torch.no_grad():
    xt, yt = test.tensors
    accuracy = (model(xt.to(device)).argmax(1)
                == yt.to(device)).float().mean().item()
print(f"test accuracy {accuracy:.4f}")
if args.save:
    torch.save(model.state_dict(), args.save)
