"""``edgekit bench``: time models here or on a board over SSH; a table, and the bench document with ``--json``."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import typer

from edgekit.bench.display import plain, three_digits
from edgekit.cli.common import console, handles_errors, progress_enabled
from edgekit.cli.options import TargetOpt
from edgekit.records.result import to_document
from edgekit.records.stats import parse_shape
from edgekit.core.errors import UsageError
from edgekit.core.fileio import ensure_writable_dir, write_json
from edgekit.core.outputs import check_report_paths, with_artifact_folders
from edgekit.llm.bench import llm_models
from edgekit.remote.options import RemoteOptions


@handles_errors
def bench_command(
    artifacts: list[Path] = typer.Argument(
        ..., metavar="ARTIFACT...", help="Model file (.onnx, TorchScript .pt, ExecuTorch .pte) or artifact folder holding one model."
    ),
    target: TargetOpt = None,
    threads: int | None = typer.Option(
        None, "--threads",
        help="Intra-op threads (default: the target's, else all cores; locally at most this host's cores minus one).",
    ),
    warmup: int = typer.Option(10, "--warmup", help="Untimed runs before timing."),
    min_runs: int = typer.Option(50, "--min-runs", help="At least this many timed runs."),
    min_time: float = typer.Option(1.0, "--min-time", help="And at least this many seconds of timed runs."),
    max_runs: int = typer.Option(100_000, "--max-runs", help="Safety cap on timed runs."),
    batch: int = typer.Option(1, "--batch", help="Size of dynamic axes (the batch)."),
    processes: int = typer.Option(1, "--processes", help="Worker processes per model; 2+ adds a confidence interval across them (use 4+ for CI gates)."),
    reference: bool = typer.Option(False, "--reference", help="Also time a fixed reference workload in every round, so gates can normalise by it."),
    shape: list[str] | None = typer.Option(None, "--shape", metavar="NAME=DIMS", help="Input shape NAME=DIMS, e.g. input=1x1x8x8 (repeatable)."),
    input_file: Path | None = typer.Option(None, "--input", help=".npz of input arrays by input name."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the bench document (JSON) here (an existing file only if empty or an edgekit bench document)."),
    html_out: Path | None = typer.Option(None, "--html", help="Write a self-contained HTML report here (latency distributions, size-accuracy-latency chart; an existing file only if empty or an edgekit HTML report)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No table."),
    # --- remote benchmark over SSH (edgekit.remote) ---
    host: str | None = typer.Option(None, "--host", help="Run on a board over SSH: HOST or USER@HOST. Takes one bundle or export folder; copies it once, re-uses it while unchanged."),
    port: int | None = typer.Option(None, "--port", help="With --host: SSH port."),
    identity: Path | None = typer.Option(None, "--identity", help="With --host: SSH private key file."),
    ssh_option: list[str] | None = typer.Option(None, "--ssh-option", metavar="KEY=VALUE", help="With --host: ssh -o KEY=VALUE (repeatable). Connection keys only (Port, User, IdentityFile, StrictHostKeyChecking, UserKnownHostsFile, ConnectTimeout, ProxyJump, ...); ProxyCommand, LocalCommand and other keys that run commands are refused, and each value must match its key's grammar (ProxyJump: [user@]host[:port],...)."),
    remote_dir: str | None = typer.Option(None, "--remote-dir", help="With --host: folder for bundles on the board (default ~/.cache/edgekit)."),
    remote_python: str | None = typer.Option(None, "--remote-python", help="With --host: python on the board with numpy + the runtime (default python3)."),
    timeout: float | None = typer.Option(None, "--timeout", help="With --host: limit in seconds for the whole remote run, from connecting through the copy to the runner's end (default 600)."),
    force: bool = typer.Option(False, "--force", help="With --host: go on when the model is estimated not to fit the board's RAM."),
    prompt_tokens: int = typer.Option(128, "--prompt-tokens", help="Language models: prompt length fed at once (prefill, time to first token)."),
    new_tokens: int = typer.Option(128, "--new-tokens", help="Language models: tokens generated greedily after it (decode tokens/s)."),
    emulate: bool = typer.Option(False, "--emulate", help="Count executed aarch64 instructions per inference on the target's core under QEMU (a native bundle, or a .pte/.onnx with --target): deterministic, for gates; see docs/emulated-counts.md."),
    emulate_runs: int = typer.Option(20, "--emulate-runs", help="With --emulate: inferences counted (per run = their count / this)."),
) -> None:
    """Benchmark models on this machine, or on a board over SSH with --host: latency percentiles, load time, peak memory.

    Each model runs in its own process; several models are interleaved so machine drift hits all alike.
    """
    from edgekit.bench.api import bench


    shapes = _parse_shapes(shape or [])
    reports = {"--json": json_out, "--html": html_out}
    if json_out is not None or html_out is not None:
        chosen = check_report_paths(reports, with_artifact_folders([*artifacts, input_file, identity, target]), REPORT_FORMATS)
        for path in chosen.values():
            ensure_writable_dir(path.parent)  # fail now, not after the benchmark
    # --- remote benchmark over SSH (edgekit.remote) ---

    remote = RemoteOptions(host, port, identity, tuple(ssh_option or ()), remote_dir, remote_python, timeout, force)
    if emulate:
        from edgekit.cli.bench_emulate import run_emulated

        results = run_emulated(artifacts, target=target, threads=threads, runs=emulate_runs, quiet=quiet, conflicting={
            "--host": remote.wanted(), "--processes": processes != 1, "--reference": reference,
            "--shape": bool(shapes), "--input": input_file is not None})
    elif remote.wanted():
        if processes != 1 or reference:
            raise UsageError("--processes and --reference apply to local runs; a board runs one process per model")
        results = remote.bench(
            artifacts, target=target, threads=threads, warmup=warmup, min_runs=min_runs, min_time_s=min_time,
            batch=batch, shapes=shapes or None, input_file=input_file,
            on_line=None if quiet else lambda line: typer.echo(line, err=True),
        )
    elif llms := _language_models(artifacts, shapes, input_file, reference):
        from edgekit.llm.bench import bench_llms
        from edgekit.core.targets import load_target
        from edgekit.core.threads import resolve_threads

        chosen_threads, notes = resolve_threads(threads, load_target(target) if target else None)
        err = console(stderr=True)
        for note in notes:
            err.print(f"note: {note}", markup=False)
        say = (lambda line: err.print(f"  {line}", markup=False)) if not quiet and progress_enabled() else None
        results = bench_llms(llms, chosen_threads, prompt_tokens, new_tokens, processes, progress=say, target=target)
    else:  # --- end remote ---
        names = [_short(p) for p in artifacts]
        with _progress(names, enabled=not quiet and progress_enabled()) as report:
            results = bench(
                artifacts, target=target, threads=threads, warmup=warmup, min_runs=min_runs,
                min_time_s=min_time, max_runs=max_runs, batch=batch, shapes=shapes or None, input_file=input_file, progress=report,
                processes=processes, reference=reference,
            )
    if json_out is not None or html_out is not None:  # again: a file may have appeared during the benchmark
        check_report_paths(reports, with_artifact_folders([*artifacts, input_file, identity, target]), REPORT_FORMATS)
    if json_out is not None:
        write_json(json_out, to_document(results))
    if html_out is not None:
        from edgekit.bench.html_report import write_html

        write_html(html_out, results, title="edgekit bench",
                   subtitle=", ".join(_labels(results)) + (f" for {target}" if target else ""))
    if not quiet and emulate:
        from edgekit.cli.bench_emulate import footer, render_instructions

        out = console()
        out.print(render_instructions(results))
        for line in footer(results):
            out.print(plain(line, style="dim"))
    elif not quiet and results and "llm" in results[0].settings:
        from edgekit.cli.llm_program import render_bench

        console().print(render_bench(results))
    elif not quiet:
        out = console()
        out.print(render_table(results))
        for line in _footer(results):
            out.print(plain(line, style="dim"))


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_command)


def _language_models(artifacts, shapes, input_file, reference) -> list:
    """The language-model artifacts to bench with prompts and tokens/s ([] when the paths are other models)."""
    llms = llm_models(artifacts)
    if llms and (shapes or input_file is not None or reference):
        raise UsageError("--shape, --input and --reference do not apply to language models (--prompt-tokens, --new-tokens do)")
    return llms


#: What an existing report file must be for bench to replace it (edgekit.core.outputs.check_report_paths).
REPORT_FORMATS = {"--json": "json:edgekit.bench", "--html": "html"}


def _parse_shapes(texts: list[str]) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for text in texts:
        try:
            name, dims = parse_shape(text)
        except ValueError as exc:
            raise UsageError(f"--shape: {exc}") from None
        if name in shapes:
            raise UsageError(f"--shape names input {name!r} twice")
        shapes[name] = list(dims)
    return shapes


@contextlib.contextmanager
def _progress(names: list[str], enabled: bool):
    """A status line on stderr, updated at most ten times a second (runners report every block)."""
    if not enabled:
        yield None
        return
    last = [0.0]
    with console(stderr=True).status("starting the benchmark runners") as status:

        def report(index: int, runs: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 0.1:
                last[0] = now
                status.update(f"benchmarking {names[index]}: {runs} timed runs")

        yield report


def _short(path) -> str:
    path = Path(path)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name




def _labels(results) -> list[str]:
    """File names, with their folder where two results would otherwise look alike."""
    names = [Path(r.model.path).name for r in results]
    return [_short(r.model.path) if names.count(n) > 1 else n for r, n in zip(results, names)]


def render_table(results):
    from rich import box
    from rich.table import Table

    several = len(results) > 1
    table = Table(title=f"edgekit bench ({results[0].runtime.get('threads')} threads)", box=box.SIMPLE_HEAD,
                  collapse_padding=True, pad_edge=False)
    headers = ["model", "format", "precision", "size\nMB", "p50\nms", "p90\nms", "p99\nms", "mean\nms",
               "throughput\n/s", "load\nms", "peak RSS\nMB", "accuracy"]
    generating = any(r.tokens_per_s is not None for r in results)
    if generating:
        headers.insert(headers.index("load\nms"), "tokens\n/s")
    if several:
        headers += ["p50 ×\nfirst", "size ×\nfirst"]
    for header in headers:
        text = header in ("model", "format", "precision")
        table.add_column(header, justify="left" if text else "right", no_wrap=True)
    first = results[0]
    for label, r in zip(_labels(results), results):
        t = r.timing
        row = [
            label, r.model.format, r.model.precision, three_digits(r.size_mb), three_digits(t.p50), three_digits(t.p90), three_digits(t.p99),
            three_digits(t.mean), f"{r.throughput_per_s:,.0f}", three_digits(t.load), f"{r.memory.peak_rss:.1f}",
            "–" if r.model.accuracy is None else f"{r.model.accuracy * 100:.2f}%",
        ]
        if generating:
            row.insert(headers.index("tokens\n/s"), "–" if r.tokens_per_s is None else f"{r.tokens_per_s:,.0f}")
        if several:
            row.append(f"{t.p50 / first.timing.p50:.2f}×" if first.timing.p50 > 0 else "–")
            row.append(f"{r.model.bytes / first.model.bytes:.2f}×" if first.model.bytes > 0 else "–")
        table.add_row(*(plain(cell) for cell in row))  # paths and names from files: no markup, no escapes
    return table


def _footer(results) -> list[str]:
    host = results[0].host
    cpu = host.get("cpu_model") or "unknown CPU"
    lines = [f"host: {host.get('machine')}, {cpu}, {host.get('logical_cores')} logical cores"
             + (" (emulated)" if host.get("emulated") else "")]
    for r in results:
        if r.p50_interval is not None:
            center, low, high = r.p50_interval
            name = r.model.variant or Path(r.model.path).name
            lines.append(f"{name}: p50 {center:.4g} ms, 95% CI {low:.4g}-{high:.4g} ms across "
                         f"{r.spread.processes} worker processes")
    notes: list[str] = []
    for r in results:
        for note in r.notes:
            if note not in notes:
                notes.append(note)
    return lines + [f"note: {n}" for n in notes]
