"""A toy OpenAI-compatible server, the process behind the toy engine (tests/toy_engine.py):
``python tests/fakes/toy_server.py --port N --model M --token-ms 4 [--batching]``.

It answers ``/health``, ``/v1/models``, ``/v1/chat/completions`` (streamed or not, with
``ignore_eos`` honoured and usage when asked), ``/v1/completions`` with ``logprobs``, and
``/metrics`` (one gauge, ``toy:num_running_reqs``). Each token takes ``--token-ms``; without
``--batching`` requests are served one at a time, so at a concurrency above 1 its
throughput is lower: the toy knob has a real effect for an experiment to find. Standard
library only, so it runs in any Python.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


class Toy:
    def __init__(self, model: str, token_s: float, batching: bool) -> None:
        self.model = model
        self.token_s = token_s
        self.one_at_a_time = threading.Lock() if not batching else None
        self.running = 0
        self.count_lock = threading.Lock()

    def words(self, n: int) -> list[str]:
        return [" " + WORDS[i % len(WORDS)] for i in range(n)]


class Handler(BaseHTTPRequestHandler):
    server: ToyHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, data: Any) -> None:
        self._send(code, json.dumps(data).encode())

    def do_GET(self) -> None:
        toy = self.server.toy
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": toy.model, "object": "model"}]})
        elif self.path == "/metrics":
            text = f"# TYPE toy:num_running_reqs gauge\ntoy:num_running_reqs {toy.running}\n"
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "not JSON"}})
            return
        if self.path == "/v1/chat/completions":
            self._generate(req, chat=True)
        elif self.path == "/v1/completions":
            self._generate(req, chat=False)
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def _generate(self, req: dict[str, Any], chat: bool) -> None:
        toy = self.server.toy
        asked = req.get("max_completion_tokens") or req.get("max_tokens") or 16
        # without ignore_eos the toy "model" stops after a few words
        n = int(asked) if req.get("ignore_eos") else min(int(asked), 3)
        lock = toy.one_at_a_time
        if lock is not None:
            lock.acquire()
        with toy.count_lock:
            toy.running += 1
        try:
            if req.get("stream"):
                self._stream(req, n)
            else:
                time.sleep(toy.token_s * n)
                self._json(200, self._whole(req, n, chat))
        finally:
            with toy.count_lock:
                toy.running -= 1
            if lock is not None:
                lock.release()

    def _usage(self, req: dict[str, Any], n: int) -> dict[str, int]:
        prompt = json.dumps(req.get("messages") or req.get("prompt") or "")
        p = max(1, len(prompt.split()))
        return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}

    def _whole(self, req: dict[str, Any], n: int, chat: bool) -> dict[str, Any]:
        words = self.server.toy.words(n)
        finish = "length" if req.get("ignore_eos") or n >= 3 else "stop"
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            choice["message"] = {"role": "assistant", "content": "".join(words)}
        else:
            choice["text"] = "".join(words)
            if req.get("logprobs") is not None:
                top_n = int(req["logprobs"])
                choice["logprobs"] = {
                    "tokens": words,
                    "token_logprobs": [-0.1 * (i + 1) for i in range(n)],
                    "top_logprobs": [
                        dict([(w, -0.1 * (i + 1)), (" zulu", -3.0)][:top_n])
                        for i, w in enumerate(words)
                    ],
                }
        return {
            "id": "toy-" + uuid.uuid4().hex,
            "object": "chat.completion" if chat else "text_completion",
            "model": self.server.toy.model,
            "choices": [choice],
            "usage": self._usage(req, n),
        }

    def _chunk(self, data: dict[str, Any] | str) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        payload = f"data: {text}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _stream(self, req: dict[str, Any], n: int) -> None:
        toy = self.server.toy
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": "toy-" + uuid.uuid4().hex, "object": "chat.completion.chunk"}
        self._chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        for word in toy.words(n):
            time.sleep(toy.token_s)
            self._chunk({**base, "choices": [{"index": 0, "delta": {"content": word}}]})
        finish = "length" if req.get("ignore_eos") else "stop"
        self._chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (req.get("stream_options") or {}).get("include_usage"):
            self._chunk({**base, "choices": [], "usage": self._usage(req, n)})
        self._chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class ToyHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], toy: Toy) -> None:
        super().__init__(address, Handler)
        self.toy = toy


def main() -> None:
    p = argparse.ArgumentParser(prog="toy_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--token-ms", type=float, default=4.0)
    p.add_argument("--batching", action="store_true")
    args = p.parse_args()
    server = ToyHTTPServer(
        (args.host, args.port), Toy(args.model, args.token_ms / 1000, args.batching)
    )
    print(f"toy server ready on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
