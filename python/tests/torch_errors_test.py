#!/usr/bin/env python3
"""What the braid backend refuses raises a RuntimeError saying why, on the rank that passed it,
before anything is issued, and the group keeps working: a tensor on another device (the message
names braid's missing device path; a "meta" tensor stands in for a CUDA one, which Debian's
CPU-only torch cannot make), a sparse tensor, a reduction on a dtype braid does not reduce
(int16), bitwise ops on integers, AVG on bool, a tag, a receive without a source, lists of the
wrong length, mismatched dtypes or sizes, a rank outside the group. (torch 1.13 stops a meta
tensor itself before the backend in the collectives it dispatches, all_reduce among them.) Also: monitored_barrier,
which torch 1.13 only routes to gloo (its refusal is recorded here), and the group's describe().
Run on 1 rank by torch_launch.py (any launcher works)."""
import datetime
import os
import sys

from torch_env import dist, init, torch

import braid.torch

checks = 0


def expect(words, fn, exc=RuntimeError):
    global checks
    try:
        fn()
    except exc as e:
        missing = [w for w in words if w not in str(e)]
        if missing:
            sys.exit("FAIL: the message %r lacks %s" % (str(e), missing))
        if "Exception raised from" in str(e):
            sys.exit("FAIL: a C++ backtrace in the message: %r" % str(e))
        checks += 1
        print("ok: %s" % str(e).split("\n")[0], flush=True)
        return
    sys.exit("FAIL: nothing raised (expected %s about %s)" % (exc.__name__, words))


rank, size = init("braid", timeout_s=60)
pg = dist.distributed_c10d._get_default_group()
x = torch.ones(8)
meta = torch.empty(8, device="meta")
# The collectives that torch 1.13 routes through its dispatcher (all_reduce, broadcast, ...) stop
# a meta tensor before any backend (it has kernels for CPU and CUDA tensors only, so a CUDA tensor
# does reach braid's check); the others reach braid with it.
expect(["_allgather_base", "meta", "device path", "CPU"],
       lambda: dist.all_gather_into_tensor(torch.empty(8 * size, device="meta"), meta))
expect(["_reduce_scatter_base", "meta", "device path"],
       lambda: dist.reduce_scatter_tensor(meta, torch.empty(8 * size, device="meta")))
expect(["alltoall_base", "meta", "device path"], lambda: dist.all_to_all_single(meta, meta))
expect(["dense"], lambda: dist.all_reduce(torch.eye(3).to_sparse()))
expect(["no reduction on int16"], lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)))
expect(["BAND", "bool tensors only", "int32"],
       lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), dist.ReduceOp.BAND))
expect(["BXOR", "int64"],
       lambda: dist.all_reduce(torch.ones(4, dtype=torch.int64), dist.ReduceOp.BXOR))
expect(["AVG", "bool"],
       lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool), dist.ReduceOp.AVG))
expect(["tag 3", "no tags"], lambda: dist.send(x, 0, tag=3))
expect(["recv_anysource", "pass src"], lambda: dist.recv(x))
expect(["rank 5", "not in this group"], lambda: pg.send([x], 5, 0).wait())
expect(["allgather", "output tensors"],
       lambda: dist.all_gather([torch.zeros(8)] * (size + 1), x))
expect(["allgather", "output holds 9 elements, the input 8"],
       lambda: dist.all_gather([torch.zeros(9)] * size, x))
expect(["_allgather_base", "must hold"],
       lambda: dist.all_gather_into_tensor(torch.zeros(8 * size + 1), x))
expect(["_reduce_scatter_base", "must hold"],
       lambda: dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(3 * size + 2)))
expect(["alltoall_base", "splits add up"],
       lambda: dist.all_to_all_single(torch.zeros(4 * size), torch.zeros(4 * size),
                                      [4] * size, [5] * size))
expect(["allreduce_coalesced", "one dtype"],
       lambda: pg.allreduce_coalesced([torch.ones(2), torch.ones(2, dtype=torch.float64)]))
expect(["monitored_barrier is only implemented for GLOO"], lambda: dist.monitored_barrier())
# Waiting inside a coalescing block (batch_isend_irecv's): refused, the calls are issued at its
# end; a send to this rank itself and its receive complete there (braid allows self-messages in
# a group).
reqs, got = [], torch.zeros(8)
with dist.distributed_c10d._coalescing_manager(None, reqs):
    sent = pg.send([torch.full((8,), 7.0)], rank, 0)
    recvd = pg.recv([got], rank, 0)
    expect(["waited for inside a coalescing block"], lambda: sent.wait())
sent.wait()
recvd.wait()
if not torch.equal(got, torch.full((8,), 7.0)):
    sys.exit("FAIL: a coalesced send to itself delivered %s" % got)
# Still working, bit for bit.
y = torch.arange(8, dtype=torch.float32)
dist.all_reduce(y)
if not torch.equal(y, torch.arange(8, dtype=torch.float32) * size):
    sys.exit("FAIL: all_reduce after the refusals: %s" % y)
# The C++ monitoredBarrier (pg.monitored_barrier) works on braid.
pg.monitored_barrier()
info = braid.torch.describe()
if "rank %d/%d" % (rank, size) not in info:
    sys.exit("FAIL: describe() says %r" % info)
if dist.get_backend() != "braid" or pg.name() != "braid":
    sys.exit("FAIL: backend %r, name %r" % (dist.get_backend(), pg.name()))
dist.destroy_process_group()
# A malformed BRAID_TORCH_BLOCKING_BYTES fails the group's creation, before braid's init.
os.environ["BRAID_TORCH_BLOCKING_BYTES"] = "12Q"
expect(["BRAID_TORCH_BLOCKING_BYTES='12Q'", "not a size"],
       lambda: braid.torch.ProcessGroupBraid.create(dist.HashStore(), 0, 1,
                                                    datetime.timedelta(seconds=10)))
del os.environ["BRAID_TORCH_BLOCKING_BYTES"]
print("PASS: %d refusals raised RuntimeError with their reason; %s" % (checks, info), flush=True)
