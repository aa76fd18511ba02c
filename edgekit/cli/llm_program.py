"""The ``quantize`` / ``export`` routes of a language model imported from GGUF (``edgekit.llm.artifact``)."""

from __future__ import annotations


from edgekit.cli.common import console, echo_json
from edgekit.cli.describe import manifest_summary
from edgekit.core.errors import UsageError
from edgekit.llm.artifact import write_program
from edgekit.llm.cached import is_llm_artifact as check


def is_llm_artifact(source) -> bool:
    return check(source)


def refuse_int8_options(given: dict, route: str) -> None:
    used = [flag for flag, value in given.items() if value not in (None, False, (), [])]
    if used:
        raise UsageError(f"{', '.join(used)} do(es) not apply to {route}")


def write(source, out, precision: str, kind: str, *, group_size: int, eval_tokens, eval_text, threads, force,
          as_json: bool, target: str | None, kernels: str | None = None) -> None:
    from edgekit.cli.common import progress_enabled

    err = console(stderr=True)
    say = (lambda message: err.print(f"  {message}", markup=False)) if progress_enabled() else None
    folder, manifest = write_program(source, out, precision, kind=kind, group_size=group_size, eval_tokens=eval_tokens,
                                     eval_text=eval_text, threads=threads, force=force, progress=say, target=target,
                                     kernels=kernels)
    if as_json:
        echo_json(manifest_summary(folder, manifest))
        return
    render(folder, manifest)


def render(folder, manifest) -> None:
    from rich.table import Table

    entry = manifest.files[0]
    quality = entry.details.get("quality") or {}
    table = Table(title=f"{entry.details.get('variant')} -> {folder}")
    for column in ("file", "MB", "context", "perplexity", "float ppl", "growth", "greedy agree", "recommended"):
        table.add_column(column)
    growth = quality.get("perplexity_growth")
    table.add_row(entry.path, f"{entry.bytes / 2**20:.1f}", str(entry.details.get("context")),
                  f"{quality['perplexity']:.3f}" if quality else "-",
                  f"{quality['float_perplexity']:.3f}" if quality else "-",
                  f"{growth * 100:+.2f}%" if growth is not None else "-",
                  f"{quality['greedy_agreement'] * 100:.1f}%" if quality else "-",
                  ("yes" if quality.get("recommended") else "NO (over budget)") if quality else "not measured")
    console().print(table)
    if quality and not quality.get("recommended"):
        console(stderr=True).print(
            f"Warning: perplexity grew {growth * 100:.2f}% over the float model's, past the "
            f"{quality['perplexity_budget'] * 100:.0f}% budget: this file is not recommended", markup=False)


def render_bench(results):
    """The language-model bench table: one row per model, medians over the worker processes."""
    from rich.table import Table

    table = Table(title="Language models (medians over processes)")
    for column in ("model", "MB", "threads", "prefill tok/s", "decode tok/s", "TTFT ms", "peak RSS MiB", "perplexity"):
        table.add_column(column)
    for result in results:
        llm = result.settings["llm"]
        ppl = next((note.split()[1] for note in result.notes if note.startswith("perplexity ")), "-")
        table.add_row(result.model.variant, f"{result.size_mb:.1f}", str(result.runtime.get("threads")),
                      f"{llm['prefill_tps']['median']:.1f}", f"{llm['decode_tps']['median']:.1f}",
                      f"{llm['ttft_ms']['median']:.0f}", f"{llm['peak_rss_mb']['median']:.0f}", ppl)
    return table
