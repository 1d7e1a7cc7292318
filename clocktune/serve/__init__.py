"""Serving a trained agent live: ``clocktune serve`` (a WebSocket per session and a page), ``clocktune chat``.

- :mod:`clocktune.serve.protocol`: the messages (the timeline's own events, as JSON) and their checks.
- :mod:`clocktune.serve.live`: a live session between a channel and the runtime, with its limits and recording.
- :mod:`clocktune.serve.app`: the ASGI app (page, socket, health) and who may open a session.
- :mod:`clocktune.serve.server`: uvicorn on the wall clock's loop, compute on the starting thread.
"""
