"""What ``verify --emulate`` found: per-batch agreement, the verdict, the emulated bench (JSON-able)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from edgekit.board.inputs import output_of_key

VERIFY_SCHEMA = "edgekit.verify"
VERIFY_SCHEMA_VERSION = 1
BENCH_STATUS = "functional check under emulation"
BENCH_NOTE = "timings were taken under QEMU on this host; they are not the device's latency"
DEFAULT_ATOL = 1e-3
ISA_MIN_COSINE = 0.999  # one int8 program on the board's ISA vs this host's (formats.parity: the float floor)
INT8_RANGE_FRACTION = 0.01  # of the host output's range: about 2.5 steps of an 8-bit output
METRICS = ("max_abs", "max_rel", "cosine", "top1_agreement")


@dataclass(frozen=True)
class Tolerance:
    """How closely the emulated board must reproduce the host's outputs on the same inputs.

    fp32: max |emulated - host| <= ``atol`` and the same top-1 class for every sample.
    int8: quantized kernels differ between ISAs (x86 VNNI/AVX2 vs ARM NEON); a rounding
    difference in one requantization moves an output by a quantization step or two, so the
    bound is ``atol`` or 1% of the host output's range (about 2.5 steps of an 8-bit output),
    whichever is larger; cosine must stay >= 0.999 and top-1 must agree for every sample.
    """

    precision: str
    atol: float = DEFAULT_ATOL
    min_top1: float = 1.0
    min_cosine: float | None = None
    rule: str = ""  # a rule of another kind (a language model's tokens), said as it is

    @classmethod
    def for_precision(cls, precision: str, atol: float = DEFAULT_ATOL) -> "Tolerance":
        return cls(precision, atol, 1.0, ISA_MIN_COSINE if precision != "fp32" else None)

    def bound(self, host_output) -> float:
        if self.precision == "fp32" or host_output.size == 0:
            return self.atol
        spread = float(host_output.max() - host_output.min())
        return max(self.atol, INT8_RANGE_FRACTION * spread)

    def describe(self) -> str:
        if self.rule:
            return self.rule
        if self.precision != "fp32":
            return (f"max abs <= max({self.atol:g}, {INT8_RANGE_FRACTION:.0%} of the host output's range), "
                    f"cosine >= {self.min_cosine:g}, top-1 agreement {self.min_top1:.0%}")
        return f"max abs <= {self.atol:g}, top-1 agreement {self.min_top1:.0%}"


@dataclass(frozen=True)
class BatchCheck:
    batch: int
    emulated_vs_host: dict[str, float]
    emulated_vs_float: dict[str, float]
    host_vs_float: dict[str, float]
    bound: float  # the max-abs bound applied to emulated_vs_host
    passed: bool
    reason: str = ""  # why it failed
    output: int = 0  # which of the model's outputs (0: the first)


@dataclass(frozen=True)
class EmulationReport:
    bundle: str
    target: str
    model: dict[str, Any]  # path, format, precision, sha256, variant
    checksums: dict[str, Any]  # files checked
    emulation: dict[str, Any]  # launcher, qemu, qemu_cpu, release, python, rootfs, venv, runtime, machine
    host: dict[str, Any]  # machine, python, runtime
    tolerance: Tolerance
    batches: tuple[BatchCheck, ...]
    bench: dict[str, Any] | None  # {"status": BENCH_STATUS, "note": BENCH_NOTE, "result": bench result}
    seconds: dict[str, float]
    notes: tuple[str, ...] = field(default_factory=tuple)
    serve: dict[str, Any] | None = None  # the bundle's serve.py under emulation (edgekit.emulate.serve_check)
    # the bundle's own output check on the emulated outputs (edgekit.emulate.bundle_check)
    bundle_check: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        bench_ok = self.bench is None or bool(self.bench.get("ok"))
        serve_ok = self.serve is None or bool(self.serve.get("ok"))
        own_ok = self.bundle_check is None or bool(self.bundle_check.get("ok"))
        entry = self.emulation.get("entry_point")  # run.sh check in a Python-free root, where it ran
        entry_ok = not isinstance(entry, dict) or bool(entry.get("ok"))
        return (bool(self.batches) and all(b.passed for b in self.batches) and bench_ok and serve_ok and own_ok
                and entry_ok)

    def failure(self) -> str:
        """One line: why the verification failed ("" when it passed)."""
        for check in self.batches:
            if not check.passed:
                where = f"batch {check.batch}" + (f", output {check.output}" if check.output else "")
                return f"the emulated {self.emulation.get('machine', 'aarch64')} run differs from the host at {where}: {check.reason}"
        if not self.batches:
            return "no reference batches were compared"
        if self.bundle_check is not None and not self.bundle_check.get("ok"):
            return (f"the bundle's own check ({self.bundle_check.get('command')}) fails on the emulated board's outputs: "
                    f"{'; '.join(self.bundle_check.get('failures') or ())}; it will fail on the device too")
        entry = self.emulation.get("entry_point")
        if isinstance(entry, dict) and not entry.get("ok"):
            return (f"the bundle's {entry.get('command')} failed under emulation: "
                    f"{entry.get('verdict') or entry.get('error') or 'exit status ' + str(entry.get('exit_code'))}")
        if self.bench is not None and not self.bench.get("ok"):
            return f"the bundle's runner.py failed under emulation: {self.bench.get('error') or 'no result'}"
        if self.serve is not None and not self.serve.get("ok"):
            return f"the bundle's serve.py failed under emulation: {self.serve.get('error') or 'no answer'}"
        return ""

    def to_dict(self) -> dict:
        data = asdict(self)
        data["tolerance"] = {**asdict(self.tolerance), "rule": self.tolerance.describe()}
        data["batches"] = [asdict(b) for b in self.batches]
        data["notes"] = list(self.notes)
        return {"schema": VERIFY_SCHEMA, "schema_version": VERIFY_SCHEMA_VERSION, "mode": "emulated",
                "passed": self.passed, **data}


def check_batch(batch: int, emulated, host, reference, tolerance: Tolerance) -> BatchCheck:
    """Compare the emulated board's output with the host's (the verdict) and both with the float model's."""
    from edgekit.formats.parity import compare

    if emulated.shape != host.shape:
        empty: dict[str, float] = {}
        return BatchCheck(batch, empty, empty, empty, tolerance.atol, False,
                          f"output shape {tuple(emulated.shape)} != host's {tuple(host.shape)}")
    vs_host, vs_float, host_float = (
        _metrics(compare, host, emulated), _metrics(compare, reference, emulated), _metrics(compare, reference, host)
    )
    bound = tolerance.bound(host)
    reasons = []
    if not vs_host["max_abs"] <= bound:  # NaN fails too
        reasons.append(f"max abs difference {vs_host['max_abs']:.3g} > {bound:.3g}")
    if not vs_host["top1_agreement"] >= tolerance.min_top1:
        reasons.append(f"top-1 agreement {vs_host['top1_agreement']:.1%} < {tolerance.min_top1:.0%}")
    if tolerance.min_cosine is not None and not vs_host["cosine"] >= tolerance.min_cosine:
        reasons.append(f"cosine {vs_host['cosine']:.5f} < {tolerance.min_cosine:g}")
    return BatchCheck(batch, vs_host, vs_float, host_float, bound, not reasons, "; ".join(reasons))


def _metrics(compare, reference, candidate) -> dict[str, float]:
    if reference.shape != candidate.shape:
        return {}
    stats = compare(reference, candidate)
    return {key: float(stats[key]) for key in METRICS}


def check_batches(emulated: dict, hosted: dict, reference: dict, tolerance: Tolerance, notes: list[str]) -> tuple:
    """Every output of every batch checked (``b{N}/output``, ``b{N}/outputs/{k}`` keys), in batch and
    output order; an output only one side produced is a note."""
    from dataclasses import replace


    keys = sorted((where, key) for key in hosted if (where := output_of_key(key)) is not None)
    batches = tuple(replace(check_batch(batch, emulated[key], hosted[key], reference[key], tolerance), output=index)
                    for (batch, index), key in keys if key in emulated and key in reference)
    missing = sorted(set(hosted) ^ set(emulated))
    if missing:
        notes.append(f"outputs produced on one side only: {', '.join(missing)}")
    return batches


def bundle_fields(bundle) -> dict[str, Any]:
    """The report's fields that name the bundle checked: path, target, model, checksums (verified)."""
    return {
        "bundle": str(bundle.path.resolve()),
        "target": bundle.target,
        "model": {"path": bundle.model.name, "format": bundle.format, "precision": bundle.precision,
                  "sha256": bundle.info.get("model_sha256"), "variant": bundle.info.get("variant", "")},
        "checksums": {"file": "SHA256SUMS", "files_checked": bundle.checked_files, "ok": True},
    }
