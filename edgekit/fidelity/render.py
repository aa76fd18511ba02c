"""Fidelity records (``assess``) in words, for tables, reports and logs (plain strings, no printing)."""

from __future__ import annotations

from edgekit.fidelity.evidence import REAL

LABELS = {"top1_agreement": "argmax agreement", "timestep_agreement": "per-timestep agreement",
          "symbol_agreement": "symbol agreement",
          "correlation": "correlation", "max_abs_of_spread": "max abs / spread", "cosine": "cosine"}


def binding_text(fidelity: dict) -> str:
    """The binding metric the table leads with: ``per-timestep agreement 0.49 < 0.9 (logits)``."""
    head = fidelity.get("headline") or {}
    if not head:
        return "-"
    value, floor = head.get("value"), head.get("floor")
    sign = (">=" if head.get("ok") else "<") if head.get("sense") == "min" else ("<=" if head.get("ok") else ">")
    return f"{LABELS.get(head.get('metric'), head.get('metric'))} {value:.4g} {sign} {floor:g} ({head.get('output')})"


def verdict_text(fidelity: dict) -> str:
    if not fidelity.get("evidence"):
        return "-"
    if fidelity["evidence"] not in REAL:
        return "unverified (synthetic)"
    ok = fidelity["verdict"] == "pass" if fidelity.get("verdict") else fidelity.get("ok")
    return f"{'PASS' if ok else 'FAIL'} ({fidelity['evidence']})"


def worst(fidelity: dict, metric: str):
    """The worst value of ``metric`` over every output (lowest; highest for errors), or None."""
    values = [o["metrics"].get(metric) for o in fidelity.get("outputs") or () if o["metrics"].get(metric) is not None]
    if not values:
        return None
    return max(values) if "error" in metric or metric.startswith("max_") else min(values)


def evidence_lines(entries) -> list[str]:
    """One line per distinct evidence note (a synthetic one says it is no evidence of accuracy)."""
    lines = []
    for entry in entries:
        note = ((entry.metrics or {}).get("fidelity") or {}).get("evidence_note")
        if note and note not in lines:
            lines.append(note)
    return lines


def output_lines(fidelity: dict) -> list[str]:
    """One line per output: its kind, its binding metrics against their floors, then the others."""
    out = []
    for result in fidelity.get("outputs") or ():
        binds = ", ".join(f"{LABELS.get(b['metric'], b['metric'])} {b['value']:.4g} "
                          f"({'>=' if b['sense'] == 'min' else '<='} {b['floor']:g}: {'ok' if b['ok'] else 'FAIL'})"
                          for b in result["binding"] if b["value"] is not None)
        rest = ", ".join(f"{k} {v:.4g}" for k, v in result["metrics"].items()
                         if v is not None and k not in {b["metric"] for b in result["binding"]})
        out.append(f"{result['output']} [{result['kind']}]: {binds or 'no binding metric'}; {rest}")
    return out
