"""`clocktune chat`: a live session in a terminal. Each line you type is spoken: its words reach the agent as
recogniser updates at a speaking pace (the last one final), and the agent's actions print as the session logs them."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from websockets.sync.client import connect

__all__ = ["chat", "describe"]


def describe(message: dict[str, Any]) -> str | None:
    """One server message as a line of the terminal's timeline, or ``None`` for one not shown (``wait``)."""
    kind, t = message.get("kind"), message.get("t", 0.0)
    stamp = f"{t:7.2f}s"
    if kind == "ready":
        return f"session {message['session']} ({message['domain']}): tools {', '.join(message['tools'])}"
    if kind == "user_chunk":
        return f"{stamp}  you     {message['text']}{'  [final]' if message.get('final') else ''}"
    if kind == "tool_call":
        return f"{stamp}  call    {message['call_id']} {message['name']}({json.dumps(message['arguments'])})"
    if kind in ("tool_modify", "tool_cancel"):
        arguments = f" {json.dumps(message['arguments'])}" if kind == "tool_modify" else ""
        return f"{stamp}  {kind[5:]:<7} {message['call_id']}{arguments}"
    if kind == "tool_result":
        body = f"error: {message['error']}" if message.get("error") else json.dumps(message.get("content"))
        return f"{stamp}  result  {message['call_id']} {body[:200]}"
    if kind == "commit":
        return f"{stamp}  commit"
    if kind == "say":
        return f"{stamp}  agent   {message['text']}"
    if kind in ("notice", "error"):
        return f"{stamp}  {kind:<7} {message.get('text') or message.get('message')}"
    if kind == "ended":
        recorded = f", recorded to {message['recorded']}" if message.get("recorded") else ""
        return f"{stamp}  ended   {message['reason']}{recorded}"
    return None


def chat(
    url: str,
    words_per_s: float = 3.0,
    seed: int = 0,
    lines: TextIO = sys.stdin,
    out: Callable[[str], None] = print,
) -> None:
    """Talks to a served agent: each line typed is spoken word by word; EOF or ``/quit`` ends the session.

    Args:
        url: The session socket (``ws://HOST:PORT/session``, with ``?token=`` when the server needs one).
        words_per_s: Speaking pace of the typed words.
        seed: The domain state's seed (``open.seed``).
        lines: Where the typed lines come from.
        out: Where the timeline's lines go.
    """
    with connect(url, open_timeout=30) as socket:
        ended = threading.Event()

        def read() -> None:
            try:
                for text in socket:
                    message = json.loads(text)
                    line = describe(message)
                    if line is not None:
                        out(line)
                    if message.get("kind") == "ended":
                        break
            except Exception:  # noqa: BLE001 - the socket closed
                pass
            ended.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        socket.send(json.dumps({"kind": "open", "seed": seed}))
        count = 0
        for line in lines:
            words = line.split()
            if line.strip() == "/quit" or ended.is_set():
                break
            for index, word in enumerate(words):
                count += 1
                final = index == len(words) - 1
                socket.send(json.dumps({"kind": "user_chunk", "id": f"u{count}", "text": word, "final": final}))
                if not final:
                    time.sleep(1.0 / words_per_s)
        if not ended.is_set():
            time.sleep(0.5)  # the last answer may still be on its way
            socket.send(json.dumps({"kind": "end"}))
        ended.wait(timeout=30)
