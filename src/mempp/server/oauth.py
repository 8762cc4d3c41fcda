"""OAuth 2.1 beside the API keys: the server as a resource server (MCP authorization, RFC 9728).

With ``--oauth-issuer URL --oauth-audience AUD`` (or ``$MEMPP_OAUTH_ISSUER`` /
``$MEMPP_OAUTH_AUDIENCE``), a bearer token that is a JWT is checked here, on ``/v1`` and
``/mcp`` alike; any other bearer is an API key, as before:

- the issuer's signing keys come from its metadata (RFC 8414's
  ``/.well-known/oauth-authorization-server``, else OpenID's ``openid-configuration``),
  whose ``issuer`` must be the one configured, then its ``jwks_uri``; they are held
  ``KEYS_TTL_S`` and fetched again, at most every ``REFETCH_S``, for an unknown key id;
- the token must be signed by one of them with an asymmetric algorithm (RS*, PS*, ES*,
  EdDSA: an unsigned ``alg: none`` token or an HMAC one is refused), name the issuer
  (``iss``) and the audience (``aud``), and be within its ``exp`` (required) and ``nbf``;
- its scopes (``scope``, space-separated, or ``scp``) map to one memory scope and role:
  ``mempp:<scope>:<role>`` (``mempp:sales:write``); the highest role named for that scope
  applies. A token naming no memory scope, or several, is refused (a request acts on one
  scope, and a token's scope never reaches another).

Every refusal is a 401 whose ``WWW-Authenticate`` challenge names the reason and points to
``/.well-known/oauth-protected-resource``, the metadata that tells a client (an MCP host)
which authorization server to ask. Keys that cannot be fetched (the issuer down) refuse the
token with that reason: never a pass.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from joserfc.jws import extract_compact

from mempp.errors import InvalidInput
from mempp.server.keys import ROLES, Principal
from mempp.server.problems import Problem

ENV_ISSUER = "MEMPP_OAUTH_ISSUER"
ENV_AUDIENCE = "MEMPP_OAUTH_AUDIENCE"
METADATA_PATH = "/.well-known/oauth-protected-resource"
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
KEYS_TTL_S = 300.0
REFETCH_S = 10.0
FETCH_TIMEOUT_S = 5.0
_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
_SCOPE = re.compile(r"^mempp:(.+):(read|write|admin)$")
_RANK = {role: rank for rank, role in enumerate(ROLES)}


class TokenRefused(Exception):
    """Why a bearer token does not authenticate (the challenge's error_description)."""


def looks_like_jwt(token: str) -> bool:
    return bool(_JWT.match(token))


def from_environment(issuer: str | None, audience: str | None) -> OAuthVerifier | None:
    """The verifier the options or the environment ask for, or None for keys only."""
    issuer = issuer or os.environ.get(ENV_ISSUER) or None
    audience = audience or os.environ.get(ENV_AUDIENCE) or None
    if issuer is None and audience is None:
        return None
    if issuer is None or audience is None:
        missing = "--oauth-issuer" if issuer is None else "--oauth-audience"
        raise InvalidInput(f"OAuth needs both an issuer and an audience: give {missing} too")
    return OAuthVerifier(issuer, audience)


@dataclass
class _Keys:
    keys: KeySet
    fetched: float


class OAuthVerifier:
    """Checks bearer JWTs of one issuer for one audience (thread-safe)."""

    def __init__(
        self,
        issuer: str,
        audience: str,
        *,
        timeout_s: float = FETCH_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not issuer.startswith(("https://", "http://")):
            raise InvalidInput(f"must be an http(s) URL, got {issuer!r}", field="oauth_issuer")
        if not audience.strip():
            raise InvalidInput("must not be empty", field="oauth_audience")
        self.issuer = issuer.rstrip("/")
        self.audience = audience
        self._http = httpx.Client(timeout=timeout_s, transport=transport)
        self._lock = threading.Lock()
        self._keys: _Keys | None = None
        self._last_fetch = 0.0

    # -- what clients are told ------------------------------------------------------------
    def metadata(self, base_url: str) -> dict[str, Any]:
        """The protected resource's metadata (RFC 9728)."""
        return {
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": [
                "mempp:{scope}:read",
                "mempp:{scope}:write",
                "mempp:{scope}:admin",
            ],
            "resource_documentation": f"{base_url.rstrip('/')}/docs",
        }

    def challenge(self, base_url: str | None, error: str | None = None, reason: str = "") -> str:
        parts = ['Bearer realm="mempp"']
        if base_url:
            parts.append(f'resource_metadata="{base_url.rstrip("/")}{METADATA_PATH}"')
        if error:
            parts.append(f'error="{error}"')
        if reason:
            parts.append('error_description="' + reason.replace('"', "'") + '"')
        return ", ".join(parts)

    # -- checking a token -----------------------------------------------------------------
    def principal(self, token: str, base_url: str | None = None) -> Principal:
        """The principal of a valid token, or the 401 problem saying why not."""
        try:
            return self._principal(token)
        except TokenRefused as refused:
            reason = str(refused)
            raise Problem(
                401,
                f"the bearer token was refused: {reason}",
                field="Authorization",
                headers={"WWW-Authenticate": self.challenge(base_url, "invalid_token", reason)},
            ) from None

    def _principal(self, token: str) -> Principal:
        try:
            header = extract_compact(token.encode("ascii")).protected
        except (JoseError, ValueError, TypeError) as exc:
            raise TokenRefused(f"not a readable JWT ({exc})") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise TokenRefused(f"algorithm {algorithm!r} is not accepted (signed tokens only)")
        keys = self._keyset(header.get("kid"))
        try:
            decoded = jwt.decode(token, keys, algorithms=ALGORITHMS)
        except (JoseError, ValueError) as exc:
            raise TokenRefused(f"the signature does not verify ({_describe(exc)})") from None
        claims = decoded.claims
        registry = jwt.JWTClaimsRegistry(
            iss={"essential": True, "value": self.issuer},
            aud={"essential": True, "value": self.audience},
            exp={"essential": True},
        )
        try:
            registry.validate(claims)
        except JoseError as exc:
            raise TokenRefused(_claim_reason(exc, claims)) from None
        return _principal_of(claims)

    def _keyset(self, kid: object) -> KeySet:
        with self._lock:
            now = time.monotonic()
            held = self._keys
            stale = held is None or now - held.fetched > KEYS_TTL_S
            unknown = held is not None and kid is not None and not _has(held.keys, kid)
            if stale or (unknown and now - self._last_fetch > REFETCH_S):
                self._last_fetch = now
                self._keys = held = _Keys(self._fetch(), now)
            assert held is not None
            if kid is not None and not _has(held.keys, kid):
                raise TokenRefused(f"key {kid!r} is not among the issuer's signing keys")
            return held.keys

    def _fetch(self) -> KeySet:
        try:
            metadata = self._metadata()
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str):
                raise TokenRefused("the issuer's metadata names no jwks_uri")
            response = self._http.get(jwks_uri)
            response.raise_for_status()
            return KeySet.import_key_set(response.json())
        except TokenRefused:
            raise
        except (httpx.HTTPError, ValueError, JoseError) as exc:
            raise TokenRefused(f"the issuer's signing keys cannot be fetched ({exc})") from None

    def _metadata(self) -> dict[str, Any]:
        last: Exception | None = None
        for name in ("oauth-authorization-server", "openid-configuration"):
            try:
                response = self._http.get(f"{self.issuer}/.well-known/{name}")
            except httpx.HTTPError as exc:
                last = exc
                continue
            if response.status_code == 200:
                found = response.json()
                if (
                    not isinstance(found, dict)
                    or found.get("issuer", "").rstrip("/") != self.issuer
                ):
                    raise TokenRefused("the issuer's metadata names another issuer")
                return found
            last = httpx.HTTPStatusError(
                f"{response.status_code} from {response.url}",
                request=response.request,
                response=response,
            )
        raise TokenRefused(f"the issuer's metadata cannot be fetched ({last})")

    def close(self) -> None:
        self._http.close()


def _has(keys: KeySet, kid: object) -> bool:
    return any(key.kid == kid for key in keys.keys)


def _describe(exc: Exception) -> str:
    return getattr(exc, "description", None) or type(exc).__name__


def _claim_reason(exc: JoseError, claims: dict[str, Any]) -> str:
    text = _describe(exc)
    name = getattr(exc, "claim", None)
    if name == "exp" or "expired" in text.lower():
        return "it has expired" if "exp" in claims else "it has no expiry (exp)"
    if name == "aud" or "aud" in text:
        return f"it is for another audience ({claims.get('aud')!r})"
    if name == "iss" or "iss" in text:
        return f"it is from another issuer ({claims.get('iss')!r})"
    return text


def _principal_of(claims: dict[str, Any]) -> Principal:
    raw = claims.get("scope", claims.get("scp", ""))
    scopes = raw.split() if isinstance(raw, str) else [str(s) for s in raw or []]
    roles: dict[str, str] = {}
    for item in scopes:
        found = _SCOPE.match(item)
        if found:
            scope, role = found.group(1), found.group(2)
            if scope not in roles or _RANK[role] > _RANK[roles[scope]]:  # type: ignore[index]
                roles[scope] = role
    if not roles:
        raise TokenRefused("it grants no memory scope (mempp:<scope>:<role>)")
    if len(roles) > 1:
        raise TokenRefused(
            f"it grants several memory scopes ({', '.join(sorted(roles))}); a request acts "
            "on one: ask for a token of one scope"
        )
    ((scope, role),) = roles.items()
    subject = str(claims.get("sub") or "unknown")[:200]
    return Principal(f"oauth:{subject}", scope, role)  # type: ignore[arg-type]
