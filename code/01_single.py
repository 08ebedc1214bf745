"""Step 1a: the single-process baseline you already have. One process, one
device."""
import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, RandomSampler

from ddp_helpers import ConvNet, accuracy, load_dataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch-size", type=int, default=96)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--save", help="write the trained weights here")
args = p.parse_args()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(args.seed)  # the same initial weights in every run
train, test = load_dataset(args.dataset, args.data_dir)
g = torch.Generator()
sampler = RandomSampler(train, generator=g)
loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
model = ConvNet(image_size=train[0][0].shape[-1]).to(device)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
print(f"1 process, device {device.type}, batch {args.batch_size}")

for epoch in range(args.epochs):
    g.manual_seed(args.seed + epoch)  # a new, reproducible order every epoch
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    print(f"epoch {epoch} loss {total / len(loader):.4f}")

print(f"test accuracy {accuracy(model, test, device):.4f}")
if args.save:
    torch.save(model.state_dict(), args.save)
