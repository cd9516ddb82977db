#!/usr/bin/python3
"""PyTorch's "Distributed Pipeline Parallelism Using RPC" tutorial, made to run, timed as
`distrl-bench pipeline` times distrl's form of it (configs/pipeline_resnet50.yaml).

The tutorial's structure: ResNet-50 (torchvision's Bottleneck layout, written out here because
Debian ships no torchvision) cut into conv1..layer2 and layer3..fc, each shard created on its
worker with rpc.remote and run under a lock; the master splits each batch with
split(split_size), sends every micro-batch through shard1.remote().forward(x_rref) and
shard2.rpc_async().forward(y_rref), concatenates, runs dist_autograd.backward and a
DistributedOptimizer (SGD, lr 0.05). Batches of 120 random 3x128x128 images, 1000 classes, MSE on
one-hot labels, 3 batches per setting. The tutorial's own script needs torchvision and does not
run as written on current releases; this one is the same structure, written to run on Debian's
python3-torch 1.13 alone. torch threads: 1 per process, as distrl-pipeline's run.torch_threads.

Needs python3-torch (apt install python3-torch; not a distrl dependency).
    /usr/bin/python3 tools/reference/rpc_pipeline_tutorial.py --sizes 8 20 40 120 --batches 1
"""
import argparse
import os

# One OpenMP thread per process before torch loads: torch.set_num_threads(1) alone leaves
# TensorPipe's RPC worker threads with OpenMP's default team (every core), which on 2 vCPUs
# oversubscribes three processes. distrl-pipeline runs with run.torch_threads: 1 likewise.
os.environ.setdefault("OMP_NUM_THREADS", "1")
import socket
import threading
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.optim import DistributedOptimizer


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.down = None
        if stride != 1 or inplanes != planes * 4:
            self.down = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        idn = x if self.down is None else self.down(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        return torch.relu(self.bn3(self.conv3(out)) + idn)


def layer(inplanes, planes, blocks, stride):
    mods = [Bottleneck(inplanes, planes, stride)] + [Bottleneck(planes * 4, planes, 1) for _ in range(blocks - 1)]
    return nn.Sequential(*mods)


class Shard(nn.Module):
    def __init__(self, part, classes):
        super().__init__()
        self.lock = threading.Lock()
        if part == 1:
            self.seq = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                     nn.MaxPool2d(3, 2, 1), layer(64, 64, 3, 1), layer(256, 128, 4, 2))
        else:
            self.seq = nn.Sequential(layer(512, 256, 6, 2), layer(1024, 512, 3, 2), nn.AdaptiveAvgPool2d((1, 1)),
                                     nn.Flatten(), nn.Linear(2048, classes))

    def forward(self, x_rref):
        x = x_rref.to_here()
        with self.lock:
            return self.seq(x)

    def parameter_rrefs(self):
        return [rpc.RRef(p) for p in self.parameters()]


def master(args):
    s1 = rpc.remote("worker1", Shard, args=(1, 1000))
    s2 = rpc.remote("worker2", Shard, args=(2, 1000))
    params = s1.rpc_sync().parameter_rrefs() + s2.rpc_sync().parameter_rrefs()
    opt = DistributedOptimizer(torch.optim.SGD, params, lr=0.05)

    def batch(size):
        x = torch.randn(120, 3, 128, 128)
        y = torch.zeros(120, 1000).scatter_(1, torch.randint(1000, (120, 1)), 1)
        t0 = time.perf_counter()
        with dist_autograd.context() as ctx:
            futs = []
            for mb in x.split(size):
                y_rref = s1.remote().forward(rpc.RRef(mb))
                futs.append(s2.rpc_async().forward(y_rref))
            out = torch.cat(torch.futures.wait_all(futs))
            dist_autograd.backward(ctx, [nn.functional.mse_loss(out, y)])
            opt.step(ctx)
        return time.perf_counter() - t0

    for _ in range(args.warmup):  # untimed: the first batch pays for allocations and RPC set-up
        batch(args.sizes[0])
    for size in args.sizes:
        total = sum(batch(size) for _ in range(args.batches))
        print(f"micro-batch size {size:4d}: {total / args.batches:.3f} s per batch", flush=True)


def run(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=3000)
    rpc.init_rpc("master" if rank == 0 else f"worker{rank}", rank=rank, world_size=3, rpc_backend_options=opts)
    if rank == 0:
        master(args)
    rpc.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed batches before the first size")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    mp.spawn(run, args=(a, free), nprocs=3, join=True)
