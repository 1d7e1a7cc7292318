"""Weather and news: forecasts by city and day, headlines by topic, alerts and subscriptions."""

from __future__ import annotations

import random
from typing import Any

from data_gen.domains.base import Domain, ToolError, tool
from data_gen.task import Answer, Task, TaskContext, call, ref

CITIES = (
    "Paris", "Lyon", "Berlin", "Madrid", "Rome", "Boston", "Chicago", "Denver", "Seattle", "Austin",
    "Toronto", "Tokyo", "Sydney", "Lisbon", "Dublin", "Oslo",
)  # fmt: skip
DAYS = ("today", "tomorrow", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "stormy", "clear")
TOPICS = ("sports", "technology", "politics", "business", "science", "health", "music", "movies")

TOOLS = [
    tool(
        "get_weather",
        "Current or forecast weather for a city on a day.",
        {"city": {"type": "string"}, "day": {"type": "string", "enum": list(DAYS)}},
        latency_s=0.5,
    ),
    tool("get_headlines", "Top news headlines on a topic.", {"topic": {"type": "string", "enum": list(TOPICS)}}),
    tool(
        "set_weather_alert",
        "Alerts the user when a condition is forecast for a city.",
        {"city": {"type": "string"}, "condition": {"type": "string", "enum": list(CONDITIONS)}},
        side_effect=True,
        latency_s=0.7,
    ),
    tool(
        "subscribe_topic",
        "Subscribes the user to a daily digest on a topic.",
        {"topic": {"type": "string", "enum": list(TOPICS)}},
        side_effect=True,
    ),
]


def initial_state(rng: random.Random) -> dict[str, Any]:
    """A forecast for a handful of cities, two headlines per topic, no alerts or subscriptions yet."""
    forecast = {
        city: {day: {"temp_c": rng.randint(-5, 34), "conditions": rng.choice(CONDITIONS)} for day in DAYS}
        for city in rng.sample(CITIES, 6)
    }
    headlines = {topic: [f"{topic.title()} story {rng.randint(100, 999)}" for _ in range(2)] for topic in TOPICS}
    return {"forecast": forecast, "headlines": headlines, "alerts": [], "subscriptions": []}


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one weather/news call against ``state``."""
    if name == "get_weather":
        city, day = arguments["city"], arguments["day"]
        if city not in state["forecast"]:
            raise ToolError(f"no forecast for {city}")
        return {"city": city, "day": day, **state["forecast"][city][day]}
    if name == "get_headlines":
        return {"topic": arguments["topic"], "headlines": state["headlines"][arguments["topic"]]}
    if name == "set_weather_alert":
        alert = {"city": arguments["city"], "condition": arguments["condition"]}
        state["alerts"].append(alert)
        return {"ok": True, "alert_id": f"al{len(state['alerts'])}"}
    if name == "subscribe_topic":
        if arguments["topic"] in state["subscriptions"]:
            raise ToolError(f"already subscribed to {arguments['topic']}")
        state["subscriptions"].append(arguments["topic"])
        return {"ok": True}
    raise ToolError(f"unknown tool {name}")


def _weather_answer(key: str, city: str) -> Answer:
    def answer(results: dict[str, Any]) -> Answer:
        w = results[key]
        return Answer(f"In {city} it's {w['temp_c']} degrees and {w['conditions']} {w['day']}.", [str(w["temp_c"])])

    return answer


def weather_lookup(ctx: TaskContext) -> Task:
    """One forecast; the day is guessed as today until the user names it, so some guesses get corrected."""
    city = ctx.pick(list(ctx.state["forecast"]))
    day = ctx.pick(DAYS)
    u = ctx.utterance()
    u.say(ctx.pick(["", "hey,", "so", "okay so"]))
    u.say(ctx.pick(["what's the weather", "how's the weather looking", "what's it going to be like", "check weather"]))
    u.say("in", city).reading([call("w", "get_weather", city=city, day="today")], ctx.guess())
    u.say(ctx.pick(["for", "on", ""]) if day not in ("today", "tomorrow") else "", day)
    u.reading([call("w", "get_weather", city=city, day=day)], ctx.confident())
    return Task("lookup", [u.done(answer=_weather_answer("w", city))])


def weather_compare(ctx: TaskContext) -> Task:
    """Two cities on the same day: parallel calls."""
    first, second = ctx.rng.sample(list(ctx.state["forecast"]), 2)
    day = ctx.pick(DAYS)
    u = ctx.utterance()
    u.say(ctx.pick(["is it warmer in", "which is warmer,", "compare the weather in"]), first)
    u.reading([call("a", "get_weather", city=first, day=day)], ctx.unsure())
    u.say(ctx.pick(["or", "versus", "and"]), second, day)
    calls = [call("a", "get_weather", city=first, day=day), call("b", "get_weather", city=second, day=day)]
    u.reading(calls, ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        a, b = results["a"], results["b"]
        warmer = first if a["temp_c"] >= b["temp_c"] else second
        text = f"{first} is {a['temp_c']} degrees and {second} is {b['temp_c']}, so {warmer} is warmer {day}."
        return Answer(text, [str(a["temp_c"]), str(b["temp_c"]), warmer])

    return Task("compare", [u.done(answer=answer)])


def alert_with_correction(ctx: TaskContext) -> Task:
    """A state-changing alert whose condition the user corrects mid-sentence."""
    city = ctx.pick(list(ctx.state["forecast"]))
    wrong, right = ctx.rng.sample(CONDITIONS, 2)
    u = ctx.utterance()
    u.say(ctx.pick(["let me know if it gets", "alert me when it's", "warn me if it turns"]), wrong, "in", city)
    u.reading([call("alert", "set_weather_alert", city=city, condition=wrong)], ctx.confident())
    u.say(ctx.pick(["actually no,", "sorry, I mean", "wait, make that"]), right)
    u.reading([call("alert", "set_weather_alert", city=city, condition=right)], ctx.confident())
    answer = Answer(f"Done, I'll alert you when it's {right} in {city}.", [right, city])
    return Task("correction", [u.done(answer=lambda results: answer)])


def news_then_subscribe(ctx: TaskContext) -> Task:
    """Headlines, then (late in the sentence) a subscription to the same topic."""
    topic = ctx.pick(TOPICS)
    u = ctx.utterance()
    u.say(ctx.pick(["what's new in", "any news on", "give me the latest"]), topic)
    u.reading([call("news", "get_headlines", topic=topic)], ctx.confident())
    u.say(ctx.pick(["and sign me up for the", "and subscribe me to the"]), topic, "digest")
    calls = [call("news", "get_headlines", topic=topic), call("sub", "subscribe_topic", topic=topic)]
    u.reading(calls, ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        top = results["news"]["headlines"][0]
        return Answer(f"Top {topic} headline: {top}. You're subscribed to the {topic} digest.", [top])

    return Task("lookup_and_act", [u.done(answer=answer)])


def alert_like_forecast(ctx: TaskContext) -> Task:
    """A forecast, then an alert for whatever it forecasts: the alert's condition is the forecast's result."""
    city = ctx.pick(list(ctx.state["forecast"]))
    day = ctx.pick(DAYS[1:])
    u = ctx.utterance()
    u.say(ctx.pick(["what's the forecast for", "check the weather for", "how does it look for"]), city, day)
    lookup = call("w", "get_weather", city=city, day=day)
    u.reading([lookup], ctx.confident())
    u.say(ctx.pick(["and set an alert for", "and warn me whenever it's", "then alert me about"]))
    u.say(ctx.pick(["that", "those conditions", "that kind of weather"]))
    u.reading(
        [lookup, call("alert", "set_weather_alert", city=city, condition=ref("w", "conditions"))], ctx.confident()
    )

    def answer(results: dict[str, Any]) -> Answer:
        w = results["w"]
        return Answer(f"{city} {day}: {w['temp_c']} degrees, {w['conditions']}. Alert set.", [str(w["temp_c"])])

    return Task("dependent", [u.done(answer=answer)])


def weather_two_turns(ctx: TaskContext) -> Task:
    """The user asks without a city; the agent asks back, and the city arrives in a second utterance."""
    city = ctx.pick(list(ctx.state["forecast"]))
    first = ctx.utterance()
    first.say(
        ctx.pick(["", "hey", "so"]), ctx.pick(["what's the weather like", "is it nice out", "how's the weather"])
    )
    ask = first.done(calls=[], answer=lambda results: Answer(ctx.pick(["Which city?", "Where are you asking about?"])))
    second = ctx.utterance()
    second.say(ctx.pick(["", "um", "oh"]), ctx.pick(["in", "for", "I mean in"]), city)
    second.reading([call("w", "get_weather", city=city, day="today")], ctx.confident())
    return Task("multi_turn", [ask, second.done(answer=_weather_answer("w", city))])


DOMAIN = Domain(
    name="weather_news",
    tools=TOOLS,
    initial_state=initial_state,
    execute=execute,
    grammars=[
        (weather_lookup, 2.0),
        (weather_compare, 3.0),
        (alert_with_correction, 2.5),
        (news_then_subscribe, 1.5),
        (alert_like_forecast, 3.0),
        (weather_two_turns, 1.5),
    ],
)
