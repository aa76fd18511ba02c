"""Which skips CI may have. A skip outside this list means a system package or an extra that CI
is meant to install is missing, and the feature it guards went untested: under EDGEKIT_CI=1
(``.ci/run`` sets it) the run fails then. Every run prints its skips grouped by reason."""

from __future__ import annotations

import re

# Reasons (regular expressions, matched against the skip message) CI expects: no GPU on the CI machine.
EXPECTED_ON_CI = (
    r"CUDA",
    r"needs a GPU",
    r"GPU has no bf16",
)


def unexpected(reasons: dict[str, int]) -> dict[str, int]:
    return {reason: count for reason, count in reasons.items()
            if not any(re.search(pattern, reason) for pattern in EXPECTED_ON_CI)}
