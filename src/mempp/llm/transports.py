"""The HTTP under the client: httpx when installed, else the standard library's urllib; both
return a status, headers and body, and raise ``_TransportFailure`` for a connection that broke."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from mempp.errors import InvalidInput
from mempp.llm.errors import LLMUnavailable

INSTALL_HINT = "pip install 'mempp[llm]'"


class _TransportFailure(Exception):
    """The request did not get an HTTP answer (refused, reset, timed out)."""


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes


class _HttpxTransport:
    def __init__(self, timeout: float) -> None:
        try:
            import httpx
        except ImportError:  # pragma: no cover - exercised only without httpx
            raise LLMUnavailable(
                f"httpx is not installed: {INSTALL_HINT} (or use transport='urllib')"
            ) from None
        self._httpx = httpx
        # Connecting should fail fast even when a long generation is allowed.
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))

    def post(self, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> _Response:
        limit = self._httpx.Timeout(timeout, connect=min(timeout, 10.0))
        try:
            response = self._client.post(url, headers=dict(headers), content=body, timeout=limit)
        except self._httpx.TimeoutException as exc:
            raise _TransportFailure(f"timed out ({type(exc).__name__})") from exc
        except self._httpx.TransportError as exc:
            raise _TransportFailure(f"{type(exc).__name__}: {exc}") from exc
        lowered = {k.lower(): v for k, v in response.headers.items()}
        return _Response(response.status_code, lowered, response.content)

    def close(self) -> None:
        self._client.close()


class _UrllibTransport:
    def post(self, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> _Response:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                lowered = {k.lower(): v for k, v in response.headers.items()}
                return _Response(response.status, lowered, response.read())
        except urllib.error.HTTPError as exc:  # an HTTP answer, just not 2xx
            lowered = {k.lower(): v for k, v in (exc.headers or {}).items()}
            return _Response(exc.code, lowered, exc.read() or b"")
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise _TransportFailure(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        pass


def _make_transport(kind: str, timeout: float) -> _HttpxTransport | _UrllibTransport:
    if kind == "httpx":
        return _HttpxTransport(timeout)
    if kind == "urllib":
        return _UrllibTransport()
    if kind == "auto":
        try:
            import httpx  # noqa: F401
        except ImportError:
            return _UrllibTransport()
        return _HttpxTransport(timeout)
    raise InvalidInput(f"transport must be 'auto', 'httpx' or 'urllib', got {kind!r}")
