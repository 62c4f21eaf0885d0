#!/usr/bin/env python3
"""FSDP on CPU with backend braid, as far as torch 1.13 goes:

1. torch 1.13's FSDP itself: on Debian bookworm (torch 1.13 on Python 3.11) the FSDP module does
   not even import (torch.distributed._shard declares a dataclass field with a mutable default,
   which Python 3.11 refuses with a ValueError); where it imports, FullyShardedDataParallel
   constructs on a braid group and its first forward raises torch's own refusal, "FSDP does not
   support CPU only execution" (FSDP 1.13 needs CUDA streams). This test checks whichever of the
   two happens and fails the day FSDP runs on CPU, so the account in docs/torch.md stays true.
2. FSDP's communication, by hand: each rank keeps 1/N of a flat parameter, all-gathers it into
   one tensor before forward (all_gather_into_tensor), reduce-scatters the flat gradient after
   backward (reduce_scatter_tensor) and updates its shard (SGD). Trained 20 steps on braid, this
   must give the same losses as the unsharded model trained with gloo's all_reduce of the whole
   gradient (bit for bit on 2 ranks: sums of two are the same in either order; within 1e-6
   relative on more).
Run by torch_launch.py on 2 ranks.
"""
import gc
import sys

from torch_env import dist, init, torch

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

rank, size = init("braid")
gloo = dist.new_group(backend="gloo")

# 1. torch 1.13's FSDP on CPU.
try:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
except ValueError as e:
    if "mutable default" not in str(e):
        raise
    print("rank %d: torch %s's FSDP does not import on Python %d.%d: %s" %
          (rank, torch.__version__, sys.version_info[0], sys.version_info[1], e), flush=True)
    FSDP = None
if FSDP is not None:
    torch.manual_seed(0)
    fsdp = FSDP(nn.Linear(16, 16))
    shard = sum(p.numel() for p in fsdp.parameters())
    try:
        fsdp(torch.ones(2, 16))
        sys.exit("FAIL: FSDP ran a forward on CPU: torch changed, update docs/torch.md and this "
                 "test")
    except RuntimeError as e:
        if "FSDP does not support CPU only execution" not in str(e):
            raise
        print("rank %d: FSDP constructed on braid (flat parameter shard of %d elements); first "
              "forward: %s" % (rank, shard, e), flush=True)


# 2. FSDP's collectives by hand.
def model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 4))


def data(step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 12, generator=g), torch.randint(0, 4, (8,), generator=g)


LR, STEPS = 0.1, 20


def flat_of(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def load(m, flat):
    off = 0
    for p in m.parameters():
        p.data.copy_(flat[off:off + p.numel()].view_as(p))
        off += p.numel()


def train_sharded():
    m = model()
    full = flat_of(m)
    per = -(-full.numel() // size)  # padded to a multiple of the ranks, as FSDP pads
    padded = torch.zeros(per * size)
    padded[:full.numel()] = full
    mine = padded[rank * per:(rank + 1) * per].clone()
    losses = []
    for step in range(STEPS):
        gathered = torch.empty(per * size)
        dist.all_gather_into_tensor(gathered, mine)  # unshard
        load(m, gathered[:full.numel()])
        x, y = data(step)
        loss = F.cross_entropy(m(x), y)
        m.zero_grad()
        loss.backward()
        grad = torch.zeros(per * size)
        grad[:full.numel()] = torch.cat([p.grad.reshape(-1) for p in m.parameters()]) / size
        gshard = torch.empty(per)
        dist.reduce_scatter_tensor(gshard, grad)  # the mean gradient's shard
        mine -= LR * gshard
        total = torch.tensor([loss.item()], dtype=torch.float64)
        dist.all_reduce(total)
        losses.append(total.item() / size)
    return losses


def train_reference():
    m = model()
    losses = []
    for step in range(STEPS):
        x, y = data(step)
        loss = F.cross_entropy(m(x), y)
        m.zero_grad()
        loss.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in m.parameters()]) / size
        dist.all_reduce(grad, group=gloo)
        load(m, flat_of(m) - LR * grad)
        total = torch.tensor([loss.item()], dtype=torch.float64)
        dist.all_reduce(total, group=gloo)
        losses.append(total.item() / size)
    return losses


got, want = train_sharded(), train_reference()
worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
tol = 0.0 if size == 2 else 1e-6
if worst > tol:
    sys.exit("FAIL: rank %d: sharded on braid vs all_reduce on gloo: max relative loss difference "
             "%.2e > %.0e\n%s\n%s" % (rank, worst, tol, got, want))
# The gloo group goes while the interpreter is whole: left to its exit it can abort the process
# ("terminate called without an active exception", pytorch#190489).
dist.destroy_process_group(gloo)
del gloo
gc.collect()
dist.destroy_process_group()
print("PASS: rank %d: torch's FSDP %s; FSDP's collectives by hand on braid match gloo over %d "
      "steps (max relative loss difference %.1e)" %
      (rank, "does not import" if FSDP is None else "refuses CPU at its first forward", STEPS,
       worst), flush=True)
