"""The server's logs: plain text, or one JSON object a line (``--log-format json`` /
``$MEMPP_LOG_FORMAT=json``), each record written during a request carrying its request id.

A JSON line holds the time (UTC, ISO 8601), level, logger, message, the request id when
there is one, and the request log's own fields (method, route template, status,
``duration_ms``). Nothing mempp logs holds a record's text, a question or a key: the request
line names the route template, not the path or the body.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime

ENV_FORMAT = "MEMPP_LOG_FORMAT"
FORMATS = ("text", "json")

request_id_var: ContextVar[str | None] = ContextVar("mempp_request_id", default=None)

_FIELDS = ("http_method", "http_route", "status", "duration_ms")


class RequestIdFilter(logging.Filter):
    """Puts the current request's id on every record (``record.request_id``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id:
            line["request_id"] = request_id
        for name in _FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(log_format: str) -> None:
    """Send mempp's and uvicorn's logs to standard error in ``log_format``."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
        )
    for name in ("mempp", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False
    # The request lines of mempp.server.requests replace uvicorn's access log.
    logging.getLogger("uvicorn.access").disabled = True
