"""Running the app: uvicorn on the wall clock's loop, the model's compute on the thread that started the server.

``run_wall`` (``runtime.wall_clock``) puts the event loop (uvicorn, the sockets, every session's timers) on a helper
thread and serves the compute (the engine's batched forwards) on the calling thread, where torch's CPU kernels keep
their OpenMP parallelism; :class:`ServerThread` does the same from a thread of its own, for tests, benchmarks and
``clocktune chat``, and says which port it bound.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import uvicorn

from clocktune.runtime.wall_clock import run_wall

__all__ = ["WS_MAX_BYTES", "ServerThread", "is_loopback", "run_server", "serve_alongside", "server_config"]

T = TypeVar("T")

# The transport's frame limit (uvicorn's ws_max_size). Frames up to this size are read and refused by the protocol's
# own limit (1 MB) with an `error` message, the session going on (tested with 10 MB); uvicorn closes on a larger one
# (1009), so this bounds what one message can make the server hold.
WS_MAX_BYTES = 16 * 1024 * 1024


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only the loopback interface (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_config(app: Any, host: str, port: int) -> uvicorn.Config:
    """uvicorn's config for the app: the sans-I/O websockets protocol, bounded frames and queues, quiet logs."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        ws="websockets-sansio",
        ws_max_size=WS_MAX_BYTES,
        ws_max_queue=8,  # frames a session has not read yet: bounded per connection
        lifespan="off",
        log_level="warning",
        timeout_graceful_shutdown=2,
    )


def run_server(app: Any, host: str, port: int) -> None:
    """Serves ``app`` until interrupted; this thread runs the models' compute.

    Args:
        app: The ASGI app (``serve.app.create_app``).
        host: Interface to bind.
        port: Port to bind (0: any free port).
    """
    run_wall(uvicorn.Server(server_config(app, host, port)).serve())


def serve_alongside(app: Any, client: Callable[[int], T], host: str = "127.0.0.1") -> T:
    """Serves ``app`` on this thread (the compute's, as :func:`run_server`) while ``client(port)`` runs on a helper
    thread; the server stops when the client returns.

    Args:
        app: The ASGI app.
        client: Called with the bound port once the server listens (a terminal, a benchmark's clients).
        host: Interface to bind.

    Returns:
        What ``client`` returned; its exception is raised here.
    """
    server = uvicorn.Server(server_config(app, host, 0))
    outcome: dict[str, Any] = {}

    def run_client() -> None:
        try:
            while not server.started:
                threading.Event().wait(0.01)
            outcome["result"] = client(server.servers[0].sockets[0].getsockname()[1])
        except BaseException as error:  # noqa: BLE001 - raised on the serving thread below
            outcome["error"] = error
        finally:
            server.should_exit = True

    threading.Thread(target=run_client, name="clocktune-serve-client", daemon=True).start()
    run_wall(server.serve())
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


class ServerThread:
    """The server on a thread of its own (that thread serves the compute): for tests, benchmarks and ``chat``.

    Args:
        app: The ASGI app.
        host: Interface to bind.
        port: Port (0: any free port; :attr:`port` says which).
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = uvicorn.Server(server_config(app, host, port))
        self.host = host
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="clocktune-serve", daemon=True)

    def _run(self) -> None:
        try:
            run_wall(self.server.serve())
        except BaseException as error:  # noqa: BLE001 - reported by start() or stop()
            self.error = error

    def start(self, timeout_s: float = 30.0) -> ServerThread:
        """Starts serving and waits until the socket is bound.

        Raises:
            RuntimeError: When the server did not start within ``timeout_s``.
        """
        self.thread.start()
        waited = threading.Event()
        for _ in range(int(timeout_s * 100)):
            if self.server.started or not self.thread.is_alive():
                break
            waited.wait(0.01)
        if not self.server.started:
            raise RuntimeError(f"the server did not start: {self.error!r}")
        return self

    @property
    def port(self) -> int:
        """The bound port."""
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stops serving and waits for the thread."""
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
