"""A control for ``mempp-fact-index``: the same pipeline with an extractor that cannot miss.

Serves the OpenAI chat protocol on 127.0.0.1 with a "model" (``sentence-splitter``) that
answers every fact-extraction prompt with the document's own sentences as its facts, then runs
``mempp bench`` with it as the endpoint and every other argument passed through. The fact
legs then search the documents' sentences: what remains of the difference to ``mempp-paper``
is the indexing unit (sentences standing for their document, a document ranked by its best
sentence), not the extractor. No language model runs; nothing leaves the machine.

    python benchmarks/fact_index_control.py locomo --data DIR --cache DIR --out DIR \\
        --systems mempp-paper mempp-fact-index --answer-hook MODULE:FUNCTION

Pass an ``--answer-hook`` (the splitter answers nothing else: other prompts get HTTP 400).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "sentence-splitter"
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def sentences(document: str) -> list[str]:
    return [part.strip() for part in _SENTENCE.split(document) if len(part.split()) >= 2]


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        messages = body.get("messages") or []
        system = str(messages[0].get("content", "")) if messages else ""
        if not self.path.endswith("/chat/completions") or not system.startswith(
            "You list the facts"
        ):
            self._send(400, {"error": {"message": "the splitter only extracts facts"}})
            return
        document = str(messages[-1]["content"]).split("\n\n", 1)[-1]
        facts = sentences(document) or [document.strip()]
        reply = {"facts": facts[:20]}
        self._send(
            200,
            {
                "id": "split",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": json.dumps(reply)},
                        "finish_reason": "stop",
                    }
                ],
            },
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def main(argv: list[str]) -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        command = [sys.executable, "-m", "mempp.bench", *argv]
        command += ["--llm-base-url", url, "--answer-model", MODEL]
        return subprocess.call(command)
    finally:
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
