# pytorch/examples, mnist/main.py (commit 77f55b9, August 2025), as
# code/mnist_main.py has it, with the edits for DDP ("Your own script" shows
# them as a diff). Start it with torchrun:
#   torchrun --standalone --nproc_per_node=2 code/mnist_ddp.py --epochs 1
# Copyright (c) 2017, Pytorch contributors. BSD 3-Clause License: the licence's
# full text, with its conditions and disclaimer, is in code/LICENSE-pytorch-examples.
import argparse
import os
import sys
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torchvision import datasets, transforms
from torch.optim.lr_scheduler import StepLR
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    # a new order every epoch, the same on every rank
    train_loader.sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            # print once: rank 0's own loss, not the mean over ranks
            if dist.get_rank() == 0:
                print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                    epoch, batch_idx * len(data) * dist.get_world_size(),
                    len(train_loader.dataset),
                    100. * batch_idx / len(train_loader), loss.item()))
            # outside the rank-0 `if`: every rank leaves the loop together
            if args.dry_run:
                break


def unpadded_shard(dataset):
    # this rank's test images: r, r + world_size, ...: each image once over all
    # ranks. A DistributedSampler pads with copies instead, so that every rank
    # gets as many (step 4)
    return torch.utils.data.Subset(
        dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    # each rank tested its own share: add up the sums of all ranks (the same on
    # every rank), and the images tested, so that every image counts once
    sums = torch.tensor([test_loss, correct, len(test_loader.dataset)],
                        dtype=torch.float64, device=device)
    dist.all_reduce(sums)
    test_loss, correct, tested = (sums[0].item(), int(sums[1].item()),
                                  int(sums[2].item()))
    test_loss /= tested

    if dist.get_rank() == 0:
        print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'
              .format(test_loss, correct, tested, 100. * correct / tested))


def main():
    # Training settings
    parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
    parser.add_argument('--batch-size', type=int, default=64, metavar='N',
                        help='global batch for training, over all ranks '
                        '(default: 64)')
    parser.add_argument('--test-batch-size', type=int, default=1000, metavar='N',
                        help='input batch size for testing (default: 1000)')
    parser.add_argument('--epochs', type=int, default=14, metavar='N',
                        help='number of epochs to train (default: 14)')
    parser.add_argument('--lr', type=float, default=1.0, metavar='LR',
                        help='learning rate (default: 1.0)')
    parser.add_argument('--gamma', type=float, default=0.7, metavar='M',
                        help='Learning rate step gamma (default: 0.7)')
    parser.add_argument('--no-accel', action='store_true',
                        help='disables accelerator')
    parser.add_argument('--dry-run', action='store_true',
                        help='quickly check a single pass')
    parser.add_argument('--seed', type=int, default=1, metavar='S',
                        help='random seed (default: 1)')
    parser.add_argument('--log-interval', type=int, default=10, metavar='N',
                        help='how many batches to wait before logging training status')
    parser.add_argument('--save-model', action='store_true', 
                        help='For Saving the current Model')
    args = parser.parse_args()

    use_accel = not args.no_accel and torch.accelerator.is_available()

    torch.manual_seed(args.seed)

    # set by torchrun: which GPU of this node is mine
    local_rank = int(os.environ["LOCAL_RANK"])
    if use_accel:
        device = torch.device(torch.accelerator.current_accelerator().type,
                              local_rank)
        torch.accelerator.set_device_index(local_rank)
    else:
        device = torch.device("cpu")
    # nccl on GPUs, gloo on CPU
    dist.init_process_group(dist.get_default_backend_for_device(device))
    world_size = dist.get_world_size()

    # each rank its share of the batch
    train_kwargs = {'batch_size': args.batch_size // world_size}
    test_kwargs = {'batch_size': args.test_batch_size}
    if use_accel:
        accel_kwargs = {'num_workers': 1,
                        'persistent_workers': True,
                       'pin_memory': True}  # no shuffle: the sampler shuffles
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)

    transform=transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize((0.1307,), (0.3081,))
        ])
    dataset1 = datasets.MNIST('data', train=True, download=False,
                       transform=transform)
    dataset2 = datasets.MNIST('data', train=False,
                       transform=transform)
    train_loader = torch.utils.data.DataLoader(
        dataset1, sampler=DistributedSampler(dataset1), **train_kwargs)
    test_loader = torch.utils.data.DataLoader(unpadded_shard(dataset2),
                                              **test_kwargs)

    model = DDP(Net().to(device),
                device_ids=[local_rank] if use_accel else None)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()

    if args.save_model and dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "mnist_cnn.pt")
    dist.barrier()  # leave together, then close the connections
    dist.destroy_process_group()
    # gloo (CPU): freeing DDP's objects after this sometimes hangs; skip it
    if not use_accel:
        sys.stdout.flush()
        os._exit(0)


if __name__ == '__main__':
    main()
