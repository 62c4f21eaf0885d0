#!/usr/bin/env python3
"""Every torch.distributed collective on backend braid against backend gloo on the same inputs,
bit for bit, on every rank: float32, float16, bfloat16, float64, int32, int64, uint8 (and bool,
int8), several counts, in and out of place, non-contiguous tensors, uneven all-to-all splits,
async work and futures, sub-groups (new_group: a view, no new descriptor). --default-gloo: the
default group on gloo and braid groups made by new_group(backend="braid") (each its own braid
communicator). Inputs are small
integers, so every sum, product and average is exact whatever order a backend folds in; that
makes the comparison with gloo exact.

Where gloo has no such collective or dtype (torch 1.13's gloo lacks all_gather_into_tensor,
reduce_scatter, all_to_all of lists, AVG, bfloat16 and bool), the reference is computed from
gloo's result of what it has (all_gather, all_reduce; the same values in float32 or uint8) or,
for point-to-point, from the known inputs; each check names its reference. Run by
torch_launch.py on 2 or 4 ranks; prints "PASS: ... checks" from every rank.
"""
import gc
import os
import sys

from torch_env import dist, init, torch

ReduceOp = dist.ReduceOp
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
          torch.uint8, torch.int8, torch.bool]
FULL = os.environ.get("BRAID_TORCH_FULL_TESTS") == "1"
COUNTS = [1, 13, 4099] + ([70001] if FULL else [])
checks = 0


def fail(msg):
    print("FAIL: rank %d: %s" % (rank, msg), flush=True)
    sys.exit(1)


def same(got, want, what):
    global checks
    checks += 1
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        diff = "" if got.shape != want.shape else " (first elements %s vs %s)" % (
            got.reshape(-1)[:6].tolist(), want.reshape(-1)[:6].tolist())
        fail("%s: braid %s %s differs from the reference %s %s%s" %
             (what, got.dtype, tuple(got.shape), want.dtype, tuple(want.shape), diff))


def values(dtype, r, count, salt=0, positive=False):
    """Rank r's input: small integers (exact in every dtype and every order of summation)."""
    i = torch.arange(count, dtype=torch.int64)
    if dtype == torch.bool:
        v = (i * 3 + r * 5 + salt) % 2
    elif positive or dtype == torch.uint8:
        v = (i * 7 + r * 13 + salt) % 5
    else:
        v = (i * 7 + r * 13 + salt) % 9 - 4
    return v.to(dtype)


def gloo_dtype(dtype):
    """What gloo reduces in place of a dtype it lacks (the same values, exactly)."""
    return {torch.bfloat16: torch.float32, torch.bool: torch.uint8}.get(dtype, dtype)


def gloo_all_reduce(t, op, group):
    """gloo's all_reduce of `t`'s values (in a dtype gloo has), as `t`'s dtype; AVG as gloo's sum
    divided by the group's size (gloo has no AVG); bool's SUM/PRODUCT as MAX/MIN (braid's
    logical or/and, as torch's NCCL backend), BXOR via uint8 BXOR."""
    g = t.to(gloo_dtype(t.dtype))
    n = dist.get_world_size(group)
    if op == ReduceOp.AVG:
        dist.all_reduce(g, ReduceOp.SUM, group=gloo_of[group])
        g = g / n if g.is_floating_point() else torch.div(g, n, rounding_mode="trunc")
    else:
        if t.dtype == torch.bool:
            op = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PRODUCT: ReduceOp.MIN}.get(op, op)
        dist.all_reduce(g, op, group=gloo_of[group])
    return g.to(t.dtype)


def ops_for(dtype):
    ops = [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX]
    if dtype != torch.bool:
        ops.append(ReduceOp.AVG)
    if dtype == torch.bool:
        ops += [ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR]
    return ops


def check_all_reduce(group, ranks):
    me = dist.get_rank(group)
    for dtype in DTYPES:
        for count in COUNTS:
            for op in ops_for(dtype):
                x = values(dtype, ranks[me], count, positive=op == ReduceOp.PRODUCT)
                want = gloo_all_reduce(x.clone(), op, group)
                got = x.clone()
                dist.all_reduce(got, op, group=group)
                same(got, want, "all_reduce %s %s count %d" % (op, dtype, count))
        # A non-contiguous tensor (every other column of a matrix): staged, written back in place.
        x = values(dtype, ranks[me], 2 * 37).view(37, 2)
        want = gloo_all_reduce(x.clone(), ReduceOp.MAX, group)
        got = x.clone()
        view = got[:, 1]
        dist.all_reduce(view, ReduceOp.MAX, group=group)
        same(got[:, 1], want[:, 1], "all_reduce of a non-contiguous view %s" % dtype)
        same(got[:, 0], x[:, 0], "the untouched column next to a non-contiguous all_reduce")


def check_premul_sum(group, ranks):
    me = dist.get_rank(group)
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        x = values(dtype, ranks[me], 100)
        want = gloo_all_reduce(x.clone(), ReduceOp.SUM, group) * 2
        got = x.clone()
        dist.all_reduce(got, dist._make_nccl_premul_sum(2.0), group=group)
        same(got, want, "all_reduce PREMUL_SUM(2) %s" % dtype)


def check_reduce_broadcast(group, ranks):
    me, n = dist.get_rank(group), len(ranks)
    root = ranks[1 % n]  # global rank, as torch's API takes it
    for dtype in DTYPES:
        for count in COUNTS:
            x = values(dtype, ranks[me], count)
            want = gloo_all_reduce(x.clone(), ReduceOp.MIN, group)
            got = x.clone()
            dist.reduce(got, root, ReduceOp.MIN, group=group)
            same(got, want if ranks[me] == root else x, "reduce MIN %s count %d" % (dtype, count))
            want = x.clone().to(gloo_dtype(dtype))
            dist.broadcast(want, root, group=gloo_of[group])
            got = x.clone()
            dist.broadcast(got, root, group=group)
            same(got, want.to(dtype), "broadcast %s count %d" % (dtype, count))
    x = values(torch.int32, ranks[me], 20).view(10, 2)
    got = x.clone()
    dist.broadcast(got[:, 0], root, group=group)  # non-contiguous
    want = x.clone()
    dist.broadcast(want, root, group=gloo_of[group])
    same(got[:, 0], want[:, 0], "broadcast of a non-contiguous view")
    same(got[:, 1], x[:, 1], "the column next to a non-contiguous broadcast")


def gloo_all_gather(x, group):
    outs = [torch.empty_like(x, dtype=gloo_dtype(x.dtype)) for _ in range(dist.get_world_size(group))]
    dist.all_gather(outs, x.to(gloo_dtype(x.dtype)), group=gloo_of[group])
    return [o.to(x.dtype) for o in outs]


def check_gathers(group, ranks):
    me, n = dist.get_rank(group), len(ranks)
    root = ranks[-1]
    for dtype in DTYPES:
        for count in COUNTS:
            x = values(dtype, ranks[me], count, salt=3)
            want = gloo_all_gather(x, group)
            outs = [torch.full_like(x, 1) for _ in range(n)]
            dist.all_gather(outs, x, group=group)
            for k in range(n):
                same(outs[k], want[k], "all_gather %s count %d block %d" % (dtype, count, k))
            # Into one tensor (gloo lacks it: the reference is gloo's all_gather, concatenated).
            flat = torch.cat(want)
            out = torch.zeros(n * count, dtype=dtype)
            dist.all_gather_into_tensor(out, x, group=group)
            same(out, flat, "all_gather_into_tensor %s count %d" % (dtype, count))
            # In place: the input is this rank's block of the output.
            out = torch.zeros(n * count, dtype=dtype)
            out[me * count:(me + 1) * count] = x
            dist.all_gather_into_tensor(out, out[me * count:(me + 1) * count], group=group)
            same(out, flat, "all_gather_into_tensor in place %s count %d" % (dtype, count))
            # The blocks of one tensor as the output list (braid writes them as one buffer).
            out = torch.zeros(n * count, dtype=dtype)
            dist.all_gather(list(out.chunk(n)), x, group=group)
            same(out, flat, "all_gather into adjacent blocks %s count %d" % (dtype, count))
            # gather to the last rank.
            got = [torch.zeros_like(x) for _ in range(n)] if ranks[me] == root else None
            dist.gather(x, got, dst=root, group=group)
            if got is not None:
                for k in range(n):
                    same(got[k], want[k], "gather %s count %d block %d" % (dtype, count, k))
            # scatter from the last rank: block k is rank k's input from above.
            recv = torch.zeros_like(x)
            dist.scatter(recv, [w.clone() for w in want] if ranks[me] == root else None,
                         src=root, group=group)
            same(recv, want[me], "scatter %s count %d" % (dtype, count))
    # all_gather_coalesced: two inputs of different sizes, against gloo's (got[r][i]: rank r's
    # input i).
    a, b = values(torch.float32, ranks[me], 5), values(torch.float32, ranks[me], 11, salt=1)
    got = [[torch.zeros_like(a), torch.zeros_like(b)] for _ in range(n)]
    dist.all_gather_coalesced(got, [a, b], group=group)
    want = [[torch.zeros_like(a), torch.zeros_like(b)] for _ in range(n)]
    dist.all_gather_coalesced(want, [a, b], group=gloo_of[group])
    for k in range(n):
        for i in range(2):
            same(got[k][i], want[k][i], "all_gather_coalesced rank %d input %d" % (k, i))
    # all_gather_object goes through all_gather of byte tensors of different lengths.
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": ranks[me], "pad": "x" * ranks[me]}, group=group)
    if objs != [{"rank": r, "pad": "x" * r} for r in ranks]:
        fail("all_gather_object: %r" % objs)


def check_reduce_scatter(group, ranks):
    me, n = dist.get_rank(group), len(ranks)
    for dtype in DTYPES:
        for count in COUNTS:
            for op in [ReduceOp.SUM, ReduceOp.MAX] + ([ReduceOp.AVG] if dtype != torch.bool else []):
                x = values(dtype, ranks[me], n * count, salt=5)
                # gloo lacks reduce_scatter: its all_reduce of the whole input, this rank's block.
                want = gloo_all_reduce(x.clone(), op, group)[me * count:(me + 1) * count]
                out = torch.zeros(count, dtype=dtype)
                dist.reduce_scatter_tensor(out, x.clone(), op, group=group)
                same(out, want, "reduce_scatter_tensor %s %s count %d" % (op, dtype, count))
                inp = x.clone()
                view = inp[me * count:(me + 1) * count]
                dist.reduce_scatter_tensor(view, inp, op, group=group)  # in place
                same(view, want, "reduce_scatter_tensor in place %s %s count %d" %
                     (op, dtype, count))
                out = torch.zeros(count, dtype=dtype)
                dist.reduce_scatter(out, list(x.clone().chunk(n)), op, group=group)
                same(out, want, "reduce_scatter (list) %s %s count %d" % (op, dtype, count))


def check_all_to_all(group, ranks):
    me, n = dist.get_rank(group), len(ranks)
    for dtype in DTYPES:
        # Equal blocks, against gloo's all_to_all_single.
        for count in COUNTS:
            x = values(dtype, ranks[me], n * count, salt=7)
            want = torch.zeros(n * count, dtype=gloo_dtype(dtype))
            dist.all_to_all_single(want, x.to(gloo_dtype(dtype)), group=gloo_of[group])
            got = torch.zeros(n * count, dtype=dtype)
            dist.all_to_all_single(got, x, group=group)
            same(got, want.to(dtype), "all_to_all_single %s count %d" % (dtype, count))
        # Uneven splits of rows of 3: rank r sends (r + 2p) % 4 rows to rank p (some none).
        ins = [(me + 2 * p) % 4 for p in range(n)]
        outs = [(p + 2 * me) % 4 for p in range(n)]
        x = values(dtype, ranks[me], 3 * sum(ins), salt=11).view(-1, 3)
        want = torch.zeros(sum(outs), 3, dtype=gloo_dtype(dtype))
        dist.all_to_all_single(want, x.to(gloo_dtype(dtype)), outs, ins, group=gloo_of[group])
        got = torch.zeros(sum(outs), 3, dtype=dtype)
        dist.all_to_all_single(got, x, outs, ins, group=group)
        same(got, want.to(dtype), "all_to_all_single uneven %s" % dtype)
    # all_to_all of lists (gloo lacks it): block p of rank r holds r * 100 + p, r + p + 1 times.
    send = [torch.full((ranks[me] + p + 1,), ranks[me] * 100 + p, dtype=torch.int64)
            for p in range(n)]
    recv = [torch.zeros(ranks[p] + me + 1, dtype=torch.int64) for p in range(n)]
    dist.all_to_all(recv, send, group=group)
    for p in range(n):
        same(recv[p], torch.full((ranks[p] + me + 1,), ranks[p] * 100 + me, dtype=torch.int64),
             "all_to_all of lists from rank %d" % ranks[p])


def check_coalesced(group, ranks):
    me = dist.get_rank(group)
    ts = [values(torch.float32, ranks[me], c, salt=c) for c in (3, 1, 17)]
    want = [t.clone() for t in ts]
    dist.all_reduce_coalesced(want, ReduceOp.SUM, group=gloo_of[group])
    got = [t.clone() for t in ts]
    dist.all_reduce_coalesced(got, ReduceOp.SUM, group=group)
    for k in range(3):
        same(got[k], want[k], "all_reduce_coalesced tensor %d" % k)


def check_point_to_point(group, ranks):
    me, n = dist.get_rank(group), len(ranks)
    if n < 2:
        return
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    for dtype in DTYPES:
        x = values(dtype, ranks[me], 1000)
        got = torch.zeros_like(x)
        # Ring: even ranks send first; odd ranks receive first (blocking calls).
        if me % 2 == 0:
            dist.send(x, nxt, group=group)
            dist.recv(got, prv, group=group)
        else:
            dist.recv(got, prv, group=group)
            dist.send(x, nxt, group=group)
        same(got, values(dtype, prv, 1000), "send/recv ring %s" % dtype)
    # isend/irecv, completed in either order; a receive into a non-contiguous view.
    x = values(torch.int64, ranks[me], 50)
    got = torch.zeros(50, 2, dtype=torch.int64)
    reqs = [dist.irecv(got[:, 1], prv, group=group), dist.isend(x, nxt, group=group)]
    for r in reversed(reqs):
        r.wait()
    same(got[:, 1], values(torch.int64, prv, 50), "irecv into a non-contiguous view")
    same(got[:, 0], torch.zeros(50, dtype=torch.int64), "the column next to the irecv")
    # batch_isend_irecv: a braid group of sends and receives (any order completes).
    bufs = [torch.zeros(7, dtype=torch.float32) for _ in range(n)]
    ops = []
    for p in range(n):
        if p != me:
            ops.append(dist.P2POp(dist.irecv, bufs[p], ranks[p], group=group))
            ops.append(dist.P2POp(dist.isend, torch.full((7,), float(ranks[me]) * 10 + p),
                                  ranks[p], group=group))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    for p in range(n):
        if p != me:
            same(bufs[p], torch.full((7,), float(ranks[p]) * 10 + me), "batch_isend_irecv from %d"
                 % ranks[p])


def check_async(group, ranks):
    me, n = dist.get_rank(group), len(ranks)
    # Larger than BRAID_TORCH_BLOCKING_BYTES (256 KiB): braid's non-blocking calls, in flight
    # together.
    xs = [values(torch.float32, ranks[me], 70000 * (k + 1), salt=k) for k in range(4)]
    wants = [gloo_all_reduce(x.clone(), ReduceOp.SUM, group) for x in xs]
    gots = [x.clone() for x in xs]
    works = [dist.all_reduce(g, group=group, async_op=True) for g in gots]
    # A future chained on the first (what DDP's communication hooks do).
    doubled = works[0].get_future().then(lambda fut: fut.value()[0] * 2)
    for w in reversed(works):
        if not w.wait() or not w.is_completed():
            fail("a waited work is not completed and successful")
    for k in range(4):
        same(gots[k], wants[k], "async all_reduce %d" % k)
    same(doubled.wait(), wants[0] * 2, "a future chained on an all_reduce")
    # A callback that makes a synchronous call of its own (non-blocking underneath: it waits
    # inside the completion of the first, on whichever thread completes it).
    def chained(fut):
        t = fut.value()[0].clone()
        dist.all_reduce(t, group=group)
        return t
    x = xs[1].clone()
    fut = dist.all_reduce(x, group=group, async_op=True).get_future().then(chained)
    same(fut.wait(), gloo_all_reduce(wants[1].clone(), ReduceOp.SUM, group),
         "an all_reduce inside a future's callback")
    dist.barrier(group=group)


def run_all(group, ranks, label):
    for fn in [check_all_reduce, check_premul_sum, check_reduce_broadcast, check_gathers,
               check_reduce_scatter, check_all_to_all, check_coalesced, check_point_to_point,
               check_async]:
        try:
            fn(group, ranks)
        except Exception as e:  # a braid or torch error: say where
            fail("%s on %s raised %s: %s" % (fn.__name__, label, type(e).__name__, e))


def fd_count():
    return len(os.listdir("/proc/self/fd"))


default_gloo = "--default-gloo" in sys.argv
if not default_gloo:
    rank, size = init("braid")
    world = None
    gloo_of = {None: dist.new_group(backend="gloo")}
    if dist.get_backend() != "braid":
        fail("the default group's backend is %r" % dist.get_backend())
else:
    # The default group on gloo, braid groups made with new_group(backend="braid"): each is a
    # braid communicator of its own, met through its group's store.
    rank, size = init("gloo")
    import braid.torch  # noqa: F401
    world = dist.new_group(backend="braid")
    gloo_of = {world: None}
run_all(world, list(range(size)), "the default group" if world is None else "a braid world group")
# Sub-groups: the odd ranks, highest first in the list (torch sorts them), and ranks 0..2 of 4.
# Of a braid default group, a braid sub-group is a view: it opens no descriptor (its gloo twin
# does).
subsets = [[r for r in range(size) if r % 2 == 1]] + ([[0, 1, 2]] if size >= 4 else [[0]])
for ranks in subsets:
    fds = fd_count()
    sub = dist.new_group(ranks, backend="braid")
    if fd_count() != fds and not default_gloo:
        fail("new_group(%s) opened %d descriptors" % (ranks, fd_count() - fds))
    sub_gloo = dist.new_group(ranks, backend="gloo")
    if rank in ranks:
        gloo_of[sub] = sub_gloo
        import braid.torch
        if not isinstance(sub, braid.torch.ProcessGroupBraid):
            fail("new_group made %r" % sub)
        run_all(sub, ranks, "sub-group %s" % ranks)
# The first group still works after the sub-groups' calls.
check_all_reduce(world, list(range(size)))
# Every group goes while the interpreter is whole, the default one last: a gloo group left to the
# interpreter's exit can abort the process there ("terminate called without an active
# exception": its threads outlive Python's teardown, pytorch#190489), seen once in ~50 runs.
made = [g for pair in gloo_of.items() for g in pair if g is not None]
for g in made:
    dist.destroy_process_group(g)
del made, g, sub, sub_gloo
world = None
gloo_of.clear()
gc.collect()
dist.destroy_process_group()
print("PASS: rank %d of %d: %d checks against gloo%s" %
      (rank, size, checks, " (braid groups of a gloo default group)" if default_gloo else ""),
      flush=True)
