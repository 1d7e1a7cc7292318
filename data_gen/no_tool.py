"""Requests that need no tool: greetings, thanks, questions about the assistant, small talk.

They teach the agent that hearing the user is not a reason to call something.
"""

from __future__ import annotations

from data_gen.domains.base import Domain
from data_gen.task import Answer, Task, TaskContext

_OPENERS = ("", "hey", "hi", "um", "okay", "so")


def no_tool(ctx: TaskContext, domain: Domain) -> Task:
    """One of four no-tool requests, worded variously; the answer names what the request calls for."""
    u = ctx.utterance()
    u.say(ctx.pick(_OPENERS))
    kind = ctx.rng.randrange(4)
    if kind == 0:
        u.say(ctx.pick(["what can you", "what kinds of things can you", "remind me what you can"]))
        u.say(ctx.pick(["help me with", "do for me", "do here"]))
        first, second = ctx.rng.sample([tool.name.replace("_", " ") for tool in domain.tools], 2)
        answer = Answer(f"I can {first}, {second}, and more in {domain.name.replace('_', ' ')}.", [first, second])
    elif kind == 1:
        u.say(ctx.pick(["thanks, that's all", "great, that's everything", "perfect, thank you so much"]))
        u.say(ctx.pick(["for now", "for today", ""]))
        answer = Answer(ctx.pick(["You're welcome!", "Happy to help.", "Anytime, have a good day."]))
    elif kind == 2:
        u.say(
            ctx.pick(["how are you", "how's it going", "how are you doing"]), ctx.pick(["today", "", "this morning"])
        )
        answer = Answer(ctx.pick(["Doing well, thanks! What can I do for you?", "All good here. How can I help?"]))
    else:
        word = ctx.pick(["itinerary", "receipt", "schedule", "thermostat", "reservation", "forecast"])
        u.say(ctx.pick(["how do you spell", "can you spell"]), word)
        answer = Answer(f"{word}: {'-'.join(word.upper())}.", ["-".join(word.upper())])
    turn = u.done(calls=[], answer=lambda results: answer, tail=0.3)
    return Task("no_tool", [turn])
