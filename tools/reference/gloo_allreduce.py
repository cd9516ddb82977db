#!/usr/bin/python3
"""The same measurement as `distrl-bench allreduce`, with PyTorch's gloo backend, for comparison.

Needs python3-torch (apt install python3-torch; not a distrl dependency).
    /usr/bin/python3 tools/reference/gloo_allreduce.py --ranks 2 4
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, sizes, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        iters = max(5, min(2000, (512 << 20) // nbytes))
        for _ in range(max(3, iters // 10)):
            dist.all_reduce(t)
        dist.barrier()
        per = []
        for _ in range(iters):
            s = time.perf_counter()
            dist.all_reduce(t)
            per.append(time.perf_counter() - s)
        per.sort()
        med = torch.tensor([per[len(per) // 2]], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        if rank == 0:
            alg = nbytes / med.item() / 1e9
            out.put((world, nbytes, iters, med.item() * 1e6, alg, alg * 2 * (world - 1) / world))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--sizes", type=int, nargs="+", default=[4 << 10, 1 << 20, 16 << 20, 64 << 20])
    a = p.parse_args()
    print("| ranks | size | calls | time per call | algbw GB/s | busbw GB/s |\n|---:|---:|---:|---:|---:|---:|")
    ctx = mp.get_context("spawn")
    for i, world in enumerate(a.ranks):
        q = ctx.Queue()
        mp.spawn(worker, args=(world, a.sizes, 29700 + i, q), nprocs=world, join=True)
        while not q.empty():
            w, b, it, us, alg, bus = q.get()
            print(f"| {w} | {b >> 10} KiB | {it} | {us:.1f} µs | {alg:.2f} | {bus:.2f} |")


if __name__ == "__main__":
    main()
