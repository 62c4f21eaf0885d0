#!/usr/bin/env python3
"""torch's DistributedDataParallel on braid: `import braid.torch`, then
init_process_group("braid") and DDP as with any backend. Trains the GPT of
examples/pytorch_sharded.py (same data, same seeds) with torch.optim.AdamW; `--backend gloo`
trains the same model over gloo, for comparison:

    torchrun --standalone --nproc_per_node 4 --redirects 1 --tee 1 examples/torch_ddp.py
    torchrun --standalone --nproc_per_node 4 --redirects 1 --tee 1 examples/torch_ddp.py --backend gloo
    build/tools/braidrun -n 4 -- python3 examples/torch_ddp.py

(torchrun is `/usr/bin/python3 -m torch.distributed.run`; torch 1.13's fails on Python 3.11
unless --redirects and --tee are given non-zero values, which send each rank's output to a log
folder and to the console.)
Rank 0 prints the loss of every step (the mean over all ranks' batches, before the update) and,
with --bench, the median time of a training step (forward, backward with DDP's bucketed
all-reduces overlapping it, optimizer step) after --warmup steps. --d-model and --layers build a
larger model (the benchmark's). Under torchrun the ranks meet through env://; under braidrun
(BRAID_RANK, BRAID_WORLD_SIZE) through a file:// store named after braidrun's job id.
"""
import argparse
import datetime
import hashlib
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import pytorch_sharded as gpt  # noqa: E402  (re-runs under Debian's python3 when torch is missing)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402


def init(backend, timeout_s):
    if "RANK" in os.environ:  # torchrun, or any launcher that sets its variables
        rank, size, method = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://"
    elif "BRAID_RANK" in os.environ:  # braidrun
        rank, size = int(os.environ["BRAID_RANK"]), int(os.environ["BRAID_WORLD_SIZE"])
        job = hashlib.sha1(os.environ["BRAID_UNIQUE_ID"].encode()).hexdigest()[:16]
        method = "file:///tmp/braid-torch-ddp-" + job
    else:
        sys.exit("torch_ddp: run it under torchrun (python3 -m torch.distributed.run) or braidrun")
    if backend == "braid":
        import braid.torch  # noqa: F401  (registers the backend "braid")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo on one host
    dist.init_process_group(backend, init_method=method, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return rank, size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="braid", help="braid (default) or gloo")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--d-model", type=int, default=gpt.D_MODEL)
    ap.add_argument("--layers", type=int, default=gpt.LAYERS)
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    ap.add_argument("--bench", action="store_true", help="print the median step time")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300, help="the group's timeout, seconds")
    args = ap.parse_args()
    torch.set_num_threads(1)  # several ranks share the host's cores
    rank, size = init(args.backend, args.timeout)
    torch.manual_seed(0)  # the same initial model on every rank (DDP also broadcasts it)
    model = nn.parallel.DistributedDataParallel(gpt.GPT(args.d_model, args.layers),
                                                bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.AdamW(model.parameters(), **gpt.ADAMW)
    if rank == 0:
        print("torch DDP (%s) on %d ranks, %d parameters" %
              (args.backend, size, sum(p.numel() for p in model.parameters())), flush=True)
    times = []
    for step in range(args.steps):
        start = time.perf_counter()
        loss = gpt.loss_of(model, step, rank)
        opt.zero_grad(set_to_none=False)
        loss.backward()  # DDP all-reduces the gradients in buckets as backward produces them
        opt.step()
        times.append(time.perf_counter() - start)
        total = torch.tensor([loss.item()], dtype=torch.float64)
        dist.all_reduce(total)
        if rank == 0:
            print("step %3d  loss %.12f" % (step, total.item() / size), flush=True)
    if args.bench and rank == 0:
        steady = times[args.warmup:] or times
        print("ddp %s on %d ranks: d_model %d, %d layers: median step %.3f ms over %d steps" %
              (args.backend, size, args.d_model, args.layers, 1e3 * statistics.median(steady),
               len(steady)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
