#!/usr/bin/env python3
"""A small GPT-style model trained data-parallel with braid's sharded step from PyTorch (CPU):

    braidrun -n 4 python3 examples/pytorch_sharded.py --preset zero3 --steps 20
    braidrun -n 4 python3 examples/pytorch_sharded.py --reference ddp --steps 20

The parameters are grouped into buckets (the embeddings, each transformer block, the final norm
and head) handed to braid, which holds the sharded parameters, gradients and AdamW states. Each
step the script gathers every bucket and copies it into the model, runs forward and backward on
this rank's own synthetic batch, hands each bucket's flattened gradient to braid (last bucket
first, as backward produces them) and lets braid run AdamW on the mean gradient over ranks.

`--reference ddp` trains the same model on the same data with torch's DistributedDataParallel
over gloo and torch.optim.AdamW (same hyper-parameters), for comparison: rank 0 prints the loss
of every step (the mean over all ranks' batches, before the update) in the same format, and the
two curves agree to about 1e-6 relative (fp32; the sums over ranks are ordered differently).

The model keeps a full copy of the parameters, so this shows the API and the arithmetic, not
the memory saving of zero3 (a framework integration would gather into the layers' storage).
"""
import argparse
import math
import os
import socket
import sys

try:
    import torch
except ImportError:
    # Debian's python3-torch is only seen by Debian's interpreter, not by a pyenv or venv python3
    # that comes first on PATH: run under that one rather than fail.
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("pytorch_sharded: torch is not installed "
             "(tools/install-deps.sh installs python3-torch)")
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

VOCAB, SEQ, D_MODEL, HEADS, LAYERS, BATCH = 64, 32, 64, 4, 2, 8
ADAMW = dict(lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a 4x MLP."""

    def __init__(self, d_model=D_MODEL, heads=HEADS):
        super().__init__()
        self.d, self.heads = d_model, heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.fc, self.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        b, t, _ = x.shape
        d, h = self.d, self.heads
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, d // h).unbind(2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))  # (b, heads, t, head dim)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        # Causal mask made here, not a bool buffer: DDP broadcasts buffers and gloo has no bool.
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """The defaults are the model this example trains; examples/torch_ddp.py also builds larger
    ones (--d-model, --layers) for its step-time benchmark."""

    def __init__(self, d_model=D_MODEL, layers=LAYERS, heads=HEADS):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d_model), nn.Embedding(SEQ, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))

    def buckets(self):
        """Parameter groups handed to braid, in forward order."""
        return [list(self.tok.parameters()) + list(self.pos.parameters())] + \
            [list(b.parameters()) for b in self.blocks] + \
            [list(self.ln.parameters()) + list(self.head.parameters())]


def batch(step, rank):
    """This rank's deterministic batch of `step`: arithmetic sequences mod VOCAB, each with its
    own start and stride, so the next token is predictable from the context."""
    g = torch.Generator().manual_seed(1000003 * step + 7919 * rank + 1)
    start = torch.randint(0, VOCAB, (BATCH, 1), generator=g)
    stride = torch.randint(1, 8, (BATCH, 1), generator=g)
    seq = (start + stride * torch.arange(SEQ + 1)) % VOCAB
    return seq[:, :-1], seq[:, 1:]


def loss_of(model, step, rank):
    x, y = batch(step, rank)
    return F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))


def train_braid(args):
    from braid import Comm, Shard
    comm = Comm.from_env()
    torch.manual_seed(0)  # same initial model on every rank
    model = GPT()
    buckets = model.buckets()
    shard = Shard(comm, args.preset, [torch.cat([p.detach().reshape(-1) for p in ps])
                                      for ps in buckets])
    if comm.rank == 0:
        print("braid %s on %d ranks, %d buckets, %d parameters" %
              (args.preset, comm.size, len(buckets), sum(shard.numel)), flush=True)
    for step in range(args.steps):
        with torch.no_grad():  # the model's parameters := braid's current full buckets
            for b, ps in enumerate(buckets):
                flat, off = torch.frombuffer(shard.gather(b), dtype=torch.float32), 0
                for p in ps:  # copies: braid frees the gathered bucket at release
                    p.copy_(flat[off:off + p.numel()].view_as(p))
                    off += p.numel()
                shard.release(b)
        loss = loss_of(model, step, comm.rank)
        model.zero_grad(set_to_none=False)
        loss.backward()
        for b in reversed(range(len(buckets))):  # the order backward finishes them
            shard.reduce_grad(b, torch.cat([p.grad.reshape(-1) for p in buckets[b]]))
        shard.step(**ADAMW)  # braid divides the gradient sum by the rank count, as DDP does
        mean = comm.allreduce_sum([loss.item()])[0] / comm.size
        if comm.rank == 0:
            print("step %3d  loss %.8f" % (step, mean), flush=True)
    if comm.rank == 0:
        print("braid memory per rank (bytes): %s" % shard.memory(), flush=True)
        t = shard.traffic()
        print("braid traffic of rank 0 (payload bytes sent): intra %d, inter %d; %.3f s of "
              "communication exposed, %.3f s hidden (at most)" %
              (t["intra_total"], t["inter_total"], t["exposed_seconds"], t["hidden_seconds"]),
              flush=True)
    shard.destroy()
    comm.destroy()


def master_port(args):
    """--master-port, else a port rank 0 finds free and shares over a braid communicator (so that
    concurrent jobs, e.g. parallel ctests, do not collide)."""
    if args.master_port:
        return args.master_port
    from braid import Comm
    comm = Comm.from_env()
    port = 0
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = int(comm.allreduce_sum([port])[0])
    comm.destroy()
    return port


def train_ddp(args):
    import datetime
    import torch.distributed as dist
    rank, size = int(os.environ["BRAID_RANK"]), int(os.environ["BRAID_WORLD_SIZE"])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port(args)),
                      RANK=str(rank), WORLD_SIZE=str(size))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are on this host
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(GPT())
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    if rank == 0:
        print("torch DDP (gloo) on %d ranks, %d parameters" %
              (size, sum(p.numel() for p in model.parameters())), flush=True)
    for step in range(args.steps):
        loss = loss_of(model, step, rank)
        opt.zero_grad(set_to_none=False)
        loss.backward()  # DDP all-reduces the gradients and divides by the rank count
        opt.step()
        total = torch.tensor([loss.item()], dtype=torch.float64)
        dist.all_reduce(total)
        if rank == 0:
            print("step %3d  loss %.8f" % (step, total.item() / size), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="zero3", help="braid preset (zero3, zero1, ddp, ...)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reference", choices=["ddp"], help="train with torch DDP + AdamW instead")
    ap.add_argument("--master-port", type=int, default=0, help="gloo's port (--reference ddp)")
    args = ap.parse_args()
    if "BRAID_RANK" not in os.environ:
        sys.exit("pytorch_sharded: run it under braidrun, e.g. braidrun -n 4 python3 %s" %
                 sys.argv[0])
    torch.set_num_threads(1)  # several ranks share the host's cores
    train_ddp(args) if args.reference else train_braid(args)


if __name__ == "__main__":
    main()
