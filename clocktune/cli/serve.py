"""``clocktune serve`` and ``clocktune chat``: a trained agent live, over WebSockets, in a browser or a terminal.

clocktune serve --model runs/demo/checkpoint --domain smart_home          # then open http://127.0.0.1:8000/
clocktune serve --model oracle --data runs/demo/data/eval/data --record runs/live
clocktune chat --model runs/demo/checkpoint --domain smart_home
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from clocktune.cli.arguments import (
    add_batch_size_flag,
    add_constrained_flag,
    add_trust_flag,
    output_folder,
    positive_float,
    positive_int,
)

__all__ = ["add_serve_parsers", "cmd_chat", "cmd_serve"]

TOKEN_VARIABLE = "CLOCKTUNE_SERVE_TOKEN"


def _live_domain(value: str) -> tuple[Any, Any]:
    """The ``--domain`` NAME (a registered domain) or FILE (a declarative domain the user names: trusted)."""
    from data_gen.declarative import load_domain_file
    from data_gen.plugins import domain_plugin, generatable_domains

    if Path(value).is_file():
        domain = load_domain_file(value, trust_code=True)
    else:
        domains = generatable_domains()
        if value not in domains:
            raise ValueError(f"--domain {value!r}: not a file and not one of {', '.join(sorted(domains))}")
        domain = domains[value]
    from clocktune.serve.live import LiveDomain

    return LiveDomain(domain.name, domain.tools, domain.initial_state), domain_plugin(domain).backend


def build_sessions(args: argparse.Namespace) -> Any:
    """The live sessions a ``serve``/``chat`` command line describes (model loaded, domain and data read)."""
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.policy_factories import SCRIPTED_MODELS, is_checkpoint, load_policy_model, policy_factory
    from clocktune.serve.live import LiveSessions, ServeLimits
    from data_gen.backends import check_domain_code, session_backends

    timelines = load_timeline_files(args.data) if args.data else []
    check_domain_code(timelines, args.trust_domain_code)
    domain, domain_backends = _live_domain(args.domain) if args.domain else (None, None)
    if domain is None and not timelines:
        raise ValueError("give --domain (sessions on its tools) or --data (held-out timelines sessions may open)")
    data_backends = session_backends(args.trust_domain_code)

    def backends(timeline: Any) -> Any:
        if domain is not None and timeline.domain == domain.name and timeline.task == "live":
            return domain_backends(timeline)
        return data_backends(timeline)

    strategy = args.policy or ("oracle" if args.model == "oracle" else "speculative")
    if args.model in SCRIPTED_MODELS and not timelines:
        raise ValueError(f"--model {args.model} follows recorded plans: give --data with the timelines to serve")
    loaded = load_policy_model(args.model) if is_checkpoint(args.model) else None
    policies = policy_factory(
        strategy,
        args.model,
        loaded,
        constrained=args.constrained,
        call_bias=args.call_bias if loaded is not None else 0.0,
        batch_size=args.batch_size,
    )
    limits = ServeLimits(idle_s=args.idle_s, session_s=args.session_s, max_sessions=args.max_sessions)
    record = Path(args.record) if args.record else None
    return LiveSessions(policies, strategy, backends, domain, {t.id: t for t in timelines}, record, limits)


def _token(args: argparse.Namespace) -> str | None:
    from clocktune.serve.server import is_loopback

    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    if token is None and not is_loopback(args.host):
        raise ValueError(f"--host {args.host} is not loopback: give --token or set {TOKEN_VARIABLE}")
    return token


def cmd_serve(args: argparse.Namespace) -> int:
    """``clocktune serve``: serves live sessions until interrupted.

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0.
    """
    from clocktune.serve.app import create_app
    from clocktune.serve.server import run_server

    token = _token(args)  # before the model loads: a refused bind costs nothing
    sessions = build_sessions(args)
    app = create_app(sessions, token=token, allow_origins=tuple(args.allow_origin))
    where = f"http://{args.host}:{args.port}"
    print(f"clocktune serve: the page at {where}/, sessions at ws://{args.host}:{args.port}/session", file=sys.stderr)
    try:
        run_server(app, args.host, args.port)
    except KeyboardInterrupt:
        pass
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """``clocktune chat``: one live session in this terminal (a server on loopback, or ``--url``'s).

    Args:
        args: The parsed command line.

    Returns:
        The exit status, 0.
    """
    from clocktune.serve.terminal import chat

    if args.url:
        chat(args.url, args.words_per_s, args.seed)
        return 0
    if args.model is None:
        raise ValueError("give --model (served here, on loopback) or --url (a running server's session socket)")
    from clocktune.serve.app import create_app
    from clocktune.serve.server import serve_alongside

    args.host = "127.0.0.1"

    def talk(port: int) -> None:
        # The server computes on this (main) thread, so the terminal's side runs on a thread of its own.
        print("type what you would say; Enter ends the utterance, /quit or Ctrl-D leaves", file=sys.stderr)
        chat(f"ws://127.0.0.1:{port}/session", args.words_per_s, args.seed)

    try:
        serve_alongside(create_app(build_sessions(args)), talk)
    except KeyboardInterrupt:
        pass
    return 0


def _add_agent_flags(parser: argparse.ArgumentParser, model_required: bool) -> None:
    parser.add_argument(
        "--model",
        required=model_required,
        help="a checkpoint, 'scripted'/'oracle' (the recorded plan of a --data timeline), or 'openai:MODEL[@URL]'",
    )
    parser.add_argument("--policy", default=None, help="the policy's name; for scripted models, its strategy")
    parser.add_argument("--domain", default=None, help="a registered domain's name or a declarative domain file")
    parser.add_argument("--data", nargs="+", default=None, help="held-out timelines a session may open by id")
    add_constrained_flag(parser)
    parser.add_argument("--call-bias", type=float, default=0.0, help="a checkpoint's call bias (clocktune eval's)")
    parser.add_argument("--record", type=output_folder, default=None, help="write every session as a timeline here")
    parser.add_argument("--idle-s", type=positive_float, default=300.0, help="end a session silent this long")
    parser.add_argument("--session-s", type=positive_float, default=3600.0, help="end a session this old")
    parser.add_argument("--max-sessions", type=positive_int, default=256, help="sessions open at once")
    add_batch_size_flag(parser)
    add_trust_flag(parser)


def add_serve_parsers(sub: Any) -> None:
    """Adds ``serve`` and ``chat`` to the ``clocktune`` subcommands."""
    serve = sub.add_parser("serve", help="serve an agent live: a WebSocket per session and a page to talk to it")
    _add_agent_flags(serve, model_required=True)
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (not loopback: a token is required)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--token", default=None, help=f"required of every client (default: ${TOKEN_VARIABLE})")
    serve.add_argument(
        "--allow-origin", action="append", default=[], help="a browser origin allowed besides the server's own"
    )
    serve.set_defaults(func=cmd_serve)

    chat = sub.add_parser("chat", help="talk to an agent in this terminal: each line you type is spoken")
    _add_agent_flags(chat, model_required=False)
    chat.add_argument("--url", default=None, help="a running server's session socket instead of serving here")
    chat.add_argument("--words-per-s", type=positive_float, default=3.0, help="speaking pace of typed words")
    chat.add_argument("--seed", type=int, default=0, help="seed of the domain's drawn state")
    chat.set_defaults(func=cmd_chat)
