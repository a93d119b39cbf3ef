"""A drop-in for vLLM's custom all-reduce (NOT YET RUN INSIDE vLLM).

vLLM's CudaCommunicator (vllm/distributed/device_communicators/cuda_communicator.py) builds
`CustomAllreduce(group=cpu_group, device=device)` for its tensor-parallel group and, in
`all_reduce(input_)`, calls `custom_all_reduce(input_)` (out of place) whenever
`not ca.disabled and ca.should_custom_ar(input_)`, else pynccl. Its graph capture enters
`ca.capture()`. This class has that interface over tpcomm; hand it to vLLM by replacing the
communicator's `ca_comm` after start-up, or by patching `dispatch_custom_allreduce` to return it:

    from tpcomm.torch.vllm import TpcommCustomAllreduce
    comm.ca_comm = TpcommCustomAllreduce(group=comm.cpu_group, device=comm.device)

SGLang's custom all-reduce has the same shape. Capture needs no buffer registration: tpcomm's
P2P kernels read the input in place (docs/p2p.md), so capture() does nothing.
"""
import contextlib
import warnings

import torch

import tpcomm
from tpcomm.torch import Communicator

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class TpcommCustomAllreduce:
    """vLLM's CustomAllreduce interface over tpcomm.torch (see the module comment).

    group: a torch.distributed group used only to share tpcomm's unique id (vLLM passes its
    gloo CPU group). device: this rank's torch.device; CPU means a host rank.
    max_size: the largest message (bytes) it takes; larger ones go to vLLM's NCCL path.
    """

    def __init__(self, group, device, max_size=8 * 1024 * 1024):
        device = torch.device(device)
        index = -1 if device.type == "cpu" else (device.index if device.index is not None else torch.cuda.current_device())
        self.disabled = False
        self.max_size = int(max_size)
        self.device = device
        try:
            self.comm = Communicator.from_process_group(group, device=index)
        except tpcomm.TpcommError as e:
            # As vLLM's own: one that cannot start disables itself (vLLM then runs NCCL).
            warnings.warn("tpcomm custom all-reduce disabled: %s" % e)
            self.disabled = True
            self.comm = None

    def should_custom_ar(self, inp):
        if self.disabled or inp.dtype not in _DTYPES or not inp.is_contiguous():
            return False
        if inp.device != self.device and not (inp.device.type == self.device.type == "cuda"
                                              and inp.device.index == self.device.index):
            return False
        return inp.numel() * inp.element_size() <= self.max_size

    def custom_all_reduce(self, inp):
        """Out of place, as vLLM expects; None when this object is disabled."""
        if self.disabled:
            return None
        return self.comm.all_reduce(inp, inplace=False)

    def all_reduce(self, inp, out=None, registered=False):
        """vLLM's lower-level form: into `out` when given (the input is left alone)."""
        if out is None:
            return self.custom_all_reduce(inp)
        out.copy_(inp)
        return self.comm.all_reduce(out)

    @contextlib.contextmanager
    def capture(self):
        yield  # nothing to register: the kernels read the captured pointers in place

    def close(self):
        if self.comm is not None and not self.disabled:
            self.comm.destroy()
        self.disabled = True

    def __del__(self):
        try:
            if self.comm is not None and not self.disabled:
                self.comm.abort()
        except Exception:
            pass
