"""mempp's server: the memory over HTTP (``/v1``) and MCP (stdio and ``/mcp``) for agents.

Needs the ``serve`` extra (``pip install 'mempp[serve]'``). ``create_app(ServerState(path))``
is the ASGI app; ``mempp serve``, ``mempp mcp`` and ``mempp keys`` are its command line.
Modules: ``state`` (the shared store, Memories, keys and principals: the contract of every
door), ``api`` (the /v1 routes), ``schemas`` (the wire format), ``mcp`` (the MCP tools),
``keys`` (API keys), ``problems`` (RFC 9457 errors), ``limits`` (body sizes), ``ingest``
(JSON Lines uploads), ``config`` and ``app`` (the ASGI app), ``cli`` (the commands).

Nothing is imported here, so that the command line loads without the web dependencies.
"""
