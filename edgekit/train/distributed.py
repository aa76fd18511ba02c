"""Distributed training: detected from the environment torchrun sets, nothing to configure.

``torchrun --nproc_per_node N -m edgekit train ...`` starts N processes with ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE`` and ``MASTER_ADDR/PORT`` set. Each joins one process group
(NCCL on GPUs, gloo on CPUs), takes ``cuda:LOCAL_RANK`` when there are GPUs, and wraps the
model in DDP (default) or FSDP2 ``fully_shard`` (``--strategy fsdp``). Only rank 0 logs and
writes files; collectives (state-dict gathers, flag reductions) are called on every rank.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from edgekit.core.device import select_device
from edgekit.core.errors import EdgekitError, UsageError


def env_rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def is_main_process() -> bool:
    """True outside torchrun and on rank 0 under it (usable before any process group exists)."""
    return env_rank() == 0


@dataclass
class Runtime:
    """Where this process trains: its rank, the world, its device, the parallel strategy."""

    rank: int
    world_size: int
    local_rank: int
    device: Any  # torch.device
    strategy: str  # "none" | "ddp" | "fsdp"
    backend: str | None = None
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.strategy != "none"

    def barrier(self) -> None:
        if self.parallel:
            import torch.distributed as dist

            if self.backend == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()

    @contextlib.contextmanager
    def main_first(self):
        """Rank 0 runs the body first (e.g. builds a cache), the others after it."""
        if not self.is_main:
            self.barrier()
        try:
            yield
        finally:
            if self.is_main:
                self.barrier()

    def any_true(self, flag: bool) -> bool:
        """True when ``flag`` is true on any rank (a collective when parallel)."""
        if not self.parallel:
            return flag
        import torch
        import torch.distributed as dist

        t = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def sum(self, values: list) -> list:
        """Element-wise sum over ranks of a list of numbers."""
        if not self.parallel:
            return list(values)
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def broadcast_flag(self, flag: bool) -> bool:
        """Rank 0's value of ``flag`` on every rank."""
        if not self.parallel:
            return flag
        import torch
        import torch.distributed as dist

        t = torch.tensor([int(flag)], device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())


def setup(config) -> Runtime:
    """Join the process group torchrun prepared (or a one-process group for FSDP), pick the device."""
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank, local_rank = env_rank(), int(os.environ.get("LOCAL_RANK", "0") or 0)
    strategy = config.strategy if config.strategy != "auto" else ("ddp" if world > 1 else "none")
    if strategy == "none":
        device = select_device(config.device)
        return Runtime(0, 1, 0, device, strategy)

    if config.device == "mps":
        raise UsageError("distributed training (DDP/FSDP) is not supported on MPS; use --device cpu")
    if config.device.startswith("cuda:") and world > 1:
        raise UsageError(f"under torchrun each process uses cuda:LOCAL_RANK; pass --device cuda, not {config.device!r}")
    use_cuda = config.device in ("auto", "cuda") or config.device.startswith("cuda:")
    use_cuda = use_cuda and torch.cuda.is_available()
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"device {config.device!r} requested but CUDA is not available")
    if use_cuda:
        index = int(config.device.split(":")[1]) if config.device.startswith("cuda:") else local_rank
        if index >= torch.cuda.device_count():
            raise UsageError(f"LOCAL_RANK {index} has no GPU ({torch.cuda.device_count()} visible)")
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if config.cpu_offload and device.type != "cuda":
        raise UsageError("--cpu-offload moves FSDP shards between GPU and host memory; it needs CUDA")
    backend = "nccl" if device.type == "cuda" else "gloo"

    import torch.distributed as dist

    owns = False
    if not dist.is_initialized():
        try:
            if "MASTER_ADDR" in os.environ:
                kwargs = {"device_id": device} if backend == "nccl" else {}
                dist.init_process_group(backend, rank=rank, world_size=world, **kwargs)
            elif world == 1:
                dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
            else:
                raise UsageError("WORLD_SIZE > 1 but MASTER_ADDR is not set; launch with torchrun")
        except (RuntimeError, ValueError) as exc:
            raise EdgekitError(f"could not join the {backend} process group: {str(exc).splitlines()[0]}") from None
        owns = True
    return Runtime(dist.get_rank(), dist.get_world_size(), local_rank, device, strategy, backend, owns)


def teardown(runtime: Runtime, clean: bool = True) -> None:
    if runtime.owns_group:
        import gc

        import torch.distributed as dist

        # Every rank reaches this point before the group goes away, and DDP's reducer (which holds
        # the group's communication threads) is collected first: tearing down while another rank
        # was still in its last collective aborted a rank ("terminate called without an active
        # exception") on a loaded machine.
        if clean and runtime.world_size > 1:  # after a failure another rank may never arrive
            dist.barrier()
        gc.collect()
        dist.destroy_process_group()


def wrap(model, runtime: Runtime, config):
    """The module to train (compiled / DDP / sharded) and the module that holds the state.

    nanoGPT's order: compile, then DDP. FSDP: shard each ``fsdp_units()`` block, then the root,
    then compile.
    """
    import torch

    if runtime.strategy == "fsdp":
        try:
            from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
        except ImportError:  # torch < 2.6 kept FSDP2 under _composable
            try:
                from torch.distributed._composable.fsdp import CPUOffloadPolicy, fully_shard
            except ImportError:
                raise UsageError("--strategy fsdp needs FSDP2 (torch >= 2.4); use --strategy ddp") from None

        kwargs = {"offload_policy": CPUOffloadPolicy()} if config.cpu_offload else {}
        units = model.fsdp_units() if hasattr(model, "fsdp_units") else []
        for unit in units:
            fully_shard(unit, **kwargs)
        fully_shard(model, **kwargs)
        return (torch.compile(model) if config.compile else model), model
    trained = torch.compile(model) if config.compile else model
    if runtime.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [runtime.device.index] if runtime.device.type == "cuda" else None
        trained = DistributedDataParallel(trained, device_ids=ids)
    return trained, model


_NO_CONTEXT = contextlib.nullcontext()


def grad_sync(model, runtime: Runtime, sync: bool):
    """Skip the gradient all-reduce on accumulation micro-steps (all but the last of a group)."""
    if sync or runtime.strategy == "none":
        return _NO_CONTEXT
    if runtime.strategy == "ddp":
        return model.no_sync()
    return _fsdp_no_sync(model)


@contextlib.contextmanager
def _fsdp_no_sync(model):
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


# --------------------------------------------------------------------------- state dicts


def _options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, **kw)


def model_state(model, runtime: Runtime) -> dict:
    """The full, unsharded model state on the CPU (complete on rank 0; collective under FSDP)."""
    if runtime.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(model, options=_options())
    if not runtime.is_main:
        return {}  # only rank 0 writes; DDP replicas are identical
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def load_model_state(model, state: dict, runtime: Runtime) -> None:
    if runtime.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
    else:
        model.load_state_dict(state)


def optimizer_state(model, optimizer, runtime: Runtime) -> dict:
    if runtime.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(model, optimizer, options=_options())
    return optimizer.state_dict() if runtime.is_main else {"state": {}, "param_groups": []}


def load_optimizer_state(model, optimizer, state: dict, runtime: Runtime) -> None:
    if runtime.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
    else:
        optimizer.load_state_dict(state)


def rng_states(runtime: Runtime) -> dict:
    """Every rank's RNG states as CPU tensors, keyed ``torch.<rank>`` / ``cuda.<rank>`` (on rank 0)."""
    import torch

    local = {"torch": torch.get_rng_state()}
    if runtime.device.type == "cuda":
        local["cuda"] = torch.cuda.get_rng_state(runtime.device)
    if not runtime.parallel or runtime.world_size == 1:
        return {f"{name}.0": state for name, state in local.items()}
    import torch.distributed as dist

    out = {}
    for name, state in local.items():
        state = state.to(runtime.device)
        gathered = [torch.empty_like(state) for _ in range(runtime.world_size)]
        dist.all_gather(gathered, state)
        out.update({f"{name}.{r}": g.cpu() for r, g in enumerate(gathered)})
    return out


def restore_rng(states: dict, runtime: Runtime) -> None:
    import torch

    torch.set_rng_state(states[f"torch.{runtime.rank}"])
    if runtime.device.type == "cuda" and f"cuda.{runtime.rank}" in states:
        torch.cuda.set_rng_state(states[f"cuda.{runtime.rank}"], runtime.device)
