"""The chat client against a real local HTTP server speaking the OpenAI protocol."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mempp.errors import InvalidInput, MemppError
from mempp.llm import (
    LLMClient,
    LLMConfig,
    LLMContextOverflow,
    LLMError,
    LLMReplyError,
    LLMUnavailable,
    map_concurrent,
    parse_json_reply,
)

import fake_openai
from fake_openai import FakeOpenAI, RecordedRequest, ScriptedReply

# The shared fixture (pytest finds fixtures among module attributes).
server = fake_openai.server

MESSAGES = [{"role": "user", "content": "Say hi."}]


class Sleeps:
    """Records backoff waits instead of sleeping, so retry tests run instantly."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def make_client(server: FakeOpenAI, **kwargs: Any) -> LLMClient:
    kwargs.setdefault("model", "fake-model")
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("sleep", Sleeps())
    kwargs.setdefault("timeout", 5.0)
    return LLMClient(base_url=server.base_url, **kwargs)


# -- happy path -----------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["httpx", "urllib"])
def test_chat_sends_the_openai_request_and_returns_the_text(server, transport):
    server.reply("Hello there.")
    with make_client(server, transport=transport) as client:
        assert client.chat(MESSAGES, max_tokens=50) == "Hello there."
        assert client.usage.requests == 1
        assert client.usage.prompt_tokens == 10
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "model": "fake-model",
        "messages": MESSAGES,
        "temperature": 0.0,
        "max_tokens": 50,
    }


def test_no_auth_header_without_a_key_and_none_params_are_left_out(server):
    server.reply("ok")
    with make_client(server, api_key=None) as client:
        client.chat(MESSAGES, temperature=None, max_tokens=None, extra={"seed": 7})
    [request] = server.requests
    assert "authorization" not in request.headers
    assert "temperature" not in request.body and "max_tokens" not in request.body
    assert request.body["seed"] == 7


def test_url_joining_rule(server):
    server.reply("a").reply("b").reply("c")
    with LLMClient(base_url=server.root_url, model="m") as client:  # no /v1
        assert client.endpoint == server.root_url + "/chat/completions"
        client.chat(MESSAGES)
    with LLMClient(base_url=server.base_url + "/", model="m") as client:
        assert client.endpoint == server.base_url + "/chat/completions"
        client.chat(MESSAGES)
    full = server.base_url + "/chat/completions"
    with LLMClient(base_url=full, model="m") as client:  # a full endpoint is kept
        assert client.endpoint == full
        client.chat(MESSAGES)
    assert [r.path for r in server.requests] == [
        "/chat/completions",
        "/v1/chat/completions",
        "/v1/chat/completions",
    ]


def test_404_explains_the_base_url(server):
    client = LLMClient(base_url=server.root_url + "/api", model="m")
    with client, pytest.raises(LLMError, match="/v1") as info:
        client.chat(MESSAGES)
    assert info.value.status == 404


# -- JSON replies ---------------------------------------------------------------------------
def test_chat_json_sends_its_schema_and_reads_fenced_replies(server):
    server.reply('Here you go:\n```json\n{"answer": "Friday", "citations": [3]}\n```\nDone.')
    with make_client(server) as client:
        reply = client.chat_json(
            MESSAGES, schema={"answer": str, "citations": list[int]}, name="ask answer"
        )
        assert client.format_mode == "json_schema"
    assert reply == {"answer": "Friday", "citations": [3]}
    assert server.requests[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "ask_answer",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string"},
                    "citations": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["answer", "citations"],
                "additionalProperties": False,
            },
        },
    }


def test_an_open_ended_object_is_sent_without_strict(server):
    server.reply('{"scores": {"S1": 1}}')
    with make_client(server) as client:
        client.chat_json(MESSAGES, schema={"scores": dict[str, float]})
    spec = server.requests[0].body["response_format"]["json_schema"]
    assert "strict" not in spec
    assert spec["schema"]["properties"]["scores"] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }


def test_a_refused_format_steps_down_once_and_is_remembered(server):
    server.error(400, "response_format type json_schema is not supported")
    server.error(400, "Unrecognized request argument supplied: response_format")
    server.reply('{"a": 1}').reply('{"a": 2}')
    with make_client(server) as client:
        assert client.chat_json(MESSAGES, schema={"a": int}) == {"a": 1}
        assert client.format_mode == "text"
        assert client.chat_json(MESSAGES, schema={"a": int}) == {"a": 2}
        assert client.usage.retries == 0
    formats = [r.body.get("response_format", {}).get("type") for r in server.requests]
    assert formats == ["json_schema", "json_object", None, None]


def test_a_bad_request_that_is_not_about_the_format_is_not_stepped_around(server):
    server.error(400, "messages: field required").reply("never sent")
    with make_client(server) as client, pytest.raises(LLMError, match="field required"):
        client.chat_json(MESSAGES, schema={"a": int})
    assert len(server.requests) == 1 and client.format_mode == "json_schema"


@pytest.mark.parametrize(
    "content",
    [
        '{"text": "<the merged record>"}',
        '{"text": "..."}',
        '{"text": "the merged record, in plain prose"}',
        '{"text": "text"}',
    ],
)
def test_a_placeholder_or_an_echo_of_the_instructions_is_unusable(server, content):
    messages = [
        {"role": "system", "content": "Write the merged record, in plain prose. Reply in JSON."},
        {"role": "user", "content": "Records: the launch is on Friday."},
    ]
    server.reply(content)
    with (
        make_client(server) as client,
        pytest.raises(LLMReplyError, match=r"placeholder|repeats|key"),
    ):
        client.chat_json(messages, schema={"text": str})


def test_a_value_that_is_a_key_of_the_reply_is_unusable(server):
    # Gemma 3 270M answered a real `ask` with {"answer": "citations", "citations": [1]}.
    server.reply('{"answer": "citations", "citations": [1]}')
    with make_client(server) as client, pytest.raises(LLMReplyError, match="key of the reply"):
        client.chat_json(MESSAGES, schema={"answer": str, "citations": list[int]})
    server.reply('{"answer": "The citations are in the memo.", "citations": [1]}')
    with make_client(server) as client:
        assert client.chat_json(MESSAGES, schema={"answer": str, "citations": list[int]})


def test_a_phrase_of_the_input_is_not_an_echo_even_when_the_instructions_quote_it(server):
    messages = [
        {"role": "system", "content": "Example: the launch is on Friday."},
        {"role": "user", "content": "Records: the launch is on Friday."},
    ]
    server.reply('{"text": "the launch is on Friday"}')
    with make_client(server) as client:
        assert client.chat_json(messages, schema={"text": str}) == {
            "text": "the launch is on Friday"
        }


def test_without_a_schema_any_json_object_is_asked_for(server):
    server.reply('{"free": "form"}')
    with make_client(server) as client:
        assert client.chat_json(MESSAGES) == {"free": "form"}
    assert server.requests[0].body["response_format"] == {"type": "json_object"}


def test_json_mode_can_be_switched_off_for_servers_without_it(server):
    server.reply('{"a": 1}')
    with make_client(server, json_mode=False) as client:
        assert client.chat_json(MESSAGES, schema={"a": int}) == {"a": 1}
        assert client.format_mode == "text"
    assert "response_format" not in server.requests[0].body


def test_malformed_json_reply_raises(server):
    server.reply('{"answer": "Friday", citations: [3]}')
    with make_client(server) as client, pytest.raises(LLMReplyError, match="malformed") as info:
        client.chat_json(MESSAGES, schema={"answer": str})
    assert info.value.reply is not None and "citations" in info.value.reply


def test_partial_json_reply_raises(server):
    server.reply('{"answer": "Friday", "citations": [3, 4', finish_reason="length")
    with make_client(server) as client, pytest.raises(LLMReplyError, match="partial"):
        client.chat_json(MESSAGES, schema={"answer": str})


def test_missing_key_and_wrong_type_raise(server):
    server.reply('{"answer": "x"}').reply('{"answer": 5, "citations": ["a"]}')
    with make_client(server) as client:
        with pytest.raises(LLMReplyError, match="missing key 'citations'"):
            client.chat_json(MESSAGES, schema={"answer": str, "citations": list[int]})
        with pytest.raises(LLMReplyError, match="'answer' should be str") as info:
            client.chat_json(MESSAGES, schema={"answer": str, "citations": list[int]})
    assert "'citations' should be" in str(info.value)


def test_reply_retry_shows_the_model_its_mistake(server):
    server.reply("Sure! The answer is Friday.").reply('{"answer": "Friday"}')
    with make_client(server) as client:
        assert client.chat_json(MESSAGES, schema={"answer": str}, reply_retries=1) == {
            "answer": "Friday"
        }
    second = server.requests[1].messages
    assert second[:1] == MESSAGES
    assert second[1] == {"role": "assistant", "content": "Sure! The answer is Friday."}
    assert "could not be used" in second[2]["content"]


def test_reply_retry_gives_up_after_the_last_try(server):
    server.reply("no json").reply("still none")
    with make_client(server) as client, pytest.raises(LLMReplyError):
        client.chat_json(MESSAGES, reply_retries=1)
    assert len(server.requests) == 2


def test_empty_content_is_a_reply_error_and_is_retried(server):
    server.reply("   ").reply('{"ok": true}')
    with make_client(server) as client:
        with pytest.raises(LLMReplyError, match="no text"):
            client.chat(MESSAGES)
        server.reply("").reply('{"ok": true}')
        assert client.chat_json(MESSAGES, schema={"ok": bool}, reply_retries=1) == {"ok": True}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  ```\n{"a": 1}\n```  ', {"a": 1}),
        ('<think>maybe {"a": 2}</think>\n{"a": 1}', {"a": 1}),
        ('Answer: {"a": {"b": [1, 2]}} and that is all {}', {"a": {"b": [1, 2]}}),
    ],
)
def test_parse_json_reply_accepts_common_wrappers(text, expected):
    assert parse_json_reply(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("no object here", "no JSON object"),
        ('{"a": 1,}', "malformed"),
        ('```json\n{"a": [1, 2', "partial"),
        ("[1, 2, 3]", "no JSON object"),
    ],
)
def test_parse_json_reply_rejects_bad_json(text, match):
    with pytest.raises(LLMReplyError, match=match):
        parse_json_reply(text)


def test_schema_types():
    schema = {"n": int, "x": float, "ok": bool, "ids": list[int | str], "m": dict[str, float]}
    good = '{"n": 1, "x": 2, "ok": false, "ids": [1, "2"], "m": {"a": 0.5}}'
    assert parse_json_reply(good, schema)["x"] == 2
    for bad in (
        '{"n": true, "x": 1, "ok": false, "ids": [], "m": {}}',  # bool is not int
        '{"n": 1, "x": "1", "ok": false, "ids": [], "m": {}}',
        '{"n": 1, "x": 1, "ok": false, "ids": [1.5], "m": {}}',
        '{"n": 1, "x": 1, "ok": false, "ids": [], "m": {"a": "high"}}',
    ):
        with pytest.raises(LLMReplyError, match="should be"):
            parse_json_reply(bad, schema)


def test_check_hook_turns_value_errors_into_reply_errors():
    def check(reply: dict[str, Any]) -> None:
        if reply["n"] < 0:
            raise ValueError("n must be >= 0")

    with pytest.raises(LLMReplyError, match="n must be >= 0"):
        parse_json_reply('{"n": -1}', {"n": int}, check=check)


# -- timeouts and retries -------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["httpx", "urllib"])
def test_timeout_raises_unavailable(server, transport):
    server.reply("too late", delay=1.0)
    with make_client(server, timeout=0.2, max_retries=0, transport=transport) as client:
        started = time.monotonic()
        with pytest.raises(LLMUnavailable, match="unreachable"):
            client.chat(MESSAGES)
    assert time.monotonic() - started < 0.9


def test_timeout_is_retried(server):
    sleeps = Sleeps()
    server.reply("too late", delay=1.0).reply("in time")
    with make_client(server, timeout=0.3, max_retries=2, sleep=sleeps) as client:
        assert client.chat(MESSAGES) == "in time"
        assert client.usage.retries == 1
    assert len(sleeps.calls) == 1


@pytest.mark.parametrize("transport", ["httpx", "urllib"])
def test_429_then_success_waits_retry_after(server, transport):
    sleeps = Sleeps()
    server.error(429, "slow down", headers={"Retry-After": "2"}).reply("done")
    with make_client(server, sleep=sleeps, transport=transport) as client:
        assert client.chat(MESSAGES) == "done"
    assert sleeps.calls == [2.0]
    assert len(server.requests) == 2


def test_retry_after_ms_and_the_cap(server):
    sleeps = Sleeps()
    server.error(429, headers={"retry-after-ms": "250"})
    server.error(503, headers={"Retry-After": "9999"})
    server.reply("done")
    with make_client(server, sleep=sleeps, max_retry_after=30.0) as client:
        assert client.chat(MESSAGES) == "done"
    assert sleeps.calls == [0.25, 30.0]


def test_real_sleep_honours_retry_after(server):
    server.error(429, headers={"Retry-After": "1"}).reply("done")
    with make_client(server, sleep=time.sleep) as client:
        started = time.monotonic()
        assert client.chat(MESSAGES) == "done"
    assert time.monotonic() - started >= 0.95


def test_500_then_success_backs_off_exponentially_with_jitter(server):
    sleeps = Sleeps()
    server.error(500).error(502).error(503).reply("done")
    with make_client(server, sleep=sleeps, backoff_base=1.0, backoff_max=3.0) as client:
        assert client.chat(MESSAGES) == "done"
        assert client.usage.retries == 3
    # attempt n waits within [ceiling/2, ceiling], ceiling = min(max, base * 2**n)
    for wait_s, ceiling in zip(sleeps.calls, (1.0, 2.0, 3.0), strict=True):
        assert ceiling / 2 <= wait_s <= ceiling


def test_5xx_exhausts_retries(server):
    for _ in range(3):
        server.error(500, "boom")
    with make_client(server, max_retries=2) as client, pytest.raises(LLMUnavailable) as info:
        client.chat(MESSAGES)
    assert info.value.status == 500 and "boom" in str(info.value)
    assert len(server.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422, 501])
def test_permanent_errors_are_not_retried(server, status):
    sleeps = Sleeps()
    server.error(status, "bad request body").reply("never sent")
    with make_client(server, sleep=sleeps) as client, pytest.raises(LLMError) as info:
        client.chat(MESSAGES)
    assert not isinstance(info.value, LLMUnavailable)
    assert info.value.status == status and "bad request body" in str(info.value)
    assert len(server.requests) == 1 and sleeps.calls == []


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (500, "input (1226 tokens) is too large to process. increase the physical batch size"),
        (500, "Context size has been exceeded."),
        (400, "This model's maximum context length is 8192 tokens."),
    ],
)
def test_a_context_overflow_fails_at_once_as_such(server, status, message):
    server.error(status, message).reply("never sent")
    with make_client(server) as client, pytest.raises(LLMContextOverflow, match="too large"):
        client.chat(MESSAGES)
    assert len(server.requests) == 1


class Clock:
    """A clock that advances only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_deadline_caps_retries_and_says_so(server):
    clock = Clock()
    notices: list[str] = []
    for _ in range(10):
        server.error(503, "loading model")
    client = make_client(
        server,
        max_retries=9,
        # Waits of 5-10 s (half fixed, half jitter): each at least NOTICE_AFTER, so each is
        # announced. With 8 s, a wait could fall in 4-5 s and go unannounced (a flaky run).
        backoff_base=10.0,
        backoff_max=10.0,
        deadline=20.0,
        sleep=clock.sleep,
        clock=clock,
        notify=notices.append,
    )
    with client, pytest.raises(LLMUnavailable, match="20 s deadline") as info:
        client.chat(MESSAGES)
    assert info.value.status == 503 and "loading model" in str(info.value)
    assert sum(clock.sleeps) < 20.0 and len(server.requests) == len(clock.sleeps) + 1 <= 5
    assert notices and all("HTTP 503" in n and "retrying in" in n for n in notices)


def test_a_slow_reply_is_announced_while_waiting(server, monkeypatch):
    monkeypatch.setattr("mempp.llm.client.NOTICE_AFTER", 0.2)
    notices: list[str] = []
    server.reply("late", delay=0.8)
    with make_client(server, notify=notices.append) as client:
        assert client.chat(MESSAGES) == "late"
    assert len(notices) == 1 and "waiting for" in notices[0] and "attempt 1" in notices[0]


def test_the_deadline_bounds_a_server_that_never_answers(server):
    server.reply("too late", delay=3.0).reply("too late", delay=3.0)
    started = time.monotonic()
    client = make_client(server, timeout=60.0, deadline=1.0, max_retries=4, sleep=time.sleep)
    with client, pytest.raises(LLMUnavailable):
        client.chat(MESSAGES)
    assert time.monotonic() - started < 2.5


def test_connection_refused_is_unavailable():
    fake = FakeOpenAI().start()
    base_url = fake.base_url
    fake.stop()
    sleeps = Sleeps()
    client = LLMClient(base_url=base_url, model="m", max_retries=2, sleep=sleeps)
    with client, pytest.raises(LLMUnavailable, match="after 3 attempt"):
        client.chat(MESSAGES)
    assert len(sleeps.calls) == 2


def test_non_json_body_is_a_clear_error(server):
    server.raw("<html>Welcome to nginx</html>")
    with make_client(server) as client, pytest.raises(LLMError, match="not JSON"):
        client.chat(MESSAGES)


# -- cache ----------------------------------------------------------------------------------
def test_cache_hit_avoids_a_second_request(server, tmp_path):
    cache = tmp_path / "calls.sqlite"
    server.reply("first")
    with make_client(server, cache_path=str(cache)) as client:
        assert client.chat(MESSAGES) == "first"
        assert client.chat(MESSAGES) == "first"
        assert client.usage.cache_hits == 1
    with make_client(server, cache_path=str(cache)) as client:  # persists across clients
        assert client.chat(MESSAGES) == "first"
    assert len(server.requests) == 1


def test_cache_key_covers_model_messages_params_and_tag(server, tmp_path):
    cache = str(tmp_path / "calls.sqlite")
    for reply in "abcdef":
        server.reply(reply)
    with make_client(server, cache_path=cache) as client:
        assert client.chat(MESSAGES) == "a"
        assert client.chat(MESSAGES, temperature=0.5) == "b"
        assert client.chat([{"role": "user", "content": "Say bye."}]) == "c"
        assert client.chat(MESSAGES, cache_tag="run-2") == "d"
        assert client.chat(MESSAGES, max_tokens=10) == "e"
    with make_client(server, cache_path=cache, model="other-model") as client:
        assert client.chat(MESSAGES) == "f"
    assert len(server.requests) == 6


def test_cache_never_stores_the_api_key(server, tmp_path):
    cache = tmp_path / "calls.sqlite"
    server.reply("x")
    with make_client(server, cache_path=str(cache), api_key="sk-secret-123") as client:
        client.chat(MESSAGES)
    assert b"sk-secret-123" not in cache.read_bytes()
    rows = sqlite3.connect(cache).execute("SELECT model, reply FROM calls").fetchall()
    assert rows == [("fake-model", "x")]


def test_unusable_json_reply_is_evicted_from_the_cache(server, tmp_path):
    cache = str(tmp_path / "calls.sqlite")
    server.reply("not json").reply('{"a": 1}')
    with make_client(server, cache_path=cache) as client:
        with pytest.raises(LLMReplyError):
            client.chat_json(MESSAGES, schema={"a": int})
        assert client.chat_json(MESSAGES, schema={"a": int}) == {"a": 1}
        assert client.chat_json(MESSAGES, schema={"a": int}) == {"a": 1}  # now cached
    assert len(server.requests) == 2


# -- configuration --------------------------------------------------------------------------
def test_config_from_env_and_overrides():
    env = {
        "MEMPP_LLM_BASE_URL": "http://localhost:11434/v1",
        "MEMPP_LLM_MODEL": "llama3.1",
        "MEMPP_LLM_API_KEY": "ollama",
        "MEMPP_LLM_TIMEOUT": "12.5",
        "MEMPP_LLM_JSON_MODE": "0",
        "MEMPP_LLM_DEADLINE": "45",
    }
    config = LLMConfig.from_env(env, model="qwen2.5", base_url=None)
    assert config.deadline == 45.0 and LLMConfig().deadline == 120.0
    with pytest.raises(InvalidInput, match="MEMPP_LLM_DEADLINE"):
        LLMConfig.from_env({"MEMPP_LLM_DEADLINE": "soon"})
    with pytest.raises(InvalidInput, match="deadline"):
        LLMClient(base_url="http://127.0.0.1:1/v1", model="m", deadline=0)
    assert config.base_url == "http://localhost:11434/v1"
    assert config.model == "qwen2.5"  # an override wins; a None override is ignored
    assert config.api_key == "ollama" and config.timeout == 12.5 and config.json_mode is False
    assert "ollama" not in repr(config)
    with pytest.raises(InvalidInput, match="unknown"):
        LLMConfig.from_env(env, modle="x")


def test_missing_configuration_is_explained():
    with pytest.raises(LLMUnavailable, match="MEMPP_LLM_BASE_URL"):
        LLMClient.from_env({})
    with pytest.raises(LLMUnavailable, match="MEMPP_LLM_MODEL"):
        LLMClient.from_env({"MEMPP_LLM_BASE_URL": "http://localhost:8000/v1"})
    with pytest.raises(InvalidInput, match="http"):
        LLMClient(base_url="localhost:8000/v1", model="m")


def test_errors_are_mempp_errors():
    assert issubclass(LLMUnavailable, LLMError) and issubclass(LLMReplyError, LLMError)
    assert issubclass(LLMError, MemppError)


def test_llm_is_not_imported_by_mempp():
    code = (
        "import sys, mempp, mempp.llm.answer, mempp.bench.judge, mempp.cli; "
        "print('mempp.llm.client' in sys.modules, 'httpx' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# -- concurrency ----------------------------------------------------------------------------
def test_map_concurrent_keeps_order_and_bounds_workers():
    active = 0
    peak = 0
    lock = threading.Lock()

    def work(n: int) -> int:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1
        return n * n

    assert map_concurrent(work, range(12), max_workers=3) == [n * n for n in range(12)]
    assert 1 < peak <= 3


def test_map_concurrent_errors():
    def work(n: int) -> int:
        if n == 2:
            raise ValueError("bad item")
        return n

    with pytest.raises(ValueError, match="bad item"):
        map_concurrent(work, range(5), max_workers=2)
    results = map_concurrent(work, range(5), max_workers=2, return_exceptions=True)
    assert results[:2] == [0, 1] and isinstance(results[2], ValueError) and results[3:] == [3, 4]


def test_client_bounds_requests_in_flight_across_threads():
    active = 0
    peak = 0
    lock = threading.Lock()

    def responder(request: RecordedRequest) -> ScriptedReply:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
        return ScriptedReply(content=json.dumps(request.messages[0]["content"]))

    with FakeOpenAI(responder=responder) as fake:
        with LLMClient(base_url=fake.base_url, model="m", max_concurrency=2) as client:
            prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(8)]
            replies = client.map(client.chat, prompts, max_workers=8)
        assert replies == [f'"q{i}"' for i in range(8)]
        assert len(fake.requests) == 8
    assert peak == 2


def test_fake_server_reports_an_empty_queue(server):
    with make_client(server) as client, pytest.raises(LLMError, match="no scripted reply"):
        client.chat(MESSAGES)


def test_cache_dir_is_created(server, tmp_path: Path):
    server.reply("x")
    target = tmp_path / "deep" / "er" / "cache.sqlite"
    with make_client(server, cache_path=str(target)) as client:
        client.chat(MESSAGES)
    assert target.exists()
