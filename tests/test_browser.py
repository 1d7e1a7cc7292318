"""The page `clocktune serve` serves, driven in headless Chromium: typed words stream as speech, and the agent's
calls appear before Enter is pressed."""

import pytest

from clocktune.runtime.policy_factories import policy_factory
from clocktune.serve.app import create_app
from clocktune.serve.live import LiveSessions
from clocktune.serve.server import ServerThread
from data_gen.backends import session_backends
from tests.browser import headless_chromium, quit_chromium, rows, speak, spoken_words, wait_for_row


@pytest.fixture(scope="module")
def smart_home_request(generated):
    """A held-out single-utterance smart-home request whose teacher called before the user's last word."""
    for timeline in generated[0]:
        finals = [e for e in timeline.events if e.kind == "user_chunk" and e.final]
        if timeline.domain != "smart_home" or len(finals) != 1 or not timeline.ground_truth.facts:
            continue
        if any(e.kind == "tool_call" and e.t < finals[0].t for e in timeline.events):
            return timeline
    raise AssertionError("no such request in the generated data")


@pytest.fixture(scope="module")
def browser():
    driver = headless_chromium()
    yield driver
    quit_chromium(driver)


def test_typing_a_request_in_the_page_makes_the_agent_call_before_enter_and_answer_with_the_facts(
    smart_home_request, browser
):
    timeline = smart_home_request
    sessions = LiveSessions(
        policy_factory("oracle"), "oracle", backends=session_backends(), timelines={timeline.id: timeline}
    )
    seen_before_enter = []
    with ServerThread(create_app(sessions)) as server:
        browser.get(f"{server.url}/?timeline={timeline.id}")
        assert _ready(browser)
        speak(browser, spoken_words(timeline), words_per_s=5, before_enter=lambda d: seen_before_enter.extend(rows(d)))
        answer = wait_for_row(browser, lambda row: "say-final" in row[0], timeout_s=30)
        latency = browser.find_element("id", "latency").text
    calls_before_enter = [row for row in seen_before_enter if row[1] == "call"]
    assert calls_before_enter, seen_before_enter
    assert all(fact.lower() in answer[2].lower() for fact in timeline.ground_truth.facts), answer
    assert latency.endswith(" ms")  # the page measured end of words to the answer
    assert not any("error" in row[0] for row in seen_before_enter)


def _ready(browser) -> bool:
    import time

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if "session live-" in browser.find_element("id", "session").text:
            return True
        time.sleep(0.05)
    return False


def test_a_page_of_another_origin_cannot_open_a_session(browser):
    import http.server
    import threading

    class AnotherSite(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = b"<p>another site</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), AnotherSite)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    sessions = LiveSessions(policy_factory("oracle"), "oracle", backends=session_backends(), timelines={})
    try:
        with ServerThread(create_app(sessions)) as server:
            # Another site's page opens a socket to the server: the browser sends that site's Origin, and the server
            # refuses it with an error the page can read.
            browser.get(f"http://127.0.0.1:{other.server_address[1]}/")
            script = (
                "const done = arguments[0];"
                f"const s = new WebSocket('ws://127.0.0.1:{server.port}/session');"
                "s.onmessage = (m) => done(JSON.parse(m.data).message); s.onerror = () => done('socket error');"
            )
            message = browser.execute_async_script(script)
    finally:
        other.shutdown()
    assert f"origin 'http://127.0.0.1:{other.server_address[1]}' may not open sessions" in message
