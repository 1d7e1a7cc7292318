"""The state line: what the runtime states about the turn before each action, and that training sees the same."""

from tiny_tokenizer import tiny_tokenizer

from clocktune.encoding import extend_tokenizer
from clocktune.render import IGNORE_INDEX, Renderer
from clocktune.state_line import TurnState
from clocktune.timeline.events import AGENT_KINDS, Event, ToolSchema

TOOLS = [
    ToolSchema("find_free_slots", "Free slots on a day.", {"type": "object", "properties": {}}, side_effect=False),
    ToolSchema("create_event", "Adds an event.", {"type": "object", "properties": {}}, side_effect=True),
]

# Each agent action with the line the runtime writes before it.
TURNS = [
    (Event("e0", 0.5, "user_chunk", "user", text="book a call", final=False), None),
    (Event("e1", 0.5, "wait", "agent"), "[user speaking]"),
    (Event("e2", 1.0, "tool_call", "agent", call_id="c1", name="find_free_slots", arguments={}), "[user speaking]"),
    (
        Event("e3", 1.1, "tool_call", "agent", call_id="c2", name="create_event", arguments={"at": {"$ref": "c1"}}),
        "[user speaking | c1 find_free_slots: running]",
    ),
    (Event("e4", 1.2, "tool_call", "agent", call_id="c3", name="find_free_slots", arguments={"x": 1}), None),
    (Event("e5", 1.5, "tool_result", "tool", call_id="c1", content={"slots": []}), None),
    (Event("e6", 1.6, "tool_cancel", "agent", call_id="c3"), None),
    (
        Event("e7", 1.6, "wait", "agent"),
        "[user speaking | c1 find_free_slots: done | c2 create_event: uncommitted]",
    ),
    (Event("e8", 2.0, "user_chunk", "user", text="on friday", final=True), None),
    (
        Event("e9", 2.1, "tool_modify", "agent", call_id="c1", arguments={"day": "friday"}),
        "[user done | c1 find_free_slots: done | c2 create_event: uncommitted]",
    ),
    (Event("e10", 2.2, "commit", "agent"), "[user done | c1 find_free_slots: running | c2 create_event: uncommitted]"),
    (Event("e11", 2.3, "wait", "agent"), "[user done | c1 find_free_slots: running | c2 create_event: running]"),
    (Event("e12", 2.8, "tool_result", "tool", call_id="c1", content={"slots": ["09:00"]}), None),
    (Event("e13", 3.4, "tool_result", "tool", call_id="c2", error="calendar is full"), None),
    (
        Event("e14", 3.5, "say", "agent", text="Sorry, it failed.", final=True),
        "[user done | c1 find_free_slots: done | c2 create_event: failed]",
    ),
    # A new turn starts with a fresh line.
    (Event("e15", 9.0, "user_chunk", "user", text="thanks", final=True), None),
    (Event("e16", 9.1, "say", "agent", text="You're welcome.", final=True), "[user done]"),
]


def test_state_line_follows_speech_calls_commit_and_turns():
    state = TurnState(TOOLS)
    for event, expected in TURNS:
        if expected is not None:
            assert state.text() == expected + "\n", event.id
        state.update(event)


def test_renderer_writes_the_state_line_after_the_clock_without_loss():
    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, "abs_bins", "chatml")
    renderer = Renderer(tokenizer, TOOLS)
    for event, expected in TURNS:
        if expected is not None:
            # The runtime feeds header, clock and state line; the model writes the action after them.
            assert tokenizer.decode(renderer.prompt_for_action(event.t)).endswith(">" + expected + "\n"), event.id
        renderer.append(event)
    rendering = renderer.rendering
    # No state-line token carries loss: the labelled text is the actions' bodies and end tokens only.
    labelled = tokenizer.decode([label for label in rendering.labels if label != IGNORE_INDEX])
    assert "[user" not in labelled and "<|commit|>" in labelled
    assert tokenizer.decode(rendering.input_ids).count("[user") == sum(e.kind in AGENT_KINDS for e, _ in TURNS)
