"""ctypes binding of braid's communicator set-up and sharded step (include/braid/shard.h).

Buffers (numpy arrays or torch tensors) are passed by pointer: they must be C-contiguous, hold
exactly the bucket's elements and have the shard's dtype; anything else raises ValueError or
TypeError before braid sees it. A failing braid call raises BraidError with braid's own message
(braidShardGetLastError / braidGetLastError).
"""
import collections
import ctypes
import os

from . import _library

# braidDataType_t values (braid.h; they are NCCL's).
_FLOAT16, _FLOAT32, _FLOAT64, _BFLOAT16 = 6, 7, 8, 9
_DTYPES = {"float32": (_FLOAT32, 4), "float16": (_FLOAT16, 2), "bfloat16": (_BFLOAT16, 2)}
_SUM = 0  # braidSum

_RESULTS = {0: "braidSuccess", 2: "braidErrSystem", 3: "braidErrInternal",
            4: "braidErrInvalidArgument", 5: "braidErrInvalidUsage", 6: "braidErrRemote",
            7: "braidInProgress", 8: "braidErrTimeout", 9: "braidErrAborted"}


class BraidError(RuntimeError):
    """A braid call failed; `code` is its braidResult_t, the text braid's message."""

    def __init__(self, what, code, message):
        self.code = code
        super().__init__("%s failed (%s): %s" % (what, _RESULTS.get(code, code), message))


# --- The C structs, field for field as in shard.h (ctypes lays them out like the C compiler). ---
class _Factor(ctypes.Structure):
    _fields_ = [("intra", ctypes.c_int), ("inter", ctypes.c_int)]


class _Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("ranksPerNode", ctypes.c_int), ("nodes", ctypes.c_int),
                ("p", _Factor), ("g", _Factor), ("os", _Factor),
                ("replicaEveryMicrobatch", ctypes.c_int), ("allowPartialNode", ctypes.c_int),
                ("hpz", ctypes.c_int), ("hpzInt8", ctypes.c_int), ("qwz", ctypes.c_int),
                ("qgz", ctypes.c_int), ("preset", ctypes.c_char * 24),
                ("note", ctypes.c_char * 256)]


class _AdamW(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("lr", ctypes.c_float), ("beta1", ctypes.c_float),
                ("beta2", ctypes.c_float), ("eps", ctypes.c_float), ("weightDecay", ctypes.c_float),
                ("gradDivisor", ctypes.c_double)]


class _SGD(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("lr", ctypes.c_float), ("momentum", ctypes.c_float),
                ("dampening", ctypes.c_float), ("weightDecay", ctypes.c_float),
                ("nesterov", ctypes.c_int)]


class _StepOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("optimizer", ctypes.c_int), ("adamw", _AdamW),
                ("sgd", _SGD), ("gradDivisor", ctypes.c_double), ("maxGradNorm", ctypes.c_float),
                ("lossScale", ctypes.c_float)]


class _StepInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("skipped", ctypes.c_int), ("clipped", ctypes.c_int),
                ("gradNorm", ctypes.c_double), ("lossScale", ctypes.c_float),
                ("nextLossScale", ctypes.c_float), ("step", ctypes.c_int64)]


class _LossScaler(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("initScale", ctypes.c_float),
                ("growthFactor", ctypes.c_float), ("backoffFactor", ctypes.c_float),
                ("growthInterval", ctypes.c_int)]


class _OsShard(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("offset", ctypes.c_size_t), ("count", ctypes.c_size_t),
                ("master", ctypes.POINTER(ctypes.c_float)), ("grad", ctypes.POINTER(ctypes.c_float)),
                ("m", ctypes.POINTER(ctypes.c_float)), ("v", ctypes.POINTER(ctypes.c_float))]


class StepInfo(collections.namedtuple(
        "StepInfo", "step grad_norm skipped clipped loss_scale next_loss_scale")):
    """What a step did (braidShardStepInfo_t): optimizer steps applied so far, the global
    gradient norm before clipping, whether the step was skipped (inf/NaN: fp16 overflow) or
    clipped, the loss scale it divided by and the one to use next (dynamic scaler)."""


class OsShard(collections.namedtuple("OsShard", "offset count master grad m v")):
    """This rank's optimizer-state shard of one bucket during a prepared step
    (braidShardOsShard_t): elements [offset, offset + count) of the bucket; `master` (update it
    in place), `grad`, `m`, `v` are ctypes float arrays over braid's memory
    (torch.frombuffer(x, dtype=torch.float32) views one), valid until finish_step()."""


class _Memory(ctypes.Structure):
    _fields_ = [("params", ctypes.c_uint64), ("grads", ctypes.c_uint64),
                ("optimizer", ctypes.c_uint64), ("total", ctypes.c_uint64)]


# braidShardTraffic_t: payload bytes per purpose and level (docs/sharding.md, "Traffic").
TRAFFIC_PURPOSES = ("gather", "grad_reduce", "replica", "redistribute", "control")


class _Traffic(ctypes.Structure):
    _fields_ = [("intra", ctypes.c_uint64 * 5), ("inter", ctypes.c_uint64 * 5),
                ("intraTotal", ctypes.c_uint64), ("interTotal", ctypes.c_uint64),
                ("collectives", ctypes.c_uint64), ("exposedSeconds", ctypes.c_double),
                ("hiddenSeconds", ctypes.c_double)]


_libs = None


def load_libraries():
    """Loads libbraid.so and libbraid_shard.so once and declares the functions used here."""
    global _libs
    if _libs is not None:
        return _libs
    # libbraid first and global (_library), so that libbraid_shard resolves against this copy.
    core = _library.load_core()
    shard = ctypes.CDLL(_library.find("libbraid_shard.so", "sharding",
                                      "build it (cmake --build build --target braid_shard)"))
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    for lib, name, args in [
            (core, "braidInitFromEnv", [ctypes.POINTER(P)]),
            (core, "braidCommDestroy", [P]),
            (core, "braidCommCount", [P, ctypes.POINTER(I)]),
            (core, "braidCommUserRank", [P, ctypes.POINTER(I)]),
            (core, "braidAllReduce", [P, P, S, I, I, P]),
            (shard, "braidShardPreset", [ctypes.c_char_p, P, ctypes.POINTER(_Config)]),
            (shard, "braidShardReport", [ctypes.POINTER(_Config), I, ctypes.c_uint64,
                                         ctypes.c_char_p, S]),
            (shard, "braidShardCreate", [P, ctypes.POINTER(_Config), I, ctypes.POINTER(S), I,
                                         ctypes.POINTER(P), ctypes.POINTER(P)]),
            (shard, "braidShardGather", [P, I, ctypes.POINTER(P)]),
            (shard, "braidShardRelease", [P, I]),
            (shard, "braidShardReduceGrad", [P, I, P]),
            (shard, "braidShardStepEx", [P, ctypes.POINTER(_StepOptions),
                                         ctypes.POINTER(_StepInfo)]),
            (shard, "braidShardPrepareStep", [P, ctypes.POINTER(_StepOptions),
                                              ctypes.POINTER(_StepInfo)]),
            (shard, "braidShardOptimizerShard", [P, I, ctypes.POINTER(_OsShard)]),
            (shard, "braidShardFinishStep", [P]),
            (shard, "braidShardSetLossScaler", [P, ctypes.POINTER(_LossScaler)]),
            (shard, "braidShardGetLossScale", [P, ctypes.POINTER(ctypes.c_float)]),
            (shard, "braidShardSetPrefetch", [P, I]),
            (shard, "braidShardSave", [P, ctypes.c_char_p]),
            (shard, "braidShardLoad", [P, ctypes.c_char_p]),
            (shard, "braidShardMemory", [P, ctypes.POINTER(_Memory)]),
            (shard, "braidShardTraffic", [P, ctypes.POINTER(_Traffic)]),
            (shard, "braidShardTrafficReset", [P]),
            (shard, "braidShardDestroy", [P])]:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    core.braidGetLastError.argtypes, core.braidGetLastError.restype = [P], ctypes.c_char_p
    shard.braidShardGetLastError.argtypes = [P]
    shard.braidShardGetLastError.restype = ctypes.c_char_p
    _libs = (core, shard)
    return _libs


def _check(rc, what, message):
    if rc != 0:
        raise BraidError(what, rc, message().decode(errors="replace"))


def _buffer(obj, numel, dtype, what):
    """The address of a contiguous numpy array or torch tensor of `numel` elements of `dtype`."""
    if hasattr(obj, "data_ptr"):  # torch.Tensor
        have = str(obj.dtype).replace("torch.", "")
        contiguous, count, ptr = obj.is_contiguous(), obj.numel(), obj.data_ptr()
        if obj.device.type != "cpu":
            raise ValueError("%s: the tensor is on %s; braid's step takes host memory" %
                             (what, obj.device))
    elif hasattr(obj, "__array_interface__"):  # numpy.ndarray
        have = str(obj.dtype)
        contiguous, count, ptr = obj.flags["C_CONTIGUOUS"], obj.size, obj.ctypes.data
    else:
        raise TypeError("%s: expected a torch tensor or a numpy array, got %s" %
                        (what, type(obj).__name__))
    if have != dtype:
        raise TypeError("%s: the buffer holds %s but the shard's parameters are %s" %
                        (what, have, dtype))
    if not contiguous:
        raise ValueError("%s: the buffer is not contiguous (call .contiguous() first)" % what)
    if count != numel:
        raise ValueError("%s: the buffer holds %d elements, the bucket %d" % (what, count, numel))
    return ctypes.c_void_p(ptr)


class Comm:
    """A braid communicator over all ranks of the job."""

    def __init__(self, handle):
        self._core, _ = load_libraries()
        self.handle = handle
        rank, size = ctypes.c_int(), ctypes.c_int()
        self._call("braidCommUserRank", handle, ctypes.byref(rank))
        self._call("braidCommCount", handle, ctypes.byref(size))
        self.rank, self.size = rank.value, size.value

    @classmethod
    def from_env(cls):
        """braidInitFromEnv(): the rank, size and rendezvous braidrun put in the environment."""
        core, _ = load_libraries()
        if "BRAID_RANK" not in os.environ:
            raise BraidError("braidInitFromEnv", 5,
                             "BRAID_RANK is not set: launch with braidrun -n N python3 ...")
        handle = ctypes.c_void_p()
        _check(core.braidInitFromEnv(ctypes.byref(handle)), "braidInitFromEnv",
               lambda: core.braidGetLastError(None))
        return cls(handle)

    def _call(self, name, *args):
        _check(getattr(self._core, name)(*args), name,
               lambda: self._core.braidGetLastError(self.handle))

    def allreduce_sum(self, values):
        """The sums over the ranks of a list of floats (in float64)."""
        buf = (ctypes.c_double * len(values))(*values)
        self._call("braidAllReduce", buf, buf, len(values), _FLOAT64, _SUM, self.handle)
        return list(buf)

    def destroy(self):
        if self.handle:
            self._call("braidCommDestroy", self.handle)
            self.handle = None


class Shard:
    """A sharded model: braid holds the P, G and OS shards of `buckets` and runs the step.

    `init` is one buffer per bucket (its full initial values, identical on every rank); the
    buckets' sizes and the parameter dtype (float32, float16, bfloat16) are taken from them.
    """

    def __init__(self, comm, preset, init, dtype="float32"):
        self._core, self._lib = load_libraries()
        if dtype not in _DTYPES:
            raise ValueError("dtype must be one of %s, not %r" % (sorted(_DTYPES), dtype))
        self.comm, self.dtype, self.handle = comm, dtype, None
        self._type, self._esize = _DTYPES[dtype]
        self.numel = [int(b.numel() if hasattr(b, "data_ptr") else b.size) for b in init]
        self.config = _Config(size=ctypes.sizeof(_Config))
        _check(self._lib.braidShardPreset(preset.encode(), comm.handle, ctypes.byref(self.config)),
               "braidShardPreset(%r)" % preset, lambda: self._lib.braidShardGetLastError(None))
        ptrs = [_buffer(b, n, dtype, "initial bucket %d" % i)
                for i, (b, n) in enumerate(zip(init, self.numel))]
        handle = ctypes.c_void_p()
        _check(self._lib.braidShardCreate(
            comm.handle, ctypes.byref(self.config), len(init),
            (ctypes.c_size_t * len(init))(*self.numel), self._type,
            (ctypes.c_void_p * len(init))(*ptrs), ctypes.byref(handle)),
            "braidShardCreate", lambda: self._lib.braidShardGetLastError(None))
        self.handle = handle

    def _call(self, name, *args):
        _check(getattr(self._lib, name)(self.handle, *args), name,
               lambda: self._lib.braidShardGetLastError(self.handle))

    def report(self, phi=0):
        """braidShardReport(): what this rank holds and which collectives run, as text."""
        buf = ctypes.create_string_buffer(16384)
        _check(self._lib.braidShardReport(ctypes.byref(self.config), self.comm.rank, phi, buf,
                                          len(buf)),
               "braidShardReport", lambda: self._lib.braidShardGetLastError(None))
        return buf.value.decode()

    def gather(self, bucket):
        """The full parameters of `bucket`: a ctypes array over braid's memory (of the dtype's
        element size; torch.frombuffer(a, dtype=...) views it), valid until release(bucket)."""
        if not 0 <= bucket < len(self.numel):
            raise IndexError("bucket %d: the shard has %d buckets" % (bucket, len(self.numel)))
        ptr = ctypes.c_void_p()
        self._call("braidShardGather", bucket, ctypes.byref(ptr))
        elem = {4: ctypes.c_float, 2: ctypes.c_uint16}[self._esize]
        return (elem * self.numel[bucket]).from_address(ptr.value)

    def release(self, bucket):
        self._call("braidShardRelease", bucket)

    def reduce_grad(self, bucket, grad):
        """Hands over the full gradient of `bucket` (copied before this returns)."""
        if not 0 <= bucket < len(self.numel):
            raise IndexError("bucket %d: the shard has %d buckets" % (bucket, len(self.numel)))
        self._call("braidShardReduceGrad", bucket,
                   _buffer(grad, self.numel[bucket], self.dtype, "gradient of bucket %d" % bucket))

    @staticmethod
    def _options(optimizer, lr, betas, eps, weight_decay, momentum, dampening, nesterov,
                 max_grad_norm, loss_scale, grad_divisor):
        if optimizer not in ("adamw", "sgd"):
            raise ValueError("optimizer must be 'adamw' or 'sgd', not %r" % (optimizer,))
        return _StepOptions(
            size=ctypes.sizeof(_StepOptions), optimizer=0 if optimizer == "adamw" else 1,
            adamw=_AdamW(size=ctypes.sizeof(_AdamW), lr=lr, beta1=betas[0], beta2=betas[1],
                         eps=eps, weightDecay=weight_decay),
            sgd=_SGD(size=ctypes.sizeof(_SGD), lr=lr, momentum=momentum, dampening=dampening,
                     weightDecay=weight_decay, nesterov=1 if nesterov else 0),
            gradDivisor=grad_divisor, maxGradNorm=max_grad_norm, lossScale=loss_scale)

    @staticmethod
    def _info(info):
        return StepInfo(info.step, info.gradNorm, bool(info.skipped), bool(info.clipped),
                        info.lossScale, info.nextLossScale)

    def step(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, max_grad_norm=0.0,
             optimizer="adamw", momentum=0.9, dampening=0.0, nesterov=False, loss_scale=0.0,
             grad_divisor=0.0):
        """The optimizer on braid's OS shards, in fp32, on the gradient sum divided by
        grad_divisor (0: ranks x micro-batches, the mean) x the loss scale: "adamw"
        (torch.optim.AdamW's formula: lr, betas, eps, weight_decay) or "sgd" (torch.optim.SGD's:
        lr, momentum, dampening, nesterov, weight_decay). max_grad_norm > 0 clips the global
        norm; loss_scale is what the loss was multiplied by (0: the dynamic scaler's, see
        set_loss_scaler, else 1). Collective. Returns a StepInfo; a step skipped for an
        overflow returns normally with skipped=True."""
        opts = self._options(optimizer, lr, betas, eps, weight_decay, momentum, dampening,
                             nesterov, max_grad_norm, loss_scale, grad_divisor)
        info = _StepInfo(size=ctypes.sizeof(_StepInfo))
        self._call("braidShardStepEx", ctypes.byref(opts), ctypes.byref(info))
        return self._info(info)

    def prepare_step(self, max_grad_norm=0.0, loss_scale=0.0, grad_divisor=0.0):
        """The optimizer escape hatch, part 1: the boundary work of step() (reduction, overflow
        check, norm, clipping) without the update; then optimizer_shard(b) gives each bucket's
        OS shard to update, and finish_step() redistributes it. Gather, reduce_grad and step
        are refused in between. Collective. Returns a StepInfo (skipped: leave master alone)."""
        opts = self._options("adamw", 0.0, (0.9, 0.999), 0.0, 0.0, 0.0, 0.0, False,
                             max_grad_norm, loss_scale, grad_divisor)
        info = _StepInfo(size=ctypes.sizeof(_StepInfo))
        self._call("braidShardPrepareStep", ctypes.byref(opts), ctypes.byref(info))
        return self._info(info)

    def optimizer_shard(self, bucket):
        """This rank's OS shard of `bucket` during a prepared step, as an OsShard."""
        if not 0 <= bucket < len(self.numel):
            raise IndexError("bucket %d: the shard has %d buckets" % (bucket, len(self.numel)))
        view = _OsShard(size=ctypes.sizeof(_OsShard))
        self._call("braidShardOptimizerShard", bucket, ctypes.byref(view))
        n = view.count

        def arr(ptr):
            return (ctypes.c_float * n).from_address(ctypes.addressof(ptr.contents)) if n else \
                (ctypes.c_float * 0)()
        return OsShard(view.offset, n, arr(view.master), arr(view.grad), arr(view.m),
                       arr(view.v))

    def finish_step(self):
        """The optimizer escape hatch, part 2: redistributes the updated master weights."""
        self._call("braidShardFinishStep")

    def set_loss_scaler(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
                        growth_interval=2000, enable=True):
        """Dynamic loss scaling (torch.cuda.amp.GradScaler's rule); enable=False turns it off.
        Every rank must pass the same values."""
        if not enable:
            self._call("braidShardSetLossScaler", None)
            return
        scaler = _LossScaler(size=ctypes.sizeof(_LossScaler), initScale=init_scale,
                             growthFactor=growth_factor, backoffFactor=backoff_factor,
                             growthInterval=growth_interval)
        self._call("braidShardSetLossScaler", ctypes.byref(scaler))

    def loss_scale(self):
        """The scale to multiply the next loss by (1 without a dynamic scaler)."""
        scale = ctypes.c_float()
        self._call("braidShardGetLossScale", ctypes.byref(scale))
        return scale.value

    def set_prefetch(self, enable):
        """Turns the prefetch of the next bucket's gather on or off. Collective: every rank
        must pass the same value (different ones raise BraidError on every rank)."""
        self._call("braidShardSetPrefetch", 1 if enable else 0)

    def save(self, directory):
        """Checkpoint: every rank writes its shards into `directory` (which must exist and be
        visible to every rank), rank 0 the manifest. Collective."""
        self._call("braidShardSave", os.fsencode(directory))

    def load(self, directory):
        """Loads a checkpoint written by save(), under this shard's configuration and rank
        count (which may differ from the saving job's). Collective."""
        self._call("braidShardLoad", os.fsencode(directory))

    def memory(self):
        """Bytes this rank allocated per state: dict of params, grads, optimizer, total."""
        mem = _Memory()
        self._call("braidShardMemory", ctypes.byref(mem))
        return {f: getattr(mem, f) for f, _ in _Memory._fields_}

    def traffic(self):
        """Payload bytes this rank sent since create or reset_traffic(): a dict with `intra` and
        `inter` (dicts by purpose: gather, grad_reduce, replica, redistribute, control), the
        totals, the number of collectives, and the timeline (exposed_seconds, hidden_seconds)."""
        t = _Traffic()
        self._call("braidShardTraffic", ctypes.byref(t))
        return {"intra": dict(zip(TRAFFIC_PURPOSES, t.intra)),
                "inter": dict(zip(TRAFFIC_PURPOSES, t.inter)),
                "intra_total": t.intraTotal, "inter_total": t.interTotal,
                "collectives": t.collectives, "exposed_seconds": t.exposedSeconds,
                "hidden_seconds": t.hiddenSeconds}

    def reset_traffic(self):
        """Zeroes the counters of traffic()."""
        self._call("braidShardTrafficReset")

    def destroy(self):
        if self.handle:
            self._call("braidShardDestroy")
            self.handle = None
