"""Reload an artifact with its runtime and hold it to the float model's reference outputs."""

from __future__ import annotations

import re

from pathlib import Path

import numpy as np

from edgekit.errors import ParityError

FLOAT_ATOL = 1e-4
FLOAT_RTOL = 1e-3
INT8_MIN_COSINE = 0.95
INT8_MIN_TOP1 = 0.8


def predictor_for(path: Path, fmt: str, details: dict | None = None, threads: int = 1):
    """A numpy-in/numpy-out callable running the artifact with its own runtime."""
    from edgekit import formats

    return formats.get(fmt).ops().predictor(path, details, threads)


def compare(reference: np.ndarray, candidate: np.ndarray) -> dict:
    ref = reference.astype(np.float64).reshape(len(reference), -1)
    got = candidate.astype(np.float64).reshape(len(candidate), -1)
    diff = np.abs(ref - got)
    denom = np.linalg.norm(ref) * np.linalg.norm(got)
    return {
        "max_abs": float(diff.max()),
        "max_rel": float((diff / (np.abs(ref) + 1e-6)).max()),
        # both all-zero agree; an all-zero output against a non-zero one (a collapsed int8 file) does not
        "cosine": float((ref * got).sum() / denom) if denom > 0 else float(not ref.any() and not got.any()),
        "top1_agreement": float((ref.argmax(1) == got.argmax(1)).mean()),
        "allclose": bool(np.allclose(got, ref, atol=FLOAT_ATOL, rtol=FLOAT_RTOL)),
    }


def check_parity(predict, cases: dict, precision: str, label: str, decisions: bool = True) -> dict:
    """Run ``predict`` on every reference case; raise ParityError past tolerance.

    fp32 artifacts must match allclose(atol=1e-4, rtol=1e-3); int8 ones must keep the float
    model's decisions (top-1 agreement) and direction (cosine) on the same inputs. ``decisions``
    False: outputs that are not class scores (a model without labelled data: hidden states, random
    inputs near a tie) are held to the cosine alone, as ``edgekit quantize`` holds them.
    """
    worst: dict = {}
    for batch, (inputs, expected) in sorted(cases.items()):
        try:
            got = np.asarray(predict(inputs))
        except Exception as exc:  # noqa: BLE001 - ORT and the TorchScript interpreter raise their own types
            shapes = ", ".join(f"{name} {tuple(value.shape)}" for name, value in inputs.items())
            raise ParityError(
                f"{label}: the model fails on the reference inputs at batch {batch} ({shapes}): {_reason(exc)}; "
                "a dynamic axis may have been frozen to the example's size (try --torchscript-mode script or "
                "--onnx-exporter dynamo)"
            ) from None
        if got.shape != expected.shape:
            raise ParityError(f"{label}: output shape {got.shape} != float model's {expected.shape} at batch {batch}")
        stats = compare(expected, got)
        if precision == "fp32" and not stats["allclose"]:
            raise ParityError(
                f"{label}: output differs from the float model at batch {batch} "
                f"(max abs error {stats['max_abs']:.3g} > {FLOAT_ATOL:g} + {FLOAT_RTOL:g}*|ref|)"
            )
        if precision != "fp32" and (stats["cosine"] < INT8_MIN_COSINE
                                    or (decisions and stats["top1_agreement"] < INT8_MIN_TOP1)):
            raise ParityError(
                f"{label}: int8 output diverges from the float model at batch {batch} "
                f"(cosine {stats['cosine']:.3f}, top-1 agreement {stats['top1_agreement']:.2f}; "
                f"need >= {INT8_MIN_COSINE} and >= {INT8_MIN_TOP1})"
            )
        worst = _worst(worst, stats)
    worst.pop("allclose", None)
    # Six significant figures, not decimals: a max abs error of 3e-7 must not read as 0.
    return {**{k: float(f"{v:.6g}") for k, v in worst.items()}, "batch_sizes": sorted(cases)}


def _reason(exc: BaseException) -> str:
    """The informative line of a runtime's error: ORT's last sentence, TorchScript's last line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[-1] if "TorchScript interpreter" in lines[0] else lines[0]
    if "Status Message: " in text:  # ORT: "... Status Message: /src/file.h:583 void f(...) what went wrong"
        text = re.sub(r"^/\S+:\d+ .*?\) ", "", text.split("Status Message: ", 1)[1])
    return text[:300]


def _worst(acc: dict, stats: dict) -> dict:
    if not acc:
        return dict(stats)
    return {
        "max_abs": max(acc["max_abs"], stats["max_abs"]),
        "max_rel": max(acc["max_rel"], stats["max_rel"]),
        "cosine": min(acc["cosine"], stats["cosine"]),
        "top1_agreement": min(acc["top1_agreement"], stats["top1_agreement"]),
        "allclose": acc["allclose"] and stats["allclose"],
    }
