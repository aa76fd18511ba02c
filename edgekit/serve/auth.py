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


def bind_error(host: str, api_key: str | None) -> str | None:
    """Why ``host`` may not be bound without a key (None when it may)."""
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
