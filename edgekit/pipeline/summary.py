"""The pipeline's results as people read them: one table (the terminal and ``pipeline.md`` print the
same cells), ``pipeline.json``, and ``report.html`` with the same ratios, verdict and skips.

A model without labelled data is judged by fidelity to the float model: the quality column is
headed "fidelity" and holds the cosine and top-1 agreement of each variant's outputs to the
float model's on fixed inputs. A variant the plan skipped (``edgekit.pipeline.plan``) is a row
marked "skipped", its reason printed under the table.
"""

from __future__ import annotations
from edgekit.bench.html_report import Ratio, write_html
from edgekit.core.fileio import write_json, write_text
from edgekit.core.outputs import generator_mark
from edgekit.pipeline.target import TargetCost, basis_line
from edgekit.pipeline.verdict import recommendation_line

HEADERS = ("variant", "format", "size", "accuracy", "p50 ms", "p99 ms", "peak RSS", "gate")


def ratio(value: float | None) -> str:
    return "" if value is None else f" ({value:.2f}x)"


def headers(result, target_column: bool = True) -> tuple[str, ...]:
    """The table's headers; ``target_column``: with the target's figures (the terminal prints them as
    a table of their own, so the main one keeps its width)."""
    names = tuple(result.metric if name == "accuracy" else name for name in HEADERS)
    if not (target_column and _has_target(result)):
        return names
    return (*names[:-1], f"on {result.target_name}", names[-1])


def _has_target(result) -> bool:
    """The rows carry the target's figures (edgekit.pipeline.target): the table gets its column."""
    return bool(getattr(result, "target_name", "")) and any(getattr(row, "target", None) for row in result.rows)


def target_cell(row) -> str:
    if not getattr(row, "target", None):
        return "-"
    cell = TargetCost(**row.target).cell()
    return cell if cell == "-" else cell + ratio(row.target_ratio)


def target_line(result) -> str | None:
    if not _has_target(result):
        return None

    return basis_line([row.target for row in result.rows], result.target_name)


def quality(row) -> str:
    """The quality cell: accuracy, or fidelity (cosine, top-1 agreement) to the float model."""
    if getattr(row, "metric", "accuracy") == "fidelity":
        found = row.fidelity or {}
        if found.get("cosine") is None:
            return "-"
        top1 = found.get("top1_agreement")
        head = found.get("headline") or {}
        if head.get("metric") not in (None, "cosine"):  # the metric that binds for this output leads
            text = f"{head['metric']} {head['value']:.4g}, cos {found['cosine']:.5f}"
        else:
            text = f"cos {found['cosine']:.5f}" + ("" if top1 is None else f", top-1 {100 * top1:.1f}%")
        from edgekit.fidelity.evidence import REAL

        # figures from inputs edgekit made up are no evidence of accuracy: said in the cell itself
        return text + (" (synthetic)" if found.get("evidence") and found["evidence"] not in REAL else "")
    return pct(row.accuracy)


def cells(result, target_column: bool = True) -> list[tuple[str, ...]]:
    """The table's rows, as text: every variant measured, then every variant skipped."""
    out = []
    extra = target_column and _has_target(result)
    for row in result.rows:
        cells_ = (row.variant, row.format, f"{row.size_bytes / 1024:.1f} KB{ratio(row.size_ratio)}", quality(row),
                  f"{row.p50_ms:.3f}{ratio(row.p50_ratio)}", f"{row.p99_ms:.3f}", f"{row.peak_rss_mb:.0f} MB")
        out.append((*cells_, *((target_cell(row),) if extra else ()), row.gate))
    failed = getattr(result, "failed", ())
    for skip in result.skipped:
        for variant in skip.variants:
            what = "FAILED" if skip in failed else "skipped"
            out.append((variant, variant.rsplit("-", 1)[-1], what, "-", "-", "-", "-", *(("-",) if extra else ()),
                        "fail" if skip in failed else "skip"))
    return out


def skipped_lines(result) -> list[str]:
    failed = getattr(result, "failed", ())
    return [f"{'Failed' if skip in failed else 'Skipped'} {', '.join(skip.variants)}: "
            f"{skip.reason.removeprefix('failed: ')}" for skip in result.skipped]


def title(result, target_name: str) -> str:
    return f"edgekit pipeline: {result.model} for {target_name}"


def float_line(result) -> str:
    if result.metric == "fidelity":
        return (f"{result.model} has no labelled data: each variant is judged by fidelity to the float model "
                "(cosine and top-1 agreement of its outputs on fixed inputs).")
    return f"Float model test accuracy: {pct(result.float_accuracy)}."


def summary_markdown(result, target_name: str) -> str:
    lines = [
        f"# {title(result, target_name)}",
        "",
        f"{float_line(result)} Benchmarked on this machine; "
        "ratios are against the fp32 variant of the same format, measured in the same run.",
        "",
        "| " + " | ".join(headers(result)) + " |",
        "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if _has_target(result) else "") + "---|",
    ]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in cells(result)]
    basis = target_line(result)
    lines += ["", *((basis, "") if basis else ()), recommendation_line(result.recommended), ""]
    lines += _choice_markdown(getattr(result, "runtime_choice", None))
    lines += [f"Gate: **{'PASSED' if result.passed else 'FAILED'}** (details in gate.md)", ""]
    lines += [f"- Warning: {warning}" for warning in result.warnings]
    lines += [f"- {line}" for line in skipped_lines(result)]

    lines += ["", generator_mark("markdown")]  # proves the file is edgekit's to a rerun (edgekit.core.outputs)
    return "\n".join(lines) + "\n"


def _choice_markdown(choice: dict | None) -> list[str]:
    """Every counted variant ranked on the target's core, and the runtime to deploy (edgekit.pipeline.choice)."""
    if choice is None:
        return []
    from edgekit.pipeline import choice as runtime

    lines = [runtime.heading(choice), "", "| " + " | ".join(runtime.COLUMNS) + " |",
             "|---|---|---|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in runtime.cells(choice)]
    return [*lines, "", *(f"- {line}" for line in runtime.not_counted_lines(choice)), "", runtime.choice_line(choice), ""]


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def write_summary(result, config, target, plan) -> None:
    doc = {
        "schema": "edgekit.pipeline.run",
        "schema_version": 1,
        "target": target.name,
        "model": result.model,
        "source": {"kind": plan.kind, "path": _source_path(config, plan)},
        "metric": result.metric,
        "float_accuracy": result.float_accuracy,
        "passed": result.passed,
        "variants": [row.to_dict() for row in result.rows],
        "skipped": [skip.to_dict() for skip in result.skipped],
        "failed": [skip.to_dict() for skip in getattr(result, "failed", ())],
        "recommended": result.recommended,
        "runtime_choice": getattr(result, "runtime_choice", None),
        "warnings": list(result.warnings),
    }
    write_json(result.out / "pipeline.json", doc)
    write_text(result.out / "pipeline.md", summary_markdown(result, target.name))


def _source_path(config, plan) -> str | None:
    if plan.kind == "zoo":
        return None
    return str(plan.checkpoint if plan.kind == "checkpoint" else config.source)


def write_report(result, results, target) -> None:
    """report.html: each variant's latency distribution and the size-quality-latency trade-off, with
    the table's ratios (fp32 of the same format, 95 % interval), recommendation, warnings and skips."""
    verdict = "all budgets met" if result.passed else f"{len(result.gate_report.failures)} budget check(s) failed"
    judged = (f"float test accuracy {pct(result.float_accuracy)}" if result.metric == "accuracy"
              else "no labelled data: judged by fidelity to the float model")
    ratios = {row.variant: Ratio(f"fp32-{row.format}", row.p50_ratio, row.p50_ratio_ci, row.size_ratio,
                                 row.size_ratio is not None)
              for row in result.rows}
    basis = target_line(result)
    choice = getattr(result, "runtime_choice", None)
    if choice is not None:
        from edgekit.pipeline.choice import choice_line

        choice = choice_line(choice)
    lines = [*((basis,) if basis else ()), recommendation_line(result.recommended), *((choice,) if choice else ()),
             *(f"Warning: {w}" for w in result.warnings)]
    write_html(result.out / "report.html", results, title=title(result, target.name),
               subtitle=f"{judged}; gate: {verdict}", gates={row.variant: row.gate for row in result.rows},
               ratios=ratios, quality=(result.metric, {row.variant: quality(row) for row in result.rows}),
               verdict=lines, notes=skipped_lines(result))
