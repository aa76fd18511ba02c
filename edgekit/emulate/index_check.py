"""Before pip runs under emulation: can the indexes it will use give the board what is pinned?

An emulated ``pip install`` from an index takes minutes (a torch install ~7), and when it fails its
last line misleads: with PyTorch's CPU index unreachable it says "No matching distribution found
for numpy==2.4.6". So this host asks first, in seconds, what pip in the rootfs would ask: each
index the requirements (or ``--index-url``) name is contacted; then ``pip install --dry-run
--report`` resolves every pin for the board's platform (``--platform`` family, its Python) from
those indexes alone, reading metadata only. The answers, each one line naming the cause and the
flag that fixes it:

* an index that cannot be reached (DNS, refused, proxy, TLS);
* a pin with no wheel for the board on those indexes;
* a CUDA build where the board needs the CPU one (PyPI's aarch64 torch requires ``nvidia-*``
  packages: gigabytes a Pi cannot use), which is refused instead of installed.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from edgekit.emulate import EmulationError
from edgekit.bundle.requirements import NETWORK_SIGNS, family_text, platform_args, parse_requirements
from edgekit.core.children import popen_kwargs

PYPI = "https://pypi.org/simple"
PROBE_TIMEOUT_S = 20.0
RESOLVE_TIMEOUT_S = 600.0
CUDA_SIGNS = ("nvidia-", "triton")  # requirements only a GPU build of torch has
_WHEELS = "or verify a bundle made with --wheels (edgekit bundle ... --wheels) on a machine that reaches the index"
_FIX = ("pass --index-url URL of a reachable index with these pins (torch: its CPU build, a mirror of "
        f"https://download.pytorch.org/whl/cpu), {_WHEELS}")


@dataclass(frozen=True)
class Indexes:
    """Where pip in the rootfs looks: the main index and the extra ones, and who named each."""

    main: str
    extra: tuple[str, ...] = ()
    named_by: str = "the bundle's requirements.txt"

    @property
    def all(self) -> tuple[str, ...]:
        return (self.main, *self.extra)


def indexes_of(requirements: str, replaced_by: str | None = None, env: dict | None = None) -> Indexes:
    """The indexes ``requirements`` (already checked: ``parse_requirements``) send pip to, with
    the environment's ``PIP_INDEX_URL``/``PIP_EXTRA_INDEX_URL`` as the rootfs's pip sees them."""
    env = os.environ if env is None else env
    checked = parse_requirements(requirements, "the requirements to install")
    from_env = [u for u in env.get("PIP_INDEX_URL", "").split() if u.startswith(("http://", "https://"))]
    extra_env = tuple(u for u in env.get("PIP_EXTRA_INDEX_URL", "").split() if u.startswith(("http://", "https://")))
    main = checked.index_url or (from_env[0] if from_env else PYPI)
    extra = tuple(dict.fromkeys(((checked.extra_index_url,) if checked.extra_index_url else ()) + extra_env))
    named_by = ("--index-url" if replaced_by else "the bundle's requirements.txt") if checked.index_url else \
        ("PIP_INDEX_URL" if from_env else "pip's default")
    return Indexes(main, extra, named_by)


def check_indexes(requirements: str, platform: str, python: str, *, replaced: bool = False,
                  timeout_s: float = RESOLVE_TIMEOUT_S) -> Indexes:
    """EmulationError (one line) unless the indexes reach every pin as the board needs it."""
    indexes = indexes_of(requirements, "--index-url" if replaced else None)
    for url in indexes.all:
        problem = unreachable(url)
        if problem:
            who = indexes.named_by if url == indexes.main else "the requirements' --extra-index-url"
            raise EmulationError(f"the package index {shown(url)} named by {who} is not reachable from this machine "
                                 f"({problem}); {_FIX}")
    report = _dry_run(requirements, platform, python, timeout_s)
    cuda = cuda_builds(report)
    if cuda:
        name, version, signs = cuda[0]
        raise EmulationError(
            f"{' / '.join(map(shown, indexes.all))} ({indexes.named_by}) has {name} {version} for {platform} only as a CUDA build "
            f"(it requires {', '.join(signs[:3])}{', ...' if len(signs) > 3 else ''}: gigabytes a board without an "
            f"NVIDIA GPU cannot use), so it is not installed; pass --index-url URL of an index with {name}'s CPU build"
            f"{' (https://download.pytorch.org/whl/cpu or a mirror of it)' if name.lower() == 'torch' else ''}, {_WHEELS}")
    return indexes


def shown(url: str) -> str:
    """``url`` as messages show it: a password in it is masked (``https://user:***@host/...``)."""
    return re.sub(r"^(https?://[^/@:]*):[^/@]*@", r"\1:***@", url)


def unreachable(url: str) -> str | None:
    """Why ``url`` cannot be reached from here (None: it answered, whatever the status)."""
    request = urllib.request.Request(url.rstrip("/") + "/", method="HEAD", headers={"User-Agent": "edgekit"})
    context = ssl.create_default_context(cafile=_ca_file())
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S, context=context) as answer:
            answer.read(1)
        return None
    except urllib.error.HTTPError:
        return None  # it answered: reachable (a 404 at the root is the index's business)
    except urllib.error.URLError as exc:
        reason = exc.reason
        host = urlsplit(url).hostname or url
        if isinstance(reason, OSError) and getattr(reason, "errno", None) in (-2, -3, -5):
            return f"cannot resolve {host}"
        return f"{host}: {reason}"[:200]
    except (OSError, ValueError) as exc:
        return f"{urlsplit(url).hostname or url}: {exc}"[:200]


def cuda_builds(report: dict) -> list[tuple[str, str, list[str]]]:
    """(name, version, its GPU-only requirements) of each resolved distribution that is a CUDA build."""
    found = []
    for item in report.get("install") or []:
        metadata = item.get("metadata") or {}
        requires = [re.split(r"[\s;<>=!~\[(]", str(r).strip(), maxsplit=1)[0] for r in metadata.get("requires_dist") or []]
        signs = list(dict.fromkeys(r for r in requires if r.lower().startswith(CUDA_SIGNS)))
        version = str(metadata.get("version", ""))
        if signs or re.search(r"\+cu\d", version):
            found.append((str(metadata.get("name", "?")), version, signs or [f"local version {version}"]))
    return found


def _dry_run(requirements: str, platform: str, python: str, timeout_s: float) -> dict:
    """pip's resolution of the pins for the board (metadata only: PEP 658), as its ``--report``."""
    with tempfile.TemporaryDirectory(prefix="edgekit-index-check-") as scratch:
        folder = Path(scratch)
        (folder / "requirements.txt").write_text(requirements, encoding="utf-8")
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                "--only-binary=:all:", *platform_args(platform), "--python-version", python, "--implementation", "cp",
                "--target", str(folder / "target"), "--report", str(folder / "report.json"),
                "--disable-pip-version-check", "--no-input", "--quiet", "-r", str(folder / "requirements.txt")]
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                                  env=_pip_env(), check=False, **popen_kwargs())
        except subprocess.TimeoutExpired:
            raise EmulationError(f"resolving the board's requirements on this host took over {timeout_s:g} s; "
                                 "check the network") from None
        output = done.stdout + done.stderr
        if done.returncode != 0:
            errors = [line.removeprefix("ERROR: ").strip() for line in output.splitlines() if line.startswith("ERROR:")]
            missing = re.search(r"No matching distribution found for (\S+)", output)
            if any(sign in output for sign in NETWORK_SIGNS):
                raise EmulationError(f"a package index the requirements name stopped answering ({errors[-1] if errors else 'network error'}); "
                                     f"{_FIX}")
            if missing:
                listed = re.search(r"\(from versions: ([^)]*)\)", output)
                versions = (listed.group(1).strip() if listed else "") or "none"
                raise EmulationError(
                    f"{missing.group(1)} has no wheel for {family_text(platform)} / Python {python} on the indexes "
                    f"the requirements name (versions there: {versions[:120]}); {_FIX}")
            raise EmulationError(f"the board's requirements do not resolve: {errors[-1] if errors else 'pip failed'}")
        try:
            return json.loads((folder / "report.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}


def _pip_env() -> dict[str, str]:
    """The host's environment without its pip configuration: the rootfs's pip has none of it
    (no find-links, no local indexes), only the http(s) index variables edgekit forwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        urls = [u for u in os.environ.get(name, "").split() if u.startswith(("http://", "https://"))]
        if urls:
            env[name] = " ".join(urls)
    for name in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def host_ca_bundle() -> Path | None:
    """The CA bundle this host trusts (it may hold a proxy's or a company's CA the rootfs lacks)."""
    paths = ssl.get_default_verify_paths()
    candidates = [os.environ.get(n) for n in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")]
    candidates += [paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def _ca_file() -> str | None:
    found = host_ca_bundle()
    return str(found) if found else None
