#!/usr/bin/env python3
"""perf/torch_compare.py: torch.distributed on backend braid against backend gloo, side by side in
one job (the same processes, calls interleaved so background load hits both alike):

    python3 perf/torch_compare.py -n 4 [--coll all_reduce,all_gather_into_tensor] [-b 8] [-e 256M]
                                  [-f 8] [--reps 5] [--ddp] [--ddp-steps 20] [--d-model 64,256]

Each rank initialises a braid default group and a gloo group over the same ranks
(new_group(backend="gloo")). Per size, it times --reps repetitions of each backend's call,
alternating braid and gloo; a repetition is a barrier, then `iters` calls (async_op=False, so
each call is waited for) of float32 tensors, and its time per call is the slowest rank's. It
prints the median per call and braid / gloo (< 1: braid is faster).

Collectives: all_reduce (sum, in place) and all_gather_into_tensor. torch 1.13's gloo has no
all_gather_into_tensor; its column is gloo's all_gather into a list of N tensors (the nearest
gloo has), braid's is the real all_gather_into_tensor. Sizes are the whole buffer (all-gather:
the output), like perf/compare's. torch's MPI backend is absent from Debian's torch
(torch.distributed.is_mpi_available() is False): there is no MPI column.

--ddp times DistributedDataParallel training steps of examples/pytorch_sharded.py's GPT
(examples/torch_ddp.py's model; d_model from --d-model, 2 layers) on a braid group, on a gloo
group and, for the step without communication, in DDP's no_sync() context, alternating steps:
the median step time of each (forward, backward with DDP's bucketed all-reduces, AdamW step)
after 3 warm-up steps, and the communication each adds (its step minus the no_sync step; on
CPU the step is mostly compute, so the step ratio says little and the communication ratio is
the one to read).

Launch: with -n N this script starts N ranks of itself with torchrun's variables (or run it
under torchrun / python3 -m torch.distributed.run). Run it under the shared lock:
`flock /tmp/braid-bench.lock python3 perf/torch_compare.py -n 4`.
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_size(text):
    units = {"": 0, "K": 10, "M": 20, "G": 30}
    t = text.strip().upper()
    unit = t[-1] if t[-1] in units else ""
    return int(t[:-1] if unit else t) << units[unit]


def human(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


def iters_for(nbytes):
    """Calls per repetition: about the same wall time per size on a 2-core machine."""
    if nbytes <= 64 << 10:
        return 200
    if nbytes <= 1 << 20:
        return 50
    if nbytes <= 16 << 20:
        return 10
    return 2


def launch(args):
    """Starts the ranks of this script with torchrun's variables; returns the exit status."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = sys.executable
    procs = []
    for r in range(args.n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(args.n), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([exe, os.path.abspath(__file__)] + sys.argv[1:], env=env,
                                      start_new_session=True))
    deadline = time.monotonic() + args.timeout
    # Until all exit, one fails (the others would wait for it) or the time is up.
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline and \
            not any(p.poll() for p in procs):
        time.sleep(0.1)
    status = 0
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            status = 1
        p.wait()
        status = status or p.returncode
    if status:
        print("torch_compare: a rank failed or ran past --timeout %d s" % args.timeout)
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=0, help="start N ranks (else: run as a rank)")
    ap.add_argument("--coll", default="all_reduce,all_gather_into_tensor")
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="256M")
    ap.add_argument("-f", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ddp", action="store_true", help="also time DDP training steps")
    ap.add_argument("--ddp-only", action="store_true", help="only the DDP steps")
    ap.add_argument("--ddp-steps", type=int, default=10)
    ap.add_argument("--d-model", default="64,256")
    ap.add_argument("--timeout", type=int, default=280, help="seconds before the ranks are killed")
    args = ap.parse_args()
    if "RANK" not in os.environ:
        if args.n < 1:
            sys.exit("torch_compare: pass -n N, or run it under torchrun")
        return launch(args)

    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    import torch.distributed as dist
    import braid.torch  # noqa: F401
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("braid", timeout=datetime.timedelta(seconds=args.timeout))
    rank, n = dist.get_rank(), dist.get_world_size()
    braid_g = dist.group.WORLD
    gloo_g = dist.new_group(backend="gloo")

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, dist.ReduceOp.MAX, group=gloo_g)
        return t.item()

    def out(line):
        if rank == 0:
            print(line, flush=True)

    out("# torch %s, %d ranks on one host, float32; braid/gloo < 1: braid faster; times are "
        "per call, median of %d repetitions, slowest rank" % (torch.__version__, n, args.reps))
    out("# torch MPI backend: %s" % ("available" if dist.is_mpi_available() else
                                     "not in this torch build (no column)"))
    if not args.ddp_only:
        sizes, s = [], parse_size(args.b)
        while s <= parse_size(args.e):
            sizes.append(s)
            s *= args.f
        if sizes[-1] != parse_size(args.e):
            sizes.append(parse_size(args.e))
        for coll in args.coll.split(","):
            out("\n# %s%s" % (coll, " (gloo column: all_gather into a list; gloo has no "
                              "all_gather_into_tensor)" if coll == "all_gather_into_tensor"
                              else ", sum, in place"))
            out("%10s %6s %14s %14s %10s" % ("bytes", "iters", "braid us", "gloo us",
                                             "braid/gloo"))
            for nbytes in sizes:
                count = max(1, nbytes // 4)
                if coll == "all_gather_into_tensor":
                    count = max(1, count // n)
                    x = torch.ones(count)
                    flat = torch.empty(count * n)
                    outs = [torch.empty(count) for _ in range(n)]
                    calls = {"braid": lambda: dist.all_gather_into_tensor(flat, x, group=braid_g),
                             "gloo": lambda: dist.all_gather(outs, x, group=gloo_g)}
                else:
                    x = torch.ones(count)
                    calls = {"braid": lambda: dist.all_reduce(x, group=braid_g),
                             "gloo": lambda: dist.all_reduce(x, group=gloo_g)}
                iters = iters_for(nbytes)
                times = {"braid": [], "gloo": []}
                for name in ("braid", "gloo"):  # warm-up (connections, buffers)
                    calls[name]()
                for _ in range(args.reps):
                    for name in ("braid", "gloo"):
                        dist.barrier(group=gloo_g)
                        start = time.perf_counter()
                        for _ in range(iters):
                            calls[name]()
                        times[name].append(slowest((time.perf_counter() - start) / iters))
                b, g = statistics.median(times["braid"]), statistics.median(times["gloo"])
                out("%10s %6d %14.1f %14.1f %10.3f" % (human(count * 4 * (
                    n if coll == "all_gather_into_tensor" else 1)), iters, b * 1e6, g * 1e6, b / g))
    if args.ddp or args.ddp_only:
        import pytorch_sharded as gpt
        import torch.nn as nn
        out("\n# DDP step (forward, backward with bucketed all-reduces, AdamW), GPT of "
            "examples/pytorch_sharded.py, 2 layers, batch 8 x 32 tokens per rank; median of %d "
            "steps after 3 warm-up, steps alternating between braid, gloo and a third model in "
            "DDP's no_sync() (the same step without communication); comm = step - no_sync "
            "step: what the all-reduces add to the step" % args.ddp_steps)
        out("%8s %11s %10s %10s %10s %10s %10s %10s %10s" % (
            "d_model", "parameters", "braid ms", "gloo ms", "nosync ms", "braid/gloo",
            "b comm ms", "g comm ms", "comm b/g"))
        for d in [int(v) for v in args.d_model.split(",")]:
            runs = {}
            for name, group in (("braid", braid_g), ("gloo", gloo_g), ("nosync", gloo_g)):
                torch.manual_seed(0)
                model = nn.parallel.DistributedDataParallel(gpt.GPT(d, 2), process_group=group)
                runs[name] = (model, torch.optim.AdamW(model.parameters(), **gpt.ADAMW))
            times = {name: [] for name in runs}
            for step in range(args.ddp_steps + 3):
                for name in ("braid", "gloo", "nosync"):
                    model, opt = runs[name]
                    dist.barrier(group=gloo_g)
                    start = time.perf_counter()
                    loss = gpt.loss_of(model, step, rank)
                    opt.zero_grad(set_to_none=False)
                    if name == "nosync":
                        with model.no_sync():
                            loss.backward()
                    else:
                        loss.backward()
                    opt.step()
                    t = slowest(time.perf_counter() - start)
                    if step >= 3:
                        times[name].append(t)
            params = sum(p.numel() for p in runs["braid"][0].parameters())
            b, g, z = (statistics.median(times[k]) for k in ("braid", "gloo", "nosync"))
            out("%8d %11d %10.2f %10.2f %10.2f %10.3f %10.2f %10.2f %10.3f" % (
                d, params, b * 1e3, g * 1e3, z * 1e3, b / g, (b - z) * 1e3, (g - z) * 1e3,
                (b - z) / (g - z) if g > z else float("nan")))
    dist.destroy_process_group()
    out("# torch_compare: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
