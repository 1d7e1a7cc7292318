"""Restaurants: search by cuisine and area, menus and ratings, table availability, booking and cancelling."""

from __future__ import annotations

import random
from typing import Any

from data_gen.domains.base import Domain, ToolError, tool
from data_gen.task import Answer, PlannedCall, Task, TaskContext, UtteranceBuilder, call, ref

CUISINES = ("italian", "japanese", "mexican", "indian", "french", "thai", "chinese", "greek")
PLACES = {
    "italian": ("Bella Notte", "Trattoria Roma"),
    "japanese": ("Sakura", "Kyoto House"),
    "mexican": ("El Toro", "Casa Maya"),
    "indian": ("Spice Route", "Tandoor Palace"),
    "french": ("Chez Marie", "Le Petit Bistro"),
    "thai": ("Bangkok Garden", "Lotus Thai"),
    "chinese": ("Golden Dragon", "Jade Garden"),
    "greek": ("Olive Tree", "Mykonos"),
}
DISHES = {
    "italian": ("lasagna", "risotto", "margherita pizza", "tiramisu"),
    "japanese": ("ramen", "sushi platter", "tempura", "miso soup"),
    "mexican": ("tacos", "enchiladas", "burrito", "guacamole"),
    "indian": ("butter chicken", "lamb biryani", "dal", "samosas"),
    "french": ("onion soup", "coq au vin", "steak frites", "creme brulee"),
    "thai": ("pad thai", "green curry", "tom yum", "mango sticky rice"),
    "chinese": ("dumplings", "kung pao chicken", "fried rice", "peking duck"),
    "greek": ("moussaka", "souvlaki", "greek salad", "baklava"),
}
AREAS = ("downtown", "midtown", "harbor", "old town", "riverside")
DAYS = ("today", "tomorrow", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
TIMES = ("17:30", "18:00", "18:30", "19:00", "19:30", "20:00", "20:30", "21:00")
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
FILLERS = ("", "", "so", "um,", "hey,", "okay so")
DEFAULT_DAY, DEFAULT_TIME, DEFAULT_PARTY = "today", "19:00", 2

TOOLS = [
    tool(
        "search_restaurants",
        "Restaurants serving a cuisine, optionally in one area, best rated first.",
        {"cuisine": {"type": "string", "enum": list(CUISINES)}, "area": {"type": "string", "enum": list(AREAS)}},
        required=["cuisine"],
        latency_s=1.0,
    ),
    tool("get_menu", "Dishes and prices of one restaurant.", {"restaurant_id": {"type": "string"}}, latency_s=0.5),
    tool(
        "get_rating",
        "Guest rating, review count and price level of one restaurant.",
        {"restaurant_id": {"type": "string"}},
        latency_s=0.4,
    ),
    tool(
        "check_availability",
        "Whether a restaurant has a table for a party at a day and time, and which times are free that day.",
        {
            "restaurant_id": {"type": "string"},
            "day": {"type": "string", "enum": list(DAYS)},
            "time": {"type": "string", "enum": list(TIMES)},
            "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
        },
        latency_s=0.6,
    ),
    tool(
        "find_reservations",
        "The user's confirmed reservations at one restaurant.",
        {"restaurant_id": {"type": "string"}},
        latency_s=0.3,
    ),
    tool(
        "book_table",
        "Reserves a table for a party at a day and time.",
        {
            "restaurant_id": {"type": "string"},
            "day": {"type": "string", "enum": list(DAYS)},
            "time": {"type": "string", "enum": list(TIMES)},
            "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
        },
        side_effect=True,
        latency_s=0.8,
    ),
    tool(
        "cancel_reservation",
        "Cancels one of the user's reservations.",
        {"reservation_id": {"type": "string"}},
        side_effect=True,
        latency_s=0.5,
    ),
]


def initial_state(rng: random.Random) -> dict[str, Any]:
    """Eight restaurants with three-dish menus and a weekly closing day, and two reservations already made."""
    pairs = [(cuisine, name) for cuisine in CUISINES for name in PLACES[cuisine]]
    restaurants: dict[str, dict[str, Any]] = {}
    for i, (cuisine, name) in enumerate(rng.sample(pairs, 8)):
        rid = f"r{i + 1}"
        restaurants[rid] = {
            "id": rid,
            "name": name,
            "cuisine": cuisine,
            "area": rng.choice(AREAS),
            "rating": round(rng.uniform(3.4, 4.9), 1),
            "reviews": rng.randint(20, 900),
            "price_level": rng.randint(1, 4),
            "closed_on": rng.choice(DAYS[2:]),
            "max_party": rng.randint(4, 8),
            "tables": rng.randint(2, 3),
            "menu": [{"dish": dish, "price": rng.randint(6, 32)} for dish in rng.sample(DISHES[cuisine], 3)],
        }
    reservations: dict[str, dict[str, Any]] = {}
    for rid in rng.sample(list(restaurants), 2):
        r = restaurants[rid]
        res_id = f"res{len(reservations) + 1}"
        reservations[res_id] = {
            "id": res_id,
            "restaurant_id": rid,
            "day": rng.choice([d for d in DAYS if d != r["closed_on"]]),
            "time": rng.choice(TIMES),
            "party_size": rng.randint(2, 4),
            "status": "confirmed",
        }
    return {"restaurants": restaurants, "reservations": reservations}


def _restaurant(state: dict[str, Any], rid: str) -> dict[str, Any]:
    if rid not in state["restaurants"]:
        raise ToolError(f"unknown restaurant {rid}")
    return state["restaurants"][rid]


def _taken(state: dict[str, Any], rid: str, day: str, time: str) -> int:
    return sum(
        1
        for res in state["reservations"].values()
        if res["restaurant_id"] == rid and res["day"] == day and res["time"] == time and res["status"] == "confirmed"
    )


def _ranked(state: dict[str, Any], cuisine: str, area: str | None) -> list[dict[str, Any]]:
    found = [
        r for r in state["restaurants"].values() if r["cuisine"] == cuisine and (area is None or r["area"] == area)
    ]
    found.sort(key=lambda r: (-r["rating"], -r["reviews"]))
    return found


def _refusal(state: dict[str, Any], r: dict[str, Any], day: str, time: str, party: int) -> str | None:
    if r["closed_on"] == day:
        return f"{r['name']} is closed on {day}"
    if party > r["max_party"]:
        return f"{r['name']} seats at most {r['max_party']}"
    if _taken(state, r["id"], day, time) >= r["tables"]:
        return f"{r['name']} is full at {time}"
    return None


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one restaurant call against ``state``."""
    if name == "search_restaurants":
        cuisine, area = arguments["cuisine"], arguments.get("area")
        keys = ("id", "name", "area", "rating", "price_level")
        results = [{key: r[key] for key in keys} for r in _ranked(state, cuisine, area)]
        return {"cuisine": cuisine, "area": area, "results": results}
    if name == "get_menu":
        r = _restaurant(state, arguments["restaurant_id"])
        return {"restaurant": r["name"], "dishes": [dict(d) for d in r["menu"]]}
    if name == "get_rating":
        r = _restaurant(state, arguments["restaurant_id"])
        return {key: r[key] for key in ("name", "rating", "reviews", "price_level")}
    if name == "check_availability":
        r = _restaurant(state, arguments["restaurant_id"])
        day, time, party = arguments["day"], arguments["time"], arguments["party_size"]
        refusal = _refusal(state, r, day, time, party)
        free = []
        if r["closed_on"] != day and party <= r["max_party"]:
            free = [t for t in TIMES if _taken(state, r["id"], day, t) < r["tables"]]
        return {
            "restaurant": r["name"],
            "day": day,
            "time": time,
            "party_size": party,
            "available": refusal is None,
            "reason": refusal or "",
            "free_times": free,
        }
    if name == "find_reservations":
        r = _restaurant(state, arguments["restaurant_id"])
        results = [
            {key: res[key] for key in ("id", "day", "time", "party_size")}
            for res in state["reservations"].values()
            if res["restaurant_id"] == r["id"] and res["status"] == "confirmed"
        ]
        return {"restaurant": r["name"], "results": results}
    if name == "book_table":
        r = _restaurant(state, arguments["restaurant_id"])
        day, time, party = arguments["day"], arguments["time"], arguments["party_size"]
        refusal = _refusal(state, r, day, time, party)
        if refusal:
            raise ToolError(refusal)
        res_id = f"res{len(state['reservations']) + 1}"
        state["reservations"][res_id] = {
            "id": res_id,
            "restaurant_id": r["id"],
            "day": day,
            "time": time,
            "party_size": party,
            "status": "confirmed",
        }
        return {"reservation_id": res_id, "restaurant": r["name"], "day": day, "time": time, "party_size": party}
    if name == "cancel_reservation":
        res_id = arguments["reservation_id"]
        if res_id not in state["reservations"]:
            raise ToolError(f"unknown reservation {res_id}")
        res = state["reservations"][res_id]
        if res["status"] != "confirmed":
            raise ToolError(f"reservation {res_id} is already cancelled")
        res["status"] = "cancelled"
        return {"reservation_id": res_id, "status": "cancelled"}
    raise ToolError(f"unknown tool {name}")


def _time_words(ctx: TaskContext, time: str) -> str:
    hour, minute = int(time[:2]) - 12, int(time[3:])
    if minute and ctx.rng.random() < 0.3:
        return f"half past {NUMBERS[hour]}"
    return (f"{hour}:{minute:02d}" if minute else str(hour)) + ctx.pick(["", "pm", " pm"])


def _at(ctx: TaskContext, time: str) -> str:
    return ctx.pick(["at", "at", "around"]) + " " + _time_words(ctx, time)


def _on(ctx: TaskContext, day: str) -> str:
    if day in ("today", "tomorrow"):
        return ctx.pick([day, day, day + " night" if day == "tomorrow" else "tonight"])
    return ctx.pick(["on", "this", "", "next"]) + " " + day


def _party(ctx: TaskContext, party: int) -> str:
    n = NUMBERS[party]
    return ctx.pick([f"for {n}", f"for {n} people", f"for {n} of us", f"party of {n}"])


def _open_slot(ctx: TaskContext, r: dict[str, Any]) -> tuple[str, str, int]:
    """A day, time and party size that ``r`` can seat, given the reservations already in the state."""
    while True:
        day, time = ctx.pick(DAYS), ctx.pick(TIMES)
        if day != r["closed_on"] and _taken(ctx.state, r["id"], day, time) < r["tables"]:
            return day, time, ctx.rng.randint(2, min(6, r["max_party"]))


def _booked(results: dict[str, Any], key: str) -> Answer:
    b = results[key]
    text = (
        f"You're booked at {b['restaurant']} {b['day']} at {b['time']} for {b['party_size']}, "
        f"confirmation {b['reservation_id']}."
    )
    return Answer(text, [b["reservation_id"], b["restaurant"], b["time"]])


def _check(rid: str, day: str, time: str, party: int) -> PlannedCall:
    return call("c", "check_availability", restaurant_id=rid, day=day, time=time, party_size=party)


def _book(key: str, rid: Any, day: str, time: str, party: int) -> PlannedCall:
    return call(key, "book_table", restaurant_id=rid, day=day, time=time, party_size=party)


def _say_slots(ctx: TaskContext, u: UtteranceBuilder, slots: dict[str, Any], order: list[str]) -> None:
    for slot in order:
        if slot == "day":
            u.say(_on(ctx, slots["day"]))
        elif slot == "time":
            u.say(_at(ctx, slots["time"]))
        else:
            u.say(_party(ctx, slots["party"]))


def table_lookup(ctx: TaskContext) -> Task:
    """Availability with slots guessed (today, 7pm, two people) until spoken; sometimes a plain menu lookup."""
    r = ctx.pick(list(ctx.state["restaurants"].values()))
    u = ctx.utterance().say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.3:
        u.say(
            ctx.pick(["what's on the menu at", "what do they serve at", "show me the menu for", "what can I eat at"])
        )
        u.say(r["name"]).reading([call("m", "get_menu", restaurant_id=r["id"])], ctx.confident())

        def menu_answer(results: dict[str, Any]) -> Answer:
            dishes = results["m"]["dishes"]
            listed = ", ".join(f"{d['dish']} for {d['price']}" for d in dishes)
            return Answer(f"{r['name']} has {listed}.", [d["dish"] for d in dishes])

        return Task("lookup", [u.done(answer=menu_answer)])
    slots = {"day": ctx.pick(DAYS), "time": ctx.pick(TIMES), "party": ctx.rng.randint(2, 8)}
    lead, end = ctx.pick(
        [("is there a table at", ""), ("can we get a table at", ""), ("does", "have a table"), ("any room at", "")]
    )
    u.say(lead, r["name"], end)
    known = {"day": DEFAULT_DAY, "time": DEFAULT_TIME, "party": DEFAULT_PARTY}
    u.reading([_check(r["id"], known["day"], known["time"], known["party"])], ctx.guess())
    order = ["day", "time", "party"]
    ctx.rng.shuffle(order)
    for i, slot in enumerate(order):
        _say_slots(ctx, u, slots, [slot])
        known[slot] = slots[slot]
        conf = ctx.confident() if i == len(order) - 1 else ctx.guess()
        u.reading([_check(r["id"], known["day"], known["time"], known["party"])], conf)

    def answer(results: dict[str, Any]) -> Answer:
        c = results["c"]
        if c["available"]:
            return Answer(
                f"Yes, {c['restaurant']} has a table {c['day']} at {c['time']}.", [c["restaurant"], c["time"]]
            )
        if c["free_times"]:
            others = ", ".join(c["free_times"])
            return Answer(f"No: {c['reason']}. Free times that day: {others}.", [c["free_times"][0]])
        return Answer(f"No: {c['reason']}.", [c["reason"]])

    return Task("lookup", [u.done(answer=answer)])


def restaurant_compare(ctx: TaskContext) -> Task:
    """Two or three restaurants by name: ratings (or menus) fetched in parallel."""
    chosen = ctx.rng.sample(list(ctx.state["restaurants"].values()), ctx.pick([2, 2, 3]))
    menus = len(chosen) == 2 and ctx.rng.random() < 0.3
    tool_name, prefix = ("get_menu", "m") if menus else ("get_rating", "g")
    u = ctx.utterance().say(ctx.pick(FILLERS))
    if menus:
        lead, joint, end = ctx.pick(
            [("compare the menus at", "and", ""), ("which is cheaper,", "or", ""), ("is", "or", "cheaper to eat at")]
        )
    else:
        options = [
            ("which is rated better,", ctx.pick(["or", "versus"]), ""),
            ("which has better reviews,", "or", ""),
            ("compare the ratings of", ctx.pick(["and", "with"]), ""),
        ]
        if len(chosen) == 2:
            options.append(("is", "or", ctx.pick(["better", "the better one", "rated higher"])))
        lead, joint, end = ctx.pick(options)
    u.say(lead)
    calls: list[PlannedCall] = []
    for i, r in enumerate(chosen):
        if i:
            u.say(joint if i == len(chosen) - 1 else "")
        u.say(r["name"] + ("," if i < len(chosen) - 2 else ""))
        calls.append(call(f"{prefix}{i}", tool_name, restaurant_id=r["id"]))
        u.reading(calls, ctx.unsure() if i == 0 else ctx.confident())
    u.say(end)

    def answer(results: dict[str, Any]) -> Answer:
        if menus:
            lows = [min(d["price"] for d in results[f"m{i}"]["dishes"]) for i in range(len(chosen))]
            parts = " and ".join(f"{r['name']} from {p}" for r, p in zip(chosen, lows, strict=True))
            return Answer(f"Dishes start at {parts}.", [str(p) for p in lows])
        got = [results[f"g{i}"] for i in range(len(chosen))]
        best = max(got, key=lambda g: g["rating"])
        parts = ", ".join(f"{g['name']} {g['rating']}" for g in got)
        return Answer(f"Ratings: {parts}. {best['name']} comes out on top.", [str(g["rating"]) for g in got])

    return Task("compare", [u.done(answer=answer)])


def best_place_then_act(ctx: TaskContext) -> Task:
    """Search a cuisine, then book or read the menu of the top result: the id comes from the search."""
    r = ctx.pick(list(ctx.state["restaurants"].values()))
    area = r["area"] if ctx.rng.random() < 0.5 else None
    top = _ranked(ctx.state, r["cuisine"], area)[0]
    search = call("s", "search_restaurants", cuisine=r["cuisine"], **({"area": area} if area else {}))
    u = ctx.utterance().say(ctx.pick(FILLERS))
    where = f"{ctx.pick(['in', 'around', 'near'])} {area}" if area else ""
    if ctx.rng.random() < 0.35:
        u.say(ctx.pick(["what's the menu like at", "show me the menu of", "what do they have at"]))
        u.say(ctx.pick(["the best", "the top rated", "the highest rated"]), r["cuisine"], "place", where)
        u.reading([search, call("m", "get_menu", restaurant_id=ref("s", "results.0.id"))], ctx.confident())

        def menu_answer(results: dict[str, Any]) -> Answer:
            name, dishes = results["m"]["restaurant"], results["m"]["dishes"]
            listed = ", ".join(d["dish"] for d in dishes)
            return Answer(f"The top {r['cuisine']} spot is {name}; they serve {listed}.", [name, dishes[0]["dish"]])

        return Task("dependent", [u.done(answer=menu_answer)])
    day, time, party = _open_slot(ctx, top)
    u.say(ctx.pick(["book a table at", "get us a table at", "reserve", "I want a table at"]))
    u.say(
        ctx.pick(["the best", "the top rated", "the best rated"]),
        r["cuisine"],
        ctx.pick(["place", "restaurant", "spot"]),
    )
    u.say(where)
    slots = {"day": day, "time": time, "party": party}
    known = {"day": DEFAULT_DAY, "time": DEFAULT_TIME, "party": DEFAULT_PARTY}
    u.reading(
        [search, _book("b", ref("s", "results.0.id"), known["day"], known["time"], known["party"])], ctx.confident()
    )
    order = ["party", "day", "time"] if ctx.rng.random() < 0.5 else ["day", "time", "party"]
    for slot in order:
        _say_slots(ctx, u, slots, [slot])
        known[slot] = slots[slot]
        u.reading(
            [search, _book("b", ref("s", "results.0.id"), known["day"], known["time"], known["party"])],
            ctx.confident(),
        )
    return Task("dependent", [u.done(answer=lambda results: _booked(results, "b"))])


def table_late_intent(ctx: TaskContext) -> Task:
    """Day, time, party and place come first, the intent last: an availability check is guessed until then."""
    r = ctx.pick(list(ctx.state["restaurants"].values()))
    day, time, party = _open_slot(ctx, r)
    u = ctx.utterance().say(ctx.pick(FILLERS))
    order = ["day", "time", "party"] if ctx.rng.random() < 0.6 else ["party", "day", "time"]
    _say_slots(ctx, u, {"day": day, "time": time, "party": party}, order)
    u.say(ctx.pick(["at", "at", "over at", ""]), r["name"] + ",")
    u.reading([_check(r["id"], day, time, party)], ctx.guess())
    if ctx.rng.random() < 0.65:
        u.say(ctx.pick(["book it", "can you book that", "reserve a table", "lock that in", "go ahead and book"]))
        u.reading([_book("b", r["id"], day, time, party)], ctx.confident())
        return Task("late_intent", [u.done(answer=lambda results: _booked(results, "b"))])
    u.say(ctx.pick(["is that available", "do they have room", "is there a table", "can they fit us"]))
    u.reading([_check(r["id"], day, time, party)], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        c = results["c"]
        return Answer(f"Yes, {c['restaurant']} can seat {c['party_size']} {c['day']} at {c['time']}.", [c["time"]])

    return Task("late_intent", [u.done(answer=answer)])


def booking_correction(ctx: TaskContext) -> Task:
    """A booking whose time, day or party size the user corrects mid-sentence."""
    r = ctx.pick(list(ctx.state["restaurants"].values()))
    day, time, party = _open_slot(ctx, r)
    slot = ctx.pick(["day", "time", "party"])
    old = {"day": day, "time": time, "party": party}
    while old == {"day": day, "time": time, "party": party}:
        old[slot] = ctx.pick({"day": DAYS, "time": TIMES, "party": list(NUMBERS)}[slot])
    u = ctx.utterance().say(ctx.pick(FILLERS))
    u.say(ctx.pick(["book a table at", "reserve a table at", "can you book", "get me a table at"]), r["name"])
    order = ["day", "time", "party"]
    ctx.rng.shuffle(order)
    order.remove(slot)
    order.append(slot)
    _say_slots(ctx, u, old, order)
    u.reading([_book("b", r["id"], old["day"], old["time"], old["party"])], ctx.confident())
    u.say(ctx.pick(["actually,", "no wait,", "sorry,", "hmm, actually", "oh no,"]))
    if slot == "time":
        u.say(ctx.pick(["make it", "let's say", "better"]), _time_words(ctx, time))
    elif slot == "day":
        u.say(ctx.pick(["make it", "let's do", "I meant"]), day)
    else:
        n = NUMBERS[party]
        u.say(ctx.pick([f"make it {n}", f"make it {n} people", f"we'll be {n}", f"there'll be {n} of us"]))
    u.reading([_book("b", r["id"], day, time, party)], ctx.confident())
    u.say(ctx.pick(["", "instead", "then"]))
    return Task("correction", [u.done(answer=lambda results: _booked(results, "b"))])


def booking_multi_turn(ctx: TaskContext) -> Task:
    """The first request lacks the day and time, or the party size; the agent asks and the reply books."""
    r = ctx.pick(list(ctx.state["restaurants"].values()))
    day, time, party = _open_slot(ctx, r)
    u = ctx.utterance().say(ctx.pick(FILLERS))
    u.say(
        ctx.pick(["I'd like to book a table at", "book me a table at", "can I get a table at", "reserve"]), r["name"]
    )
    v = ctx.utterance()
    if ctx.rng.random() < 0.5:
        u.say(_party(ctx, party))
        ask = Answer(
            ctx.pick(["Sure, for which day and time?", "What day and time?", "Sure, when would you like it?"])
        )
        v.say(ctx.pick(["", "um", "let's say", "how about", "hmm,"]))
        if ctx.rng.random() < 0.5:
            v.say(_on(ctx, day)).reading([_book("b", r["id"], day, DEFAULT_TIME, party)], ctx.unsure())
            v.say(_at(ctx, time))
        else:
            v.say(_at(ctx, time), _on(ctx, day))
    else:
        u.say(_on(ctx, day), _at(ctx, time))
        ask = Answer(ctx.pick(["Sure, for how many people?", "How many of you?", "Sure, what party size?"]))
        v.say(ctx.pick(["", "um", "just", "we'll be"]), NUMBERS[party], ctx.pick(["", "people", "of us"]))
    v.reading([_book("b", r["id"], day, time, party)], ctx.confident())
    first = u.done(calls=[], answer=lambda results: ask)
    return Task("multi_turn", [first, v.done(answer=lambda results: _booked(results, "b"))])


def cancel_reservation(ctx: TaskContext) -> Task:
    """Look up the reservation at a named place, then cancel the first one found."""
    res = ctx.pick(list(ctx.state["reservations"].values()))
    r = ctx.state["restaurants"][res["restaurant_id"]]
    find = call("f", "find_reservations", restaurant_id=r["id"])
    u = ctx.utterance().say(ctx.pick(FILLERS))
    cancel = call("x", "cancel_reservation", reservation_id=ref("f", "results.0.id"))
    if ctx.rng.random() < 0.3:
        u.say(ctx.pick(["I can't make it to", "we won't make it to", "turns out we can't go to"]), r["name"])
        u.reading([find], ctx.unsure())
        u.say(ctx.pick(["anymore, cancel it", "so cancel the reservation", "please cancel", "can you cancel"]))
    else:
        u.say(ctx.pick(["cancel my reservation at", "please cancel my table at", "drop my booking at"]), r["name"])
    u.reading([find, cancel], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        x, booked = results["x"], results["f"]["results"][0]
        return Answer(
            f"Cancelled {x['reservation_id']} at {r['name']} for {booked['day']} at {booked['time']}.",
            [x["reservation_id"], r["name"]],
        )

    return Task("dependent", [u.done(answer=answer)])


DOMAIN = Domain(
    name="restaurants",
    tools=TOOLS,
    initial_state=initial_state,
    execute=execute,
    grammars=[
        (table_lookup, 2.0),
        (restaurant_compare, 3.0),
        (best_place_then_act, 3.0),
        (table_late_intent, 1.5),
        (booking_correction, 2.5),
        (booking_multi_turn, 1.5),
        (cancel_reservation, 2.0),
    ],
)
