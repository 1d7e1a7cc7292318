"""The HTTP transport of the endpoint policy (``clocktune.runtime.openai_policy``): one JSON POST, held to a deadline.

What it guarantees, whatever the server does:

- The API key goes only where ``base_url`` points. Redirects are refused, not followed: a chat-completion POST
  that is redirected cannot succeed anyway (``urllib`` turns it into a body-less GET), and following one would
  hand the ``Authorization`` header to whichever origin the ``Location`` names. The header is also added as an
  *unredirected* header, so that an opener a caller supplies, which may follow redirects, never forwards it
  either; a response that arrives from another URL than the one asked is refused.
- No key over plain ``http`` except to loopback (``127.0.0.0/8``, ``::1``, ``localhost``), unless the caller
  says ``allow_insecure_http``: ``check_base_url`` raises before any connection is made.
- Every request ends by its deadline: the socket timeout bounds each read, and a wall-clock deadline bounds the
  whole exchange, headers and body, however slowly the server trickles them. The exchange runs in a daemon worker
  thread, and the caller stops waiting at the deadline; the worker checks the deadline between reads, so it ends
  by itself one read later (a server trickling its *headers* keeps it until it stops or the socket times out).
- Responses are bounded: at most ``MAX_RESPONSE_BYTES``, and parsed with ``clocktune.timeline.bounded_json``
  (deeply nested JSON is a parse error, not a ``RecursionError`` out of ``json.loads``).

All failures are :class:`EndpointError`, one line each, which the policy turns into notices.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from clocktune.timeline.bounded_json import loads_bounded

# A chat completion of one action is a few kilobytes; more is a misbehaving server.
MAX_RESPONSE_BYTES = 8 * 2**20
_READ_SIZE = 65536
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


class EndpointError(Exception):
    """The endpoint did not give a usable completion (transport, HTTP status, deadline or response shape)."""


def excerpt(value: str, limit: int = 120) -> str:
    """A short ``repr`` of ``value``: errors become notices in the model's context, so they stay short.

    Args:
        value: The text to quote.
        limit: Characters kept.

    Returns:
        ``repr(value)``, cut after ``limit`` characters with the full length noted.
    """
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names this machine: ``localhost``, an address in ``127.0.0.0/8``, or ``::1``.

    Args:
        host: A URL's host name (``urlsplit(url).hostname``: lower case, IPv6 without brackets).

    Returns:
        ``True`` for a loopback host; ``False`` for anything else, names that may resolve to loopback included.
    """
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_base_url(base_url: str, api_key: str | None, allow_insecure_http: bool = False) -> None:
    """Refuses a base URL the policy must not send requests (or the key) to; makes no connection.

    Args:
        base_url: The API root, e.g. ``https://api.openai.com/v1``.
        api_key: The key that would be sent; ``None`` or empty sends none.
        allow_insecure_http: Send the key over plain ``http`` to a host that is not loopback.

    Raises:
        ValueError: For a scheme other than ``http``/``https``, a URL without a host, or a key bound for a
            non-loopback host over plain ``http`` without ``allow_insecure_http``.
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint URL {base_url!r} must be http(s)://HOST[:PORT]/...")
    if parts.scheme == "http" and api_key and not allow_insecure_http and not is_loopback(parts.hostname):
        raise ValueError(
            f"refusing to send the API key over plain http to {parts.hostname}: use an https:// endpoint URL "
            "(plain http is allowed for localhost), or allow insecure http explicitly"
        )


class RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Answers every redirect with the redirect itself as an ``HTTPError`` (see the module docstring)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        """urllib's hook for a 3xx answer: raises instead of returning the follow-up request."""
        raise urllib.error.HTTPError(req.full_url, code, msg, headers, fp)


def build_endpoint_opener(base_url: str, *handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
    """The default opener of an endpoint: refuses redirects, and reaches loopback hosts without a proxy.

    Args:
        base_url: The API root the opener will be used with.
        *handlers: Further ``urllib`` handlers (a ``ProxyHandler`` of your own, say).

    Returns:
        The opener.
    """
    extra: list[urllib.request.BaseHandler] = [RefuseRedirects(), *handlers]
    # A proxy cannot reach this machine's loopback, and plain-http loopback traffic carrying the key must not be
    # handed to one from the environment (http_proxy) either.
    if is_loopback(urlsplit(base_url).hostname) and not any(isinstance(h, urllib.request.ProxyHandler) for h in extra):
        extra.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*extra)


def _read_bounded(response: Any, deadline: float, timeout_message: str) -> bytes:
    """The body of ``response``, read one chunk at a time so that a trickling body is cut at ``deadline``."""
    # read1 returns what one socket read gives; read(n) would wait for all n bytes, however slowly they come.
    read = getattr(response, "read1", None) or response.read
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() >= deadline:
            raise EndpointError(timeout_message)
        chunk = read(_READ_SIZE)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise EndpointError(f"response is larger than {MAX_RESPONSE_BYTES} bytes")
        chunks.append(chunk)


def _exchange(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    socket_timeout_s: float,
    deadline: float,
    timeout_message: str,
) -> bytes:
    """Sends ``request`` and reads the whole response body (runs in the worker thread)."""
    url = request.full_url
    try:
        with opener.open(request, timeout=socket_timeout_s) as response:
            final_url = response.geturl()
            if final_url != url:
                # Only a caller's opener follows redirects; the key did not travel (unredirected header).
                raise EndpointError(f"{url} redirected to {final_url}; redirects are refused: use the final URL")
            return _read_bounded(response, deadline, timeout_message)
    except urllib.error.HTTPError as error:
        if 300 <= error.code < 400:
            location = error.headers.get("Location", "") if error.headers is not None else ""
            error.close()
            raise EndpointError(
                f"HTTP {error.code} redirect to {excerpt(location)} refused (the key is only sent to {url}): "
                "use the final URL as the endpoint"
            ) from None
        try:
            detail = _read_bounded(error, deadline, timeout_message).decode("utf-8", "replace").strip()
        except (OSError, http.client.HTTPException, EndpointError):
            detail = ""
        raise EndpointError(f"HTTP {error.code} {error.reason}: {excerpt(detail)}") from None
    except TimeoutError:
        # The socket timeout is at most what is left of the deadline: when that is what ran out, say so.
        late = time.monotonic() >= deadline - 0.01
        raise EndpointError(timeout_message if late else f"no response within {socket_timeout_s:g}s") from None
    except urllib.error.URLError as error:
        # Connection refused, DNS failure, or a timeout while connecting (reason is then a socket.timeout).
        raise EndpointError(f"cannot reach {url}: {error.reason}") from None
    except (OSError, http.client.HTTPException) as error:
        raise EndpointError(f"request to {url} failed: {error!r}") from None


def post_json(
    opener: urllib.request.OpenerDirector,
    url: str,
    body: dict[str, Any],
    api_key: str | None,
    socket_timeout_s: float,
    deadline_s: float,
    deadline_reason: str = "request deadline",
) -> dict[str, Any]:
    """POSTs ``body`` as JSON and returns the JSON object the server answers, within ``deadline_s`` seconds.

    Args:
        opener: The ``urllib`` opener to send with (:func:`build_endpoint_opener` refuses redirects).
        url: The full endpoint URL (already checked with :func:`check_base_url`).
        body: The request body.
        api_key: Sent as ``Authorization: Bearer ...`` (never on a redirect); ``None`` sends no header.
        socket_timeout_s: The longest wait for any one connect or read.
        deadline_s: Wall-clock bound on the whole exchange, from now.
        deadline_reason: What set the deadline, for the error message.

    Returns:
        The response's JSON object.

    Raises:
        EndpointError: For any failure: transport, HTTP status, redirect, deadline, size, non-JSON or too deep
            JSON, or a JSON value that is not an object.
    """
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    if api_key:
        # Unredirected: urllib copies only the ordinary headers onto a redirected request.
        request.add_unredirected_header("Authorization", f"Bearer {api_key}")
    deadline_s = max(deadline_s, 0.0)
    timeout_message = f"no complete response within {deadline_s:.3g}s ({deadline_reason})"
    deadline = time.monotonic() + deadline_s
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            outcome["raw"] = _exchange(
                opener, request, max(min(socket_timeout_s, deadline_s), 1e-3), deadline, timeout_message
            )
        except BaseException as error:  # handed to the waiting caller below
            outcome["error"] = error
        finally:
            finished.set()

    threading.Thread(target=work, name="endpoint-request", daemon=True).start()
    if not finished.wait(deadline_s):
        raise EndpointError(timeout_message)
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, EndpointError):
            raise error
        raise EndpointError(f"request to {url} failed: {error!r}")
    raw: bytes = outcome["raw"]
    text = raw.decode("utf-8", "replace")
    try:
        reply = loads_bounded(text)
    except ValueError as error:
        raise EndpointError(f"response is not JSON ({error}): {excerpt(text)}") from None
    if not isinstance(reply, dict):
        raise EndpointError(f"response is not a JSON object: {excerpt(text)}")
    return reply
