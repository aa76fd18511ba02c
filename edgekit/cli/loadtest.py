"""``edgekit loadtest``: latency percentiles and throughput of a served model under load, as bench JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, handles_errors
from edgekit.records.result import to_document
from edgekit.core.bounds import check_threads
from edgekit.core.errors import UsageError
from edgekit.core.fileio import ensure_writable_dir, write_json
from edgekit.serve.auth import key_error
from edgekit.serve.loadtest import LoadSettings, loadtest


@handles_errors
def loadtest_command(
    url: Optional[str] = typer.Argument(None, help="Server address, e.g. http://127.0.0.1:8000 (omit with --serve)."),
    serve: Optional[Path] = typer.Option(None, "--serve", help="Start `edgekit serve` on this artifact (127.0.0.1, a free port), test it, stop it."),
    concurrency: int = typer.Option(16, "--concurrency", "-c", help="Clients in a closed loop (with --rate: most requests in flight)."),
    duration: float = typer.Option(10.0, "--duration", help="Seconds of load."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Send this many requests per second instead (open loop)."),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds before a request counts as timed out."),
    warmup: int = typer.Option(5, "--warmup", help="Untimed requests first."),
    input_file: Optional[Path] = typer.Option(None, "--input", help=".npz of input arrays to send (default: zeros of the model's input shapes)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="EDGEKIT_API_KEY", help="Key to send (Authorization: Bearer)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the bench document (JSON, what `edgekit gate` reads) here (an existing file only if empty or an edgekit bench document)."),
    max_batch: int = typer.Option(16, "--max-batch", help="With --serve: the server's micro-batch size (1: off)."),
    max_wait_ms: float = typer.Option(0.0, "--max-wait-ms", help="With --serve: the server's micro-batch wait."),
    threads: Optional[int] = typer.Option(None, "--threads", help="With --serve: the server's intra-op threads."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No table."),
) -> None:
    """Load-test a served model: p50/p90/p99, throughput, errors by status. Gate p99 under load and
    the error rate with `edgekit gate RESULT.json --max-p99-ms 20 --max-error-rate 0.1%`."""
    if (url is None) == (serve is None):
        raise UsageError("give a URL or --serve ARTIFACT (one of them)")

    why = key_error(api_key, "--api-key (or EDGEKIT_API_KEY)")
    if why:  # before any server is started
        raise UsageError(why)

    check_threads(threads, "--threads")
    settings = LoadSettings(concurrency, duration, rate, timeout, warmup)
    if json_out is not None:
        from edgekit.core.outputs import check_report_paths, with_artifact_folders

        check_report_paths({"--json": json_out}, with_artifact_folders([serve, input_file]), {"--json": "json:edgekit.bench"})
        ensure_writable_dir(json_out.parent)
    if serve is not None:
        from edgekit.core.process import local_server

        extra = ["--max-batch", str(max_batch), "--max-wait-ms", str(max_wait_ms)]
        if threads:
            extra += ["--threads", str(threads)]
        with local_server(serve, extra, api_key=api_key) as address:
            result = loadtest(address, settings, input_file=input_file, api_key=api_key)
    else:
        result = loadtest(url, settings, input_file=input_file, api_key=api_key)
    if json_out is not None:
        from edgekit.core.outputs import check_report_paths, with_artifact_folders

        check_report_paths({"--json": json_out}, with_artifact_folders([serve, input_file]),
                           {"--json": "json:edgekit.bench"})  # a file may have appeared during the load test
        write_json(json_out, to_document([result]))
    if not quiet:
        render(result)


def render(result) -> None:
    from rich import box
    from rich.table import Table

    t, s = result.timing, result.settings
    table = Table(title=f"edgekit loadtest {result.model.path}", box=box.SIMPLE_HEAD)
    for header in ("requests", "ok", "p50 ms", "p90 ms", "p99 ms", "throughput /s", "error rate", "by status"):
        table.add_column(header, justify="right")
    counts = ", ".join(f"{k}: {v}" for k, v in s["status_counts"].items())
    table.add_row(str(s["requests"]), str(t.runs), f"{t.p50:.2f}", f"{t.p90:.2f}", f"{t.p99:.2f}",
                  f"{result.throughput_per_s:,.1f}", f"{s['error_rate'] * 100:.2f}%", counts)
    out = console()
    out.print(table)
    for note in result.notes:
        out.print(f"note: {note}", style="dim")


def register(app: typer.Typer) -> None:
    app.command("loadtest")(loadtest_command)
