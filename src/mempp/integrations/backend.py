"""The memory an adapter is given: a ``Memory``, a ``Client`` or an ``AsyncClient``, called
the same way from sync and async framework code.

``call(name, ...)`` runs a method from sync code (an ``AsyncClient`` cannot: the error says
to pass a ``Client``); ``acall(name, ...)`` from async code, awaiting an ``AsyncClient`` and
running a ``Memory`` or ``Client`` in a worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mempp.errors import InvalidInput
from mempp.memory import Memory


def _clients() -> tuple[type, type] | None:
    try:
        from mempp.client.aio import AsyncClient
        from mempp.client.sync import Client
    except ImportError:  # no httpx: only an in-process Memory can be given
        return None
    return Client, AsyncClient


def check(memory: object) -> object:
    """``memory`` itself, if it is a Memory, a Client or an AsyncClient."""
    clients = _clients()
    if isinstance(memory, Memory) or (clients is not None and isinstance(memory, clients)):
        return memory
    raise InvalidInput(
        f"must be a mempp Memory, Client or AsyncClient, got {type(memory).__name__}",
        field="memory",
    )


def is_async(memory: object) -> bool:
    clients = _clients()
    return clients is not None and isinstance(memory, clients[1])


def call(memory: object, name: str, *args: Any, **kwargs: Any) -> Any:
    if is_async(memory):
        raise InvalidInput(
            "an AsyncClient serves the async methods only (ainvoke, abatch, asearch...); "
            "pass a mempp.Client for sync code",
            field="memory",
        )
    return getattr(memory, name)(*args, **kwargs)


async def acall(memory: object, name: str, *args: Any, **kwargs: Any) -> Any:
    if is_async(memory):
        return await getattr(memory, name)(*args, **kwargs)
    return await asyncio.to_thread(getattr(memory, name), *args, **kwargs)
