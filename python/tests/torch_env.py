"""Shared set-up of the torch backend's rank scripts: the rank and size from torchrun's
variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: init_method env://) or braidrun's
(BRAID_RANK, BRAID_WORLD_SIZE: a file:// store named by torch_launch.py, or after the job's
unique id), and init_process_group with a timeout. First thing in a rank script:
`from torch_env import torch, dist, init`."""
import datetime
import hashlib
import os

from torch_or_skip import torch  # noqa: F401 (sets the path, re-runs under Debian's python)
import torch.distributed as dist  # noqa: E402


def rank_and_size():
    if "RANK" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "BRAID_RANK" in os.environ:
        return int(os.environ["BRAID_RANK"]), int(os.environ["BRAID_WORLD_SIZE"])
    return 0, 1


def init_method():
    if "MASTER_ADDR" in os.environ:
        return "env://"
    path = os.environ.get("BRAID_TORCH_TEST_STORE")
    if not path:
        key = os.environ.get("BRAID_UNIQUE_ID", "single-%d" % os.getpid())
        path = "/tmp/braid-torch-%s" % hashlib.sha1(key.encode()).hexdigest()[:16]
    return "file://" + path


def init(backend="braid", timeout_s=120):
    """init_process_group(backend) over every rank of the launcher; returns (rank, size)."""
    rank, size = rank_and_size()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks on this host
    if backend == "braid":
        import braid.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(backend, init_method=init_method(), rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return rank, size
