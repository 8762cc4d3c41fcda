"""An ``Embedder`` served by any OpenAI-compatible ``/embeddings`` endpoint.

For stores that want a larger or multilingual encoder than the local all-MiniLM-L6-v2: OpenAI
(``text-embedding-3-small``), vLLM, Ollama (``nomic-embed-text``), llama.cpp, TEI. Only the
write path and each query call it; nothing is downloaded. Requests go through
:class:`mempp.llm.LLMClient`, so they get its retries (429, 5xx, timeouts), concurrency bound
and error messages.

Configuration comes from arguments or the environment: ``MEMPP_EMBED_BASE_URL`` (falls back to
``MEMPP_LLM_BASE_URL``), ``MEMPP_EMBED_MODEL``, ``MEMPP_EMBED_API_KEY`` (falls back to
``MEMPP_LLM_API_KEY``) and ``MEMPP_EMBED_DIMENSIONS`` (optional; models that support it return
shorter vectors). A store remembers the encoder's name (``openai/<model>[/<dimensions>]``) and
size and refuses any other, so the endpoint's model must not change under a store.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mempp.errors import InvalidInput
from mempp.llm import ENV_API_KEY as LLM_API_KEY
from mempp.llm import ENV_BASE_URL as LLM_BASE_URL
from mempp.llm import LLMClient, LLMConfig, LLMReplyError, LLMUnavailable

ENV_BASE_URL = "MEMPP_EMBED_BASE_URL"
ENV_MODEL = "MEMPP_EMBED_MODEL"
ENV_API_KEY = "MEMPP_EMBED_API_KEY"
ENV_DIMENSIONS = "MEMPP_EMBED_DIMENSIONS"
EMBEDDINGS_PATH = "/embeddings"
DEFAULT_BATCH = 64
# Some servers reject an empty input string; a lone space embeds as "nothing" everywhere.
EMPTY_STAND_IN = " "


class OpenAIEmbedder:
    """Unit-length float32 vectors from an OpenAI-compatible embeddings endpoint.

    ``dim`` is ``dimensions`` when given, else learnt from the endpoint's first reply (one
    short request if nothing was embedded yet).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = DEFAULT_BATCH,
        timeout: float = 60.0,
        max_retries: int = 4,
        client: LLMClient | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput("an embedding model name is required")
        if dimensions is not None and (
            not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1
        ):
            raise InvalidInput(f"dimensions must be a positive integer, got {dimensions!r}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidInput(f"batch_size must be a positive integer, got {batch_size!r}")
        self.model = model.strip()
        self.dimensions = dimensions
        self.batch_size = batch_size
        self._client = client or LLMClient(
            LLMConfig(
                base_url=base_url,
                model=self.model,
                api_key=api_key,
                timeout=timeout,
                max_retries=max_retries,
            )
        )
        self._dim = dimensions
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> OpenAIEmbedder:
        """Build from ``MEMPP_EMBED_*`` (see the module docstring); keyword overrides win."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {
            "model": env.get(ENV_MODEL),
            "base_url": env.get(ENV_BASE_URL) or env.get(LLM_BASE_URL),
            "api_key": env.get(ENV_API_KEY) or env.get(LLM_API_KEY),
        }
        if env.get(ENV_DIMENSIONS):
            try:
                values["dimensions"] = int(env[ENV_DIMENSIONS])
            except ValueError:
                raise InvalidInput(f"{ENV_DIMENSIONS} must be an integer") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        if not values.get("model"):
            raise LLMUnavailable(f"no embedding model configured: set {ENV_MODEL} or pass model")
        if not values.get("base_url"):
            raise LLMUnavailable(
                f"no embeddings endpoint configured: set {ENV_BASE_URL} (or {LLM_BASE_URL})"
            )
        return cls(**values)

    @property
    def name(self) -> str:
        suffix = f"/{self.dimensions}" if self.dimensions else ""
        return f"openai/{self.model}{suffix}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InvalidInput("embed takes a list of texts, not one string")
        parts = [
            self._batch(list(texts[i : i + self.batch_size]))
            for i in range(0, len(texts), self.batch_size)
        ]
        if not parts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return np.concatenate(parts)

    def _batch(self, texts: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {
            "model": self.model,
            "input": [text if text.strip() else EMPTY_STAND_IN for text in texts],
            "encoding_format": "float",
        }
        if self.dimensions:
            payload["dimensions"] = self.dimensions
        reply = self._client.post_json(EMBEDDINGS_PATH, payload)
        matrix = _vectors(reply, len(texts))
        with self._lock:
            if self._dim is None:
                self._dim = matrix.shape[1]
        if matrix.shape[1] != self._dim:
            raise LLMReplyError(
                f"the endpoint returned {matrix.shape[1]}-d vectors; this encoder is {self._dim}-d"
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.all(norms > 0) or not np.all(np.isfinite(matrix)):
            raise LLMReplyError("the endpoint returned a zero or non-finite vector")
        return (matrix / norms).astype(np.float32)


def _vectors(reply: Mapping[str, Any], count: int) -> np.ndarray:
    """``data[i].embedding`` in input order (``index`` decides when present)."""
    data = reply.get("data")
    if not isinstance(data, list) or len(data) != count:
        got = len(data) if isinstance(data, list) else "no"
        raise LLMReplyError(f"expected {count} embeddings in data[], got {got}")
    rows: list[tuple[int, list[float]]] = []
    for position, item in enumerate(data):
        vector = item.get("embedding") if isinstance(item, dict) else None
        index = item.get("index", position) if isinstance(item, dict) else position
        if not isinstance(vector, list) or not vector or not isinstance(index, int):
            raise LLMReplyError(f"data[{position}] has no embedding list")
        rows.append((index, vector))
    rows.sort(key=lambda row: row[0])
    if [index for index, _ in rows] != list(range(count)):
        raise LLMReplyError("embedding indexes do not match the inputs")
    if len({len(vector) for _, vector in rows}) != 1:
        raise LLMReplyError("embeddings of one reply differ in length")
    try:
        return np.asarray([vector for _, vector in rows], dtype=np.float64)
    except (TypeError, ValueError):
        raise LLMReplyError("an embedding holds something other than numbers") from None
