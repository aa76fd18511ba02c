"""Fuzzing edgekit's parsers of untrusted files: every mutation of a valid input either parses or
raises edgekit's own error (InputFileError / UsageError; the server's InputError for its request
parser), never anything else, never a hang, never a memory blow-up.

Fixed seeds and a bounded number of mutations per parser (a few hundred each), so the run is
deterministic and takes seconds. A failure names the parser, the mutation number and the
exception, and the mutated input is left under ``tmp_path`` to replay.

Parsers: ``.npy`` headers (edgekit.core.fileio.npy_array, the serve parser edgekit.serve.inputs.read_npy),
``.npz`` archives (edgekit.formats.reference.read_reference, edgekit.core.fileio.read_npz, the serve
parser), ``.pte`` headers (edgekit.formats.executorch.check_file), manifests (Manifest.from_dict
over edgekit.core.fileio.read_json), bundle.json (edgekit.bundle.layout.read_bundle_json), bench results
(edgekit.records.result.load_results), target TOML (edgekit.core.targets.load_target) and budget TOML
(edgekit.gates.budgets.load_project_budgets).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import resource
import signal
import time
import warnings
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from edgekit.core.errors import InputFileError, UsageError

CORPUS = Path(__file__).resolve().parent / "corpus"
REPO = Path(__file__).resolve().parent.parent
MUTATIONS = 300
CASE_SECONDS = 5  # one parse of a small file; far more is a hang
MEMORY_GROWTH_MB = 300  # peak RSS growth over a whole parser's run

# What a mutation may splice in: the shapes of the attack run's inputs and their neighbours.
HOSTILE_TEXT = [
    "9" * 20, "9" * 400, "1" * 5000, "-" + "9" * 4400, "1e400", "-1e400", "1" + "0" * 400 + ".0", "NaN", "Infinity",
    "-Infinity", "nan", "inf", "[" * 2000, "{" * 500, '{"a":' * 100, "[[" * 40 + "]]" * 40, "null", "true", "[]", "{}",
    '""', "\"\\ud800\"", "\x1b]0;x\x07", "\x00", "0x" + "f" * 40, "1979-05-27T07:32:00Z", "'''", '"""', "\\", ".", "=",
]
INTERESTING_BYTES = [0x00, 0xFF, 0x7F, 0x80, ord("9"), ord("("), ord(")"), ord("["), ord("{"), ord("'"), ord('"'),
                     ord("-"), ord("e"), ord(","), ord(":"), ord("L"), ord("\\"), ord("\n")]


class Mutator:
    """Deterministic mutations of bytes (flips, interesting bytes, splices, cuts, repeats) and,
    for JSON, of the parsed tree (a leaf or a key replaced by a hostile value)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def bytes(self, data: bytes, region: int | None = None) -> bytes:
        rng = self.rng
        data = bytearray(data)
        end = min(len(data), region) if region else len(data)
        for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
            pos = rng.randrange(max(end, 1))
            kind = rng.randrange(7)
            if kind == 0 and data:
                data[pos % len(data)] ^= 1 << rng.randrange(8)
            elif kind == 1 and data:
                data[pos % len(data)] = rng.choice(INTERESTING_BYTES)
            elif kind == 2:
                data[pos:pos] = rng.choice(HOSTILE_TEXT).encode("utf-8", "surrogatepass")
            elif kind == 3:
                del data[pos:pos + rng.randrange(1, 16)]
            elif kind == 4:
                data = data[:pos]
            elif kind == 5 and data:
                chunk = data[pos:pos + rng.randrange(1, 32)]
                data[pos:pos] = chunk * rng.randrange(1, 50)
            else:
                data[pos:pos + 4] = rng.randrange(2**32).to_bytes(4, "little")
        return bytes(data)

    def tree(self, doc):
        """A copy of ``doc`` with one to three values or keys replaced by hostile ones (as text)."""
        rng = self.rng
        text = json.dumps(doc)
        for _ in range(rng.randrange(1, 4)):
            spots = [i for i, c in enumerate(text) if c in ":,["]
            pos = rng.choice(spots) + 1
            # replace the value that follows with a hostile token
            stop = pos
            depth = 0
            while stop < len(text):
                c = text[stop]
                if c in "[{":
                    depth += 1
                elif c in "]}":
                    if depth == 0:
                        break
                    depth -= 1
                elif c == "," and depth == 0:
                    break
                elif c == '"':
                    stop = text.index('"', stop + 1) if '"' in text[stop + 1:] else len(text) - 1
                stop += 1
            if text[pos - 1] == ":" or rng.random() < 0.8:
                text = text[:pos] + rng.choice(HOSTILE_TEXT + ['"x"', "-1", "0", "1.5", '["a"]', '{"k": 1}']) + text[stop:]
        return text.encode("utf-8", "surrogatepass")


@contextlib.contextmanager
def _deadline(seconds: int, what: str):
    def expired(signum, frame):
        raise TimeoutError(f"{what} ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fuzz(name: str, seed_inputs: list[bytes], parse: Callable[[bytes, int], object], allowed: tuple[type, ...],
         mutate: Callable[[Mutator, bytes], bytes], seed: int = 20240611, count: int = MUTATIONS) -> dict[str, int]:
    """Run ``count`` mutations through ``parse``; returns how many parsed and how many were refused."""
    mutator = Mutator(seed)
    before = _rss_mb()
    outcome = {"parsed": 0, "refused": 0}
    for i in range(count):
        data = mutate(mutator, seed_inputs[i % len(seed_inputs)])
        started = time.monotonic()
        try:
            with _deadline(CASE_SECONDS, f"{name} mutation {i}"):
                parse(data, i)
            outcome["parsed"] += 1
        except allowed as exc:
            assert str(exc).strip(), f"{name} mutation {i}: an empty message"
            assert "\n" not in str(exc).strip(), f"{name} mutation {i}: a message of several lines: {exc!r}"
            outcome["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - what the test is looking for
            raise AssertionError(f"{name} mutation {i} raised {type(exc).__name__}: {str(exc)[:300]} "
                                 f"(input {data[:200]!r})") from exc
        assert time.monotonic() - started < CASE_SECONDS
    grown = _rss_mb() - before
    assert grown < MEMORY_GROWTH_MB, f"{name}: peak memory grew {grown:.0f} MB"
    assert outcome["refused"] > 0, f"{name}: no mutation was refused: the mutations do not reach the parser"
    return outcome


# -- .npy and .npz --------------------------------------------------------------------------------


def _npy(array: np.ndarray, version=(1, 0)) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


NPY_SEEDS = [
    _npy(np.arange(12, dtype=np.float32).reshape(3, 4)),
    _npy(np.zeros((1, 1, 8, 8), np.float32)),
    _npy(np.arange(6, dtype=np.int64).reshape(2, 3).T.copy(order="F")),
    _npy(np.array([1, 2, 3], np.uint8), version=(2, 0)),
    _npy(np.zeros((0, 4), np.float16)),
]


def test_npy_headers_parse_or_are_refused():
    from edgekit.core.fileio import npy_array

    result = fuzz("fileio.npy_array", NPY_SEEDS, lambda data, i: npy_array(data, f"mutation {i}"), (InputFileError,),
                  lambda m, data: m.bytes(data, region=140))
    assert result["parsed"] > 0  # some mutations stay valid (a flipped value byte)


def test_the_serve_npy_parser_answers_every_header_with_its_input_error():
    from edgekit.serve.inputs import InputError, read_npy

    fuzz("serve.inputs.read_npy", NPY_SEEDS, lambda data, i: read_npy(data, "input"), (InputError,),
         lambda m, data: m.bytes(data, region=140))


def _npz(arrays: dict[str, np.ndarray], compressed: bool) -> bytes:
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


REFERENCE = {"b1/input/input": np.zeros((1, 1, 8, 8), np.float32), "b1/output": np.ones((1, 10), np.float32),
             "b7/input/input": np.ones((7, 1, 8, 8), np.float32), "b7/output": np.zeros((7, 10), np.float32)}
NPZ_SEEDS = [_npz(REFERENCE, False), _npz(REFERENCE, True)]


def _mutate_npz(m: Mutator, data: bytes) -> bytes:
    """Half the time the archive's bytes, half the time a member's .npy header inside a valid archive."""
    if m.rng.random() < 0.5:
        return m.bytes(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = [(info.filename, archive.read(info)) for info in archive.infolist()]
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression=m.rng.choice((zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED))) as archive:
        warnings.simplefilter("ignore")  # a repeated member name is one of the mutations
        victim = m.rng.randrange(len(members))
        for index, (name, member) in enumerate(members):
            if index == victim:
                member = m.bytes(member, region=140)
                if m.rng.random() < 0.2:
                    name = m.rng.choice(["../evil.npy", "b1/input/input.npy", "x/", "b99999999/output.npy", "\x1b.npy"])
            archive.writestr(name, member)
    return out.getvalue()


def test_reference_npz_parses_or_is_refused(tmp_path):
    from edgekit.formats.reference import read_reference

    def parse(data: bytes, i: int):
        path = tmp_path / f"reference-{i}.npz"
        path.write_bytes(data)
        cases = read_reference(path)
        path.unlink()  # refused ones stay, to replay
        return cases

    result = fuzz("formats.reference.read_reference", NPZ_SEEDS, parse, (InputFileError,), _mutate_npz)
    assert result["parsed"] > 0


def test_the_strict_npz_reader_and_the_serve_npz_parser(tmp_path):
    from edgekit.core.fileio import read_npz
    from edgekit.serve.inputs import InputError, read_npz as serve_read_npz

    path = tmp_path / "x.npz"

    def parse(data: bytes, i: int):
        path.write_bytes(data)
        return read_npz(path, f"mutation {i}", max_bytes=1 << 20)

    fuzz("fileio.read_npz", NPZ_SEEDS, parse, (InputFileError,), _mutate_npz, seed=7)
    fuzz("serve.inputs.read_npz", NPZ_SEEDS, lambda data, i: serve_read_npz(data, 1 << 20), (InputError,), _mutate_npz, seed=8)


def test_a_zip_bomb_and_an_overclaiming_header_allocate_nothing(tmp_path):
    """A member that expands to 2 GiB, and a header claiming 10^12 floats over 16 bytes: both refused
    before any of it is held in memory."""
    from edgekit.core.fileio import npy_array, read_npz

    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("b1/output.npy", "w", force_zip64=True) as fh:
            block = b"\0" * (1 << 20)
            for _ in range(2048):
                fh.write(block)
    before = _rss_mb()
    with pytest.raises(InputFileError, match="expands past"):
        read_npz(bomb, "reference data")
    header = _npy(np.zeros(4, np.float32)).replace(b"(4,)", b"(1000000000000,)")
    with pytest.raises(InputFileError, match="claims shape"):
        npy_array(header, "x.npy")
    assert _rss_mb() - before < 100


# -- .pte headers ---------------------------------------------------------------------------------


def test_pte_headers_pass_or_are_refused(tmp_path):
    from edgekit.formats.executorch import check_file

    seeds = [b"\x1c\x00\x00\x00ET12" + bytes(range(64)), b"\x18\x00\x00\x00ET12\x00\x00"]
    path = tmp_path / "model.pte"

    def parse(data: bytes, i: int):
        path.write_bytes(data)
        check_file(path)

    fuzz("formats.executorch.check_file", seeds, parse, (InputFileError,), lambda m, data: m.bytes(data, region=12))


# -- JSON documents -------------------------------------------------------------------------------


def _manifest_doc() -> dict:
    from edgekit.formats.artifacts import InputSpec, Manifest, ModelFile

    return Manifest(
        kind="export", model={"name": "digits-cnn", "config": {"width": 16, "num_classes": 10, "dropout": 0.1}},
        inputs=(InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"}, (0.0, 16.0)),), outputs=("logits",),
        files=(ModelFile("model.onnx", "onnx", "a" * 64, 1234, "int8", {"accuracy": 0.97, "sqnr_db": float("inf")},
                         {"variant": "int8-static-onnx"}),),
        task={"type": "classification", "dataset": "digits"}, quantization={"method": "static", "config": {"calib": "x"}},
        metrics={"accuracy": 0.97}, parent={"path": "/a", "kind": "quantized", "manifest_sha256": "b" * 64},
        target="rpi4", versions={"edgekit": "0.1.0"}, created="2026-01-01T00:00:00+00:00",
    ).to_dict() | {"extra_files": [{"path": "reference.npz", "sha256": "c" * 64, "bytes": 99}]}


def _json_mutation(m: Mutator, data: bytes) -> bytes:
    return m.tree(json.loads(data)) if m.rng.random() < 0.6 else m.bytes(data)


def test_manifests_parse_or_are_refused(tmp_path):
    from edgekit.formats.artifacts import Manifest
    from edgekit.core.fileio import read_json

    path = tmp_path / "manifest.json"
    seed = json.dumps(_manifest_doc()).encode()

    def parse(data: bytes, i: int):
        path.write_bytes(data)
        manifest = Manifest.from_dict(read_json(path, "manifest"), str(path))
        json.dumps(manifest.to_dict())  # what was accepted can be written back (no cycles, no huge depth)

    result = fuzz("artifacts.Manifest", [seed], parse, (InputFileError,), _json_mutation)
    assert result["parsed"] > 0


def test_bundle_descriptions_parse_or_are_refused(tmp_path):
    from edgekit.bundle.layout import BUNDLE_JSON, read_bundle_json

    doc = {"schema": "edgekit.bundle", "schema_version": 1, "model": "model.onnx", "format": "onnx", "target": "rpi4",
           "model_sha256": "a" * 64, "variant": "int8-static-onnx", "python_platform": "manylinux_2_28_aarch64",
           "precision": "int8", "arch": "aarch64", "quantized_engine": "qnnpack", "threads": 4, "ram_mb": 1024,
           "python_version": "3.11", "created": "2026-01-01T00:00:00+00:00"}
    from edgekit.bundle import layout

    doc["schema"], doc["schema_version"] = layout.BUNDLE_SCHEMA, layout.BUNDLE_SCHEMA_VERSION
    read_bundle_json_seed = tmp_path / "seed"
    read_bundle_json_seed.mkdir()
    (read_bundle_json_seed / BUNDLE_JSON).write_text(json.dumps(doc))
    read_bundle_json(read_bundle_json_seed)  # the seed itself is valid

    def parse(data: bytes, i: int):
        (read_bundle_json_seed / BUNDLE_JSON).write_bytes(data)
        return read_bundle_json(read_bundle_json_seed)

    fuzz("bundle.layout.read_bundle_json", [json.dumps(doc).encode()], parse, (InputFileError,), _json_mutation)


def test_bench_results_parse_or_are_refused(tmp_path):
    from edgekit.records.result import load_results

    path = tmp_path / "bench.json"
    seed = (CORPUS / "bench" / "good.json").read_bytes()

    def parse(data: bytes, i: int):
        path.write_bytes(data)
        return load_results(path)

    result = fuzz("records.result.load_results", [seed], parse, (InputFileError,), _json_mutation)
    assert result["parsed"] > 0


# -- TOML documents -------------------------------------------------------------------------------


TOML_VALUES = ["-5", "0", "3.5", '"x"', '[1, "a"]', "{a = 1}", "[[[[1]]]]", '"20 parsecs"']


def _toml_mutation(m: Mutator, data: bytes) -> bytes:
    """Bytes, or a value after ``=`` replaced by a hostile one."""
    if m.rng.random() < 0.5:
        return m.bytes(data)
    lines = data.decode().splitlines()
    spots = [i for i, line in enumerate(lines) if "=" in line and not line.lstrip().startswith("#")]
    index = m.rng.choice(spots)
    key = lines[index].split("=", 1)[0]
    value = m.rng.choice(HOSTILE_TEXT + TOML_VALUES)
    lines[index] = f"{key}= {value}"
    return "\n".join(lines).encode("utf-8", "surrogatepass")


def test_target_profiles_parse_or_are_refused(tmp_path):
    from edgekit.core.targets import load_target

    path = tmp_path / "board.toml"
    seeds = [(REPO / "targets" / "rpi4.toml").read_bytes(), (REPO / "targets" / "rpi5.toml").read_bytes()]

    def parse(data: bytes, i: int):
        path.write_bytes(data)
        return load_target(path)

    result = fuzz("targets.load_target", seeds, parse, (InputFileError, UsageError), _toml_mutation)
    assert result["parsed"] > 0


def test_budget_files_parse_or_are_refused(tmp_path):
    from edgekit.gates.budgets import load_project_budgets

    path = tmp_path / "edgekit.toml"
    seed = (b'[budgets]\nmax_size_mb = "4MB"\nmax_p99_ms = 20\nmax_accuracy_drop = "0.5%"\n'
            b'[budgets.int8-static-onnx]\nmax_p50_ms = "8ms"\nmax_peak_rss_mb = "1GiB"\n')

    def parse(data: bytes, i: int):
        path.write_bytes(data)
        return load_project_budgets(path)

    result = fuzz("gates.budgets.load_project_budgets", [seed], parse, (InputFileError, UsageError), _toml_mutation)
    assert result["parsed"] > 0
