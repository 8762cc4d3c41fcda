"""Reading JSON replies strictly: fences and reasoning stripped, the caller's schema checked and
sent as a JSON schema, placeholders and echoes of the instructions refused."""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from mempp.errors import InvalidInput
from mempp.llm.errors import LLMReplyError

Message = Mapping[str, Any]


_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)

# A type, a union of types, list[...] / dict[str, ...] of those, or a mapping of keys to specs
# (a nested object).
SchemaSpec = Any


def strip_reasoning(text: str) -> str:
    """Drop a leading ``<think>...</think>`` block that reasoning models served through
    Ollama, vLLM or llama.cpp put in the content, and surrounding whitespace."""
    return _THINK.sub("", text, count=1).strip()


def parse_json_reply(
    text: str,
    schema: Mapping[str, SchemaSpec] | None = None,
    *,
    check: Callable[[dict[str, Any]], None] | None = None,
    required: Collection[str] | None = None,
) -> dict[str, Any]:
    """Read one JSON object out of a model reply, strictly.

    Accepted wrappers: a reasoning block, a Markdown code fence, prose before the object, text
    after it. The object itself must be complete and valid JSON: a truncated or malformed one
    raises :class:`LLMReplyError` rather than being patched up. ``schema`` maps each required key
    to its type (``str``, ``int``, ``float``, ``bool``, ``list[int]``, ``dict[str, float]``,
    ``int | str``, ``Literal["a", "b"]``, a nested mapping, ``[spec]`` for a list of ``spec``).
    ``required`` names the keys that must be present (default: all); another key that does
    not fit its type is dropped from the result. ``check`` may raise ``ValueError`` for rules
    a schema cannot express.
    """
    if not isinstance(text, str):
        raise LLMReplyError("reply is not text", reply=None)
    body = strip_reasoning(text)
    fenced = _FENCE.search(body)
    if fenced:
        body = fenced.group(1).strip()
    start = body.find("{")
    if start < 0:
        raise LLMReplyError(f"reply holds no JSON object: {_snippet(text)}", reply=text)
    try:
        # raw_decode reads exactly one value and tolerates trailing text; taking the span from
        # the first "{" to the last "}" instead would accept two glued objects or a half one.
        value, _ = json.JSONDecoder().raw_decode(body, start)
    except json.JSONDecodeError as exc:
        # Input ending mid-value means the reply was cut (often max_tokens), not mangled.
        truncated = exc.pos >= len(body.rstrip()) or exc.msg.startswith("Unterminated string")
        kind = "partial (truncated)" if truncated else "malformed"
        raise LLMReplyError(
            f"{kind} JSON in reply: {exc.msg}: {_snippet(text)}", reply=text
        ) from None
    if not isinstance(value, dict):
        raise LLMReplyError("reply JSON is not an object", reply=text)
    problems: list[str] = []
    needed = set(schema or {}) if required is None else set(required)
    for key, spec in (schema or {}).items():
        if key not in value:
            if key in needed:
                problems.append(f"missing key {key!r}")
        elif not _matches(value[key], spec):
            if key not in needed:  # an optional key that is malformed is as good as absent
                del value[key]
                continue
            problems.append(f"key {key!r} should be {_spec_name(spec)}, got {value[key]!r:.80}")
    if problems:
        raise LLMReplyError("reply JSON does not fit: " + "; ".join(problems), reply=text)
    if check is not None:
        try:
            check(value)
        except ValueError as exc:
            raise LLMReplyError(f"reply JSON does not fit: {exc}", reply=text) from None
    return value


def _matches(value: Any, spec: SchemaSpec) -> bool:
    if spec is Any or spec is object:
        return True
    if isinstance(spec, Mapping):  # a nested object with these required keys
        return isinstance(value, dict) and all(
            key in value and _matches(value[key], sub) for key, sub in spec.items()
        )
    if isinstance(spec, list):  # [spec]: a list of spec
        return isinstance(value, list) and all(_matches(v, spec[0]) for v in value)
    origin: Any = typing.get_origin(spec)
    if origin is typing.Literal:
        # Case and surrounding space are forgiven: small models write "Conflict" for
        # "conflict" when nothing enforces the schema; callers normalise the value.
        options = {str(arg).casefold() for arg in typing.get_args(spec)}
        return isinstance(value, str) and value.strip().casefold() in options
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(spec))
    if origin is list:
        (item,) = typing.get_args(spec) or (Any,)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        key_spec, val_spec = typing.get_args(spec) or (Any, Any)
        return isinstance(value, dict) and all(
            _matches(k, key_spec) and _matches(v, val_spec) for k, v in value.items()
        )
    if spec is type(None) or spec is None:
        return value is None
    if spec is float:  # JSON does not tell 1 from 1.0
        return isinstance(value, int | float) and not isinstance(value, bool)
    if spec is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(spec, type):
        return isinstance(value, spec)
    raise InvalidInput(f"unsupported schema type {spec!r}")


def _spec_name(spec: SchemaSpec) -> str:
    if isinstance(spec, Mapping):
        return "an object with " + ", ".join(repr(k) for k in spec)
    if isinstance(spec, list):
        return f"a list of {_spec_name(spec[0])}"
    if typing.get_origin(spec) is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in typing.get_args(spec))
    return getattr(spec, "__name__", None) or str(spec)


def json_schema(spec: Mapping[str, SchemaSpec]) -> dict[str, Any]:
    """The JSON Schema of a reply spec (the mapping :func:`parse_json_reply` takes): an object
    whose keys are all required and the only ones allowed, as OpenAI's strict mode wants."""
    return _object_schema(spec)


def _object_schema(spec: Mapping[str, SchemaSpec]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {key: _type_schema(value) for key, value in spec.items()},
        "required": list(spec),
        "additionalProperties": False,
    }


def _type_schema(spec: SchemaSpec) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return _object_schema(spec)
    if isinstance(spec, list):
        return {"type": "array", "items": _type_schema(spec[0])}
    origin: Any = typing.get_origin(spec)
    if origin is typing.Literal:
        return {"type": "string", "enum": [str(arg) for arg in typing.get_args(spec)]}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(arg) for arg in typing.get_args(spec)]}
    if origin is list:
        (item,) = typing.get_args(spec) or (Any,)
        return {"type": "array", "items": _type_schema(item)}
    if origin is dict:
        _, value = typing.get_args(spec) or (Any, Any)
        return {"type": "object", "additionalProperties": _type_schema(value)}
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if spec in names:
        return {"type": names[spec]}
    if spec is type(None) or spec is None:
        return {"type": "null"}
    return {}  # Any: no constraint


def _is_strict(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI's strict mode accepts the schema: every object lists its properties."""
    if schema.get("type") == "object" and "properties" not in schema:
        return False
    children: list[Any] = [*schema.get("properties", {}).values(), *schema.get("anyOf", [])]
    if isinstance(schema.get("items"), Mapping):
        children.append(schema["items"])
    return all(_is_strict(child) for child in children)


# A value that is only an angle-bracketed slot ("<your answer>"), dots, or the word "string":
# what a model that copies the reply shape from its instructions sends back.
_PLACEHOLDER = re.compile(
    r"^\s*(?:<[^<>]*>|\.{2,}|…|string)\s*$",
    re.IGNORECASE,
)
_ECHO_WORDS = 4  # a reply phrase this long found in the instructions (not the input) is an echo


def placeholder_problem(value: Any, messages: Sequence[Message] = ()) -> str | None:
    """Why ``value`` (a parsed reply) holds no content of its own, or ``None`` if it does.

    Every string in it is checked: a placeholder (:data:`_PLACEHOLDER`), a key of the reply
    itself given as a value (``{"answer": "citations"}``: the model copied the reply's shape),
    or a phrase of at least four words that the system messages contain and the other
    messages do not (the model repeated its instructions instead of reading its input).
    """
    keys = {key.strip().casefold() for key in _keys(value)}
    system = " ".join(
        _flat(m.get("content")) for m in messages if m.get("role") == "system"
    ).casefold()
    user = " ".join(
        _flat(m.get("content")) for m in messages if m.get("role") != "system"
    ).casefold()
    for text in _strings(value):
        if _PLACEHOLDER.match(text):
            return f"{text.strip()!r:.60} is a placeholder, not content"
        if text.strip().strip("\"'").casefold() in keys:
            return f"{text.strip()!r:.60} is a key of the reply's shape, not content"
        flat = _flat(text).casefold()
        if len(flat.split()) >= _ECHO_WORDS and flat in system and flat not in user:
            return f"{text.strip()!r:.60} repeats the instructions"
    return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


def _flat(text: Any) -> str:
    return " ".join(str(text or "").split())


def _snippet(text: str, width: int = 160) -> str:
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")
