"""The web page served at ``/`` by ``mempp serve``: read the record as the agent sees it.

Server-rendered HTML (Jinja2 templates in ``templates/``), a small plain script and a style
sheet in ``static/``, all shipped in the package: no build step, no CDN, works offline.
``mount(app)`` adds the pages and the static files to the server's app; the pages use the
app's ``ServerState`` (``app.state.mempp``) for keys, scopes and memories, exactly as the API.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from mempp.server.web.pages import day_index, router, search_link
from mempp.server.web.session import SessionCodec

__all__ = ["mount"]

_HERE = files("mempp.server.web")


def mount(app: FastAPI, *, secret: str | None = None) -> None:
    """Mount the pages at ``/`` and the assets at ``/static``. ``secret`` signs sessions
    (default: ``MEMPP_SESSION_SECRET``, else random per process)."""
    templates = Jinja2Templates(directory=str(_HERE / "templates"))
    templates.env.globals.update(search_link=search_link, day_index=day_index)
    app.state.mempp_web_templates = templates
    app.state.mempp_web_codec = SessionCodec(secret)
    app.state.mempp_web_ranges = {}
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=str(_HERE / "static")), name="mempp-static")
