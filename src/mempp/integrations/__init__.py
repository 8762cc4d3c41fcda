"""Adapters of mempp to agent frameworks, one module each, each an optional extra:
``langchain`` (a retriever and tools), ``langgraph`` (a ``BaseStore``), ``llamaindex`` (a
retriever and a memory block), ``openai_agents`` (function tools). Each takes
``memory=``: a :class:`mempp.Memory`, a :class:`mempp.Client` or a :class:`mempp.AsyncClient`
(see ``backend``), and passes ``as_of``, ``known_at`` and the filters through, raising on one
it cannot honour."""
