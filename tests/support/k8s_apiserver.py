"""A recording stand-in for the Kubernetes API server: just what Spark's fabric8 client asks
in client mode (tests/integration/test_k8s_executors.py). Plain HTTP on 127.0.0.1, a free port.

It holds the driver pod (Running and Ready, with a uid: Spark reads it for the executors'
ownerReference) and the pods and ConfigMaps created through it (each given a uid, pods left
Pending). Lists filter by name and by label equality; a watch gets an empty stream, held open
until :meth:`close` (a WebSocket upgrade is refused with 200, on which fabric8 falls back to a
plain HTTP watch). Every request is recorded, in order: :attr:`requests`."""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

OBJECT = re.compile(r"/api/v1/namespaces/([^/]+)/(pods|configmaps)(?:/([^/]+))?")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any  # the JSON sent, or None
    status: int  # the answer's HTTP status


def _matches(obj: dict[str, Any], query: dict[str, str]) -> bool:
    meta = obj["metadata"]
    for term in filter(None, query.get("fieldSelector", "").split(",")):
        if term.startswith("metadata.name=") and term.split("=", 1)[1] != meta["name"]:
            return False
    labels = meta.get("labels") or {}
    for term in filter(None, query.get("labelSelector", "").split(",")):
        key, equal, value = re.split(r"(!?=)", term, maxsplit=1) if "=" in term else (term, "", "")
        if equal and (labels.get(key) == value) != (equal == "="):
            return False
    return True


class ApiServer:
    def __init__(self, namespace: str, driver_pod: str) -> None:
        self.namespace = namespace
        self.requests: list[Request] = []
        self.driver = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": driver_pod, "namespace": namespace, "uid": str(uuid.uuid4()),
            "resourceVersion": "1", "labels": {"app.kubernetes.io/component": "driver"}},
            "spec": {"containers": [{"name": "l2m", "image": "l2m"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        self.objects: dict[str, list[dict[str, Any]]] = {"pods": [self.driver], "configmaps": []}
        self._changed = threading.Condition()
        self._closing = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def created(self, kind: str) -> list[Any]:
        """The bodies POSTed to create ``kind`` (``pods``, ``configmaps``), as sent."""
        return [r.body for r in self.requests if r.method == "POST"
                and r.path == f"/api/v1/namespaces/{self.namespace}/{kind}"]

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, method: str, path: str, query: dict[str, str], body: Any,
                upgrade: bool) -> tuple[int, Any]:
        found = OBJECT.fullmatch(path)
        if not found or found[1] != self.namespace:
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
        kind, name = found[2], found[3]
        items = [o for o in self.objects[kind]
                 if (name is None or o["metadata"]["name"] == name) and _matches(o, query)]
        list_kind = {"pods": "PodList", "configmaps": "ConfigMapList"}[kind]
        if method == "GET" and query.get("watch") in ("true", "1"):
            return 200, None if upgrade else "hold"
        if method == "GET" and name is None:
            return 200, {"kind": list_kind, "apiVersion": "v1",
                         "metadata": {"resourceVersion": "1"}, "items": items}
        if method == "POST" and name is None:
            made = {**body, "metadata": {**body["metadata"], "namespace": self.namespace,
                                         "uid": str(uuid.uuid4()), "resourceVersion": "1"}}
            if kind == "pods":
                made["status"] = {"phase": "Pending"}
            self.objects[kind].append(made)
            return 201, made
        if method == "DELETE" and name is None:
            self.objects[kind] = [o for o in self.objects[kind] if o not in items]
            return 200, {"kind": list_kind, "apiVersion": "v1", "metadata": {}, "items": items}
        if items and method in ("GET", "PATCH", "DELETE"):
            return 200, items[0]
        return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                upgrade = "upgrade" in self.headers.get("Connection", "").lower()
                with api._changed:
                    code, answer = api._answer(self.command, url.path, query, body, upgrade)
                    api.requests.append(Request(self.command, url.path, query, body, code))
                    api._changed.notify_all()
                data = b"" if answer in (None, "hold") else json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                if answer != "hold":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if answer == "hold":  # a watch with no events, until the stand-in closes
                    self.wfile.flush()
                    api._closing.wait()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
