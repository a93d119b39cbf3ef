"""tpcomm for PyTorch: collectives as torch ops registered with the dispatcher in C++.

    import tpcomm.torch as tt
    comm = tt.Communicator.from_process_group()     # any initialized torch.distributed group
    comm.all_reduce(t)                               # in place, like dist.all_reduce(t)
    y = comm.all_reduce(t, inplace=False)            # out of place

The ops run on torch's current CUDA stream (CPU tensors: host ranks, synchronous), are captured
by torch.cuda.graph, and trace under torch.compile(fullgraph=True) (Meta kernels, no graph
break). Errors raise RuntimeError carrying tpcomm's message. The C++ ops are compiled against the
installed torch at first import (cached); the rest of `tpcomm` does not need torch.
"""
import torch

import tpcomm
from tpcomm.torch._build import load_ops

load_ops()

_OPS = {"sum": 0, "max": 1, "min": 2}
_ops = torch.ops.tpcomm


def _op_code(op):
    if isinstance(op, str):
        code = _OPS.get(op.lower())
    else:  # torch.distributed.ReduceOp
        code = _OPS.get(str(op).split(".")[-1].lower())
    if code is None:
        raise tpcomm.InvalidArgumentError(1, "op=%r: expected 'sum', 'max' or 'min'" % (op,))
    return code


class Communicator:
    """A tpcomm communicator for torch tensors; see tpcomm.Communicator for the arguments.
    device None: the current CUDA device when CUDA is available, else -1 (host rank)."""

    def __init__(self, nranks, unique_id, rank, device=None, **kwargs):
        if device is None:
            device = torch.cuda.current_device() if torch.cuda.is_available() else -1
        self.comm = tpcomm.Communicator(nranks, unique_id, rank, device=device, **kwargs)
        self.rank, self.size, self.device = rank, nranks, device
        self._h = self.comm._comm.value

    @classmethod
    def from_process_group(cls, group=None, device=None, **kwargs):
        """Uses `group` (default: the world) only to share the unique id, made by its rank 0.
        device None: the current CUDA device for an NCCL group, else -1 (host rank)."""
        import torch.distributed as dist

        rank, size = dist.get_rank(group), dist.get_world_size(group)
        src = dist.get_global_rank(group, 0) if group is not None else 0
        obj = [bytes(tpcomm.UniqueId.generate()) if rank == 0 else None]
        dist.broadcast_object_list(obj, src=src, group=group)
        if device is None:
            device = torch.cuda.current_device() if dist.get_backend(group) == "nccl" else -1
        return cls(size, tpcomm.UniqueId(obj[0]), rank, device=device, **kwargs)

    def _check_device(self, t, fn):
        if t.is_cuda != (self.device >= 0):
            raise tpcomm.InvalidArgumentError(1, "%s: tensor is on %s but this communicator is %s" % (
                fn, t.device, "a host rank (device -1)" if self.device < 0 else "on CUDA device %d" % self.device))

    def all_reduce(self, tensor, op="sum", inplace=True, compression=None):
        """In place (returns `tensor`), like dist.all_reduce; inplace=False returns a new tensor.
        compression "none" / "fp8" / "int8" overrides the communicator's for this call (the same on
        every rank; docs/compression.md); None keeps the communicator's."""
        self._check_device(tensor, "all_reduce")
        if compression is not None and not isinstance(compression, str):
            raise tpcomm.InvalidArgumentError(1, "all_reduce: compression=%r: expected 'none', 'fp8', 'int8' or None"
                                              % (compression,))
        if inplace:
            _ops.all_reduce_(tensor, self._h, _op_code(op), compression)
            return tensor
        return _ops.all_reduce(tensor, self._h, _op_code(op), compression)

    def reduce_scatter(self, tensor, op="sum"):
        """Reduces over ranks and returns this rank's slice of the first dimension."""
        self._check_device(tensor, "reduce_scatter")
        return _ops.reduce_scatter(tensor, self._h, _op_code(op), self.size)

    def all_gather(self, tensor):
        """Concatenates every rank's tensor along the first dimension."""
        self._check_device(tensor, "all_gather")
        return _ops.all_gather(tensor, self._h, self.size)

    def all_reduce_residual_rmsnorm(self, x, residual, weight, eps=1e-6):
        """x summed over ranks; residual += that (in place); returns rmsnorm(residual) * weight."""
        self._check_device(x, "all_reduce_residual_rmsnorm")
        return _ops.all_reduce_residual_rmsnorm(x, residual, weight, float(eps), self._h)

    @property
    def last_algorithm(self):
        return self.comm.last_algorithm

    def destroy(self):
        self._h = 0
        self.comm.destroy()

    def abort(self):
        self._h = 0
        self.comm.abort()


__all__ = ["Communicator", "load_ops"]
