#!/usr/bin/env python3
"""The binding beyond AdamW, on 2 ranks under braidrun (ctest pytorch_sharded.shard_api): SGD
with momentum, the dynamic loss scaler skipping an overflowing step, the optimizer escape hatch
(prepare_step / optimizer_shard / finish_step), the prefetch switch (different values on the
two ranks are refused on both), and a checkpoint saved and loaded into a fresh shard. Every
parameter is checked bit for bit against a reference computed here in float32 (the gradients
are small integers and the learning rates powers of two, so each update is exact). Exits 77
when torch is missing.
"""
import hashlib
import os
import shutil
import sys

from torch_or_skip import torch  # noqa: E402 (sets the path, skips without torch)
from braid import BraidError, Comm, Shard  # noqa: E402

comm = Comm.from_env()
if comm.size != 2:
    sys.exit("FAIL: run with braidrun -n 2 (have %d ranks)" % comm.size)
rank = comm.rank
SIZES = (64, 37)


def check(cond, what):
    if not cond:
        sys.exit("FAIL [rank %d]: %s" % (rank, what))
    print("ok [rank %d]: %s" % (rank, what))


def gathered(shard):
    out = []
    for b in range(len(SIZES)):
        out.append(torch.frombuffer(shard.gather(b), dtype=torch.float32).clone())
        shard.release(b)
    return out


def hand_over(shard, scale=1.0, poison=False):
    """Rank r's gradient is (r + 1) * scale everywhere: the sum over 2 ranks is 3 * scale, the
    mean 1.5 * scale. `poison`: rank 1 puts an inf into bucket 0."""
    for b in reversed(range(len(SIZES))):
        g = torch.full((SIZES[b],), (rank + 1) * scale, dtype=torch.float32)
        if poison and rank == 1 and b == 0:
            g[5] = float("inf")
        shard.reduce_grad(b, g)


ref = [torch.arange(SIZES[0], dtype=torch.float32) * 0.25,
       torch.full((SIZES[1],), 0.5, dtype=torch.float32)]
shard = Shard(comm, "zero3", [x.clone() for x in ref])

# The prefetch switch is collective: on one rank and off on the other is refused on both.
try:
    shard.set_prefetch(rank == 0)
    sys.exit("FAIL [rank %d]: different prefetch settings accepted" % rank)
except BraidError as e:
    check(e.code == 5 and "different values" in str(e), "mixed prefetch refused: %s" % e)
shard.set_prefetch(False)

# SGD with momentum, first step: the buffer is the gradient, p -= lr * g.
hand_over(shard)
info = shard.step(optimizer="sgd", lr=0.125, momentum=0.9, weight_decay=0.0)
lr, g = torch.tensor(0.125), torch.tensor(1.5)
ref = [p - lr * g for p in ref]
got = gathered(shard)
check(info.step == 1 and not info.skipped and info.grad_norm > 0, "sgd step info %r" % (info,))
check(all(torch.equal(a, b) for a, b in zip(got, ref)), "sgd update bit-exact")

# Dynamic loss scaling: an inf on one rank skips the step everywhere and halves the scale.
shard.set_loss_scaler(init_scale=1024.0, growth_interval=2)
check(shard.loss_scale() == 1024.0, "loss scale starts at 1024")
hand_over(shard, scale=1024.0, poison=True)
info = shard.step(optimizer="sgd", lr=0.125)
check(info.skipped and info.next_loss_scale == 512.0 and info.step == 1,
      "overflow skipped, next scale 512: %r" % (info,))
check(shard.loss_scale() == 512.0, "loss scale backed off to 512")
check(all(torch.equal(a, b) for a, b in zip(gathered(shard), ref)), "skipped step left params")

# The escape hatch: the caller's own update, p -= 0.5 * g, on braid's OS shards.
hand_over(shard, scale=512.0)
info = shard.prepare_step()
check(not info.skipped and info.loss_scale == 512.0, "prepared step %r" % (info,))
try:
    shard.gather(0)
    sys.exit("FAIL [rank %d]: gather accepted during a prepared step" % rank)
except BraidError as e:
    check("prepared step" in str(e), "gather refused while prepared")
for b in range(len(SIZES)):
    view = shard.optimizer_shard(b)
    grad = torch.frombuffer(view.grad, dtype=torch.float32)
    master = torch.frombuffer(view.master, dtype=torch.float32)
    check(view.count > 0 and torch.all(grad == 1.5), "bucket %d shard [%d, +%d): grad 1.5" %
          (b, view.offset, view.count))
    master -= 0.5 * grad
shard.finish_step()
ref = [p - torch.tensor(0.5) * g for p in ref]
check(all(torch.equal(a, b) for a, b in zip(gathered(shard), ref)), "escape hatch bit-exact")

# A checkpoint, loaded by a fresh shard that starts from other values.
tag = hashlib.sha1(os.environ.get("BRAID_UNIQUE_ID", "braid").encode()).hexdigest()[:12]
ckpt = "/tmp/braid-py-ckpt-" + tag
if rank == 0:
    os.makedirs(ckpt, exist_ok=True)
comm.allreduce_sum([0.0])  # the directory exists before anyone writes into it
shard.save(ckpt)
fresh = Shard(comm, "zero1", [torch.zeros(n, dtype=torch.float32) for n in SIZES])
fresh.load(ckpt)
check(all(torch.equal(a, b) for a, b in zip(gathered(fresh), ref)), "loaded under zero1")
check(fresh.loss_scale() == 512.0, "the loss scaler's state was restored")
try:
    fresh.load(ckpt + "-missing")
    sys.exit("FAIL [rank %d]: a missing checkpoint loaded" % rank)
except BraidError as e:
    check(e.code in (2, 5), "missing checkpoint refused: %s" % e)
comm.allreduce_sum([0.0])
if rank == 0:
    shutil.rmtree(ckpt, ignore_errors=True)
fresh.destroy()
shard.destroy()
comm.destroy()
print("PASS: sgd, loss scaler, escape hatch, prefetch switch and checkpoint through the binding")
