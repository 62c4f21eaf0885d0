"""Issue 39: PyTorch's own NCCL backend (torch.distributed, backend "nccl") on braid's libnccl.so.2.

Run by tools/gpu-check with LD_PRELOAD=<braid's libnccl.so.2>, so that ProcessGroupNCCL's NCCL
calls resolve to braid's before the libnccl.so.2 of PyTorch's own wheel. 2 ranks (spawned here)
on one GPU, as braid allows and NVIDIA's NCCL refuses; CUDA tensors, no host copies by the test.
Checks, bit-exactly (small integers in fp32 and int32, every sum exact):
  - all_reduce (sum, int32 and fp32) in place, on the current stream, read back after a
    kernel that runs after it on the same stream (no synchronisation in between);
  - all_gather_into_tensor and all_gather (list form);
  - which library served the calls: braid's alone (its version is NCCL's 2.28.9, so the check
    reads the libraries the process mapped instead).
Exit 0 pass, 1 a wrong result or an error (the message says which rank and call), 77 no GPU.
"""
import os
import sys
import traceback


def rank_main(rank, size, port, results):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(0)  # every rank on the one GPU
    dev = torch.device("cuda", 0)
    try:
        dist.init_process_group("nccl", rank=rank, world_size=size, device_id=dev)
        n = 1 << 20
        for dtype in (torch.int32, torch.float32):
            x = (torch.arange(n, device=dev, dtype=torch.int64) % 1000 + rank * 7).to(dtype)
            dist.all_reduce(x)
            y = x * 2  # a kernel on the same stream, after the collective
            want = sum((torch.arange(n, device=dev, dtype=torch.int64) % 1000 + r * 7)
                       for r in range(size)).to(dtype) * 2
            if not torch.equal(y, want):
                bad = (y != want).nonzero()[0].item()
                raise AssertionError(f"all_reduce {dtype}: element {bad} is {y[bad].item()}, "
                                     f"want {want[bad].item()}")
        part = torch.full((4096,), rank + 1, device=dev, dtype=torch.float32)
        out = torch.empty(4096 * size, device=dev, dtype=torch.float32)
        dist.all_gather_into_tensor(out, part)
        for r in range(size):
            if not torch.all(out[r * 4096:(r + 1) * 4096] == r + 1):
                raise AssertionError(f"all_gather_into_tensor: part {r} is wrong")
        parts = [torch.empty(1000, device=dev, dtype=torch.int32) for _ in range(size)]
        dist.all_gather(parts, torch.full((1000,), 10 * rank, device=dev, dtype=torch.int32))
        for r, p in enumerate(parts):
            if not torch.all(p == 10 * r):
                raise AssertionError(f"all_gather: part {r} is wrong")
        torch.cuda.synchronize()
        # Which libnccl.so.2 files this process mapped: braid's only (the preload), or NVIDIA's
        # too (then ProcessGroupNCCL may have bound to it, not to braid's).
        with open("/proc/self/maps") as f:
            mapped = {line.split()[-1] for line in f if "libnccl.so" in line}
        braid = os.path.realpath(os.environ.get("LD_PRELOAD", "-"))
        others = sorted(m for m in mapped if os.path.realpath(m) != braid)
        served_by_braid = braid in {os.path.realpath(m) for m in mapped} and not others
        dist.destroy_process_group()
        results.put((rank, "ok" if served_by_braid else
                     f"results right, but not braid's library alone: mapped {sorted(mapped)}"))
    except Exception:
        results.put((rank, traceback.format_exc()))


def main():
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("torch_nccl_check: no PyTorch here")
        return 77
    if not torch.cuda.is_available():
        print("torch_nccl_check: skipped: no GPU")
        return 77
    print(f"torch {torch.__version__}, cuda {torch.version.cuda}, "
          f"nccl version seen by torch {torch.cuda.nccl.version()}, "
          f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}")
    size = 2
    port = 29500 + os.getpid() % 1000
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, size, port, results)) for r in range(size)]
    for p in procs:
        p.start()
    outcome = {}
    try:
        for _ in range(size):
            r, msg = results.get(timeout=180)
            outcome[r] = msg
    except Exception:
        print("torch_nccl_check: a rank did not report within 180 s")
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    ok = len(outcome) == size and all(m == "ok" for m in outcome.values())
    for r in sorted(outcome):
        print(f"[rank {r}] {outcome[r]}")
    print(f"torch_nccl_check: {size} ranks on one GPU, backend nccl on braid: "
          f"{'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
