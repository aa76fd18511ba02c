"""The documentation stays true: every command has a page, every option the docs name exists in
that command's ``--help``, links resolve, the README's test command is what CI runs, and the
examples tagged ``<!-- test -->`` run as written (argv, never a shell) in an empty folder."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"
README_MAX_LINES = 250

# the page that documents each command (a new command needs a page before this passes)
COMMAND_PAGES = {
    "bench": "bench.md", "bundle": "board.md", "cache": "cli.md", "export": "export.md", "gate": "gates.md",
    "generate": "llm.md", "import": "llm.md", "info": "cli.md", "loadtest": "serve.md", "models": "train.md",
    "pipeline": "pipeline.md", "quantize": "quantize.md", "serve": "serve.md", "targets": "reference.md",
    "train": "train.md", "verify": "board.md",
}
# options of other programs the docs name (edgekit-run on a board, pip, curl, torchrun, setpriv)
OTHER_PROGRAMS_OPTIONS = {"--data-binary", "--dry-run", "--expect-ids", "--find-links", "--head", "--near-tie",
                          "--no-deps", "--no-index", "--nproc", "--pdeathsig", "--prompt-ids"}
# pages that set up a checkout on purpose (their commands may name .venv/bin, calib_data/, pip install -e)
CHECKOUT_PAGES = {"install.md", "development.md"}


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md")), REPO / "benchmarks" / "README.md"]


def code_blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, the comment line before the fence or "", body) of every fenced block."""
    found = []
    for match in re.finditer(r"(?:^(<!--[^\n]*-->)\n)?^```(\w*)\n(.*?)^```", text, re.S | re.M):
        found.append((match[2], match[1] or "", match[3]))
    return found


def command_lines(text: str) -> list[str]:
    """Shell command lines of sh/bash blocks, continuation lines joined, trailing comments removed."""
    lines = []
    for lang, _, body in code_blocks(text):
        if lang not in ("sh", "bash"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            command = line.split("  #", 1)[0].strip()
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


@cache
def help_options(command: str | None) -> frozenset[str]:
    """Every ``--option`` the command's ``--help`` shows (None: the top-level help)."""
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    argv = [command, "--help"] if command else ["--help"]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    found = set()
    for line in result.output.splitlines():  # an option's row: "  -x, --name, --alias / --off   TYPE  what it does"
        row = re.match(r"^\s+(-[^ ].*?)(?:\s{2,}|$)", line)
        if row:
            found |= set(re.findall(r"--[a-z][a-z0-9-]*", row[1]))
    return frozenset(found)


def commands() -> set[str]:
    import typer

    from edgekit.cli.app import app

    return set(typer.main.get_command(app).commands)


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_every_command_has_a_docs_page_that_shows_it():
    assert commands() == set(COMMAND_PAGES), "a command without a page (or a page for a command that is gone)"
    for command, page in COMMAND_PAGES.items():
        text = (DOCS / page).read_text(encoding="utf-8")
        assert f"edgekit {command}" in text, f"docs/{page} never shows `edgekit {command}`"
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        assert page.name == "index.md" or f"]({page.name})" in index, f"docs/index.md does not link {page.name}"


def _command_uses(text: str) -> list[tuple[str, str]]:
    """(command, the text after it) for every ``edgekit COMMAND ...`` in a command line or inline code."""
    uses = []
    spans = command_lines(text) + re.findall(r"`(edgekit [^`]+)`", text)
    for span in spans:
        for match in re.finditer(r"(?:^|[\s/(])edgekit\s+([a-z]+)((?:\s+[^|;&]*)?)", span):
            uses.append((match[1], match[2]))
    return uses


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_option_the_docs_give_a_command_is_in_its_help(page):
    text = page.read_text(encoding="utf-8")
    known = commands()
    for command, rest in _command_uses(text):
        if command not in known:
            continue  # prose such as "edgekit replaces", or a file name
        for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest):
            assert option in help_options(command) | help_options(None), (
                f"{page.name}: `edgekit {command} ... {option}`, but `edgekit {command} --help` has no {option}")


def test_every_option_the_docs_name_exists_somewhere():
    every = set().union(*(help_options(c) for c in commands()), help_options(None))
    for page in pages():
        text = re.sub(r"`[^`]*benchmarks/[^`]*`", "", page.read_text(encoding="utf-8"))  # a benchmark script's own
        text = "\n".join(line for line in text.splitlines() if "benchmarks/" not in line)
        for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text):
            assert option in every or option in OTHER_PROGRAMS_OPTIONS, f"{page.name} names {option}, which no command has"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_between_pages_resolve():
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.relative_to(REPO)} links {target}, which does not exist"
            if anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)
                assert anchor in {_slug(h) for h in headings}, f"{page.relative_to(REPO)}: no heading for #{anchor}"


def test_the_readme_test_command_is_what_ci_runs():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Tests\n"):]
    first = command_lines(section)[0]
    assert first == ".venv/bin/python -m pytest", first
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    runs = [line for line in ci if "-m pytest" in line and not line.lstrip().startswith("#")]
    assert runs and runs[-1].endswith(f"{first} -q"), runs  # .ci/run: EDGEKIT_CI=1 .venv/bin/python -m pytest -q


def test_commands_a_user_pastes_need_no_checkout_and_no_sudo():
    for page in pages():
        if page.name in CHECKOUT_PAGES or page == README:
            continue  # README: tests/test_install_wheel.py checks its journey sections
        for line in command_lines(page.read_text(encoding="utf-8")):
            assert not line.startswith("sudo ") and " sudo " not in line, (page.name, line)
            if page.parent == DOCS:
                assert "calib_data/" not in line and ".venv/bin" not in line and "pip install -e" not in line, (
                    page.name, line)


def tagged_examples() -> list:
    """(page, block) of every sh/bash block right after a ``<!-- test -->`` line (``<!-- test slow -->``:
    the same, marked slow)."""
    found = []
    for page in pages():
        for lang, tag, body in code_blocks(page.read_text(encoding="utf-8")):
            if tag in ("<!-- test -->", "<!-- test slow -->") and lang in ("sh", "bash"):
                marks = [pytest.mark.slow] if "slow" in tag else []
                found.append(pytest.param(page.name, body, marks=marks, id=f"{page.name}:{len(found)}"))
    return found


def test_some_examples_are_tagged_to_run():
    assert len(tagged_examples()) >= 2


@pytest.mark.parametrize(("page", "block"), tagged_examples())
def test_a_tagged_example_runs_as_written(page, block, tmp_path):
    """Each line as a user pastes it into an empty folder, with edgekit on PATH and its own cache."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "EDGEKIT_CACHE_DIR": str(tmp_path / "cache"), "EDGEKIT_NO_PROGRESS": "1"}
    for line in command_lines(f"```sh\n{block}```\n"):
        argv = shlex.split(line)
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, f"{page}: {line}\nexited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, (page, line, done.stderr[-2000:])
