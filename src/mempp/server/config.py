"""What ``mempp serve`` was asked for: plain values, so they travel to worker processes.

No web dependency is imported here: ``mempp --help`` must work without the ``serve`` extra.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

DEFAULT_PORT = 8765
DEFAULT_MAX_BODY = 1 << 20  # 1 MiB: a JSON request (up to 1,000 documents of ~1 KB)
DEFAULT_MAX_UPLOAD = 256 << 20  # 256 MiB: a JSON Lines upload, read a batch at a time


@dataclass(frozen=True, slots=True)
class ServeConfig:
    location: str
    host: str = "127.0.0.1"
    scope: str = "default"
    preset: str = "default"
    encoder: str | None = None
    llm_base_url: str | None = None
    llm_model: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    max_upload: int = DEFAULT_MAX_UPLOAD
    allowed_hosts: tuple[str, ...] = ()  # names besides loopback's (a reverse proxy's)
    oauth_issuer: str | None = None  # else $MEMPP_OAUTH_ISSUER (mempp.server.oauth)
    oauth_audience: str | None = None  # else $MEMPP_OAUTH_AUDIENCE

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServeConfig:
        fields = json.loads(text)
        fields["allowed_hosts"] = tuple(fields.get("allowed_hosts", ()))
        return cls(**fields)
