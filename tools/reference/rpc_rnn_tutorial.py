#!/usr/bin/python3
"""PyTorch's distributed-autograd RNN tutorial, timed as `distrl-bench autograd` times distrl's.

The tutorial ("Distributed RNN using Distributed Autograd and Distributed Optimizer"): a ps
process owns the embedding table and the decoder (RRefs), the trainer runs the LSTM and calls
them with rpc_sync; dist_autograd.backward and a DistributedOptimizer (SGD, lr 0.05) train it.
Its own code no longer runs as printed (its loss takes a 3-d output); here the output is
flattened. Sizes are distrl-bench autograd's: ntoken 7, ninp 2, nhid 3, 4 layers, 5 x 6 tokens,
no dropout, one thread per process. Prints the median and p99 ms of forward, backward, step and
the iteration, and the iterations per second.

Needs python3-torch (apt install python3-torch; not a distrl dependency).
    /usr/bin/python3 tools/reference/rpc_rnn_tutorial.py --iterations 2000
"""
import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from torch import nn, optim
from torch.distributed.optim import DistributedOptimizer

NTOKEN, NINP, NHID, NLAYERS, BATCH, NINDICES = 7, 2, 3, 4, 5, 6


class EmbeddingTable(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(NTOKEN, NINP)

    def forward(self, x):
        return self.encoder(x)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = nn.Linear(NHID, NTOKEN)

    def forward(self, x):
        return self.decoder(x)


def _call_method(method, rref, *args):
    return method(rref.local_value(), *args)


def _remote_method(method, rref, *args):
    return rpc.rpc_sync(rref.owner(), _call_method, args=[method, rref] + list(args))


def _parameter_rrefs(module):
    return [rpc.RRef(p) for p in module.parameters()]


class RNNModel(nn.Module):
    def __init__(self, ps):
        super().__init__()
        self.emb_table_rref = rpc.remote(ps, EmbeddingTable)
        self.rnn = nn.LSTM(NINP, NHID, NLAYERS)
        self.decoder_rref = rpc.remote(ps, Decoder)

    def forward(self, x, hidden):
        emb = _remote_method(EmbeddingTable.forward, self.emb_table_rref, x)
        output, hidden = self.rnn(emb, hidden)
        return _remote_method(Decoder.forward, self.decoder_rref, output), hidden

    def parameter_rrefs(self):
        return (_remote_method(_parameter_rrefs, self.emb_table_rref) + _parameter_rrefs(self.rnn) +
                _remote_method(_parameter_rrefs, self.decoder_rref))


def ms(xs, q):
    xs = sorted(xs)
    return 1e3 * xs[min(len(xs) - 1, int(q * len(xs)))]


def trainer(iterations):
    torch.manual_seed(0)
    model = RNNModel("ps")
    opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    hidden = (torch.zeros(NLAYERS, NINDICES, NHID), torch.zeros(NLAYERS, NINDICES, NHID))
    times = {"forward": [], "backward": [], "step": [], "iteration": []}
    start = time.perf_counter()
    for _ in range(iterations):
        data = torch.randint(NTOKEN, (BATCH, NINDICES))
        target = torch.randint(NTOKEN, (BATCH * NINDICES,))
        t0 = time.perf_counter()
        with dist_autograd.context() as ctx:
            hidden = (hidden[0].detach(), hidden[1].detach())
            output, hidden = model(data, hidden)
            loss = criterion(output.view(-1, NTOKEN), target)
            t1 = time.perf_counter()
            dist_autograd.backward(ctx, [loss])
            t2 = time.perf_counter()
            opt.step(ctx)
            t3 = time.perf_counter()
        times["forward"].append(t1 - t0)
        times["backward"].append(t2 - t1)
        times["step"].append(t3 - t2)
        times["iteration"].append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    print("phase      median ms   p99 ms")
    for k, v in times.items():
        print(f"{k:10s} {ms(v, 0.5):9.3f} {ms(v, 0.99):8.3f}")
    print(f"\niterations/s {iterations / total:.0f} (torch {torch.__version__}, TensorPipe RPC)")


def run(rank, world, port, iterations):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=120)
    name = "ps" if rank == 0 else "trainer"
    rpc.init_rpc(name, rank=rank, world_size=world, rpc_backend_options=opts)
    if rank == 1:
        trainer(iterations)
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=2000)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(2, port, args.iterations), nprocs=2, join=True)


if __name__ == "__main__":
    main()
