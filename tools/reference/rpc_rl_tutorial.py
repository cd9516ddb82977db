#!/usr/bin/python3
"""PyTorch's batched-RPC REINFORCE tutorial measured as `distrl-bench rl` measures distrl.

The tutorial's structure, written out so that it runs on Debian's python3-torch (1.13) without
gym: an agent (rank 0) owns the policy (Linear 4-128, Dropout 0.6, ReLU, Linear 128-2); each
observer (ranks 1..N) steps CartPole-v1 (Gym's equations, below) and asks the agent for every
action with rpc_sync on the agent's RRef. Batched: select_action is an @async_execution
function that answers all observers with one forward pass once each has asked; unbatched: one
forward per request. Each round the agent runs every observer's episode (rpc_async on its RRef)
and does a REINFORCE update. env-steps/s = steps of all observers / wall time of the rounds.

Needs python3-torch (apt install python3-torch; not a distrl dependency).
    /usr/bin/python3 tools/reference/rpc_rl_tutorial.py --observers 1 4 8 --rounds 10 --steps 100
"""
import argparse
import math
import os
import random
import socket
import threading
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

AGENT = "agent"


class CartPole:
    """CartPole-v1 after Gym's classic_control/cartpole.py (Euler integration)."""

    def reset(self, seed):
        self.rng = random.Random(seed)
        self.s = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        return list(self.s)

    def step(self, action):
        x, x_dot, th, th_dot = self.s
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(th), math.sin(th)
        temp = (force + 0.05 * th_dot * th_dot * sin) / 1.1
        th_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1))
        x_acc = temp - 0.05 * th_acc * cos / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * x_acc
        th, th_dot = th + 0.02 * th_dot, th_dot + 0.02 * th_acc
        self.s = [x, x_dot, th, th_dot]
        done = abs(x) > 2.4 or abs(th) > 12 * 2 * math.pi / 360
        return list(self.s), 1.0, done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

    def forward(self, x):
        return F.softmax(self.affine2(F.relu(self.dropout(self.affine1(x)))), dim=1)


class Observer:
    def __init__(self, batch):
        self.id = rpc.get_worker_info().id - 1
        self.env = CartPole()
        self.select_action = Agent.select_action_batch if batch else Agent.select_action

    def run_episode(self, agent_rref, n_steps, seed):
        state, ep_reward = self.env.reset(seed), 0.0
        for _ in range(n_steps):
            action = rpc.rpc_sync(agent_rref.owner(), self.select_action, args=(agent_rref, self.id, state))
            state, reward, done = self.env.step(action)
            rpc.rpc_sync(agent_rref.owner(), Agent.report_reward, args=(agent_rref, self.id, reward))
            ep_reward += reward
            if done:
                state = self.env.reset(seed + 1)
        return ep_reward


class Agent:
    def __init__(self, world_size, batch):
        self.ob_rrefs = [rpc.remote(f"observer{r}", Observer, args=(batch,)) for r in range(1, world_size)]
        self.policy = Policy()
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=1e-2)
        self.saved_log_probs = {i: [] for i in range(world_size - 1)}
        self.rewards = {i: [] for i in range(world_size - 1)}
        self.batch = batch
        self.states = torch.zeros(world_size - 1, 1, 4)
        self.future_actions = torch.futures.Future()
        self.lock = threading.Lock()
        self.pending = len(self.ob_rrefs)
        self.agent_rref = None

    @staticmethod
    def select_action(agent_rref, ob_id, state):
        self = agent_rref.local_value()
        probs = self.policy(torch.tensor(state).float().unsqueeze(0))
        m = Categorical(probs)
        action = m.sample()
        self.saved_log_probs[ob_id].append(m.log_prob(action))
        return action.item()

    @staticmethod
    @rpc.functions.async_execution
    def select_action_batch(agent_rref, ob_id, state):
        self = agent_rref.local_value()
        self.states[ob_id].copy_(torch.tensor(state).float())
        future_action = self.future_actions.then(lambda fut: fut.wait()[ob_id].item())
        with self.lock:
            self.pending -= 1
            if self.pending == 0:
                self.pending = len(self.ob_rrefs)
                # The tutorial forwards self.states itself; the next step's copy_ into it then
                # breaks backward ("modified by an inplace operation"): forward a copy.
                probs = self.policy(self.states.squeeze(1).clone())
                m = Categorical(probs)
                actions = m.sample()
                for i in range(len(self.ob_rrefs)):
                    self.saved_log_probs[i].append(m.log_prob(actions)[i])
                future_actions = self.future_actions
                self.future_actions = torch.futures.Future()
                future_actions.set_result(actions)
        return future_action

    @staticmethod
    def report_reward(agent_rref, ob_id, reward):
        agent_rref.local_value().rewards[ob_id].append(reward)

    def run_episode(self, n_steps, seed):
        futs = [ob.rpc_async().run_episode(self.agent_rref, n_steps, seed + i) for i, ob in enumerate(self.ob_rrefs)]
        rets = torch.futures.wait_all(futs)
        # REINFORCE update over all observers' steps (the tutorial's finish_episode)
        rewards, probs = [], []
        for i in range(len(self.ob_rrefs)):
            probs.extend(self.saved_log_probs[i])
            rewards.extend(self.rewards[i])
            self.saved_log_probs[i], self.rewards[i] = [], []
        R, returns = 0.0, []
        for r in rewards[::-1]:
            R = r + 0.99 * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + 1e-8)
        loss = sum(-lp * g for lp, g in zip(probs, returns))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return sum(rets) / len(rets)


def run(rank, world_size, port, args, batch, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=120)
    if rank == 0:
        rpc.init_rpc(AGENT, rank=rank, world_size=world_size, rpc_backend_options=opts)
        agent = Agent(world_size, batch)
        agent.agent_rref = rpc.RRef(agent)
        agent.run_episode(args.steps, 0)  # warm-up round, not timed
        t0 = time.perf_counter()
        for r in range(args.rounds):
            agent.run_episode(args.steps, 1000 * (r + 1))
        seconds = time.perf_counter() - t0
        out.put(args.rounds * args.steps * (world_size - 1) / seconds)
    else:
        rpc.init_rpc(f"observer{rank}", rank=rank, world_size=world_size, rpc_backend_options=opts)
    rpc.shutdown()


def measure(observers, args, batch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, observers + 1, port, args, batch, out)) for r in range(observers + 1)]
    for p in procs:
        p.start()
    import queue
    deadline = time.time() + 600
    while True:  # a rank that dies (an exception in a worker) ends the measurement at once
        try:
            rate = out.get(timeout=1)
            break
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs) or time.time() > deadline:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"a rank failed with {observers} observers (batched={batch})")
    for p in procs:
        p.join(timeout=120)
    return rate


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--observers", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    print(f"torch {torch.__version__}; {args.rounds} rounds x {args.steps} steps per observer")
    print("observers,batched_env_steps_per_s,unbatched_env_steps_per_s")
    for n in args.observers:
        b = measure(n, args, True)
        u = measure(n, args, False)
        print(f"{n},{b:.0f},{u:.0f}", flush=True)


if __name__ == "__main__":
    main()
