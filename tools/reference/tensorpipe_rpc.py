#!/usr/bin/python3
"""The same measurement as `distrl-bench rpc`, with PyTorch's TensorPipe RPC, for comparison.

Two processes: rank 0 calls rank 1. rpc_sync round trips with a [1, 4] float32 tensor (median and
p99), then rpc_async throughput with 64 calls in flight. Prints one CSV line per run and a
summary; --cpus pins both processes to one vCPU ('same'), one each ('split'), or leaves the
placement to the OS ('any', as distrl-bench's default).

Needs python3-torch (apt install python3-torch; not a distrl dependency).
    /usr/bin/python3 tools/reference/tensorpipe_rpc.py --calls 2000 --cpus any
"""
import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def echo(t):
    return t


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(rank, cpus):
    n = os.cpu_count() or 1
    if cpus == "same":
        os.sched_setaffinity(0, {0})
    elif cpus == "split":
        os.sched_setaffinity(0, {rank % n})


def worker(rank, port, args, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    pin(rank, args.cpus)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=60)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        x = torch.rand(1, 4)
        for _ in range(200):  # warm-up
            rpc.rpc_sync("worker1", echo, args=(x,))
        lat = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            rpc.rpc_sync("worker1", echo, args=(x,))
            lat.append((time.perf_counter() - t0) * 1e6)
        lat.sort()
        t0 = time.perf_counter()
        done = 0
        inflight = []
        while done < args.throughput_calls:
            while len(inflight) < args.inflight and done + len(inflight) < args.throughput_calls:
                inflight.append(rpc.rpc_async("worker1", echo, args=(x,)))
            inflight.pop(0).wait()
            done += 1
        rate = done / (time.perf_counter() - t0)
        out.put((statistics.median(lat), lat[int(0.99 * (len(lat) - 1))], rate))
    rpc.shutdown()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--throughput-calls", type=int, default=5000)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--cpus", choices=["any", "same", "split"], default="any")
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, port, args, out)) for r in range(2)]
    for pr in procs:
        pr.start()
    median, p99, rate = out.get(timeout=300)
    for pr in procs:
        pr.join(timeout=60)
    print("backend,cpus,median_us,p99_us,async_calls_per_s,inflight")
    print(f"tensorpipe,{args.cpus},{median:.1f},{p99:.1f},{rate:.0f},{args.inflight}")
    print(f"torch {torch.__version__}, TensorPipe RPC: rpc_sync median {median:.1f} us, p99 {p99:.1f} us; "
          f"rpc_async {rate:,.0f} calls/s with {args.inflight} in flight")


if __name__ == "__main__":
    main()
