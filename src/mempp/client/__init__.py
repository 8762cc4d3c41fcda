"""The HTTP clients of a mempp server: ``mempp.Client`` and ``mempp.AsyncClient``.

``sync`` and ``aio`` hold the two clients, which share ``wire`` (the ``Memory`` API as
``/v1`` calls, and the answers as the library's types), ``transport`` (address, key,
timeouts, retries) and ``problems`` (the server's errors as the library's exceptions).
They need httpx: ``pip install 'mempp[client]'``.
"""
