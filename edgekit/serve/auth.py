"""API keys: who may bind where, and a constant-time check of the key a request carries.

Standalone: the standard library only.
"""

from __future__ import annotations

import hmac
import ipaddress

API_KEY_ENV = "EDGEKIT_API_KEY"
OPEN_PATHS = ("/healthz", "/readyz")  # probes answer without a key


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_error(api_key: str | None, what: str = "the API key") -> str | None:
    """Why ``api_key`` cannot be a key (None when it can, or when no key was given): a blank one
    (empty, spaces, a blank line) would count as a key and protect nothing, and a client can send
    only visible ASCII in a header, so a key with spaces or control characters inside locks everyone out."""
    if api_key is None:
        return None
    if not api_key.strip():
        return f"{what} is blank; give a real key (or none, on a loopback address)"
    if not all("!" <= ch <= "~" for ch in api_key):
        return (f"{what} holds whitespace, control or non-ASCII characters; a client cannot send those "
                "in a header (use visible ASCII, e.g. the output of `openssl rand -hex 24`)")
    if len(api_key) > 4096:
        return f"{what} is {len(api_key)} characters; at most 4096"
    return None


def bind_error(host: str, api_key: str | None) -> str | None:
    """Why ``host`` may not be bound with ``api_key`` (None when it may): the key must be a real
    one (``key_error``), and anything but loopback needs one."""
    why = key_error(api_key)
    if why:
        return why
    if is_loopback(host) or api_key:
        return None
    return (f"binding {host} exposes the model beyond this machine; give an API key with --api-key "
            f"or {API_KEY_ENV} (clients send it as 'Authorization: Bearer KEY' or 'X-API-Key: KEY')")


def presented_key(headers) -> str:
    """The key a request carries: ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return headers.get("x-api-key", "")


def authorized(headers, api_key: str | None) -> bool:
    if not api_key:
        return True
    return hmac.compare_digest(presented_key(headers).encode(), api_key.encode())
