"""A self-contained HTML report of bench results: one page, inline SVG, no script, no external asset.

For a reviewer opening a CI artifact: each variant's latency distribution (all on one shared
millisecond scale, so they compare by eye) and the size–accuracy–latency trade-off (a bubble per
variant: x = p50 latency, y = accuracy, area = size on disk), then the figures as a table. Ratios
are against the fp32 variant of the same format measured in the same run (the pipeline's table
reads the same ``edgekit.bench.ratios``), with the 95 % interval across worker processes when
there is one; a variant whose format has no fp32 variant in the results is held to the first one,
and the table names each ratio's baseline. The pipeline adds its verdict: the recommendation and
the "not paying off" warnings its table prints.

The distribution is drawn from the quantiles the bench result keeps: the line runs from the
fastest run to p99, the box from p50 to p90, a diamond marks the mean and a dot the slowest run.
Every variant has one colour, used in its distribution chart, its bubble and its table row.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

from edgekit.bench.display import three_digits
from edgekit.bench.html_instructions import instructions_section
from edgekit.bench.ratios import fp32_baselines, p50_ratio
from edgekit.core.fileio import write_text
from edgekit.core.outputs import generator_mark

# Okabe-Ito, the colour-blind-safe palette (yellow left out: too faint on white), then extra hues.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
           "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF", "#9467BD")

DIST_W, DIST_H = 720, 66
LEFT, RIGHT = 12, 700
SCATTER_W, SCATTER_H = 720, 420


def variant_label(result) -> str:
    return result.model.variant or Path(result.model.path).name


def colors(n: int) -> list[str]:
    """``n`` distinct colours: the palette, then evenly spaced hues."""
    if n <= len(PALETTE):
        return list(PALETTE[:n])
    extra = [_hsl_hex(360 * i / (n - len(PALETTE)), 0.55, 0.45) for i in range(n - len(PALETTE))]
    return [*PALETTE, *extra]


def render_html(results, title: str = "edgekit bench", subtitle: str = "", gates: dict | None = None,
                ratios: dict | None = None, quality: tuple[str, dict] | None = None, verdict=(), notes=()) -> str:
    """The report page for ``results`` (BenchResult list); ``gates``: variant label -> pass | fail | skip.

    ``ratios``: variant label -> ``Ratio`` as the caller's table has them (default: computed here,
    against the fp32 variant of the same format). ``quality``: (column name, label -> cell), e.g.
    ("fidelity", ...) for a model without labelled data (default: each result's accuracy).
    ``verdict``: lines shown first, as the table states them (a recommendation, warnings);
    ``notes``: lines shown under the figures (what was skipped, and why)."""
    if not results:
        raise ValueError("no results to report")

    labels = _unique([variant_label(r) for r in results])
    ratios = ratios if ratios is not None else same_run_ratios(results, labels)
    palette = colors(len(results))
    scale = _log_scale(results)
    figures = "\n".join(
        _distribution_figure(r, label, color, scale) for r, label, color in zip(results, labels, palette)
    )
    host = results[0].host or {}
    runtime = results[0].runtime or {}
    facts = (f"{host.get('machine', '?')}, {host.get('cpu_model') or 'unknown CPU'}, "
             f"{host.get('logical_cores', '?')} logical cores; {runtime.get('threads', '?')} threads; "
             f"mode {results[0].mode}" + (f"; target {results[0].target}" if results[0].target else ""))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{generator_mark("html")}
<title>{_e(title)}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px;
       color: #1b1b1b; background: #ffffff; max-width: 860px; }}
h1 {{ font-size: 22px; margin: 0 0 4px; }}
h2 {{ font-size: 17px; margin: 28px 0 6px; }}
p.sub, p.note {{ color: #555; font-size: 13px; margin: 2px 0; }}
figure {{ margin: 8px 0 12px; }}
figcaption {{ font-size: 13px; margin-bottom: 2px; }}
figcaption .swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 6px; }}
svg text {{ font-size: 11px; fill: #333; }}
table {{ border-collapse: collapse; font-size: 12px; margin-top: 6px; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; }}
td.fail {{ color: #b00020; font-weight: 600; }} td.pass {{ color: #1b7f3b; }}
div.verdict p {{ font-size: 14px; margin: 6px 0; }}
div.verdict p.recommended {{ font-weight: 600; }}
div.verdict p.warning {{ color: #8a4b00; }}
</style>
</head>
<body>
<h1>{_e(title)}</h1>
{f'<p class="sub">{_e(subtitle)}</p>' if subtitle else ''}
<p class="sub">{_e(facts)}</p>
{_verdict(verdict)}
{instructions_section(results, labels)}<h2>Latency distribution per variant (ms, one logarithmic scale)</h2>
<p class="note">Line: fastest run to p99. Box: p50 to p90, dark bar at p50. Diamond: mean. Dot: slowest run
(an arrow when it lies off the scale). Latency tails are long, so the scale is logarithmic.</p>
{figures}
<h2>Size, accuracy and latency</h2>
<p class="note">Each bubble is a variant: further left is faster, higher is more accurate, a larger bubble is a
larger file. The best trade-off sits top left with a small bubble.</p>
{_tradeoff_svg(results, labels, palette)}
<h2>Figures</h2>
{_table(results, labels, palette, gates or {}, ratios, quality)}
{"".join(f'<p class="note skipped">{_e(line)}</p>' for line in notes)}
</body>
</html>
"""


def write_html(path: str | Path, results, **kwargs) -> Path:
    write_text(Path(path), render_html(results, **kwargs))
    return Path(path)


# --------------------------------------------------------------------------------- distribution


def _log_scale(results) -> tuple[float, float]:
    """(lo, hi) in ms: whole decades around every variant's fastest run and p99."""
    lows = [r.timing.min for r in results if r.timing.min > 0] or [r.timing.p50 for r in results if r.timing.p50 > 0]
    lo = 10 ** math.floor(math.log10(max(min(lows), 1e-6))) if lows else 1e-3
    hi = 10 ** math.ceil(math.log10(max(max(r.timing.p99 for r in results), lo * 10)))
    return lo, hi


def _distribution_figure(result, label: str, color: str, scale: tuple[float, float]) -> str:
    t = result.timing
    lo, hi = scale
    span = math.log10(hi) - math.log10(lo)

    def x(ms: float) -> float:
        ms = min(max(ms, lo), hi)
        return LEFT + (RIGHT - LEFT) * (math.log10(ms) - math.log10(lo)) / span

    y, box_h = 24, 16
    parts = [
        f'<line x1="{x(t.min):.1f}" y1="{y}" x2="{x(t.p99):.1f}" y2="{y}" stroke="{color}" stroke-width="2"/>',
        f'<line x1="{x(t.min):.1f}" y1="{y - 6}" x2="{x(t.min):.1f}" y2="{y + 6}" stroke="{color}" stroke-width="2"/>',
        f'<line x1="{x(t.p99):.1f}" y1="{y - 6}" x2="{x(t.p99):.1f}" y2="{y + 6}" stroke="{color}" stroke-width="2"/>',
        f'<rect class="box" x="{x(t.p50):.1f}" y="{y - box_h / 2}" width="{max(x(t.p90) - x(t.p50), 3):.1f}" '
        f'height="{box_h}" fill="{color}"/>',
        f'<rect x="{x(t.p50) - 1:.1f}" y="{y - box_h / 2 - 2}" width="3" height="{box_h + 4}" fill="#1b1b1b"/>',
        _diamond(x(t.mean), y, 5, "#ffffff", color),
    ]
    if t.max <= hi:
        parts.append(f'<circle cx="{x(t.max):.1f}" cy="{y}" r="3.5" fill="#ffffff" stroke="{color}" stroke-width="2"/>')
    else:
        parts.append(f'<path d="M{RIGHT + 2} {y - 5} L{RIGHT + 10} {y} L{RIGHT + 2} {y + 5} Z" fill="{color}"/>')
    parts.append(f'<text x="{min(x(t.p50), RIGHT - 80):.1f}" y="{y - 12}">p50 {three_digits(t.p50)}</text>')
    parts.append(_log_axis(lo, hi, x, 46))
    caption = (f'<span class="swatch" style="background:{color}"></span><b>{_e(label)}</b> '
               f"({_e(result.model.format)}, {_e(result.model.precision)}): p50 {three_digits(t.p50)} ms, "
               f"p90 {three_digits(t.p90)}, p99 {three_digits(t.p99)}, max {three_digits(t.max)}; {t.runs} runs")
    return (f'<figure class="variant" data-variant="{_e(label)}">\n<figcaption>{caption}</figcaption>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{DIST_W}" height="{DIST_H}" '
            f'viewBox="0 0 {DIST_W} {DIST_H}" role="img" aria-label="latency distribution of {_e(label)}">'
            + "".join(parts) + "</svg>\n</figure>")


def _log_axis(lo: float, hi: float, x, y: float) -> str:
    decades = round(math.log10(hi / lo))
    steps = (1, 2, 5) if decades <= 4 else (1,)
    out = [f'<line x1="{LEFT}" y1="{y}" x2="{RIGHT}" y2="{y}" stroke="#999" stroke-width="1"/>']
    for k in range(decades + 1):
        for step in steps:
            value = lo * 10 ** k * step
            if value > hi * (1 + 1e-9):
                continue
            px = x(value)
            anchor = "start" if k == 0 and step == 1 else "end" if value >= hi * (1 - 1e-9) else "middle"
            out.append(f'<line x1="{px:.1f}" y1="{y}" x2="{px:.1f}" y2="{y + 4}" stroke="#999"/>')
            out.append(f'<text x="{px:.1f}" y="{y + 16}" text-anchor="{anchor}">{float(f"{value:.3g}"):g}</text>')
    return "".join(out)


# ------------------------------------------------------------------------------------ trade-off


def _tradeoff_svg(results, labels, palette) -> str:
    accuracies = [r.model.accuracy for r in results]
    use_accuracy = all(a is not None for a in accuracies)
    y_values = [100 * a for a in accuracies] if use_accuracy else [r.size_mb for r in results]
    y_name = "accuracy (%)" if use_accuracy else "size (MB)"
    left, right, top, bottom = 64, SCATTER_W - 24, 20, SCATTER_H - 48
    x_max = _nice_max(max(r.timing.p50 for r in results) * 1.15)
    y_lo, y_hi = min(y_values), max(y_values)
    pad = max((y_hi - y_lo) * 0.25, 0.5 if use_accuracy else y_hi * 0.1 or 0.1)
    y_lo, y_hi = (max(0.0, y_lo - pad), min(100.0, y_hi + pad)) if use_accuracy else (0.0, y_hi + pad)
    if y_hi <= y_lo:
        y_hi = y_lo + 1
    biggest = max(r.model.bytes for r in results) or 1

    def px(v):
        return left + (right - left) * v / x_max

    def py(v):
        return bottom - (bottom - top) * (v - y_lo) / (y_hi - y_lo)

    out = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fafafa" stroke="#ccc"/>']
    for v in _ticks(0.0, x_max):
        out.append(f'<line x1="{px(v):.1f}" y1="{top}" x2="{px(v):.1f}" y2="{bottom}" stroke="#e6e6e6"/>')
        out.append(f'<text x="{px(v):.1f}" y="{bottom + 16}" text-anchor="middle">{three_digits(v)}</text>')
    for v in _ticks(y_lo, y_hi):
        out.append(f'<line x1="{left}" y1="{py(v):.1f}" x2="{right}" y2="{py(v):.1f}" stroke="#e6e6e6"/>')
        out.append(f'<text x="{left - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{three_digits(v)}</text>')
    out.append(f'<text x="{(left + right) / 2}" y="{SCATTER_H - 10}" text-anchor="middle">p50 latency (ms)</text>')
    out.append(f'<text x="14" y="{(top + bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(top + bottom) / 2})">{y_name}</text>')
    order = sorted(range(len(results)), key=lambda i: -results[i].model.bytes)  # small bubbles on top
    for i in order:
        r = results[i]
        radius = 5 + 20 * math.sqrt(r.model.bytes / biggest)
        cx, cy = px(r.timing.p50), py(y_values[i])
        out.append(f'<circle class="bubble" data-variant="{_e(labels[i])}" cx="{cx:.1f}" cy="{cy:.1f}" '
                   f'r="{radius:.1f}" fill="{palette[i]}" fill-opacity="0.55" stroke="{palette[i]}" stroke-width="1.5"/>')
    placed = []  # boxes labels must avoid (x0, y0, x1, y1): the bubbles, then each label drawn
    for i, r in enumerate(results):
        cx, cy, radius = px(r.timing.p50), py(y_values[i]), 5 + 20 * math.sqrt(r.model.bytes / biggest)
        placed.append((cx - radius, cy - radius, cx + radius, cy + radius))
    for i, r in enumerate(results):
        cx, cy = px(r.timing.p50), py(y_values[i])
        radius = 5 + 20 * math.sqrt(r.model.bytes / biggest)
        text = f"{labels[i]} ({_size(r.model.bytes)})"
        width = 6.3 * len(text)
        right_side = cx + radius + 4 + width <= right
        x0 = cx + radius + 4 if right_side else cx - radius - 4 - width
        y = _free_row(placed, x0, x0 + width, cy + 4, top + 12, bottom - 4)
        placed.append((x0, y - 11, x0 + width, y + 2))
        if abs(y - 4 - cy) > 6:  # moved off its bubble's centre line: a leader line says whose label it is
            end_x = x0 if right_side else x0 + width
            out.append(f'<line x1="{cx + (radius if right_side else -radius) * 0.7:.1f}" y1="{cy:.1f}" '
                       f'x2="{end_x:.1f}" y2="{y - 4:.1f}" stroke="{palette[i]}" stroke-width="1"/>')
        out.append(f'<text x="{x0:.1f}" y="{y:.1f}">{_e(text)}</text>')
    return (f'<figure class="tradeoff"><svg xmlns="http://www.w3.org/2000/svg" width="{SCATTER_W}" '
            f'height="{SCATTER_H}" viewBox="0 0 {SCATTER_W} {SCATTER_H}" role="img" '
            f'aria-label="size, accuracy and latency of every variant">' + "".join(out) + "</svg></figure>")


# ---------------------------------------------------------------------------------------- table


@dataclass(frozen=True)
class Ratio:
    """A variant against its baseline, both measured in the same run."""

    baseline: str  # the baseline's label
    p50: float | None
    p50_ci: tuple[float, float] | None  # 95 % interval across worker processes
    size: float | None
    same_format_fp32: bool = True  # False: no fp32 variant of its format in the run, held to the first result


def same_run_ratios(results, labels: list[str] | None = None) -> dict[str, Ratio]:
    """label -> Ratio against the fp32 variant of the same format, else against the first result."""
    labels = labels or _unique([variant_label(r) for r in results])
    out = {}
    for index, (res, found) in enumerate(zip(results, fp32_baselines(results))):
        base_index = 0 if found is None else found
        base = results[base_index]
        value, low, high = p50_ratio(res, base) if base.timing.p50 > 0 else (None, None, None)
        size = res.model.bytes / base.model.bytes if base.model.bytes > 0 else None
        out[labels[index]] = Ratio(labels[base_index], value, None if low is None else (low, high), size, found is not None)
    return out


def _ratio_cell(ratio: Ratio | None) -> str:
    if ratio is None or ratio.p50 is None:
        return "–"
    interval = "" if ratio.p50_ci is None else f" ({ratio.p50_ci[0]:.2f}–{ratio.p50_ci[1]:.2f})"
    return f"{ratio.p50:.2f}×{interval}"


def _table(results, labels, palette, gates: dict, ratios: dict, quality: tuple[str, dict] | None = None) -> str:
    rows = []
    column, cells = quality if quality is not None else ("accuracy", {})
    for r, label, color in zip(results, labels, palette):
        t = r.timing
        acc = cells.get(label) or ("–" if r.model.accuracy is None else f"{100 * r.model.accuracy:.2f}%")
        ratio = ratios.get(label)
        size_ratio = "–" if ratio is None or ratio.size is None else f"{ratio.size:.2f}×"
        baseline = "–" if ratio is None else ratio.baseline
        gate = gates.get(label, "")
        rows.append(
            f'<tr data-variant="{_e(label)}"><td><span style="color:{color}">■</span> {_e(label)}</td>'
            f"<td>{_e(r.model.format)} {_e(r.model.precision)}</td><td>{_size(r.model.bytes)}</td><td>{_e(acc)}</td>"
            f"<td>{three_digits(t.p50)}</td><td>{three_digits(t.p90)}</td><td>{three_digits(t.p99)}</td>"
            f'<td class="p50-ratio">{_ratio_cell(ratio)}</td><td class="size-ratio">{size_ratio}</td>'
            f'<td class="baseline">{_e(baseline)}</td>'
            f"<td>{r.memory.peak_rss:.0f} MB</td><td class=\"{_e(gate)}\">{_e(gate or '–')}</td></tr>"
        )
    head = (f"<tr><th>variant</th><th>model</th><th>size</th><th>{_e(column)}</th><th>p50 ms</th>"
            "<th>p90 ms</th><th>p99 ms</th><th>p50 × (95% CI)</th><th>size ×</th><th>vs</th><th>peak RSS</th>"
            "<th>gate</th></tr>")
    return f"<table>\n{head}\n" + "\n".join(rows) + f"\n</table>\n{_ratio_note(labels, ratios)}"


def _ratio_note(labels: list[str], ratios: dict) -> str:
    odd = sorted({ratio.baseline for ratio in ratios.values() if not ratio.same_format_fp32})
    text = ("Ratios (×) are against the fp32 variant of the same format (column vs), measured in the same run; "
            "the interval is the 95% confidence interval across worker processes, when the bench ran several.")
    if odd:
        text += (f" Variants whose format has no fp32 variant here are held to {', '.join(odd)}, "
                 "the first variant of the run.")
    return f'<p class="note">{_e(text)}</p>'


def _verdict(lines) -> str:
    """The pipeline's conclusions, as its table prints them: the recommendation, then warnings."""
    out = []
    for line in lines:
        kind = "recommended" if line.startswith("Recommended") else "warning" if line.startswith("Warning") else "plain"
        out.append(f'<p class="{kind}">{_e(line)}</p>')
    return '<div class="verdict">\n' + "\n".join(out) + "\n</div>" if out else ""


# -------------------------------------------------------------------------------------- helpers


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out




def _size(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.2f} MB"


def _nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k at or above ``value``."""
    if not (value > 0 and math.isfinite(value)):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    step = _nice_max(span / count)
    start = math.ceil(lo / step) * step
    ticks, value = [], start
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _free_row(placed, x0: float, x1: float, y: float, lo: float, hi: float) -> float:
    """The baseline nearest ``y`` (within lo..hi) where a label spanning x0..x1 overlaps none placed."""
    for step in range(0, 40):
        for candidate in ((y + 13 * (step // 2 + 1) * (1 if step % 2 else -1)) if step else y,):
            if lo <= candidate <= hi and not any(
                    x0 < bx1 and bx0 < x1 and candidate - 11 < by1 and by0 < candidate + 2 for bx0, by0, bx1, by1 in placed):
                return candidate
    return y


def _diamond(cx: float, cy: float, r: float, fill: str, stroke: str) -> str:
    return (f'<path d="M{cx:.1f} {cy - r} L{cx + r:.1f} {cy} L{cx:.1f} {cy + r} L{cx - r:.1f} {cy} Z" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>')


def _hsl_hex(h: float, s: float, lightness: float) -> str:
    import colorsys

    r, g, b = colorsys.hls_to_rgb(h / 360, lightness, s)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"
