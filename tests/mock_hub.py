"""A small in-process stand-in for the Hugging Face Hub's upload API, for offline tests.

It answers only what ``HfApi.whoami``, ``create_repo``, ``create_branch`` and ``upload_folder`` call when every
file is uploaded as a regular (base64, non-LFS) blob:

- ``GET /api/whoami-v2``: the token's user, ``user`` (``"mock-user"``).
- ``POST /api/repos/create``: creates a repo; 409 with the repo URL when it exists (``exist_ok`` reads it).
- ``POST /api/validate-yaml``: accepts any README front matter that parses as a YAML mapping.
- ``POST /api/{models|datasets}/{repo}/branch/{branch}``: creates a branch from ``main``.
- ``POST /api/{models|datasets}/{repo}/preupload/{rev}``: every file is ``uploadMode: regular``.
- ``POST /api/{models|datasets}/{repo}/commit/{rev}``: NDJSON header + base64 files, stored in memory.

Anything else answers 404. Committed files are kept per repo and revision so that tests can read them back
(``files``) or write them to a folder and load them with ``from_pretrained`` (``export``). ``fail_next`` makes
the next requests to one route answer an error status, to test retries. Requests without a bearer token get 401,
and so do those with a token outside ``tokens`` when the hub is given some (a wrong or expired token).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import yaml

_REPO_ROUTE = re.compile(r"^/api/(models|datasets)/(.+)/(preupload|commit|branch)/([^/]+)$")


class MockHub:
    """A threaded HTTP server on 127.0.0.1 that records what is pushed to it.

    Use as a context manager; ``url`` is the value for ``HF_ENDPOINT``.

    Args:
        tokens: The bearer tokens accepted; others get 401. ``None`` accepts any.
    """

    def __init__(self, tokens: set[str] | None = None) -> None:
        self.tokens = tokens
        self.user = "mock-user"  # whom every accepted token belongs to
        self._lock = threading.Lock()
        # (repo_type, repo_id) -> revision -> path in repo -> content
        self._repos: dict[tuple[str, str], dict[str, dict[str, bytes]]] = {}
        self._failures: dict[str, list[int]] = defaultdict(list)
        self.calls: Counter[str] = Counter()  # route -> requests received, failed ones included
        self.commits: list[dict] = []  # NDJSON header values of the accepted commits, in order
        self.validated: list[str] = []  # README contents sent to /api/validate-yaml
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        # A short poll interval keeps shutdown (once per test) fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="mock-hub", daemon=True
        )

    @property
    def url(self) -> str:
        """The server's base URL, e.g. ``http://127.0.0.1:54321``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> MockHub:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def fail_next(self, route: str, status: int, times: int = 1) -> None:
        """Makes the next ``times`` requests to ``route`` answer ``status`` without doing anything.

        Args:
            route: ``"create"``, ``"validate"``, ``"branch"``, ``"preupload"`` or ``"commit"``.
            status: HTTP status to answer, e.g. 500 or 403.
            times: How many consecutive requests fail.
        """
        with self._lock:
            self._failures[route].extend([status] * times)

    def files(self, repo_id: str, repo_type: str = "model", revision: str = "main") -> dict[str, bytes]:
        """Returns a copy of the files committed to a repo revision (path in repo -> content)."""
        with self._lock:
            return dict(self._repos[(repo_type, repo_id)][revision])

    def export(self, repo_id: str, dest: Path, repo_type: str = "model", revision: str = "main") -> Path:
        """Writes the files of a repo revision under ``dest``, as a download would, and returns ``dest``."""
        for path, content in self.files(repo_id, repo_type, revision).items():
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return dest

    # -- request handling (server threads) ------------------------------------------------------------------

    def _take_failure(self, route: str) -> int | None:
        with self._lock:
            self.calls[route] += 1
            queue = self._failures[route]
            return queue.pop(0) if queue else None

    def _repo_url(self, repo_type: str, repo_id: str) -> str:
        # The Hub's model URLs have no type prefix; huggingface_hub parses the repo back from this URL.
        return f"{self.url}/{repo_id}" if repo_type == "model" else f"{self.url}/{repo_type}s/{repo_id}"

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict | None]:
        """Routes one request; returns (status, JSON body)."""
        if method == "GET" and path == "/api/whoami-v2":
            with self._lock:
                self.calls["whoami"] += 1
            return 200, {"type": "user", "name": self.user}
        if method != "POST":
            return 404, {"error": f"mock hub does not serve {method} {path}"}
        if path == "/api/repos/create":
            return self._create_repo(json.loads(body))
        if path == "/api/validate-yaml":
            return self._validate_yaml(json.loads(body))
        match = _REPO_ROUTE.match(path)
        if match is None:
            return 404, {"error": f"mock hub does not serve {method} {path}"}
        repo_type, repo_id, route, revision = match[1][:-1], match[2], match[3], unquote(match[4])
        if (failure := self._take_failure(route)) is not None:
            return failure, {"error": f"injected failure {failure}"}
        with self._lock:
            revisions = self._repos.get((repo_type, repo_id))
            if revisions is None:
                return 404, {"error": "Repository not found"}
            if route == "branch":
                if revision in revisions:
                    return 409, {"error": "Reference already exists"}
                revisions[revision] = dict(revisions["main"])
                return 200, {}
            if revision not in revisions:
                return 404, {"error": f"Invalid rev id: {revision}"}
        if route == "preupload":
            paths = [file["path"] for file in json.loads(body)["files"]]
            return 200, {"files": [{"path": p, "uploadMode": "regular", "shouldIgnore": False} for p in paths]}
        return self._commit(repo_type, repo_id, revision, body)

    def _create_repo(self, payload: dict) -> tuple[int, dict]:
        if (failure := self._take_failure("create")) is not None:
            return failure, {"error": f"injected failure {failure}"}
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
        url = self._repo_url(repo_type, repo_id)
        with self._lock:
            if (repo_type, repo_id) in self._repos:
                return 409, {"error": "You already created this repo", "url": url}
            self._repos[(repo_type, repo_id)] = {"main": {}}
        return 200, {"url": url, "name": repo_id}

    def _validate_yaml(self, payload: dict) -> tuple[int, dict]:
        if (failure := self._take_failure("validate")) is not None:
            return failure, {"error": f"injected failure {failure}"}
        content = payload["content"]
        with self._lock:
            self.validated.append(content)
        match = re.match(r"^---\n(.*?)\n---\n", content, flags=re.DOTALL)
        if match is not None and not isinstance(yaml.safe_load(match[1]), dict):
            return 400, {"errors": [{"message": "metadata must be a YAML mapping"}], "warnings": []}
        return 200, {"errors": [], "warnings": []}

    def _commit(self, repo_type: str, repo_id: str, revision: str, body: bytes) -> tuple[int, dict]:
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0]["key"] != "header":
            return 422, {"error": "a commit starts with its header line"}
        header = lines[0]["value"]
        added = {}
        for line in lines[1:]:
            if line["key"] != "file":
                return 422, {"error": f"mock hub only accepts regular files, got {line['key']!r}"}
            added[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
        oid = hashlib.sha1(body).hexdigest()
        with self._lock:
            self._repos[(repo_type, repo_id)][revision].update(added)
            self.commits.append(header)
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        return 200, {"commitUrl": f"{self.url}/{prefix}{repo_id}/commit/{oid}", "commitOid": oid, "success": True}


def _make_handler(hub: MockHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 keeps connections alive, as huggingface_hub's pooled client expects.
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            authorization = self.headers.get("Authorization", "")
            token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None
            if token is None or (hub.tokens is not None and token not in hub.tokens):
                status, payload = 401, {"error": "Invalid credentials in Authorization header"}
            else:
                status, payload = hub.handle(self.command, urlsplit(self.path).path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: object) -> None:
            """Silences the per-request stderr log."""

    return Handler
