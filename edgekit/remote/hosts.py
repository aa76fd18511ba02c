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

from edgekit.errors import UsageError

_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_ZONE = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
_OPTION_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]{1,63}$")
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


# ssh -o keys that only change how the connection is made. Keys that run local commands
# (ProxyCommand, LocalCommand, KnownHostsCommand), load code (PKCS11Provider,
# SecurityKeyProvider) or open forwards are refused: CI jobs paste these from pull requests.
ALLOWED_SSH_OPTIONS = {k.lower(): k for k in (
    "Port", "User", "IdentityFile", "IdentitiesOnly", "CertificateFile", "StrictHostKeyChecking",
    "UserKnownHostsFile", "GlobalKnownHostsFile", "HostKeyAlias", "HostKeyAlgorithms", "CheckHostIP",
    "ConnectTimeout", "ConnectionAttempts", "ServerAliveInterval", "ServerAliveCountMax", "TCPKeepAlive",
    "Compression", "LogLevel", "AddressFamily", "Ciphers", "MACs", "KexAlgorithms",
    "PubkeyAcceptedAlgorithms", "PubkeyAcceptedKeyTypes", "PreferredAuthentications", "ProxyJump",
    "UpdateHostKeys", "VerifyHostKeyDNS", "RekeyLimit", "IPQoS",
)}


def parse_ssh_option(text: str) -> str:
    """``Key=Value`` for ``ssh -o``, for an allow-listed key; returns it, or raises UsageError."""
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
    if key.lower() == "proxyjump" and (value.startswith("-") or any(c.isspace() for c in value)):
        raise UsageError(f"--ssh-option {text!r}: ProxyJump takes [user@]host[:port][,...]")
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
