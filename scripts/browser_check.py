"""Check: a trained checkpoint served by `clocktune serve`, talked to through the page in headless Chromium.

    python scripts/browser_check.py --model runs/demo/checkpoint --data runs/demo/data/eval/data \
        --screenshot docs/figures/serve-page.png

Serves the checkpoint with ``--domain smart_home`` and the held-out timelines, then for each held-out smart-home
request with one utterance (``--requests`` of them) opens the page on that timeline (``?timeline=ID``: its state),
types the request at a speaking pace, and records whether the agent called a tool before Enter, whether its answer
holds the task's facts, and the latency the page measured. Prints a table; the page of the first request that called
before Enter and answered with its facts is saved as the screenshot.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/browser.py drives Chromium

from tests.browser import headless_chromium, quit_chromium, rows, speak, spoken_words, wait_for_row  # noqa: E402


def main() -> None:
    """Serves, types each request, prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--words-per-s", type=float, default=3.0)
    parser.add_argument("--call-bias", type=float, default=1.5)
    parser.add_argument("--screenshot", default=None)
    args = parser.parse_args()

    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.policy_factories import load_policy_model, policy_factory
    from clocktune.serve.app import create_app
    from clocktune.serve.live import LiveDomain, LiveSessions
    from clocktune.serve.server import ServerThread
    from data_gen.backends import session_backends
    from data_gen.plugins import generatable_domains

    timelines = load_timeline_files([args.data])
    requests = [
        t
        for t in timelines
        if t.domain == "smart_home" and sum(e.kind == "user_chunk" and bool(e.final) for e in t.events) == 1
    ][: args.requests]
    domain = generatable_domains()["smart_home"]
    factory = policy_factory("model", loaded=load_policy_model(args.model), call_bias=args.call_bias)
    sessions = LiveSessions(
        factory,
        "model",
        session_backends(),
        LiveDomain(domain.name, domain.tools, domain.initial_state),
        {t.id: t for t in timelines},
    )
    driver = headless_chromium()
    print("| request | call before Enter | answer holds the facts | latency (page) | answer |")
    print("|---|---|---|---|---|")
    try:
        with ServerThread(create_app(sessions)) as server:
            shot = False  # the screenshot shows the first request called before Enter and answered with its facts
            for timeline in requests:
                driver.get(f"{server.url}/?timeline={timeline.id}")
                time.sleep(1.0)  # the page opens its session
                before: list = []
                words = spoken_words(timeline)
                speak(driver, words, args.words_per_s, before_enter=lambda d, seen=before: seen.extend(rows(d)))
                answer = wait_for_row(driver, lambda row: "say-final" in row[0], timeout_s=120)
                latency = driver.find_element("id", "latency").text
                called = any(row[1] == "call" for row in before)
                facts = all(f.lower() in answer[2].lower() for f in timeline.ground_truth.facts)
                print(f"| {' '.join(words)} | {called} | {facts} | {latency} | {answer[2]} |")
                if args.screenshot and called and facts and not shot:
                    time.sleep(1.0)
                    driver.save_screenshot(args.screenshot)
                    shot = True
    finally:
        quit_chromium(driver)
    stats = factory.engine.stats
    print(f"engine: {stats.forwards} forwards, mean batch {stats.rows / max(stats.forwards, 1):.2f}")


if __name__ == "__main__":
    main()
