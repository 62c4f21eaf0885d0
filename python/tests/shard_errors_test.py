#!/usr/bin/env python3
"""The binding's errors are clear Python exceptions, raised before braid sees a bad buffer:
a gradient or initial bucket of the wrong dtype, a non-contiguous or wrongly sized buffer, an
unknown bucket; and braid's own failures (an unknown preset, a step with no gradient) carry
braid's message. Run under braidrun (the ctest pytorch_sharded.shard_errors uses 1 rank); exits
77 when torch is missing.
"""
import sys

from torch_or_skip import torch  # noqa: E402 (sets the path, skips without torch)
from braid import BraidError, Comm, Shard  # noqa: E402


def expect(exc_type, words, fn):
    """fn() must raise exc_type with every one of `words` in its message."""
    try:
        fn()
    except exc_type as e:
        missing = [w for w in words if w not in str(e)]
        if missing:
            sys.exit("FAIL: %s message %r lacks %s" % (exc_type.__name__, str(e), missing))
        print("ok: %s: %s" % (exc_type.__name__, e))
        return
    sys.exit("FAIL: no %s raised (expected one about %s)" % (exc_type.__name__, words))


comm = Comm.from_env()
w = torch.arange(8, dtype=torch.float32)
shard = Shard(comm, "zero3", [w])
expect(TypeError, ["gradient of bucket 0", "float16", "float32"],
       lambda: shard.reduce_grad(0, torch.zeros(8, dtype=torch.float16)))
expect(ValueError, ["not contiguous"],
       lambda: shard.reduce_grad(0, torch.zeros(8, 2).t()[0]))
expect(ValueError, ["7 elements", "bucket 8"],
       lambda: shard.reduce_grad(0, torch.zeros(7)))
expect(IndexError, ["bucket 3", "1 buckets"], lambda: shard.gather(3))
expect(TypeError, ["initial bucket 0", "float32", "bfloat16"],
       lambda: Shard(comm, "zero3", [w], dtype="bfloat16"))
expect(BraidError, ["braidShardPreset", "no-such-preset"],
       lambda: Shard(comm, "no-such-preset", [w]))
expect(ValueError, ["optimizer must be 'adamw' or 'sgd'", "'lion'"],
       lambda: shard.step(optimizer="lion"))
expect(IndexError, ["bucket 2", "1 buckets"], lambda: shard.optimizer_shard(2))
expect(BraidError, ["braidShardSetLossScaler", "initScale"],
       lambda: shard.set_loss_scaler(init_scale=0.0))
# A step before any gradient was handed over: braid's own refusal, with its message.
expect(BraidError, ["braidShardStepEx", "braidErrInvalidUsage"], lambda: shard.step())
try:
    import numpy as np
    expect(TypeError, ["float64", "float32"], lambda: shard.reduce_grad(0, np.zeros(8)))
except ImportError:
    print("numpy missing: its dtype check is not tested")
# The shard still works after the refused calls.
shard.reduce_grad(0, torch.ones(8))
steps = shard.step(lr=0.1).step
# braidShardTraffic through the binding: one rank sends nothing (every group is itself).
t = shard.traffic()
if t["intra_total"] or t["inter_total"] or t["collectives"] or set(t["intra"]) != {
        "gather", "grad_reduce", "replica", "redistribute", "control"}:
    sys.exit("FAIL: traffic on 1 rank: %r" % t)
if not (t["exposed_seconds"] >= 0 and t["hidden_seconds"] >= 0):
    sys.exit("FAIL: negative timeline: %r" % t)
shard.reset_traffic()
print("ok: traffic %r" % t)
print("PASS: dtype, contiguity, size and bucket errors are clear; braid's message on failure;"
      " step %d ran afterwards" % steps)
shard.destroy()
comm.destroy()
