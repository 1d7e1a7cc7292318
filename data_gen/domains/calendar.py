"""Calendar: a week of events, free-slot search, creating, moving and cancelling events, and reminders."""

from __future__ import annotations

import random
from typing import Any

from data_gen.domains.base import Domain, ToolError, tool
from data_gen.task import Answer, PlannedCall, Task, TaskContext, call, ref

DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
DURATIONS = (30, 60, 90, 120)
REMINDERS = (5, 10, 15, 30, 60)
DAY_START, DAY_END = 9 * 60, 18 * 60
# Events already on the calendar, with the word a user searches them by.
EVENTS = (
    ("team sync", "sync"), ("dentist appointment", "dentist"), ("budget review", "budget"),
    ("lunch with Sam", "lunch"), ("yoga class", "yoga"), ("design review", "design"),
    ("one on one with Priya", "Priya"), ("haircut", "haircut"), ("parent teacher meeting", "teacher"),
    ("call with the bank", "bank"), ("coffee with Alex", "coffee"), ("project kickoff", "kickoff"),
    ("piano lesson", "piano"), ("car service", "car"),
)  # fmt: skip
KEYWORDS = dict(EVENTS)
# Events users add: the article they say before the title, and the title.
NEW_TITLES = (
    ("a", "gym session"), ("a", "doctor's appointment"), ("a", "study group"), ("a", "grocery run"),
    ("a", "vet visit"), ("", "book club"), ("some", "focus time"), ("", "interview prep"),
    ("a", "call with mom"), ("a", "date night"),
)  # fmt: skip
LOCATIONS = ("room 4B", "the main office", "downtown", "a video call", "the cafe on 5th", "home")
TIME_PATTERN = "^([01][0-9]|2[0-3]):[0-5][0-9]$"

TOOLS = [
    tool(
        "list_events",
        "The user's events on one day of this week, earliest first.",
        {"day": {"type": "string", "enum": list(DAYS)}},
        latency_s=0.4,
    ),
    tool(
        "find_free_slots",
        "Free gaps of at least a duration between 09:00 and 18:00 on a day, earliest first.",
        {
            "day": {"type": "string", "enum": list(DAYS)},
            "duration_min": {"type": "integer", "enum": list(DURATIONS)},
        },
        latency_s=0.8,
    ),
    tool(
        "search_events",
        "Events whose title contains a word, next occurrence first.",
        {"query": {"type": "string", "minLength": 2}},
        latency_s=0.9,
    ),
    tool(
        "get_event", "Details of one event: time, place and reminder.", {"event_id": {"type": "string"}}, latency_s=0.3
    ),
    tool(
        "create_event",
        "Adds an event to the calendar, optionally with a reminder.",
        {
            "title": {"type": "string", "minLength": 1},
            "day": {"type": "string", "enum": list(DAYS)},
            "start": {"type": "string", "pattern": TIME_PATTERN},
            "duration_min": {"type": "integer", "enum": list(DURATIONS)},
            "reminder_min": {"type": "integer", "enum": list(REMINDERS)},
        },
        required=["title", "day", "start", "duration_min"],
        side_effect=True,
        latency_s=0.7,
    ),
    tool(
        "update_event",
        "Moves an event to another day or time and/or sets its reminder.",
        {
            "event_id": {"type": "string"},
            "day": {"type": "string", "enum": list(DAYS)},
            "start": {"type": "string", "pattern": TIME_PATTERN},
            "reminder_min": {"type": "integer", "enum": list(REMINDERS)},
        },
        required=["event_id"],
        side_effect=True,
        latency_s=0.7,
    ),
    tool(
        "cancel_event",
        "Removes an event from the calendar.",
        {"event_id": {"type": "string"}},
        side_effect=True,
        latency_s=0.6,
    ),
]


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _minutes(hhmm: str) -> int:
    try:
        hours, minutes = hhmm.split(":")
        return int(hours) * 60 + int(minutes)
    except (AttributeError, ValueError) as error:
        raise ToolError(f"bad time {hhmm!r}, expected HH:MM") from error


def _conflict(events: list[dict], day: str, start: int, duration: int, skip: str = "") -> dict | None:
    for event in events:
        if event["day"] == day and event["id"] != skip:
            begin = _minutes(event["start"])
            if begin < start + duration and start < begin + event["duration_min"]:
                return event
    return None


def _free(events: list[dict], day: str, duration: int, skip: str = "") -> list[tuple[int, int]]:
    busy = sorted(
        (_minutes(e["start"]), _minutes(e["start"]) + e["duration_min"])
        for e in events
        if e["day"] == day and e["id"] != skip
    )
    slots, cursor = [], DAY_START
    for start, end in busy:
        if min(start, DAY_END) - cursor >= duration:
            slots.append((cursor, min(start, DAY_END)))
        cursor = max(cursor, end)
    if DAY_END - cursor >= duration:
        slots.append((cursor, DAY_END))
    return slots


def initial_state(rng: random.Random) -> dict[str, Any]:
    """About ten non-overlapping events spread over the week; today is a weekday."""
    events: list[dict] = []
    for title, _ in rng.sample(EVENTS, 10):
        day = rng.choice(DAYS)
        duration = rng.choice((30, 60, 60, 90))
        start = DAY_START + 30 * rng.randrange((DAY_END - DAY_START - duration) // 30 + 1)
        if _conflict(events, day, start, duration):
            continue
        events.append(
            {
                "id": f"ev{len(events) + 1}",
                "title": title,
                "day": day,
                "start": _hhmm(start),
                "duration_min": duration,
                "location": rng.choice(LOCATIONS),
                "reminder_min": 0,
            }
        )
    return {"today": rng.choice(DAYS[:5]), "events": events, "next_id": len(events) + 1}


def _brief(event: dict) -> dict[str, Any]:
    end = _hhmm(_minutes(event["start"]) + event["duration_min"])
    return {"id": event["id"], "title": event["title"], "day": event["day"], "start": event["start"], "end": end}


def _find(state: dict[str, Any], event_id: str) -> dict:
    for event in state["events"]:
        if event["id"] == event_id:
            return event
    raise ToolError(f"no event {event_id}")


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one calendar call against ``state``."""
    events = state["events"]
    if name == "list_events":
        day = arguments["day"]
        found = sorted((e for e in events if e["day"] == day), key=lambda e: e["start"])
        return {"day": day, "events": [_brief(e) for e in found]}
    if name == "find_free_slots":
        day, duration = arguments["day"], arguments["duration_min"]
        slots = [{"start": _hhmm(a), "end": _hhmm(b)} for a, b in _free(events, day, duration)]
        return {"day": day, "duration_min": duration, "slots": slots}
    if name == "search_events":
        word = arguments["query"].lower()
        today = DAYS.index(state["today"])
        found = sorted(
            (e for e in events if word in e["title"].lower()),
            key=lambda e: ((DAYS.index(e["day"]) - today) % 7, e["start"]),
        )
        return {"query": arguments["query"], "results": [_brief(e) for e in found]}
    if name == "get_event":
        event = _find(state, arguments["event_id"])
        return {**_brief(event), "location": event["location"], "reminder_min": event["reminder_min"]}
    if name == "create_event":
        day, start, duration = arguments["day"], _minutes(arguments["start"]), arguments["duration_min"]
        clash = _conflict(events, day, start, duration)
        if clash:
            raise ToolError(f"conflicts with {clash['title']} at {clash['start']} on {day}")
        event = {
            "id": f"ev{state['next_id']}",
            "title": arguments["title"],
            "day": day,
            "start": _hhmm(start),
            "duration_min": duration,
            "location": "",
            "reminder_min": arguments.get("reminder_min", 0),
        }
        state["next_id"] += 1
        events.append(event)
        return {"ok": True, "event_id": event["id"], **_brief(event), "reminder_min": event["reminder_min"]}
    if name == "update_event":
        event = _find(state, arguments["event_id"])
        if not {"day", "start", "reminder_min"} & arguments.keys():
            raise ToolError("nothing to change: give a day, a start or a reminder")
        day = arguments.get("day", event["day"])
        start = _minutes(arguments.get("start", event["start"]))
        clash = _conflict(events, day, start, event["duration_min"], skip=event["id"])
        if clash:
            raise ToolError(f"conflicts with {clash['title']} at {clash['start']} on {day}")
        event["day"], event["start"] = day, _hhmm(start)
        event["reminder_min"] = arguments.get("reminder_min", event["reminder_min"])
        return {"ok": True, "event_id": event["id"], **_brief(event), "reminder_min": event["reminder_min"]}
    if name == "cancel_event":
        event = _find(state, arguments["event_id"])
        events.remove(event)
        return {"ok": True, "event_id": event["id"], "title": event["title"], "day": event["day"]}
    raise ToolError(f"unknown tool {name}")


def _say_day(ctx: TaskContext, day: str, bare: bool = False) -> str:
    offset = (DAYS.index(day) - DAYS.index(ctx.state["today"])) % 7
    relative = {0: ["today"], 1: ["tomorrow"]}.get(offset, [])
    named = [day, f"this {day}"] if bare else [f"on {day}", day, f"this {day}"]
    return ctx.pick(relative * 2 + named)


def _say_hour(ctx: TaskContext, hour: int) -> str:
    if hour == 12:
        return ctx.pick(["noon", "12 pm", "midday"])
    if hour < 12:
        return ctx.pick([f"{hour} am", f"{hour} in the morning", f"{hour} o'clock"])
    return ctx.pick([f"{hour - 12} pm", f"{hour - 12} in the afternoon", f"{hour - 12} o'clock"])


def _say_duration(ctx: TaskContext, duration: int) -> str:
    options = {
        30: ["half an hour", "30 minutes", "thirty minutes"],
        60: ["an hour", "one hour", "60 minutes"],
        90: ["an hour and a half", "90 minutes", "ninety minutes"],
        120: ["two hours", "2 hours", "a couple of hours"],
    }
    return ctx.pick(options[duration])


def _free_hour(ctx: TaskContext, duration: int, skip: str = "", avoid: tuple = ()) -> tuple[str, int]:
    """A day and a whole hour at which ``duration`` minutes are free (ignoring event ``skip``)."""
    for day in ctx.rng.sample(DAYS, len(DAYS)):
        slots = _free(ctx.state["events"], day, duration, skip)
        hours = [
            hour
            for hour in range(9, 18)
            if (day, hour) != avoid and any(a <= hour * 60 and hour * 60 + duration <= b for a, b in slots)
        ]
        if hours:
            return day, ctx.pick(hours)
    return ctx.pick(DAYS), 9


def _agenda_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        day, events = results[key]["day"], results[key]["events"]
        if not events:
            return Answer(f"Nothing is on your calendar on {day}, it's clear.", [day])
        items = ", ".join(f"{e['title']} at {e['start']}" for e in events)
        count = f"{len(events)} event" + ("s" if len(events) > 1 else "")
        return Answer(f"On {day} you have {count}: {items}.", [count, events[0]["title"], events[0]["start"]])

    return answer


def _free_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        r = results[key]
        if not r["slots"]:
            return Answer(f"You don't have {r['duration_min']} free minutes on {r['day']}.", [r["day"]])
        first = r["slots"][0]
        more = f" and {len(r['slots']) - 1} more gap(s) after that" if len(r["slots"]) > 1 else ""
        return Answer(f"On {r['day']} you're free from {first['start']} to {first['end']}{more}.", [first["start"]])

    return answer


def _booked_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        r = results[key]
        reminder = f", with a reminder {r['reminder_min']} minutes before" if r["reminder_min"] else ""
        text = f"Done, {r['title']} is on {r['day']} from {r['start']} to {r['end']}{reminder}."
        return Answer(text, [r["title"], r["day"], r["start"]])

    return answer


def agenda_lookup(ctx: TaskContext) -> Task:
    """One day's agenda or free time; the day is guessed as today until the user names it."""
    day, today = ctx.pick(DAYS), ctx.state["today"]
    u = ctx.utterance()
    u.say(ctx.pick(["", "hey,", "so", "um", "okay"]))
    if ctx.rng.random() < 0.55:
        u.say(
            ctx.pick(
                [
                    "what's on my calendar",
                    "what do I have",
                    "what does my schedule look like",
                    "what meetings do I have",
                    "anything on my calendar",
                ]
            )
        )
        u.reading([call("day", "list_events", day=today)], ctx.guess())
        u.say(_say_day(ctx, day)).reading([call("day", "list_events", day=day)], ctx.confident())
        return Task("lookup", [u.done(answer=_agenda_answer("day"))])
    duration = ctx.pick(DURATIONS)
    u.say(ctx.pick(["when am I free", "when do I have time", "find me a free slot", "is there a gap"]))
    u.say("for", _say_duration(ctx, duration))
    u.reading([call("free", "find_free_slots", day=today, duration_min=duration)], ctx.guess())
    u.say(_say_day(ctx, day)).reading(
        [call("free", "find_free_slots", day=day, duration_min=duration)], ctx.confident()
    )
    return Task("lookup", [u.done(answer=_free_answer("free"))])


def compare_days(ctx: TaskContext) -> Task:
    """Two or three days side by side: one read-only call per day, run in parallel."""
    days = ctx.rng.sample(DAYS, ctx.pick([2, 2, 3]))
    busy = ctx.rng.random() < 0.5

    def make(index: int) -> PlannedCall:
        if busy:
            return call(f"d{index}", "list_events", day=days[index])
        return call(f"d{index}", "find_free_slots", day=days[index], duration_min=60)

    u = ctx.utterance()
    u.say(ctx.pick(["", "so", "hey,", "quick one,"]))
    if busy:
        u.say(ctx.pick(["am I busier on", "which day is busier,", "compare my schedule on", "how packed am I on"]))
    else:
        u.say(ctx.pick(["where do I have a free hour,", "which day has a free hour,", "compare my free time on"]))
    u.say(days[0] if len(days) == 2 else days[0] + ",").reading([make(0)], ctx.unsure())
    if len(days) == 3:
        u.say(days[1]).reading([make(0), make(1)], ctx.unsure())
    u.say(ctx.pick(["or", "versus", "and"]), days[-1]).reading([make(i) for i in range(len(days))], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        rows = [results[f"d{i}"] for i in range(len(days))]
        if busy:
            counts = [len(r["events"]) for r in rows]
            parts = [f"{n} event(s) on {r['day']}" for n, r in zip(counts, rows, strict=True)]
            if len(set(counts)) == 1:
                return Answer(f"You have {', '.join(parts)}, so they're equally busy.", parts)
            busiest = rows[counts.index(max(counts))]["day"]
            return Answer(f"You have {', '.join(parts)}, so {busiest} is busiest.", [*parts, busiest])
        parts = [
            f"{r['day']} from {r['slots'][0]['start']}" if r["slots"] else f"nothing free on {r['day']}" for r in rows
        ]
        return Answer(f"Your first free hour: {'; '.join(parts)}.", parts)

    return Task("compare", [u.done(answer=answer)])


def book_free_slot(ctx: TaskContext) -> Task:
    """Finds the first free slot on a day and books a new event there: a read-only search feeding a booking."""
    duration = ctx.pick(DURATIONS[:3])
    days = [d for d in DAYS if _free(ctx.state["events"], d, duration)]
    day = ctx.pick(days or DAYS)
    article, title = ctx.pick(NEW_TITLES)
    size = {
        30: ["half hour", "30 minute slot", "half hour slot"],
        60: ["hour", "hour long slot", "60 minute slot"],
        90: ["hour and a half", "90 minute slot", "ninety minute block"],
    }
    free = call("free", "find_free_slots", day=day, duration_min=duration)

    def book(**extra: Any) -> PlannedCall:
        start = ref("free", "slots.0.start")
        return call("book", "create_event", title=title, day=day, start=start, duration_min=duration, **extra)

    u = ctx.utterance()
    u.say(ctx.pick(["", "hey,", "so", "okay so"]))
    if ctx.rng.random() < 0.5:
        u.say(ctx.pick(["find me a free", "look for a free", "find the first free"]), ctx.pick(size[duration]))
        u.say(_say_day(ctx, day)).reading([free], ctx.confident())
        u.say(ctx.pick(["and book", "and put", "and schedule"]), article, title, ctx.pick(["in it", "there", ""]))
    else:
        u.say(ctx.pick(["book", "schedule", "put"]), article, title)
        u.say(ctx.pick(["in my first free", "in the earliest free", "in the next open"]), ctx.pick(size[duration]))
        u.reading([call("free", "find_free_slots", day=ctx.state["today"], duration_min=duration)], ctx.unsure())
        u.say(_say_day(ctx, day))
    u.reading([free, book()], ctx.confident())
    if ctx.rng.random() < 0.3:
        minutes = ctx.pick(REMINDERS)
        u.say(ctx.pick(["and remind me", "with a reminder", "and ping me"]), str(minutes), "minutes before")
        u.reading([free, book(reminder_min=minutes)], ctx.confident())
    return Task("dependent", [u.done(answer=_booked_answer("book"))])


def event_by_name(ctx: TaskContext) -> Task:
    """Finds an existing event by name, then moves, cancels, reminds about or describes the event found."""
    event = ctx.pick(ctx.state["events"])
    title, word = event["title"], KEYWORDS[event["title"]]
    find = call("find", "search_events", query=word)
    found = ref("find", "results.0.id")
    action = ctx.pick(["move", "cancel", "remind", "details"])
    u = ctx.utterance()
    u.say(ctx.pick(["", "hey,", "so", "um,"]))
    if action == "move":
        day, hour = _free_hour(
            ctx, event["duration_min"], skip=event["id"], avoid=(event["day"], int(event["start"][:2]))
        )
        start = f"{hour:02d}:00"
        u.say(ctx.pick(["move", "push", "reschedule", "can you move"]), "my", title).reading([find], ctx.confident())
        u.say("to", _say_day(ctx, day, bare=True))
        u.reading([find, call("act", "update_event", event_id=found, day=day, start=event["start"])], ctx.unsure())
        u.say("at", _say_hour(ctx, hour))
        u.reading([find, call("act", "update_event", event_id=found, day=day, start=start)], ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            r = results["act"]
            return Answer(f"Moved {r['title']} to {r['day']} at {r['start']}.", [r["day"], r["start"]])

    elif action == "cancel":
        u.say(ctx.pick(["cancel", "delete", "call off", "please drop"]), "my", title)
        u.reading([find, call("act", "cancel_event", event_id=found)], ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            r = results["act"]
            return Answer(f"I've cancelled your {r['title']} on {r['day']}.", [r["title"], r["day"]])

    elif action == "remind":
        minutes = ctx.pick(REMINDERS)
        act = call("act", "update_event", event_id=found, reminder_min=minutes)
        if ctx.rng.random() < 0.5:
            u.say(ctx.pick(["remind me", "ping me", "give me a heads up"]), str(minutes), "minutes before my", title)
        else:
            u.say(ctx.pick(["set a reminder for my", "add a reminder to my", "I need a reminder for my"]), title)
            u.reading([find], ctx.confident())
            u.say(str(minutes), ctx.pick(["minutes before", "minutes ahead", "minutes early"]))
        u.reading([find, act], ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            r = results["act"]
            text = f"I'll remind you {r['reminder_min']} minutes before {r['title']} on {r['day']} at {r['start']}."
            return Answer(text, [str(r["reminder_min"]), r["start"]])

    else:
        u.say(ctx.pick(["where is my", "when and where is my", "what are the details of my", "tell me about my"]))
        u.say(title).reading([find, call("act", "get_event", event_id=found)], ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            r = results["act"]
            text = f"Your {r['title']} is on {r['day']} from {r['start']} to {r['end']} at {r['location']}."
            return Answer(text, [r["day"], r["start"], r["location"]])

    return Task("dependent", [u.done(answer=answer)])


def slot_then_intent(ctx: TaskContext) -> Task:
    """Day and time come first and the intent last; the day's agenda is the early guess."""
    intent = ctx.pick(["agenda", "free", "book", "book"])
    day, hour = _free_hour(ctx, 60) if intent == "book" else (ctx.pick(DAYS), ctx.rng.randint(9, 17))
    start = f"{hour:02d}:00"
    u = ctx.utterance()
    u.say(ctx.pick(["", "so", "okay,", "um"]))
    if ctx.rng.random() < 0.5:
        u.say(_say_day(ctx, day), "at", _say_hour(ctx, hour) + ",")
    else:
        u.say("at", _say_hour(ctx, hour), _say_day(ctx, day) + ",")
    u.reading([call("day", "list_events", day=day)], ctx.guess())
    if intent == "agenda":
        u.say(ctx.pick(["what do I have", "what's on my calendar", "do I have anything"]))
        u.say(ctx.pick(["", "that day", "then"])).reading([call("day", "list_events", day=day)], ctx.confident())
        answer = _agenda_answer("day")
    elif intent == "free":
        u.say(ctx.pick(["am I free", "am I available", "is that open", "do I have an hour free"]))
        u.reading([call("free", "find_free_slots", day=day, duration_min=60)], ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            fits = any(_minutes(s["start"]) <= hour * 60 <= _minutes(s["end"]) - 60 for s in results["free"]["slots"])
            verdict = "yes, you're free" if fits else "no, you're busy"
            return Answer(f"For {day} at {start}: {verdict}.", [start, verdict])

    else:
        article, title = ctx.pick(NEW_TITLES)
        u.say(ctx.pick(["put", "schedule", "book", "add"]), article, title)
        u.reading([call("book", "create_event", title=title, day=day, start=start, duration_min=60)], ctx.confident())
        u.say(ctx.pick(["", "on my calendar", "for an hour"]))
        answer = _booked_answer("book")
    return Task("late_intent", [u.done(answer=answer)])


def create_with_correction(ctx: TaskContext) -> Task:
    """A new event whose day or time the user corrects mid-sentence; the booking waits for the final words."""
    article, title = ctx.pick(NEW_TITLES)
    day, hour = _free_hour(ctx, 60)
    fix_day = ctx.rng.random() < 0.5
    wrong_day = ctx.pick([d for d in DAYS if d != day]) if fix_day else day
    wrong_hour = hour if fix_day else ctx.pick([h for h in range(9, 18) if h != hour])

    def book(d: str, h: int, **extra: Any) -> PlannedCall:
        return call("book", "create_event", title=title, day=d, start=f"{h:02d}:00", duration_min=60, **extra)

    u = ctx.utterance()
    u.say(ctx.pick(["", "hey,", "so"]), ctx.pick(["schedule", "add", "put", "book"]), article, title)
    u.say(_say_day(ctx, wrong_day), "at", _say_hour(ctx, wrong_hour) + ",").reading(
        [book(wrong_day, wrong_hour)], ctx.confident()
    )
    u.say(ctx.pick(["actually, make it", "sorry, I mean", "no wait,", "actually no,"]))
    if fix_day:
        u.say(_say_day(ctx, day, bare=True))
    else:
        u.say(ctx.pick(["", "at"]), _say_hour(ctx, hour))
    u.reading([book(day, hour)], ctx.confident())
    if ctx.rng.random() < 0.25:
        minutes = ctx.pick(REMINDERS)
        u.say(ctx.pick(["and remind me", "with a reminder", "and ping me"]), str(minutes), "minutes before")
        u.reading([book(day, hour, reminder_min=minutes)], ctx.confident())
    return Task("correction", [u.done(answer=_booked_answer("book"))])


def two_turn_scheduling(ctx: TaskContext) -> Task:
    """The first utterance lacks the day, the agent asks for it, the second utterance supplies it."""
    first = ctx.utterance()
    first.say(ctx.pick(["", "hey,", "hi,", "so"]))
    second = ctx.utterance()
    second.say(ctx.pick(["", "um", "let's do", "how about"]))
    if ctx.rng.random() < 0.6:
        article, title = ctx.pick(NEW_TITLES)
        day, hour = _free_hour(ctx, 60)
        verb = ctx.pick(["I need to add", "can you put", "please schedule", "I want to book"])
        first.say(verb, article, title, ctx.pick(["", "on my calendar"]) if verb != "please schedule" else "")
        turn1 = first.done(calls=[], answer=lambda results: Answer("Sure, for which day and time?"), tail=0.3)
        second.say(_say_day(ctx, day), "at", _say_hour(ctx, hour))
        booking = {"title": title, "day": day, "start": f"{hour:02d}:00"}
        second.reading([call("book", "create_event", duration_min=60, **booking)], ctx.confident())
        if ctx.rng.random() < 0.3:
            fits = [d for d in (30, 90, 120) if not _conflict(ctx.state["events"], day, hour * 60, d)]
            duration = ctx.pick(fits)
            second.say(ctx.pick(["for", "and make it", "lasting"]), _say_duration(ctx, duration))
            second.reading([call("book", "create_event", duration_min=duration, **booking)], ctx.confident())
        turn2 = second.done(answer=_booked_answer("book"))
    else:
        duration = ctx.pick(DURATIONS)
        first.say(ctx.pick(["when am I free for", "I need to find", "can you find me"]), _say_duration(ctx, duration))
        turn1 = first.done(calls=[], answer=lambda results: Answer("Sure, on which day?"), tail=0.3)
        day = ctx.pick(DAYS)
        second.say(_say_day(ctx, day)).reading(
            [call("free", "find_free_slots", day=day, duration_min=duration)], ctx.confident()
        )
        turn2 = second.done(answer=_free_answer("free"))
    return Task("multi_turn", [turn1, turn2])


DOMAIN = Domain(
    name="calendar",
    tools=TOOLS,
    initial_state=initial_state,
    execute=execute,
    grammars=[
        (agenda_lookup, 2.0),
        (compare_days, 3.0),
        (book_free_slot, 3.0),
        (event_by_name, 3.0),
        (slot_then_intent, 1.5),
        (create_with_correction, 2.5),
        (two_turn_scheduling, 1.5),
    ],
)
