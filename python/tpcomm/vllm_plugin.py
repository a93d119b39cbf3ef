"""vLLM plugin `tpcomm` (entry point group `vllm.general_plugins`, pyproject.toml).

vLLM calls register() in every process it starts. It does nothing unless VLLM_PLUGINS names
`tpcomm` (VLLM_PLUGINS=tpcomm vllm serve ...): installing tpcomm never changes vLLM by itself.
Named, it makes each tensor-parallel group's custom all-reduce tpcomm's
(tpcomm/torch/vllm.py says which vLLM interface that is). Until then it imports only the tpcomm
package (which loads libtpcomm), not torch.
"""
import os


def enabled():
    """Whether VLLM_PLUGINS names this plugin explicitly."""
    names = [n.strip() for n in os.environ.get("VLLM_PLUGINS", "").split(",")]
    return "tpcomm" in names


def register():
    if not enabled():
        return None
    from tpcomm.torch.vllm import install_in_vllm

    return install_in_vllm()
