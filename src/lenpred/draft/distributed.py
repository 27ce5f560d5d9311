"""Data-parallel draft training under a standard launcher (``torchrun``): which rank, which device."""

from __future__ import annotations

import os

import torch

__all__ = ["Distributed"]


class Distributed:
    """Data-parallel training under a standard launcher (``torchrun``; accelerate's launcher sets the
    same variables): WORLD_SIZE / RANK / LOCAL_RANK from the environment, one process per device.
    Each optimiser step's batch is split across the ranks, DistributedDataParallel averages the
    gradients, rank 0 teacher-forces the state cache, checkpoints, evaluates and writes the head.
    With WORLD_SIZE unset or 1 nothing changes."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
        self._ours = False

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def device(self, device: str) -> str:
        """``cuda`` -> this process's ``cuda:LOCAL_RANK`` under a launcher."""
        return f"cuda:{self.local_rank}" if self.active and device == "cuda" else device

    def start(self, device: str) -> None:
        if not self.active:
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            dev = torch.device(device)
            if dev.type == "cuda":
                torch.cuda.set_device(dev)
            dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
            self._ours = True

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as dist

            dist.barrier()

    def stop(self) -> None:
        if self._ours:
            import torch.distributed as dist

            dist.destroy_process_group()
            self._ours = False
