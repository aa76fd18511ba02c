"""Reload an artifact with its runtime and hold it to the float model's reference outputs."""

from __future__ import annotations

import re

from pathlib import Path

import numpy as np

from edgekit.core.errors import ParityError
from edgekit import formats
from edgekit.board.check import case_samples
from edgekit.formats.evaluation import as_arrays
from edgekit.formats.metrics import OutputFidelity, output_kind

FLOAT_ATOL = 1e-4
FLOAT_RTOL = 1e-3
INT8_MIN_COSINE = 0.95
INT8_MIN_TOP1 = 0.8


def predictor_for(path: Path, fmt: str | formats.Format, details: dict | None = None, threads: int = 1):
    """A numpy-in/numpy-out callable running the artifact with its own runtime (``fmt``: its format's entry, or name)."""
    return formats.entry(fmt).ops().predictor(path, details, threads)


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


def every_output(predict):
    """The board predictor ``predict`` (``predictor_for``'s) returning every output, in the model's order."""
    runtime = predict.runtime

    def run(inputs) -> list:
        with runtime.context():
            return [np.asarray(out) for out in runtime.run(as_arrays(inputs))]

    run.runtime = runtime
    run.output_names = list(getattr(runtime, "output_names", None) or [])
    return run


def check_parity(predict, cases: dict, precision: str, label: str, decisions: bool = True,
                 names: list[str] | None = None) -> dict:
    """Run ``predict`` on every reference case; raise ParityError past tolerance.

    ``cases`` is ``{batch: (inputs, outputs)}``, the outputs one array or a list of every output
    (``read_reference(..., every_output=True)``); ``predict`` returns likewise. Every output the
    reference holds is compared. fp32 artifacts must match allclose(atol=1e-4, rtol=1e-3) on each;
    int8 ones must keep each output's direction (cosine over the whole batch) and the first
    output's decisions (top-1 agreement) on the same inputs. An output of one value per sample
    has no direction to keep: it is held, over every case at once, to its correlation with the
    float output and its largest error against the float output's spread (``fidelity.metrics``).
    ``decisions`` False: a first output that is not class scores (a model without labelled data:
    hidden states, random inputs near a tie) is held to the cosine alone, as ``edgekit quantize``
    holds it. ``names``: the outputs' names, for the error (else the runtime's, where it has them).
    """
    names = list(names or getattr(predict, "output_names", None) or [])
    worst: dict = {}
    per_output: list[dict] = []
    scalars: dict[int, OutputFidelity] = {}
    for batch, (inputs, expected) in sorted(cases.items()):
        try:
            got = predict(inputs)
        except Exception as exc:  # noqa: BLE001 - ORT and the TorchScript interpreter raise their own types
            shapes = ", ".join(f"{name} {tuple(value.shape)}" for name, value in inputs.items())
            raise ParityError(
                f"{label}: the model fails on the reference inputs at batch {batch} ({shapes}): {_reason(exc)}; "
                "a dynamic axis may have been frozen to the example's size (try --torchscript-mode script or "
                "--onnx-exporter dynamo)"
            ) from None
        expected, got = _as_list(expected), _as_list(got)
        if len(got) < len(expected):
            raise ParityError(f"{label}: the model gives {len(got)} output(s), the float model {len(expected)}")
        many = len(expected) > 1
        for k, (want, out) in enumerate(zip(expected, got)):
            what = _output_label(k, names, many)
            if out.shape != want.shape:
                raise ParityError(f"{label}: {what} shape {out.shape} != float model's {want.shape} at batch {batch}")
            stats = compare(want, out)
            if precision == "fp32" and not stats["allclose"]:
                raise ParityError(
                    f"{label}: {what} differs from the float model at batch {batch} "
                    f"(max abs error {stats['max_abs']:.3g} > {FLOAT_ATOL:g} + {FLOAT_RTOL:g}*|ref|)"
                )
            scalar = output_kind("", want, case_samples(inputs, batch)) == "scalar"
            if scalar:
                scalars.setdefault(k, OutputFidelity(what, "scalar")).add(want, out, batch)
            elif precision != "fp32" and (stats["cosine"] < INT8_MIN_COSINE
                                          or (k == 0 and decisions and stats["top1_agreement"] < INT8_MIN_TOP1)):
                top1 = f", top-1 agreement {stats['top1_agreement']:.2f}" if k == 0 else ""
                need = f"need >= {INT8_MIN_COSINE}" + (f" and >= {INT8_MIN_TOP1}" if k == 0 else "")
                raise ParityError(
                    f"{label}: int8 {what} diverges from the float model at batch {batch} "
                    f"(cosine {stats['cosine']:.3f}{top1}; {need})"
                )
            if k >= 1:
                stats = {**stats, "top1_agreement": None}  # decisions are the first output's
            while len(per_output) <= k:
                per_output.append({})
            per_output[k] = _worst(per_output[k], stats)
    for k, acc in scalars.items():
        result = acc.result()
        broken = [b for b in result["binding"] if not b["ok"]]
        if precision != "fp32" and (broken or result["nonfinite"]):
            found = ", ".join(f"{b['metric']} {b['value']:.3f} ({'>=' if b['sense'] == 'min' else '<='} "
                              f"{b['floor']:g} needed)" for b in broken) or "non-finite values"
            raise ParityError(f"{label}: int8 {acc.name} (one value per sample) diverges from the float model over "
                              f"{acc.samples} samples: {found}")
        per_output[k]["cosine"] = result["metrics"]["cosine"]  # over every sample, not per batch of 1
        per_output[k].update({m: result["metrics"][m] for m in ("correlation", "max_abs_of_spread")})
    for stats in per_output:
        worst = _worst(worst, {key: stats[key] for key in ("max_abs", "max_rel", "cosine", "top1_agreement", "allclose")})
    worst.pop("allclose", None)
    listed = [{"index": k, "name": names[k] if k < len(names) else None, **_rounded(stats, drop="allclose")}
              for k, stats in enumerate(per_output)]
    # Six significant figures, not decimals: a max abs error of 3e-7 must not read as 0.
    return {**_rounded(worst), "batch_sizes": sorted(cases), "outputs": listed}


def _as_list(outputs) -> list[np.ndarray]:
    return [np.asarray(o) for o in outputs] if isinstance(outputs, (list, tuple)) else [np.asarray(outputs)]


def _output_label(index: int, names: list[str], many: bool) -> str:
    """How an error names an output: ``output`` for a model's only one, else its index and name."""
    if not many:
        return "output"
    return f"output {index}" + (f" ({names[index]!r})" if index < len(names) and names[index] else "")


def _rounded(stats: dict, drop: str = "") -> dict:
    return {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in stats.items() if k != drop}


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
    """The worse of two comparisons (a None top-1 agreement, an output without decisions, is no figure)."""
    if not acc:
        return dict(stats)
    top1 = [v for v in (acc["top1_agreement"], stats["top1_agreement"]) if v is not None]
    return {
        **acc,
        "max_abs": max(acc["max_abs"], stats["max_abs"]),
        "max_rel": max(acc["max_rel"], stats["max_rel"]),
        "cosine": min(acc["cosine"], stats["cosine"]),
        "top1_agreement": min(top1) if top1 else None,
        "allclose": acc["allclose"] and stats["allclose"],
    }
