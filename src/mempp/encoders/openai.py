"""An ``Embedder`` served by any OpenAI-compatible ``/embeddings`` endpoint.

For stores that want a larger or multilingual encoder than the local all-MiniLM-L6-v2: OpenAI
(``text-embedding-3-small``), vLLM, Ollama (``nomic-embed-text``), llama.cpp, TEI. Only the
write path and each query call it; nothing is downloaded. Requests go through
:class:`mempp.llm.LLMClient`, so they get its retries (429, 5xx, timeouts), concurrency bound
and error messages.

Configuration comes from arguments or the environment: ``MEMPP_EMBED_BASE_URL`` (falls back to
``MEMPP_LLM_BASE_URL``), ``MEMPP_EMBED_MODEL``, ``MEMPP_EMBED_API_KEY`` (falls back to
``MEMPP_LLM_API_KEY``), ``MEMPP_EMBED_DIMENSIONS`` (optional; models that support it return
shorter vectors) and ``MEMPP_EMBED_MAX_TOKENS`` (default 512). A store remembers the encoder's
name (``openai/<model>[/<dimensions>]``) and size and refuses any other, so the endpoint's model
must not change under a store.

Long inputs: the endpoint's tokenizer is unknown here, so each text is cut to
``max_tokens * CHARS_PER_TOKEN`` characters before sending (the local encoder likewise reads
only a document's opening). When the server still says an input is too large, the batch is
halved, and a single text is cut in half again, down to :data:`MIN_CHARS`; only then does the
call fail, with :class:`EmbeddingRejected` naming the input, so that an ingest can report that
one document and store the others.
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
from mempp.llm import (
    LLMClient,
    LLMConfig,
    LLMContextOverflow,
    LLMError,
    LLMReplyError,
    LLMUnavailable,
)

ENV_BASE_URL = "MEMPP_EMBED_BASE_URL"
ENV_MODEL = "MEMPP_EMBED_MODEL"
ENV_API_KEY = "MEMPP_EMBED_API_KEY"
ENV_DIMENSIONS = "MEMPP_EMBED_DIMENSIONS"
ENV_MAX_TOKENS = "MEMPP_EMBED_MAX_TOKENS"
EMBEDDINGS_PATH = "/embeddings"
DEFAULT_BATCH = 64
# 512 tokens is the input limit of the BERT-style embedders (MiniLM, bge, e5) and llama.cpp's
# default physical batch; larger models accept more, and say so through the flag.
DEFAULT_MAX_TOKENS = 512
# Three characters per token under-counts English (about four with BPE or word pieces), so a
# cut text rarely overflows; numbers, code and non-Latin scripts may still, hence the halving.
CHARS_PER_TOKEN = 3
MIN_CHARS = 64
# Some servers reject an empty input string; a lone space embeds as "nothing" everywhere.
EMPTY_STAND_IN = " "


class EmbeddingRejected(LLMError):
    """The endpoint refused one input for good (too large even when cut to ``MIN_CHARS``, or
    a permanent error while embedding it alone). ``index`` is its position in the call."""

    def __init__(self, message: str, *, index: int, status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.index = index


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
        max_tokens: int = DEFAULT_MAX_TOKENS,
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
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise InvalidInput(f"max_tokens must be a positive integer, got {max_tokens!r}")
        self.max_chars = max(MIN_CHARS, max_tokens * CHARS_PER_TOKEN)
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
        for name, key in ((ENV_DIMENSIONS, "dimensions"), (ENV_MAX_TOKENS, "max_tokens")):
            if env.get(name):
                try:
                    values[key] = int(env[name])
                except ValueError:
                    raise InvalidInput(f"{name} must be an integer") from None
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
        cut = [self._cut(text, self.max_chars) for text in texts]
        parts = [
            self._fitting(cut[i : i + self.batch_size], offset=i)
            for i in range(0, len(cut), self.batch_size)
        ]
        if not parts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return np.concatenate(parts)

    @staticmethod
    def _cut(text: str, limit: int) -> str:
        if not text.strip():
            return EMPTY_STAND_IN
        return text if len(text) <= limit else text[:limit]

    def _fitting(self, texts: list[str], *, offset: int) -> np.ndarray:
        """:meth:`_batch`, halving the batch (then a lone text) while the server says the
        input is too large."""
        try:
            return self._batch(texts)
        except LLMContextOverflow as exc:
            if len(texts) > 1:
                half = len(texts) // 2
                return np.concatenate(
                    [
                        self._fitting(texts[:half], offset=offset),
                        self._fitting(texts[half:], offset=offset + half),
                    ]
                )
            (text,) = texts
            if len(text) <= MIN_CHARS:
                raise EmbeddingRejected(
                    f"input {offset} is too large for the embedding model even cut to "
                    f"{len(text)} characters: {exc}",
                    index=offset,
                    status=exc.status,
                ) from exc
            return self._fitting([self._cut(text, len(text) // 2)], offset=offset)
        except LLMUnavailable:
            raise  # the server, not this input: the caller cannot route around it
        except LLMError as exc:
            if len(texts) == 1 and exc.status in (400, 413, 422):
                raise EmbeddingRejected(
                    f"input {offset} was refused: {exc}", index=offset, status=exc.status
                ) from exc
            raise

    def _batch(self, texts: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {
            "model": self.model,
            "input": texts,
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
