"""braid's Python binding: ctypes over libbraid.so and libbraid_shard.so (no compiled extension).

    from braid import Comm, Shard
    comm = Comm.from_env()                    # under braidrun, like braidInitFromEnv() in C
    shard = Shard(comm, "zero3", [w0, w1])     # full initial buckets, identical on every rank
    p = shard.gather(0)                        # ctypes view of the full bucket until release(0)

See docs/sharding.md ("Python and PyTorch") and examples/pytorch_sharded.py.
"""
from .shard import BraidError, Comm, OsShard, Shard, StepInfo, load_libraries

__all__ = ["BraidError", "Comm", "OsShard", "Shard", "StepInfo", "load_libraries"]
