"""Pins the engine interface tpcomm.torch.vllm implements: vLLM's
CustomAllreduce and the calls vLLM makes on it, and SGLang's, checked against the engine that is
installed. Without vLLM (or SGLang) those tests skip and say so; the plugin's switch is checked
everywhere (it needs neither torch nor vLLM).

What is pinned (tpcomm/torch/vllm.py's module comment says the same):
  - the class vLLM builds per tensor-parallel group: CustomAllreduce(group=, device=[, symm_mem_enabled=]),
    found through cuda_communicator.dispatch_custom_allreduce() or the custom_all_reduce module;
  - every name vLLM's communicator code calls on it (`ca_comm.<name>` in cuda_communicator.py and
    parallel_state.py), and every public method of vLLM's own class, exist on ours;
  - all_reduce takes out= and registered=.
Written against vLLM's source (the per-group import, dispatch_custom_allreduce(), and the newer
symm_mem_enabled= / finalize_p2p() forms); vLLM itself has not been installed where this ran
(PyPI's latest when written: vllm 0.34.0, sglang 0.5.23).
"""
import inspect
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Static helpers of vLLM's class that its callers never use on an instance.
_VLLM_HELPERS = {"create_shared_buffer", "free_shared_buffer"}
# Instance attributes ours sets in __init__ (not class attributes, so hasattr on the class misses them).
_INSTANCE_ATTRS = {"disabled", "max_size", "device", "comm"}


def test_plugin_is_inert_unless_vllm_plugins_names_it(monkeypatch):
    from tpcomm import vllm_plugin

    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    assert not vllm_plugin.enabled()
    assert vllm_plugin.register() is None  # returns before importing torch or vLLM
    for value, on in [("", False), ("other", False), ("tpcomm_x,other", False), ("other, tpcomm", True),
                      ("tpcomm", True)]:
        monkeypatch.setenv("VLLM_PLUGINS", value)
        assert vllm_plugin.enabled() is on, value


def test_plugin_entry_point_is_declared():
    # Where vLLM looks for plugins: the entry point group vllm.general_plugins of an installed
    # distribution (pip install . writes it from pyproject.toml).
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    section = text.split('[project.entry-points."vllm.general_plugins"]', 1)
    assert len(section) == 2, "pyproject.toml does not declare the vLLM plugin"
    assert 'tpcomm = "tpcomm.vllm_plugin:register"' in section[1].split("[", 1)[0]


def _import_or_skip(name):
    try:
        return __import__(name)
    except Exception as e:  # not installed, or installed without what it needs (torch, CUDA)
        pytest.skip("%s is not importable here (%s: %s); this pin runs where it is installed "
                    "(pip install %s)" % (name, type(e).__name__, e, name))


def _ours():
    from tpcomm.torch.vllm import TpcommCustomAllreduce

    return TpcommCustomAllreduce


def _has(cls, name):
    return hasattr(cls, name) or name in _INSTANCE_ATTRS


def _called_names(module):
    """Every `ca_comm.<name>` a module's source uses."""
    return set(re.findall(r"\bca_comm\.([A-Za-z_]\w*)", inspect.getsource(module)))


def _check_class(theirs, ours, engine):
    public = {n for n, v in inspect.getmembers(theirs) if not n.startswith("_") and callable(v)} - _VLLM_HELPERS
    missing = sorted(n for n in public if not _has(ours, n))
    assert not missing, "%s's CustomAllreduce has methods tpcomm's lacks: %s" % (engine, missing)
    for name in ("should_custom_ar", "custom_all_reduce", "capture", "all_reduce", "close"):
        assert hasattr(theirs, name), "%s's CustomAllreduce no longer has %s: re-pin" % (engine, name)
    # Constructor: every argument theirs requires, ours takes; keywords theirs takes, ours accepts.
    t_init = inspect.signature(theirs.__init__).parameters
    o_init = inspect.signature(ours.__init__).parameters
    o_kwargs = any(p.kind == p.VAR_KEYWORD for p in o_init.values())
    for name, p in t_init.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        assert name in o_init or (o_kwargs and p.default is not p.empty), \
            "%s passes %s= to CustomAllreduce; tpcomm's does not take it" % (engine, name)
    params = inspect.signature(theirs.all_reduce).parameters
    assert "out" in params and "registered" in params, dict(params)


def test_vllm_interface():
    vllm = _import_or_skip("vllm")
    import vllm.distributed.device_communicators.custom_all_reduce as ca
    import vllm.distributed.parallel_state as ps

    print("vllm", getattr(vllm, "__version__", "?"))
    ours = _ours()
    _check_class(ca.CustomAllreduce, ours, "vLLM")
    callers = [ps]
    try:
        import vllm.distributed.device_communicators.cuda_communicator as cc

        callers.append(cc)
    except ImportError:
        cc = None
    called = set().union(*(_called_names(m) for m in callers))
    assert {"custom_all_reduce"} <= called, "vLLM no longer calls ca_comm.custom_all_reduce: re-pin"
    missing = sorted(n for n in called if not _has(ours, n))
    assert not missing, "vLLM calls ca_comm.%s, which tpcomm's class lacks" % missing
    # How vLLM builds it: with group= and device= keywords (and the class from where install_in_vllm patches).
    src = inspect.getsource(cc if cc is not None else ps)
    assert re.search(r"CustomAllreduce\(\s*group=", src), "vLLM builds CustomAllreduce differently: re-pin"


def test_install_in_vllm_patches_the_hook(monkeypatch):
    _import_or_skip("vllm")
    import vllm.distributed.device_communicators.custom_all_reduce as ca

    monkeypatch.setattr(ca, "CustomAllreduce", ca.CustomAllreduce)  # restored after the test
    try:
        import vllm.distributed.device_communicators.cuda_communicator as cc
    except ImportError:
        cc = None
    if cc is not None and hasattr(cc, "dispatch_custom_allreduce"):
        monkeypatch.setattr(cc, "dispatch_custom_allreduce", cc.dispatch_custom_allreduce)
    from tpcomm.torch.vllm import install_in_vllm

    patched = install_in_vllm()
    ours = _ours()
    assert ca.CustomAllreduce is ours
    if cc is not None and hasattr(cc, "dispatch_custom_allreduce"):
        assert cc.dispatch_custom_allreduce() is ours, patched


def test_sglang_interface(monkeypatch):
    _import_or_skip("sglang")
    import sglang.srt.distributed.device_communicators.custom_all_reduce as ca
    import sglang.srt.distributed.parallel_state as ps

    ours = _ours()
    _check_class(ca.CustomAllreduce, ours, "SGLang")
    missing = sorted(n for n in _called_names(ps) if not _has(ours, n))
    assert not missing, "SGLang calls ca_comm.%s, which tpcomm's class lacks" % missing
    monkeypatch.setattr(ca, "CustomAllreduce", ca.CustomAllreduce)
    from tpcomm.torch.vllm import install_in_sglang

    install_in_sglang()
    assert ca.CustomAllreduce is ours
