"""The pipecat processor: a clocktune session in a pipecat pipeline, fed recorded transcription frames."""

import asyncio
import json

import pytest
from pipecat.frames.frames import (
    FunctionCallInProgressFrame,
    FunctionCallResultFrame,
    InterimTranscriptionFrame,
    LLMTextFrame,
    TranscriptionFrame,
)
from pipecat.tests.utils import SleepFrame, run_test

from clocktune.integrations.pipecat import ClocktuneProcessor, UtteranceChunks
from clocktune.runtime.policy_factories import policy_factory
from clocktune.serve.live import LiveSessions
from data_gen.backends import session_backends
from tests.test_serve import _fast


def _recorded_frames(timeline):
    """The frames a speech-to-text service would have sent for the timeline's user side: interim transcripts holding
    the utterance so far, a final one at its end, spaced as the chunks were."""
    frames, chunks, last_t = [], {}, 0.0  # the utterance's chunks so far, a revision replacing the chunk it revises
    for event in timeline.events:
        if event.kind != "user_chunk":
            continue
        frames.append(SleepFrame(sleep=max(0.0, event.t - last_t)))
        last_t = event.t
        chunks.pop(event.revises, None)
        chunks[event.id] = event.text
        text = " ".join(chunks.values())
        if event.final:
            frames.append(TranscriptionFrame(text=text, user_id="user", timestamp=str(event.t)))
            chunks = {}
        else:
            frames.append(InterimTranscriptionFrame(text=text, user_id="user", timestamp=str(event.t)))
    return frames


def test_cumulative_transcripts_become_new_words_and_revisions_of_the_last_chunk():
    chunks = UtteranceChunks()
    assert chunks.update("turn", False) == [{"kind": "user_chunk", "id": "p1", "text": "turn", "final": False}]
    assert chunks.update("turn", False) == []
    assert chunks.update("turn off the", False)[0]["text"] == "off the"
    revision = chunks.update("turn off that light", False)[0]
    assert revision == {"kind": "user_chunk", "id": "p3", "text": "off that light", "final": False, "revises": "p2"}
    final = chunks.update("turn off that light please", True)[0]
    assert final["text"] == "please" and final["final"] and "revises" not in final
    assert chunks.update("next one", False)[0]["text"] == "next one"  # a new utterance starts afresh


def test_a_recorded_dialogue_makes_the_processor_call_before_the_final_transcript_and_answer_with_the_result(
    generated,
):
    timeline = _fast(
        next(
            t
            for t in generated[0]
            if t.ground_truth.calls
            and t.ground_truth.facts
            and any(
                e.kind == "tool_call" and e.t < max(c.t for c in t.events if c.kind == "user_chunk") for e in t.events
            )
        )
    )
    sessions = LiveSessions(
        policy_factory("oracle"), "oracle", backends=session_backends(), timelines={timeline.id: timeline}
    )
    processor, server = ClocktuneProcessor.serving(sessions, open={"timeline": timeline.id})
    frames = _recorded_frames(timeline) + [SleepFrame(sleep=1.5)]
    try:
        down, _ = asyncio.run(run_test(processor, frames_to_send=frames, start_timeout=10))
    finally:
        server.stop()
    kinds = [type(frame) for frame in down]
    first_call = kinds.index(FunctionCallInProgressFrame)
    assert first_call < kinds.index(TranscriptionFrame)  # a call made while the user was still speaking
    results = [frame for frame in down if isinstance(frame, FunctionCallResultFrame)]
    assert results and all(frame.error is None for frame in results)
    answer = " ".join(frame.text for frame in down if isinstance(frame, LLMTextFrame)).lower()
    assert all(fact.lower() in answer for fact in timeline.ground_truth.facts)
    # The answer's facts came from the calls' results: each fact is in some result the pipeline saw.
    seen = json.dumps([frame.result for frame in results]).lower()
    assert any(fact.lower() in seen for fact in timeline.ground_truth.facts)
    assert processor.ended is not None and processor.ended["accurate"] is True


@pytest.fixture(autouse=True)
def _quiet_pipecat_logs():
    from loguru import logger

    logger.remove()
    yield


def test_a_say_streams_as_llm_text_frames_of_the_new_words_between_start_and_end():
    processor = ClocktuneProcessor("ws://unused")

    async def frames():
        out = []
        for message in [
            {"kind": "say_partial", "text": "The kitchen", "final": True},
            {"kind": "say_partial", "text": "The kitchen lights", "final": True},
            {"kind": "say", "text": "The kitchen lights are off.", "final": True},
        ]:
            out += await processor._frames(message)
        return out

    out = asyncio.run(frames())
    names = [type(frame).__name__ for frame in out]
    assert names == [
        "LLMFullResponseStartFrame",
        "LLMTextFrame",
        "LLMTextFrame",
        "LLMTextFrame",
        "LLMFullResponseEndFrame",
    ]
    assert "".join(frame.text for frame in out if isinstance(frame, LLMTextFrame)) == "The kitchen lights are off."
