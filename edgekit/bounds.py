"""Upper bounds on numbers from flags: past them a value is a typo or an attack, never a setting.

Each check raises a ``UsageError`` naming the flag, the value and the allowed range, before any
work starts (a ``--timeout 1e300`` would otherwise overflow a timer thread, ``--seed 2**70``
torch's generator, ``--threads 100000`` the runtime's thread pool).
"""

from __future__ import annotations

import math
import os

from edgekit.errors import UsageError

THREADS_PER_CORE = 4  # oversubscription past this only measures the scheduler
MAX_SEED = 2**32 - 1  # numpy's legacy seeding and torch both take this range
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_RUNS = 10_000_000
MAX_TOKENS = 100_000
MIN_TEMPERATURE = 1e-3  # below this, logits / T overflow float32; 0 means greedy


def max_threads() -> int:
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_threads(value, flag: str = "threads"):
    if value is None:
        return None
    limit = max_threads()
    if not _is_int(value) or not 1 <= value <= limit:
        raise UsageError(f"{flag} must be an integer between 1 and {limit} ({THREADS_PER_CORE}x this host's cores), got {value!r}")
    return value


def check_seed(value, flag: str = "seed"):
    if value is None:
        return None
    if not _is_int(value) or not 0 <= value <= MAX_SEED:
        raise UsageError(f"{flag} must be an integer between 0 and {MAX_SEED}, got {value!r}")
    return value


def check_timeout(value, flag: str = "--timeout"):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise UsageError(f"{flag} must be a positive number of seconds up to {MAX_TIMEOUT_S:g} (7 days), got {value!r}")
    return value


def check_runs(value, flag: str, low: int = 1):
    if not _is_int(value) or not low <= value <= MAX_RUNS:
        raise UsageError(f"{flag} must be an integer between {low} and {MAX_RUNS}, got {value!r}")
    return value


def check_sampling(max_tokens, temperature, top_k) -> None:
    if not _is_int(max_tokens) or not 1 <= max_tokens <= MAX_TOKENS:
        raise UsageError(f"max_tokens must be between 1 and {MAX_TOKENS}, got {max_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature < 0 or 0 < temperature < MIN_TEMPERATURE or temperature > 100:
        raise UsageError(f"temperature must be 0 (greedy) or between {MIN_TEMPERATURE:g} and 100, got {temperature!r}")
    if not _is_int(top_k) or top_k < 0:
        raise UsageError(f"top_k must be >= 0 (0: no limit), got {top_k!r}")
