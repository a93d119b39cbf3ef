"""A drop-in for vLLM's custom all-reduce (NOT YET RUN INSIDE vLLM).

The interface it implements is vLLM's `CustomAllreduce`
(vllm/distributed/device_communicators/custom_all_reduce.py) as vLLM's source uses it, read in
its three forms (the per-group import, dispatch_custom_allreduce(), and the newer
symm_mem_enabled= / finalize_p2p()); not yet checked against an installed vLLM (PyPI's latest
when written: 0.34.0). tests/python/test_vllm_pin.py checks these names against the installed
vLLM wherever one is:
  - constructed as `CustomAllreduce(group=cpu_group, device=device)` (newer vLLM adds
    `symm_mem_enabled=`) by `CudaCommunicator.__init__` for the tensor-parallel group, the class
    coming from `dispatch_custom_allreduce()` (vLLM >= 0.10) or the module attribute (older);
  - `disabled`, `should_custom_ar(input_)` and `custom_all_reduce(input_)` (out of place) in
    `CudaCommunicator.all_reduce`;
  - `capture()` in `GroupCoordinator.graph_capture`; `all_reduce(inp, *, out, registered)`,
    `close()`, and `finalize_p2p()` (vLLM's main branch calls it once, collectively).

Switch it on in vLLM: `pip install .` registers the vLLM plugin `tpcomm` (entry point group
`vllm.general_plugins`, module tpcomm/vllm_plugin.py); it stays inert unless VLLM_PLUGINS names it,
so the switch is

    VLLM_PLUGINS=tpcomm vllm serve Qwen/Qwen3-32B -tp 2      # plus any other plugins you use

vLLM then loads it in every worker process, and each tensor-parallel group's custom all-reduce
is this class (vLLM's own `--disable-custom-all-reduce` still turns it off). In a script that
drives vLLM in one process, `tpcomm.torch.vllm.install_in_vllm()` does the same.

SGLang's custom all-reduce has the same shape (adapted from vLLM 0.6): its GroupCoordinator
imports `CustomAllreduce` from sglang/srt/distributed/device_communicators/custom_all_reduce.py
when it builds a group, so `install_in_sglang()` run in every SGLang worker process before its
model runner starts switches it on. We found no SGLang plugin hook that runs in its workers, so
that call is the engine's to make (a sitecustomize module on PYTHONPATH would do); not run inside
SGLang yet. For both engines the NCCL drop-in (LD_PRELOAD=libtpcomm_nccl.so, docs/shim.md) needs
no code at all.

Capture needs no buffer registration: tpcomm's P2P kernels read the input in place (docs/p2p.md),
so capture() does nothing.
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

    def __init__(self, group, device, max_size=8 * 1024 * 1024, symm_mem_enabled=False, **_ignored):
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

    def register_graph_buffers(self):
        """Nothing to register (see capture)."""

    def finalize_p2p(self):
        """vLLM's main branch defers its P2P check to this collective call; tpcomm's create has
        already checked P2P (data-verified) and agreed on the result, so nothing is left to do."""

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


def install_in_vllm():
    """Makes vLLM's tensor-parallel groups build TpcommCustomAllreduce instead of its own custom
    all-reduce, in this process (the vLLM plugin calls it in every worker). Returns what was
    patched."""
    patched = []
    import vllm.distributed.device_communicators.custom_all_reduce as ca_module

    ca_module.CustomAllreduce = TpcommCustomAllreduce  # vLLM < 0.10 imports it from here per group
    patched.append("custom_all_reduce.CustomAllreduce")
    try:
        import vllm.distributed.device_communicators.cuda_communicator as cc
    except ImportError:
        cc = None
    if cc is not None and hasattr(cc, "dispatch_custom_allreduce"):
        cc.dispatch_custom_allreduce = lambda: TpcommCustomAllreduce
        patched.append("cuda_communicator.dispatch_custom_allreduce")
    return patched


def install_in_sglang():
    """The same for SGLang, in this process: its GroupCoordinator imports CustomAllreduce from
    this module attribute when it builds a group."""
    import sglang.srt.distributed.device_communicators.custom_all_reduce as ca_module

    ca_module.CustomAllreduce = TpcommCustomAllreduce
    return ["sglang custom_all_reduce.CustomAllreduce"]
