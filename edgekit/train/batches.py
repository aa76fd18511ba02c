"""Batches for the loop: each rank's shuffled slice per epoch, resumable mid-epoch.

Datasets return whole batches for a list of ids, so the DataLoader only moves them (and pins
them for CUDA); workers only pay off when feeding a GPU.
"""

from __future__ import annotations

import itertools
import os

from edgekit.train.config import TrainConfig
from edgekit.train.tasks import to_device as move


class EpochBatches:
    """Batches of sample ids for one epoch: ``DistributedSampler`` order (seeded by epoch), cut
    into batches, optionally skipping the first ``skip`` (to resume mid-epoch)."""

    def __init__(self, dataset, config: TrainConfig, rt):
        from torch.utils.data import DistributedSampler

        self.sampler = DistributedSampler(
            dataset, num_replicas=rt.world_size, rank=rt.rank, shuffle=True, seed=config.seed, drop_last=False
        )
        self.batch_size = config.batch_size
        self.skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        self.sampler.set_epoch(epoch)
        self.skip = skip

    def batch_sampler(self):
        from torch.utils.data import BatchSampler

        return BatchSampler(self.sampler, self.batch_size, drop_last=False)

    def __iter__(self):
        return itertools.islice(iter(self.batch_sampler()), self.skip, None)

    def __len__(self) -> int:
        return max(len(self.batch_sampler()) - self.skip, 0)


def train_loader(dataset, config: TrainConfig, rt):
    import torch
    from torch.utils.data import DataLoader

    cuda = rt.device.type == "cuda"
    workers = config.workers
    if workers is None:  # batches are slices of in-memory arrays: workers only pay off feeding a GPU
        workers = min(4, (os.cpu_count() or 1) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))) if cuda else 0
    batches = EpochBatches(dataset, config, rt)
    loader = DataLoader(
        dataset,
        sampler=batches,
        batch_size=None,  # the dataset returns whole batches
        num_workers=workers,
        pin_memory=cuda,
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(config.seed + rt.rank),
    )
    return loader, batches


def eval_batches(dataset, size: int):
    return [dataset[list(range(i, min(i + size, len(dataset))))] for i in range(0, len(dataset), size)]


def to_device(batch: dict, device) -> dict:
    if device.type == "cpu":
        return batch  # already there

    return move(batch, device, non_blocking=device.type == "cuda")
