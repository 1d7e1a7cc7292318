"""Travel: flights and hotels to search, inspect, book and cancel.

This module runs the calls and holds the request grammars; the world they act on (vocabulary, tool schemas and
the generated initial state) is in :mod:`data_gen.domains.travel_data`.
"""

from __future__ import annotations

from typing import Any

from data_gen.domains.base import Domain, ToolError
from data_gen.domains.travel_data import CABINS, DAYS, TOOLS, initial_state
from data_gen.task import Answer, PlannedCall, Task, TaskContext, UtteranceBuilder, call, ref

NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}
FILLERS = ("", "", "so", "um,", "hey,", "okay so")


def _flight_summary(flight: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "airline", "depart", "arrive", "price", "seats_left")
    return {key: flight[key] for key in keys}


def _hotel_summary(hotel: dict[str, Any], nights: int) -> dict[str, Any]:
    keys = ("id", "name", "stars", "rating", "price_per_night")
    return {**{key: hotel[key] for key in keys}, "total": hotel["price_per_night"] * nights}


def _lookup(table: dict[str, dict[str, Any]], item_id: str, what: str) -> dict[str, Any]:
    if item_id not in table:
        raise ToolError(f"unknown {what} {item_id}")
    return table[item_id]


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one travel call against ``state``."""
    if name == "search_flights":
        origin, destination, day = (arguments["origin"], arguments["destination"], arguments["day"])
        found = [
            f
            for f in state["flights"].values()
            if f["origin"] == origin and f["destination"] == destination and f["day"] == day and f["seats_left"]
        ]
        found.sort(key=lambda f: (f["price"], f["depart"]))
        return {
            "origin": origin,
            "destination": destination,
            "day": day,
            "results": [_flight_summary(f) for f in found],
        }
    if name == "get_flight_details":
        return dict(_lookup(state["flights"], arguments["flight_id"], "flight"))
    if name == "search_hotels":
        city, nights = arguments["city"], arguments["nights"]
        found = [h for h in state["hotels"].values() if h["city"] == city and h["rooms_left"]]
        if arguments.get("sort_by", "price") == "rating":
            found.sort(key=lambda h: (-h["rating"], h["price_per_night"]))
        else:
            found.sort(key=lambda h: (h["price_per_night"], -h["rating"]))
        return {"city": city, "nights": nights, "results": [_hotel_summary(h, nights) for h in found]}
    if name == "get_hotel_details":
        return dict(_lookup(state["hotels"], arguments["hotel_id"], "hotel"))
    if name == "find_bookings":
        kind, city = arguments["kind"], arguments["city"]
        found = [
            {key: b[key] for key in ("id", "item_id", "day", "total")}
            for b in state["bookings"].values()
            if b["kind"] == kind and b["city"] == city and b["status"] == "confirmed"
        ]
        return {"kind": kind, "city": city, "results": found}
    if name == "book_flight":
        flight = _lookup(state["flights"], arguments["flight_id"], "flight")
        passengers, cabin = arguments["passengers"], arguments["cabin"]
        if flight["seats_left"] < passengers:
            raise ToolError(f"only {flight['seats_left']} seats left on {flight['id']}")
        flight["seats_left"] -= passengers
        total = flight["price"] * passengers * (5 if cabin == "business" else 2) // 2
        bid = f"bk{len(state['bookings']) + 1}"
        state["bookings"][bid] = {
            "id": bid,
            "kind": "flight",
            "item_id": flight["id"],
            "city": flight["destination"],
            "day": flight["day"],
            "passengers": passengers,
            "cabin": cabin,
            "total": total,
            "status": "confirmed",
        }
        return {"booking_id": bid, "flight_id": flight["id"], "airline": flight["airline"], "total": total}
    if name == "book_hotel":
        hotel = _lookup(state["hotels"], arguments["hotel_id"], "hotel")
        if not hotel["rooms_left"]:
            raise ToolError(f"{hotel['name']} is full")
        hotel["rooms_left"] -= 1
        nights = arguments["nights"]
        bid = f"bk{len(state['bookings']) + 1}"
        state["bookings"][bid] = {
            "id": bid,
            "kind": "hotel",
            "item_id": hotel["id"],
            "city": hotel["city"],
            "day": arguments["check_in"],
            "nights": nights,
            "total": hotel["price_per_night"] * nights,
            "status": "confirmed",
        }
        return {
            "booking_id": bid,
            "hotel": hotel["name"],
            "nights": nights,
            "total": hotel["price_per_night"] * nights,
        }
    if name == "cancel_booking":
        booking = _lookup(state["bookings"], arguments["booking_id"], "booking")
        if booking["status"] != "confirmed":
            raise ToolError(f"booking {booking['id']} is already cancelled")
        booking["status"] = "cancelled"
        if booking["kind"] == "flight":
            state["flights"][booking["item_id"]]["seats_left"] += booking["passengers"]
        else:
            state["hotels"][booking["item_id"]]["rooms_left"] += 1
        return {"booking_id": booking["id"], "status": "cancelled", "refund": booking["total"]}
    raise ToolError(f"unknown tool {name}")


def _trips(state: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Distinct (origin, destination, day) triples that have flights, in state order."""
    trips: dict[tuple[str, str, str], None] = {}
    for f in state["flights"].values():
        trips[(f["origin"], f["destination"], f["day"])] = None
    return list(trips)


def _on(ctx: TaskContext, day: str) -> str:
    if day in ("today", "tomorrow"):
        return day
    return ctx.pick(["on", "for", "this", ""]) + " " + day


def _stay(nights: int) -> str:
    return f"{NUMBERS[nights]} {'night' if nights == 1 else 'nights'}"


def _search(key: str, origin: str, destination: str, day: str) -> PlannedCall:
    return call(key, "search_flights", origin=origin, destination=destination, day=day)


def _route(ctx: TaskContext, u: UtteranceBuilder, origin: str, destination: str) -> None:
    if ctx.rng.random() < 0.7:
        u.say("from", origin, "to", destination)
    else:
        u.say("to", destination, "from", origin)


def flight_lookup(ctx: TaskContext) -> Task:
    """Cheapest flight on a route; until the day is spoken the search guesses today, so it is sometimes redone."""
    origin, destination, day = ctx.pick(_trips(ctx.state))
    ask = ctx.pick(
        ["find me flights", "are there any flights", "what flights are there", "look up flights", "any flights"]
    )
    u = ctx.utterance().say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.6:
        u.say(ask)
        _route(ctx, u, origin, destination)
        u.reading([_search("s", origin, destination, "today")], ctx.guess())
        u.say(_on(ctx, day))
        u.reading([_search("s", origin, destination, day)], ctx.confident())
    else:
        u.say(_on(ctx, day) + ",", ask)
        _route(ctx, u, origin, destination)
        u.reading([_search("s", origin, destination, day)], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        best = results["s"]["results"][0]
        n = len(results["s"]["results"])
        text = (
            f"I found {n} {'flight' if n == 1 else 'flights'} from {origin} to {destination} {day}; the cheapest "
            f"is {best['airline']} leaving at {best['depart']} for {best['price']} euros."
        )
        return Answer(text, [best["airline"], best["depart"], str(best["price"])])

    return Task("lookup", [u.done(answer=answer)])


def travel_compare(ctx: TaskContext) -> Task:
    """Parallel reads: one route searched on two or three days, or two hotels side by side."""
    u = ctx.utterance().say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.6:
        origin, destination, _ = ctx.pick(_trips(ctx.state))
        days = [d for o, de, d in _trips(ctx.state) if (o, de) == (origin, destination)]
        ctx.rng.shuffle(days)
        days = days[: ctx.pick([2, 2, 3])]
        u.say(ctx.pick(["is it cheaper to fly", "which is cheaper, flying", "compare flights", "check prices flying"]))
        _route(ctx, u, origin, destination)
        calls: list[PlannedCall] = []
        for i, day in enumerate(days):
            if i == len(days) - 1:
                u.say(ctx.pick(["or", "versus", "or on", "or maybe"]))
            elif i:
                u.say(ctx.pick(["or", "or on", "and"]))
            u.say(day if i else _on(ctx, day))
            calls.append(_search(f"d{i}", origin, destination, day))
            u.reading(calls, ctx.unsure() if i == 0 else ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            prices = [results[f"d{i}"]["results"][0]["price"] for i in range(len(days))]
            best = days[prices.index(min(prices))]
            parts = ", ".join(f"{p} euros {d}" for p, d in zip(prices, days, strict=True))
            return Answer(f"Cheapest fares: {parts}. Fly {best}.", [*map(str, prices), best])

        return Task("compare", [u.done(answer=answer)])
    first, second = ctx.rng.sample(list(ctx.state["hotels"].values()), 2)
    lead, joint, end = ctx.pick(
        [
            ("which is better, the", "or the", ""),
            ("compare the", "and the", ctx.pick(["", "for me", "on ratings"])),
            ("how do the", "and the", ctx.pick(["compare", "stack up"])),
            ("is the", "better than the", ""),
        ]
    )
    u.say(lead, first["name"])
    u.reading([call("a", "get_hotel_details", hotel_id=first["id"])], ctx.unsure())
    u.say(joint, second["name"])
    calls = [
        call("a", "get_hotel_details", hotel_id=first["id"]),
        call("b", "get_hotel_details", hotel_id=second["id"]),
    ]
    u.reading(calls, ctx.confident())
    u.say(end)

    def hotel_answer(results: dict[str, Any]) -> Answer:
        a, b = results["a"], results["b"]
        better = a["name"] if a["rating"] >= b["rating"] else b["name"]
        text = (
            f"The {a['name']} is rated {a['rating']} at {a['price_per_night']} euros a night, the {b['name']} "
            f"{b['rating']} at {b['price_per_night']}; the {better} is better rated."
        )
        return Answer(text, [str(a["rating"]), str(b["rating"]), better])

    return Task("compare", [u.done(answer=hotel_answer)])


def book_cheapest_flight(ctx: TaskContext) -> Task:
    """Search then book its first result: a read-only call feeding a state-changing one."""
    origin, destination, day = ctx.pick(_trips(ctx.state))
    passengers = ctx.pick([1, 1, 2, 3])
    cabin = ctx.pick(CABINS)
    u = ctx.utterance().say(ctx.pick(FILLERS))
    u.say(
        ctx.pick(
            [
                "book me the cheapest flight",
                "get me the cheapest flight",
                "grab the cheapest flight",
                "book the lowest fare",
            ]
        )
    )
    _route(ctx, u, origin, destination)
    u.say(_on(ctx, day))
    search = _search("search", origin, destination, day)
    book = call("book", "book_flight", flight_id=ref("search", "results.0.id"), passengers=1, cabin="economy")
    u.reading([search, book], ctx.confident())
    if passengers > 1:
        u.say(
            ctx.pick(["for", "for the", "with seats for"]),
            NUMBERS[passengers],
            ctx.pick(["of us", "people", "adults"]),
        )
    if cabin == "business" or ctx.rng.random() < 0.3:
        u.say(ctx.pick(["in", "flying"]), cabin)
    book = call("book", "book_flight", flight_id=ref("search", "results.0.id"), passengers=passengers, cabin=cabin)
    u.reading([search, book], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        b = results["book"]
        text = (
            f"Booked {b['airline']} from {origin} to {destination} {day}: {b['total']} euros, ref {b['booking_id']}."
        )
        return Answer(text, [b["booking_id"], str(b["total"])])

    return Task("dependent", [u.done(answer=answer)])


def hotel_late_intent(ctx: TaskContext) -> Task:
    """Stay details first and the intent last; before it, a hotel search is only a guess."""
    city = ctx.pick(ctx.state["cities"])
    nights, day = ctx.rng.randint(1, 5), ctx.pick(DAYS)
    intent = ctx.pick(["find", "rating", "book"])
    u = ctx.utterance().say(ctx.pick(FILLERS))
    stay = _stay(nights)
    if ctx.rng.random() < 0.5:
        u.say(ctx.pick(["for", ""]), stay, "in", city, ctx.pick(["from", "starting", "checking in"]), day + ",")
    else:
        u.say(_on(ctx, day) + ",", stay, "in", city + ",")
    u.reading([call("s", "search_hotels", city=city, nights=nights, sort_by="price")], ctx.guess())
    if intent == "find":
        u.say(ctx.pick(["what hotels are there", "find me a hotel", "show me some hotels", "what's cheap"]))
        calls = [call("s", "search_hotels", city=city, nights=nights, sort_by="price")]
    elif intent == "rating":
        u.say(
            ctx.pick(["what's the best rated hotel", "which hotel has the best reviews", "find the top rated place"])
        )
        calls = [call("s", "search_hotels", city=city, nights=nights, sort_by="rating")]
    else:
        u.say(ctx.pick(["book me the cheapest hotel", "just book the cheapest room", "reserve the cheapest place"]))
        calls = [
            call("s", "search_hotels", city=city, nights=nights, sort_by="price"),
            call("book", "book_hotel", hotel_id=ref("s", "results.0.id"), check_in=day, nights=nights),
        ]
    u.reading(calls, ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        if intent == "book":
            b = results["book"]
            text = f"Booked the {b['hotel']} in {city} from {day}: {b['total']} euros, ref {b['booking_id']}."
            return Answer(text, [b["hotel"], str(b["total"]), b["booking_id"]])
        top = results["s"]["results"][0]
        what = "best rated" if intent == "rating" else "cheapest"
        text = f"The {what} in {city} is the {top['name']}, rated {top['rating']}, {top['total']} euros for the stay."
        return Answer(text, [top["name"], str(top["rating"]), str(top["total"])])

    return Task("late_intent", [u.done(answer=answer)])


def hotel_correction(ctx: TaskContext) -> Task:
    """A named hotel booking whose nights or check-in day the user corrects mid-sentence."""
    hotel = ctx.pick(list(ctx.state["hotels"].values()))
    nights, new_nights = ctx.rng.sample(range(1, 6), 2)
    day, new_day = ctx.rng.sample(DAYS, 2)
    fix_day = ctx.rng.random() < 0.5
    u = ctx.utterance().say(ctx.pick(FILLERS))
    u.say(
        ctx.pick(["book me a room at", "reserve a room at", "I want to stay at", "can you book"]), "the", hotel["name"]
    )
    u.say(ctx.pick(["", "in " + hotel["city"]]))
    stay = _stay(nights)
    u.say(ctx.pick(["for", ""]), stay, ctx.pick(["from", "starting"]), day)
    u.reading([call("b", "book_hotel", hotel_id=hotel["id"], check_in=day, nights=nights)], ctx.confident())
    if fix_day:
        u.say(ctx.pick(["actually no,", "wait, make that", "sorry, I mean", "no, start on"]), new_day)
        day = new_day
    else:
        u.say(ctx.pick(["actually make it", "wait, no,", "sorry,", "hmm, better"]), _stay(new_nights))
        nights = new_nights
    u.reading([call("b", "book_hotel", hotel_id=hotel["id"], check_in=day, nights=nights)], ctx.confident())
    u.say(ctx.pick(["", "instead", "then"]))

    def answer(results: dict[str, Any]) -> Answer:
        b = results["b"]
        text = (
            f"You're at the {b['hotel']} for {b['nights']} nights from {day}: {b['total']} euros, "
            f"ref {b['booking_id']}."
        )
        return Answer(text, [b["booking_id"], str(b["nights"]), day])

    return Task("correction", [u.done(answer=answer)])


def trip_multi_turn(ctx: TaskContext) -> Task:
    """The first utterance leaves out the day or the nights; the agent asks, the second carries the calls."""
    u = ctx.utterance().say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.5:
        origin, destination, day = ctx.pick(_trips(ctx.state))
        u.say(ctx.pick(["I need to fly", "find me a flight", "I'm looking for flights", "can you check flights"]))
        _route(ctx, u, origin, destination)
        ask = Answer(ctx.pick(["Sure, for which day?", "Which day are you flying?", "Sure, what day?"]))
        first = u.done(calls=[], answer=lambda r: ask)
        v = ctx.utterance().say(ctx.pick(["", "um", "let's say", "oh,"]), _on(ctx, day))
        v.reading([_search("s", origin, destination, day)], ctx.confident())

        def flight_answer(results: dict[str, Any]) -> Answer:
            best = results["s"]["results"][0]
            text = f"The cheapest {day} is {best['airline']} at {best['depart']}, {best['price']} euros."
            return Answer(text, [best["airline"], str(best["price"])])

        return Task("multi_turn", [first, v.done(answer=flight_answer)])
    city, day, nights = ctx.pick(ctx.state["cities"]), ctx.pick(DAYS), ctx.rng.randint(1, 6)
    book = ctx.rng.random() < 0.5
    if book:
        u.say(ctx.pick(["book me a hotel in", "I need a room in", "reserve me a hotel in"]), city, "from", day)
    else:
        u.say(ctx.pick(["find me a hotel in", "what hotels are there in", "look for a hotel in"]), city)
    ask = Answer(ctx.pick(["Sure, for how many nights?", "How many nights?", "Sure, how many nights?"]))
    first = u.done(calls=[], answer=lambda r: ask)
    v = ctx.utterance().say(ctx.pick(["", "um", "just", "let's do"]), _stay(nights))
    calls = [call("s", "search_hotels", city=city, nights=nights, sort_by="price")]
    if book:
        v.say(ctx.pick(["", "the cheapest is fine", "whatever's cheapest"]))
        calls.append(call("book", "book_hotel", hotel_id=ref("s", "results.0.id"), check_in=day, nights=nights))
    v.reading(calls, ctx.confident())

    def hotel_answer(results: dict[str, Any]) -> Answer:
        if book:
            b = results["book"]
            return Answer(
                f"Booked the {b['hotel']}, {b['total']} euros, ref {b['booking_id']}.", [b["hotel"], b["booking_id"]]
            )
        top = results["s"]["results"][0]
        return Answer(
            f"Cheapest is the {top['name']} at {top['total']} euros in total.", [top["name"], str(top["total"])]
        )

    return Task("multi_turn", [first, v.done(answer=hotel_answer)])


def my_booking(ctx: TaskContext) -> Task:
    """Find the user's booking, then cancel it or read its details: the booking id comes from the first call."""
    booking = ctx.pick(list(ctx.state["bookings"].values()))
    kind, city = booking["kind"], booking["city"]
    find = call("find", "find_bookings", kind=kind, city=city)
    u = ctx.utterance().say(ctx.pick(FILLERS))
    cancel = ctx.rng.random() < 0.6
    if cancel:
        u.say(ctx.pick(["cancel my", "please cancel the", "I need to cancel my", "drop my"]), kind)
        u.say(ctx.pick(["booking", "reservation", ""]), ctx.pick(["to", "in"]) if kind == "flight" else "in", city)
        follow = call("x", "cancel_booking", booking_id=ref("find", "results.0.id"))
    elif kind == "flight":
        u.say(ctx.pick(["when does my flight to", "what time is my flight to", "remind me when my flight to"]), city)
        follow = call("x", "get_flight_details", flight_id=ref("find", "results.0.item_id"))
        u.reading([find], ctx.unsure())
        u.say(ctx.pick(["leave", "depart", "take off"]))
    else:
        u.say(ctx.pick(["how's my hotel in", "tell me about my hotel in", "what's my hotel like in"]), city)
        follow = call("x", "get_hotel_details", hotel_id=ref("find", "results.0.item_id"))
    u.reading([find, follow], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        x = results["x"]
        if cancel:
            return Answer(
                f"Cancelled {x['booking_id']}; {x['refund']} euros will be refunded.",
                [x["booking_id"], str(x["refund"])],
            )
        if kind == "flight":
            return Answer(f"Your {x['airline']} flight to {city} leaves {x['day']} at {x['depart']}.", [x["depart"]])
        return Answer(
            f"You're at the {x['name']}, {x['stars']} stars, rated {x['rating']}.", [x["name"], str(x["rating"])]
        )

    return Task("dependent", [u.done(answer=answer)])


DOMAIN = Domain(
    name="travel",
    tools=TOOLS,
    initial_state=initial_state,
    execute=execute,
    grammars=[
        (flight_lookup, 2.0),
        (travel_compare, 3.0),
        (book_cheapest_flight, 3.0),
        (hotel_late_intent, 1.5),
        (hotel_correction, 2.5),
        (trip_multi_turn, 1.5),
        (my_booking, 2.0),
    ],
)
