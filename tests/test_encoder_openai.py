"""The OpenAI-compatible embeddings encoder, over real HTTP against a scripted local server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mempp import EncoderMismatch, InvalidInput, Memory
from mempp.cli.main import main
from mempp.encoders import embedder_named
from mempp.encoders.openai import OpenAIEmbedder
from mempp.llm import LLMError, LLMReplyError, LLMUnavailable

from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, RecordedRequest, ScriptedReply

KEYWORDS = ("launch", "budget", "friday", "pricing")
_WORD = re.compile(r"[^\W_]+")


def keyword_vector(text: str) -> list[float]:
    """Raw (not normalised) keyword counts plus a constant: the client must normalise."""
    words = _WORD.findall(text.lower())
    return [3.0 * words.count(k) for k in KEYWORDS] + [1.0]


def embeddings_reply(request: RecordedRequest, *, shuffle: bool = False) -> ScriptedReply:
    inputs = request.body["input"]
    data = [
        {"object": "embedding", "index": i, "embedding": keyword_vector(text)}
        for i, text in enumerate(inputs)
    ]
    if shuffle:
        data.reverse()  # servers may answer out of order; "index" says which is which
    return ScriptedReply(body={"object": "list", "data": data, "model": request.body["model"]})


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(responder=embeddings_reply) as fake:
        yield fake


def embedder(server: FakeOpenAI, **kwargs: object) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        "fake-embed", base_url=server.base_url, api_key="sk-embed", max_retries=2, **kwargs
    )


def test_vectors_are_unit_float32_in_input_order_and_batched(server: FakeOpenAI) -> None:
    server.responder = lambda request: embeddings_reply(request, shuffle=True)
    encoder = embedder(server, batch_size=2)
    texts = ["launch friday", "budget", "", "pricing pricing launch", "nothing here"]
    out = encoder.embed(texts)
    assert out.dtype == np.float32 and out.shape == (5, 5)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0)
    expected = np.array([keyword_vector(t or " ") for t in texts])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.allclose(out, expected, atol=1e-6)
    posts = [r for r in server.requests if r.path == "/v1/embeddings"]
    assert [len(r.body["input"]) for r in posts] == [2, 2, 1]
    assert posts[1].body["input"][0] == " "  # an empty text is sent as one space
    assert posts[0].body["model"] == "fake-embed"
    assert posts[0].body["encoding_format"] == "float"
    assert "dimensions" not in posts[0].body
    assert posts[0].headers["authorization"] == "Bearer sk-embed"
    assert encoder.embed([]).shape == (0, 5)


def test_dim_is_learnt_once_or_given(server: FakeOpenAI) -> None:
    encoder = embedder(server)
    assert encoder.name == "openai/fake-embed"
    assert encoder.dim == 5 and len(server.requests) == 1  # one probe
    assert encoder.dim == 5 and len(server.requests) == 1
    sized = embedder(server, dimensions=5)
    assert sized.name == "openai/fake-embed/5" and sized.dim == 5
    assert len(server.requests) == 1  # known without asking
    sized.embed(["launch"])
    assert server.requests[-1].body["dimensions"] == 5
    wrong = embedder(server, dimensions=3)
    with pytest.raises(LLMReplyError, match="5-d vectors; this encoder is 3-d"):
        wrong.embed(["launch"])


def test_rate_limits_are_retried_and_bad_replies_are_clear_errors(server: FakeOpenAI) -> None:
    encoder = embedder(server)
    encoder._client._sleep = lambda seconds: None  # no real waiting in tests
    server.error(429, headers={"Retry-After": "0"})
    assert encoder.embed(["launch"]).shape == (1, 5)  # the 429, then the responder
    server.error(400, message="input too long")
    with pytest.raises(LLMError, match=r"HTTP 400.*input too long"):
        encoder.embed(["launch"])
    for body, message in (
        ({"data": []}, "expected 1 embeddings"),
        ({"data": [{"index": 0, "embedding": [0.0, 0.0]}]}, "zero or non-finite"),
        ({"data": [{"index": 0}]}, "no embedding list"),
        ({"data": [{"index": 0, "embedding": ["x", 1]}]}, "other than numbers"),
        ({"data": [{"index": 3, "embedding": [1.0]}]}, "indexes do not match"),
        ({"error": {"message": "model not found"}}, "model not found"),
    ):
        server.push(ScriptedReply(body=body))
        with pytest.raises(LLMError, match=message):
            embedder(server).embed(["launch"])
    with pytest.raises(InvalidInput):
        encoder.embed("one string")  # type: ignore[arg-type]


def test_configuration_from_the_environment() -> None:
    env = {"MEMPP_EMBED_MODEL": "m", "MEMPP_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    encoder = OpenAIEmbedder.from_env(env)
    assert encoder.model == "m" and encoder.name == "openai/m"
    assert encoder._client.config.endpoint("/embeddings") == "http://127.0.0.1:9/v1/embeddings"
    env["MEMPP_EMBED_DIMENSIONS"] = "256"
    assert OpenAIEmbedder.from_env(env).name == "openai/m/256"
    with pytest.raises(LLMUnavailable, match="MEMPP_EMBED_MODEL"):
        OpenAIEmbedder.from_env({"MEMPP_EMBED_BASE_URL": "http://127.0.0.1:9/v1"})
    with pytest.raises(LLMUnavailable, match="MEMPP_EMBED_BASE_URL"):
        OpenAIEmbedder.from_env({"MEMPP_EMBED_MODEL": "m"})
    with pytest.raises(InvalidInput, match="integer"):
        OpenAIEmbedder.from_env({**env, "MEMPP_EMBED_DIMENSIONS": "many"})
    with pytest.raises(InvalidInput):
        OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1", dimensions=0)
    with pytest.raises(InvalidInput, match="unknown encoder"):
        embedder_named("word2vec")


def test_a_store_filled_through_the_endpoint_searches_and_keeps_its_encoder(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "m.db"
    with Memory(path, embedder=embedder(server)) as memory:
        launch = memory.add("launch moved to friday", date="2024-03-01").id
        memory.add("budget approved", date="2024-03-02")
        hits = memory.search("when is the launch?", settings="default")
        assert hits[0].id == launch and "vec" in hits[0].leg_ranks
        assert memory.store.encoder() == ("openai/fake-embed", 5)
    with Memory(path, embedder=KeywordEmbedder(KEYWORDS)) as other, pytest.raises(EncoderMismatch):
        other.add("another encoder cannot write here")


def test_cli_encoder_option(
    server: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MEMPP_EMBED_BASE_URL", server.base_url)
    monkeypatch.setenv("MEMPP_EMBED_MODEL", "fake-embed")
    db = str(tmp_path / "m.db")
    assert main(["--db", db, "--encoder", "openai", "add", "launch on friday", "--json"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("MEMPP_ENCODER", "openai")  # the same choice through the environment
    assert main(["--db", db, "search", "launch", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["text"] == "launch on friday"
    assert all(r.path == "/v1/embeddings" for r in server.requests)
    assert main(["--db", db, "--encoder", "bogus", "search", "launch"]) == 2
    assert "unknown encoder" in capsys.readouterr().err


def too_large_over(limit: int):
    """A responder that, like llama.cpp's server, answers 500 "too large" when any input is
    longer than ``limit`` characters, and refuses every input holding POISON whatever its
    length."""

    def respond(request: RecordedRequest) -> ScriptedReply:
        inputs = request.body["input"]
        if any(len(text) > limit or "POISON" in text for text in inputs):
            size = max(len(text) for text in inputs)
            message = (
                f"input ({size} tokens) is too large to process. increase the physical batch size"
            )
            return ScriptedReply(status=500, body={"error": {"message": message}})
        return embeddings_reply(request)

    return respond


def test_long_texts_are_cut_before_sending(server: FakeOpenAI) -> None:
    encoder = embedder(server, max_tokens=100)
    assert encoder.embed(["launch " * 5_000]).shape == (1, 5)
    [request] = server.requests
    assert len(request.body["input"][0]) == 300  # 100 tokens at 3 characters each


def test_too_large_halves_the_batch_then_the_text(server: FakeOpenAI) -> None:
    server.responder = too_large_over(500)
    encoder = embedder(server, max_tokens=1_000)  # cuts at 3,000 characters: too many here
    texts = ["launch friday", "budget " * 400, "pricing", "launch"]
    out = encoder.embed(texts)
    assert out.shape == (4, 5)
    np.testing.assert_allclose(out[0], embedder(server).embed(["launch friday"])[0], rtol=1e-6)
    sizes = [len(r.body["input"]) for r in server.requests[:-1]]
    assert sizes[:3] == [4, 2, 1]  # the batch was halved down to the one long text
    long_tries = [
        len(r.body["input"][0]) for r in server.requests if "budget" in r.body["input"][0]
    ]
    assert long_tries[-1] <= 500 < long_tries[-2]  # then the text itself was halved
    assert server.requests and all(r.path == "/v1/embeddings" for r in server.requests)


def test_a_permanent_refusal_is_not_retried(server: FakeOpenAI) -> None:
    server.error(501, message="This server does not support embeddings. Start it with --embeddings")
    with pytest.raises(LLMError, match="does not support embeddings") as info:
        embedder(server).embed(["launch"])
    assert info.value.status == 501 and len(server.requests) == 1


def test_ingest_reports_a_refused_document_and_stores_the_rest(
    server: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.responder = too_large_over(10_000)
    monkeypatch.setenv("MEMPP_EMBED_BASE_URL", server.base_url)
    monkeypatch.setenv("MEMPP_EMBED_MODEL", "fake-embed")
    source = tmp_path / "docs.jsonl"
    lines = [{"text": f"launch note {n}"} for n in range(5)]
    lines[2] = {"text": "POISON budget"}
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    db = str(tmp_path / "m.db")
    code = main(["--db", db, "--encoder", "openai", "ingest", str(source), "--json"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert code == 3 and summary["added"] == 4 and summary["failed"] == 1
    [failure] = summary["failures"]
    assert failure["location"] == f"{source}:3" and "too large" in failure["reason"]
    assert f"{source}:3: " in captured.err
    with Memory(db, embedder=embedder(server)) as memory:
        assert sorted(r.text for r in memory.records()) == [
            f"launch note {n}" for n in (0, 1, 3, 4)
        ]
