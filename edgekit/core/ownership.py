"""What edgekit can prove it wrote: the ownership rules ``edgekit.core.outputs`` applies before it
replaces anything.

- ``foreign_entries(folder, kind)``: what in a folder edgekit did not write as an output of
  ``kind``, at every depth. The proof is the folder's own (a manifest of that kind, bundle.json
  + SHA256SUMS, pipeline.json); ``owned_tree`` turns it into a tree of rules, one per place:
  each file is one the proof lists or a name that kind writes itself, each sub-folder holds only
  such files, a pipeline run's artifacts pass their own check, links are never proven.
- ``report_written_by_edgekit(path, fmt)``: a report file proves itself by its JSON ``schema``
  or by the ``generator_mark`` line edgekit writes into its Markdown, JUnit XML and HTML.

Reads are bounded, never follow a link and never wait on a FIFO. Imports nothing of edgekit's
but its version (for the mark).
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from edgekit.core.fileio import read_regular
from edgekit._version import __version__

MANIFEST_NAME = "manifest.json"
REFERENCE_NAME = "reference.npz"
#: What each artifact kind writes beside the model files its manifest lists.
ARTIFACT_EXTRAS = {
    "checkpoint": ("checkpoint.pt", "last.pt", "metrics.jsonl", "tokenizer.json", "chat_template.jinja", "profile"),
    "quantized": (REFERENCE_NAME, "tokenizer.json", "chat_template.jinja"),  # a language model's (lm_runtime.carry_tokenizer)
    "export": (REFERENCE_NAME, "tokenizer.json", "chat_template.jinja"),
}
#: The entries of a pipeline run folder (each sub-folder is an artifact checked as its kind, each
#: report proven by its content: ``_pipeline_tree``).
PIPELINE_ENTRIES = (
    "checkpoint", "checkpoint.partial", "quantized", "export", "native", "bench.json", "gate.json", "gate.md", "junit.xml",
    "pipeline.json", "pipeline.md", "report.html",
)
KINDS = (*ARTIFACT_EXTRAS, "bundle", "pipeline")

#: edgekit's temporaries of NAME: ``.NAME.PID-XXXXXXXX.tmp``, ``.NAME.XXXXXXXX.tmp``, ``.NAME.old-PID``, ``.NAME.lock``
_TEMP = re.compile(r"^\.(?P<name>.+)\.(\d+-[a-z0-9_]{8}\.tmp|[a-z0-9_]{8}\.tmp|old-\d+|lock)\Z")
MAX_PROOF_BYTES = 16 << 20  # a manifest/bundle.json/pipeline.json larger than this proves nothing
MAX_DEPTH = 32  # a tree deeper than this is not one edgekit wrote


def foreign_entries(folder: Path, kind: str) -> list[str]:
    """What in ``folder`` edgekit did not write as an output of ``kind`` (sorted; [] when none).

    A folder with no proof of ownership (manifest of that kind, bundle.json + SHA256SUMS,
    pipeline.json) is foreign as a whole: its entries are named. With a proof, every entry at
    every depth is checked against ``owned_tree``; what fails is named by its path inside
    ``folder`` (``edgekit_serve/notes.txt``).
    """
    if kind not in KINDS and kind != "run":
        raise ValueError(f"unknown output kind {kind!r}")
    try:
        entries = sorted(name for name in os.listdir(folder) if not _TEMP.match(name))
    except OSError:
        return ["."]  # an unreadable folder proves nothing
    if not entries:
        return []
    tree = owned_tree(folder, kind)
    if tree is None:
        return entries
    return _unproven(folder, tree)


# ---------------------------------------------------------------------------------------------
# What edgekit writes, at every depth. A rule for one place of a tree is one of
#   FILE            a regular file (never a link)
#   _Proved(check)  a regular file whose content proves it (a JSON schema, a generator mark)
#   _Dir            a folder whose every entry has a rule, by name or by pattern
#   _Kind(kind)     a folder that is itself an edgekit output of ``kind``, checked on its own

FILE = "file"
#: A train run folder: what ``edgekit train`` writes there (``profile/`` holds torch.profiler traces).
RUN_FILES = (MANIFEST_NAME, "checkpoint.pt", "last.pt", "metrics.jsonl", "tokenizer.json")
PROFILE_TRACE = re.compile(r"trace_step\d{1,9}\.json")  # edgekit.train.reporting.profiler names its traces so
_ANY = re.compile(r".+")


@dataclass(frozen=True)
class _Proved:
    check: Callable[[Path], bool]


@dataclass(frozen=True)
class _Kind:
    kind: str


@dataclass
class _Dir:
    named: dict = field(default_factory=dict)
    patterns: tuple = ()  # (compiled pattern, rule), matched against the whole name
    pycache: bool = False  # __pycache__/<module>.<tag>.pyc of this folder's .py files (a bundle's scripts run in place)

    def rule(self, name: str):
        if self.pycache and name == "__pycache__":
            return self._pycache()
        if name in self.named:
            return self.named[name]
        for pattern, rule in self.patterns:
            if pattern.fullmatch(name):
                return rule
        return None

    def _pycache(self):
        listed = self.named.get("__pycache__")
        stems = [n[:-3] for n, r in self.named.items() if n.endswith(".py") and r == FILE]
        if not stems:
            return listed
        modules = "|".join(re.escape(stem) for stem in stems)
        compiled = (re.compile(rf"(?:{modules})\.[A-Za-z0-9_-]+(?:\.opt-[12])?\.pyc"), FILE)
        if isinstance(listed, _Dir):
            return _Dir(listed.named, (*listed.patterns, compiled))
        return _Dir(patterns=(compiled,))


def _profile() -> _Dir:
    return _Dir(patterns=((PROFILE_TRACE, FILE),))


def _tree(paths: Iterable, base: _Dir, pycache: bool = False) -> _Dir:
    """``base`` plus the files at ``paths`` (relative POSIX paths; ones leaving the folder are ignored)."""
    for path in paths:
        if not isinstance(path, str) or not path:
            continue
        parts = path.split("/")
        if any(part in ("", ".", "..") for part in parts):
            continue
        node = base
        for part in parts[:-1]:
            child = node.named.get(part)
            if not isinstance(child, _Dir):
                child = node.named[part] = _Dir(pycache=pycache)
            node = child
        node.named.setdefault(parts[-1], FILE)
    return base


def owned_tree(folder: Path, kind: str) -> _Dir | None:
    """What edgekit writes in ``folder`` as an output of ``kind``, from the proof found there (None: no proof)."""
    if kind == "bundle":
        return _bundle_tree(folder)
    if kind == "run":  # a run folder, finished or not: train's own names
        return _Dir({**{name: FILE for name in RUN_FILES}, "profile": _profile()})
    if kind == "pipeline":
        doc = read_proof(folder / "pipeline.json")
        return _pipeline_tree() if doc is not None and doc.get("schema") == "edgekit.pipeline.run" else None
    doc = read_proof(folder / MANIFEST_NAME)
    if doc is None or doc.get("schema") != "edgekit.manifest" or doc.get("kind") != kind:
        return None
    tree = _Dir({MANIFEST_NAME: FILE, **{name: _profile() if name == "profile" else FILE for name in ARTIFACT_EXTRAS[kind]}})
    paths = []
    files = doc.get("files")
    for entry in files if isinstance(files, list) else ():
        if isinstance(entry, dict):
            data = entry.get("data_files")
            paths += [entry.get("path"), *(d.get("path") for d in data if isinstance(d, dict))] if isinstance(data, list) \
                else [entry.get("path")]
    return _tree(paths, tree)


def _pipeline_tree() -> _Dir:
    """A pipeline run folder: its artifacts (each checked as its kind) and its reports (each proven by content)."""
    tree = _Dir({
        "pipeline.json": FILE,  # the proof itself
        "checkpoint": _Kind("run"),
        "checkpoint.partial": _Kind("run"),  # train's work folder beside a finished checkpoint
        "quantized": _Dir(patterns=((_ANY, _Kind("quantized")),)),
        "export": _Dir(patterns=((_ANY, _Kind("export")),)),
        "native": _Dir(patterns=((_ANY, _Kind("bundle")),)),  # the native runner's row: a bundle for this host
        "bench.json": _Proved(lambda p: report_written_by_edgekit(p, "json:edgekit.bench")),
        "gate.json": _Proved(lambda p: report_written_by_edgekit(p, "json:edgekit.gate")),
        "gate.md": _Proved(lambda p: report_written_by_edgekit(p, "markdown")),
        "pipeline.md": _Proved(lambda p: report_written_by_edgekit(p, "markdown")),
        "junit.xml": _Proved(lambda p: report_written_by_edgekit(p, "junit")),
        "report.html": _Proved(lambda p: report_written_by_edgekit(p, "html")),
    })
    return tree


def _bundle_tree(folder: Path) -> _Dir | None:
    doc = read_proof(folder / "bundle.json")
    if doc is None or doc.get("schema") != "edgekit.bundle":
        return None
    listed = read_sums(folder / "SHA256SUMS")
    if listed is None:
        return None
    return _tree(listed, _Dir({"SHA256SUMS": FILE}, pycache=True), pycache=True)


_SUMS_LINE = re.compile(r"^[0-9a-f]{64} [ *](.+)\Z")  # one line of splitlines()


def parse_sums(text: str) -> list[str] | None:
    """The paths a SHA256SUMS text lists (None when a line is not ``<sha256>  <path>``)."""
    paths = []
    for line in text.splitlines():
        match = _SUMS_LINE.match(line)
        if not match:
            return None
        paths.append(match.group(1))
    return paths


def read_sums(path: Path) -> list[str] | None:
    data = read_regular(path, MAX_PROOF_BYTES)
    if data is None:
        return None
    try:
        return parse_sums(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None


def _unproven(folder: Path, tree: _Dir, prefix: str = "", depth: int = 0) -> list[str]:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return [prefix.rstrip("/") or "."]
    found: list[str] = []
    for name in names:
        rel = prefix + name
        temp = _TEMP.match(name)
        if temp and tree.rule(temp.group("name")) is not None:
            continue  # what an edgekit run writing an owned name leaves beside it
        rule = tree.rule(name)
        path = folder / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError:
            found.append(rel)
            continue
        if rule is None or stat.S_ISLNK(mode):
            found.append(rel)  # edgekit writes no links: one is never followed, never proven
        elif rule == FILE or isinstance(rule, _Proved):
            if not stat.S_ISREG(mode) or (isinstance(rule, _Proved) and not rule.check(path)):
                found.append(rel)
        elif not stat.S_ISDIR(mode) or depth >= MAX_DEPTH:
            found.append(rel)
        elif isinstance(rule, _Kind):
            found += [f"{rel}/{inner}" for inner in foreign_entries(path, rule.kind)]
        else:
            found += _unproven(path, rule, f"{rel}/", depth + 1)
    return found


def read_proof(path: Path) -> dict | None:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_PROOF_BYTES:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


#: What proves a report file is edgekit's, by format: ``json:<schema>`` (its "schema" field),
#: ``markdown`` / ``junit`` (a ``generator_mark`` comment line), ``html`` (the generator meta tag).
REPORT_FORMATS = {"markdown": "edgekit Markdown report", "junit": "edgekit JUnit XML report",
                  "html": "edgekit HTML report"}
_MARK_BYTES = 4096  # the mark sits in a report's first or last lines
_MARK_COMMENT = re.compile(  # searched line by line (re.M): "$" is a line's end here, not a value's
    r"^<!-- generated by edgekit [0-9A-Za-z.+_-]{1,40} -->\r?$", re.M)
_MARK_META = re.compile(r'^<meta name="generator" content="edgekit [0-9A-Za-z.+_-]{1,40}">\r?$', re.M)


def generator_mark(fmt: str) -> str:
    """The line edgekit writes into a ``markdown``, ``junit`` or ``html`` report, so that a later run
    can tell its own report (replaceable) from a user's file (never replaced)."""
    if fmt == "html":
        return f'<meta name="generator" content="edgekit {__version__}">'
    return f"<!-- generated by edgekit {__version__} -->"


def report_written_by_edgekit(path: Path, fmt: str | None = None) -> bool:
    """Whether the regular file ``path`` is a report edgekit wrote in ``fmt`` (None: any of them)."""
    if fmt is None or fmt.startswith("json:"):
        doc = read_proof(path)
        schema = doc.get("schema") if doc is not None else None
        if isinstance(schema, str) and (schema == fmt[5:] if fmt else schema.startswith("edgekit.")):
            return True
        if fmt is not None:
            return False
    patterns = (_MARK_META,) if fmt == "html" else (_MARK_COMMENT,) if fmt is not None else (_MARK_COMMENT, _MARK_META)
    for end in (read_regular(path, _MARK_BYTES, head=True), read_regular(path, _MARK_BYTES, tail=True)):
        text = (end or b"").decode("utf-8", "replace")
        if any(pattern.search(text) for pattern in patterns):
            return True
    return False


def describe_report_format(fmt: str | None) -> str:
    if fmt is None:
        return "edgekit report"
    if fmt.startswith("json:"):
        return f"{fmt[5:]} JSON document"
    return REPORT_FORMATS[fmt]
