"""Validate what the user says about the board before any process starts.

A host string is ``[user@]host`` where host is a hostname (or ~/.ssh/config alias), a dotted
IPv4 address or a bracketed IPv6 address (``[fe80::1%eth0]``). Anything else (spaces, shell
metacharacters, a leading ``-`` that ssh would read as an option, ``host:port``) is a UsageError:
a typo must never run a command on some other host.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Callable

from edgekit.core.errors import UsageError

_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\Z")
_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\Z")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}\Z")
_ZONE = re.compile(r"^[A-Za-z0-9_.-]{1,32}\Z")
_OPTION_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]{1,63}\Z")
# Options edgekit sets itself and will not let a user turn off: without BatchMode ssh may wait
# for a password on the terminal forever.
RESERVED_OPTIONS = {"batchmode": "BatchMode=yes keeps ssh from waiting for a password; set up key login (ssh-copy-id)"}


@dataclass(frozen=True)
class Host:
    """A validated ssh destination. ``address`` is what ssh gets (IPv6 without brackets)."""

    user: str | None
    address: str
    text: str  # as the user wrote it, for messages

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.address}" if self.user else self.address

    def __str__(self) -> str:
        return self.text


def parse_host(text: str) -> Host:
    """``[user@]host`` -> Host, or a UsageError that says what is wrong with it."""
    if not isinstance(text, str) or not text:
        raise UsageError("--host is empty; give [user@]host, e.g. pi@raspberrypi.local")
    if text.startswith("-"):
        raise UsageError(f"--host {text!r} starts with '-' (ssh would read it as an option); give [user@]host")
    if any(c.isspace() or not c.isprintable() for c in text):
        raise UsageError(f"--host {text!r} contains white space or control characters; give [user@]host")
    user, at, host = text.rpartition("@")
    if at and not _USER.match(user):
        raise UsageError(
            f"--host {text!r}: user {user!r} is not a plain user name (letters, digits, '_', '.', '-', "
            "not starting with '-')"
        )
    return Host(user or None, _address(host, text), text)


def _address(host: str, text: str) -> str:
    if host.startswith("[") and host.endswith("]"):
        return _ipv6(host[1:-1], text)
    if ":" in host:
        if host.count(":") == 1:
            raise UsageError(f"--host {text!r}: give the port with --port, not host:port")
        return _ipv6(host, text)
    if _IPV4.match(host):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise UsageError(f"--host {text!r}: {host!r} is not a valid IPv4 address") from None
    labels = host.split(".")
    if labels[-1].isdigit():  # resolvers read "10.1" or "1.2.3" as IPv4 shorthand: say what you mean
        raise UsageError(f"--host {text!r}: {host!r} is neither a full IPv4 address (a.b.c.d) nor a host name")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise UsageError(
            f"--host {text!r}: {host!r} is not a valid host name (letters, digits, '-', '_' and dots; "
            "no spaces or shell characters)"
        )
    return host


def _ipv6(inner: str, text: str) -> str:
    address, pct, zone = inner.partition("%")
    if pct and not _ZONE.match(zone):
        raise UsageError(f"--host {text!r}: bad IPv6 zone {zone!r}")
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise UsageError(f"--host {text!r}: {inner!r} is not a valid IPv6 address") from None
    return inner


# ssh -o keys that only change how the connection is made, each with the grammar its value must
# match (man ssh_config). Keys that run local commands (ProxyCommand, LocalCommand,
# KnownHostsCommand), load code (PKCS11Provider, SecurityKeyProvider) or open forwards are
# refused: CI jobs paste these from pull requests. An allowed key is not enough: ssh expands
# ``%`` tokens, ``${ENV}`` and ``~`` in some values, and runs ProxyJump's hosts through
# ``/bin/sh -c`` (a ``*`` there globs the working folder into an option of the inner ssh), so
# every value is checked against what it may be, and anything else is refused.
_YES_NO = ("yes", "no")
_ALGORITHMS = re.compile(r"[+^-]?[A-Za-z0-9@._-]{1,128}(?:,[A-Za-z0-9@._-]{1,128}){0,63}\Z")
# a file path: no % tokens, ${ENV}, quotes, escapes, blanks (a list to ssh) or shell/glob characters
_FILE = re.compile(r"(?:~/)?[A-Za-z0-9_.,+=@:/][A-Za-z0-9_.,+=@:/-]{0,1000}\Z")
_HOST_ALIAS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}\Z")
_PORT = re.compile(r"[0-9]{1,5}\Z")
_IPQOS_WORDS = frozenset({
    *(f"af{a}{b}" for a in "1234" for b in "123"), *(f"cs{n}" for n in range(8)),
    "ef", "le", "lowdelay", "throughput", "reliability", "none",
})
_REKEY = re.compile(r"(?:default|[0-9]{1,12}[KMG]?)(?: (?:none|(?:[0-9]{1,9}[sSmMhHdDwW]?){1,6}))?\Z")
_AUTH_METHODS = ("gssapi-with-mic", "hostbased", "publickey", "keyboard-interactive", "password")
_LOG_LEVELS = ("QUIET", "FATAL", "ERROR", "INFO", "VERBOSE", "DEBUG", "DEBUG1", "DEBUG2", "DEBUG3")
MAX_JUMPS = 8


def _choice(*words: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value.lower() in {w.lower() for w in words} else f"one of {', '.join(words)}"
    return check


def _integer(low: int, high: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        ok = value.isascii() and value.isdigit() and len(value) <= 6 and low <= int(value) <= high
        return None if ok else f"an integer within {low}..{high}"
    return check


def _file(value: str) -> str | None:
    """A local file ssh reads: ``none``, or one path of plain characters (``~/`` at the start)."""
    if _FILE.match(value):
        return None
    return ("one local file path (or none) of letters, digits and _ . , + = @ : / -, optionally starting "
            "with ~/, not with '-' (no %tokens, $, quotes, spaces or ~user; pass a key with --identity)")


def _user(value: str) -> str | None:
    return None if _USER.match(value) else "a plain user name (letters, digits, '_', '.', '-', not starting with '-')"


def _host_alias(value: str) -> str | None:
    return None if _HOST_ALIAS.match(value) else "a host name (letters, digits, '_', '.', ':', '-')"


def _algorithms(value: str) -> str | None:
    return None if _ALGORITHMS.match(value) else "an algorithm list: [+-^]name[,name...] (letters, digits, @ . _ -)"


def _ipqos(value: str) -> str | None:
    words = value.split(" ")
    ok = 1 <= len(words) <= 2 and all(
        w.lower() in _IPQOS_WORDS or (w.isascii() and w.isdigit() and len(w) <= 3 and int(w) <= 255) for w in words)
    return None if ok else "one or two of af11..af43, cs0..cs7, ef, le, lowdelay, throughput, reliability, none, 0..255"


def _rekey(value: str) -> str | None:
    return None if _REKEY.match(value) else "default or SIZE[K|M|G], then optionally one space and none or TIME (e.g. 1G 1h)"


def _auth_methods(value: str) -> str | None:
    methods = value.split(",")
    ok = len(methods) <= len(_AUTH_METHODS) and all(m in _AUTH_METHODS for m in methods)
    return None if ok else f"a comma-separated list of {', '.join(_AUTH_METHODS)}"


def _jump(value: str) -> str | None:
    """``none`` or ``[user@]host[:port][,...]``, each host as ``--host`` takes it: nothing a shell reads."""
    what = "none or [user@]host[:port][,...] (each host as --host takes it)"
    if value.lower() == "none":
        return None
    hops = value.split(",")
    if len(hops) > MAX_JUMPS:
        return f"{what} (at most {MAX_JUMPS} hops)"
    for hop in hops:
        problem = _jump_hop(hop)
        if problem:
            return f"{what}; {hop!r} {problem}"
    return None


def _jump_hop(hop: str) -> str | None:
    if "://" in hop or hop.lower().startswith("ssh:"):
        return "is an ssh:// URI (not supported: write [user@]host[:port])"
    if "%" in hop:
        return "holds '%' (ssh would expand it as a token)"
    user, at, rest = hop.rpartition("@")
    port = None
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            return "has an unclosed '['"
        host, tail = rest[:close + 1], rest[close + 1:]
        if tail:
            if not tail.startswith(":"):
                return "has text after ']' that is not :port"
            port = tail[1:]
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    elif ":" in rest:
        return "is a bare IPv6 address (write it in brackets: [::1]:22)"
    else:
        host = rest
    if port is not None and not (_PORT.match(port) and 1 <= int(port) <= 65535):
        return "has a port that is not within 1..65535"
    try:
        parse_host(f"{user}@{host}" if at else host)
    except UsageError:
        return "is not a valid [user@]host"
    return None


_SSH_OPTIONS: dict[str, tuple[str, Callable[[str], str | None]]] = {key.lower(): (key, check) for key, check in (
    ("Port", _integer(1, 65535)),
    ("User", _user),
    ("IdentityFile", _file),
    ("IdentitiesOnly", _choice(*_YES_NO)),
    ("CertificateFile", _file),
    ("StrictHostKeyChecking", _choice("yes", "no", "ask", "accept-new", "off")),
    ("UserKnownHostsFile", _file),
    ("GlobalKnownHostsFile", _file),
    ("HostKeyAlias", _host_alias),
    ("HostKeyAlgorithms", _algorithms),
    ("CheckHostIP", _choice(*_YES_NO)),
    ("ConnectTimeout", _integer(1, 3600)),
    ("ConnectionAttempts", _integer(1, 100)),
    ("ServerAliveInterval", _integer(0, 86400)),
    ("ServerAliveCountMax", _integer(1, 1000)),
    ("TCPKeepAlive", _choice(*_YES_NO)),
    ("Compression", _choice(*_YES_NO)),
    ("LogLevel", _choice(*_LOG_LEVELS)),
    ("AddressFamily", _choice("any", "inet", "inet6")),
    ("Ciphers", _algorithms),
    ("MACs", _algorithms),
    ("KexAlgorithms", _algorithms),
    ("PubkeyAcceptedAlgorithms", _algorithms),
    ("PubkeyAcceptedKeyTypes", _algorithms),
    ("PreferredAuthentications", _auth_methods),
    ("ProxyJump", _jump),
    ("UpdateHostKeys", _choice("yes", "no", "ask")),
    ("VerifyHostKeyDNS", _choice("yes", "no", "ask")),
    ("RekeyLimit", _rekey),
    ("IPQoS", _ipqos),
)}
ALLOWED_SSH_OPTIONS = {lower: key for lower, (key, _) in _SSH_OPTIONS.items()}
MAX_OPTION_VALUE = 1024


def parse_ssh_option(text: str) -> str:
    """``Key=Value`` for ``ssh -o``: an allow-listed key whose value matches that key's grammar.

    Returns it, or raises a UsageError that names the key and what its value may be."""
    key, eq, value = str(text).partition("=")
    if not eq or not _OPTION_KEY.match(key) or not value:
        raise UsageError(f"--ssh-option {text!r} must be KEY=VALUE, e.g. StrictHostKeyChecking=accept-new")
    if any(not c.isprintable() for c in value):
        raise UsageError(f"--ssh-option {text!r} contains control characters")
    if key.lower() in RESERVED_OPTIONS:
        raise UsageError(f"--ssh-option {key} cannot be changed: {RESERVED_OPTIONS[key.lower()]}")
    if key.lower() not in ALLOWED_SSH_OPTIONS:
        raise UsageError(
            f"--ssh-option {key} is not allowed (it can run commands or open tunnels); put it in ~/.ssh/config "
            f"for this host if you trust it. Allowed: {', '.join(sorted(ALLOWED_SSH_OPTIONS.values()))}"
        )
    name, check = _SSH_OPTIONS[key.lower()]
    problem = f"at most {MAX_OPTION_VALUE} characters" if len(value) > MAX_OPTION_VALUE else check(value)
    if problem:
        raise UsageError(f"--ssh-option {str(text)[:120]!r}: {name} takes {problem}")
    return f"{key}={value}"


def check_port(port: int | None) -> int | None:
    if port is not None and not (isinstance(port, int) and 1 <= port <= 65535):
        raise UsageError(f"--port must be within 1..65535, got {port!r}")
    return port


def check_remote_path(text: str, what: str) -> str:
    """A path on the board: any characters but NUL and newlines (they are passed as quoted
    arguments, never parsed as shell text). ``~`` / ``~/...`` means the remote home; relative
    paths are relative to it too; ``~user`` is not supported."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"{what} is empty")
    if "\x00" in text or "\n" in text or "\r" in text:
        raise UsageError(f"{what} {text!r} contains a newline or NUL")
    if text.startswith("~") and text != "~" and not text.startswith("~/"):
        raise UsageError(f"{what} {text!r}: only ~ or ~/... (your home on the board) is understood, not ~user")
    if text.startswith("-"):
        raise UsageError(f"{what} {text!r} starts with '-'; use ./{text} if you mean a relative path")
    return text
