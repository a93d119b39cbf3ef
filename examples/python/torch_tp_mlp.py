"""Tensor-parallel MLP in plain torch.distributed, with the all-reduce swapped for tpcomm's.

    torchrun --nproc_per_node=2 examples/python/torch_tp_mlp.py              # GPUs (NCCL group)
    torchrun --nproc_per_node=2 examples/python/torch_tp_mlp.py --cpu        # CPU tensors (gloo group)

The group is used once, to share tpcomm's unique id; then `dist.all_reduce(y)` becomes
`comm.all_reduce(y)` (in place, same semantics). The script checks both give the same result.
Run on CPU here; the GPU form has not run yet (docs/python.md).
"""
import argparse
import os

import torch
import torch.distributed as dist

import tpcomm.torch as tt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--hidden", type=int, default=512)
    a = ap.parse_args()
    if a.cpu:
        dist.init_process_group("gloo")
        dev = torch.device("cpu")
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
        dev = torch.device("cuda")
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = tt.Communicator.from_process_group()  # device: this rank's GPU, or -1 for gloo

    torch.manual_seed(0)  # same full weights on every rank; each keeps its shard
    h, f = a.hidden, 4 * a.hidden
    w_up = torch.randn(h, f) / h**0.5
    w_down = torch.randn(f, h) / f**0.5
    up = w_up[:, rank * f // world:(rank + 1) * f // world].to(dev)      # column-parallel
    down = w_down[rank * f // world:(rank + 1) * f // world, :].to(dev)  # row-parallel
    x = torch.randn(8, h).to(dev)

    def mlp(x, all_reduce):
        y = torch.nn.functional.silu(x @ up) @ down  # this rank's partial sum
        all_reduce(y)                                # the one collective of a TP MLP
        return y

    y_tpcomm = mlp(x, comm.all_reduce)
    y_torch = mlp(x, dist.all_reduce)
    if rank == 0:
        print("tp=%d: tpcomm (%s) vs dist.all_reduce: max |diff| = %.3g" % (
            world, comm.last_algorithm, (y_tpcomm - y_torch).abs().max().item()))
    assert torch.allclose(y_tpcomm, y_torch, rtol=1e-5, atol=1e-5)
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
