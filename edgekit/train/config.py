"""Training configuration: validated up front, JSON-able so it can live in the manifest."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from edgekit.core.errors import UsageError
from edgekit.core.bounds import MAX_RUNS, check_field_types, check_seed, check_threads

DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
STRATEGIES = ("auto", "ddp", "fsdp")
TOKENIZERS = ("char", "word")

# Settings a resumed run must share with the run it continues, or it would not continue it.
RESUME_LOCKED = (
    "model",
    "model_config",
    "data",
    "tokenizer",
    "seq_len",
    "batch_size",
    "grad_accum",
    "lr",
    "min_lr",
    "weight_decay",
    "warmup_steps",
    "clip_grad_norm",
    "seed",
    "precision",
)


@dataclass(frozen=True)
class TrainConfig:
    """One training run. ``None`` means "derive it" and is documented per field.

    Batches: ``batch_size`` samples per process per micro-step; one optimizer step sees
    ``batch_size * grad_accum * world_size`` samples (the global batch).
    """

    model: str = "digits-cnn"
    model_config: dict[str, Any] = field(default_factory=dict)
    data: str | None = None  # a UTF-8 text file for language models (default: the stdlib docs corpus)
    tokenizer: str = "char"
    seq_len: int | None = None  # training sequence length for text models (None: the model's max_len)
    epochs: int | None = None  # None: 20, or as many as max_steps takes when it is given (edgekit.train.limits)
    max_steps: int | None = None  # optimizer steps; alone, the run's length (the data repeats); with epochs, the first to stop
    batch_size: int = 64
    grad_accum: int = 1
    lr: float = 3e-3
    min_lr: float = 0.0  # where the cosine decay ends
    weight_decay: float = 1e-4  # AdamW, on weights and embeddings (2+ dims), not biases or norm scales
    warmup_steps: int | None = None  # linear warm-up length (None: 5% of the optimizer steps)
    clip_grad_norm: float | None = None
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"  # auto: bf16 (or fp16) on CUDA, fp32 on CPU/MPS and for recurrent models
    grad_checkpoint: bool = False
    compile: bool = False
    max_nonfinite: int = 5  # stop after this many non-finite losses in a row
    save_every: int | None = None  # write the resumable state every N steps (None: at each evaluation)
    eval_every: int | None = None  # validate every N steps (None: once per epoch)
    log_every: int = 10
    resume: bool = False
    profile: bool = False
    workers: int | None = None  # DataLoader workers (None: 0 on CPU, a few on CUDA)
    threads: int | None = None  # torch intra-op CPU threads (None: edgekit.train.threads.default_threads on CPU)
    strategy: str = "auto"  # auto: DDP when launched by torchrun with several processes
    cpu_offload: bool = False  # FSDP only: keep parameters and optimizer state in host memory

    def __post_init__(self) -> None:
        check_field_types(self)  # the Python API takes anything: a wrong type is named here, not deep in training
        for name in ("batch_size", "grad_accum", "log_every", "max_nonfinite"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RUNS:
                raise UsageError(f"{name} must be a positive integer (at most {MAX_RUNS}), got {value!r}")
        for name in ("epochs", "max_steps", "seq_len", "save_every", "eval_every", "threads"):
            value = getattr(self, name)
            # a bound past any real run: --epochs 1e22 is a typo that would train forever
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RUNS):
                raise UsageError(f"{name} must be a positive integer (at most {MAX_RUNS}), got {value!r}")
        for name in ("warmup_steps", "workers"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_RUNS):
                raise UsageError(f"{name} must be an integer >= 0 (at most {MAX_RUNS}), got {value!r}")

        check_threads(self.threads)
        check_seed(self.seed)
        if not (_finite(self.lr) and self.lr > 0):
            raise UsageError(f"lr must be positive and finite, got {self.lr!r}")
        if not (_finite(self.min_lr) and 0 <= self.min_lr <= self.lr):
            raise UsageError(f"min_lr must be between 0 and lr ({self.lr}), got {self.min_lr!r}")
        if not (_finite(self.weight_decay) and self.weight_decay >= 0):
            raise UsageError(f"weight_decay must be >= 0 and finite, got {self.weight_decay!r}")
        if self.clip_grad_norm is not None and not (_finite(self.clip_grad_norm) and self.clip_grad_norm > 0):
            raise UsageError(f"clip_grad_norm must be positive and finite, got {self.clip_grad_norm!r}")
        if self.device not in DEVICES and not _is_cuda_index(self.device):
            raise UsageError(f"unknown device {self.device!r}; choose one of: {', '.join(DEVICES)}, cuda:N")
        _choice("precision", self.precision, PRECISIONS)
        _choice("strategy", self.strategy, STRATEGIES)
        _choice("tokenizer", self.tokenizer, TOKENIZERS)
        if self.cpu_offload and self.strategy != "fsdp":
            raise UsageError("cpu_offload needs strategy 'fsdp' (--strategy fsdp)")
        if not isinstance(self.model_config, dict):
            raise UsageError(f"model_config must be a dict, got {type(self.model_config).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_cuda_index(device: str) -> bool:
    prefix, _, index = device.partition(":")
    return prefix == "cuda" and index.isdigit()


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
