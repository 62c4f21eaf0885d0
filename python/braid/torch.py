"""braid as a torch.distributed backend. Importing this module registers the backend "braid":

    import braid.torch  # noqa: F401
    torch.distributed.init_process_group("braid")          # under torchrun, or any init_method
    model = torch.nn.parallel.DistributedDataParallel(model)

Ranks meet through torch's own store (rank 0 puts braid's unique id there), so torchrun and
init_method env://, tcp:// or file:// need nothing else. `new_group(ranks)` makes a view of the
default group's communicator (braidCommSplitRanks: no socket, no thread); its ranks must call the
default group and the sub-group in the same order, as braid's views require (docs/torch.md).
The group's timeout is braid's per-operation deadline unless BRAID_TIMEOUT is set. CPU tensors
only until braid's device path is built. See docs/torch.md.
"""
import datetime

import torch.distributed as _dist

from . import _library

_ext = _library.load_torch_extension()
ProcessGroupBraid = _ext.ProcessGroupBraid

__all__ = ["ProcessGroupBraid", "describe"]


def _timeout(t):
    if isinstance(t, datetime.timedelta):
        return t
    return datetime.timedelta(seconds=float(t))


def _create(opts, pg_options=None):
    """torch's creator (extended API): the default group, or a sub-group of it."""
    ranks = list(opts.global_ranks_in_group)
    timeout = _timeout(opts.timeout)
    if ranks:
        default = _dist.distributed_c10d._get_default_group()
        if isinstance(default, ProcessGroupBraid):
            # Global ranks are the default group's ranks.
            return ProcessGroupBraid.create_view(default, ranks, str(opts.group_id))
    # The default group, or a braid sub-group of a default group of another backend: a
    # communicator of its own, met through this group's store.
    return ProcessGroupBraid.create(opts.store, opts.group_rank, opts.group_size, timeout)


def describe(group=None):
    """braidCommDescribe of a braid group (the default group when None)."""
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupBraid):
        raise TypeError("braid.torch.describe: %r is not a braid process group" % (pg,))
    return pg.describe()


if "BRAID" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("braid", _create, extended_api=True)
