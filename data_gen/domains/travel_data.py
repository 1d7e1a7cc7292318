"""Travel's world: cities, airlines and hotels, the tool schemas, and the generated initial state.

The services that run the calls and the grammars of the requests are in :mod:`data_gen.domains.travel`.
"""

from __future__ import annotations

import random
from typing import Any

from data_gen.domains.base import tool

CITIES = (
    "Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Prague", "Amsterdam", "London", "Dublin",
    "Athens", "Oslo",
)  # fmt: skip
DAYS = ("today", "tomorrow", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
AIRLINES = ("SkyJet", "Aerolux", "BlueWing", "Nordair", "Solaris", "Vista")
HOTEL_NAMES = (
    "Grand Plaza", "Harbor Inn", "Hotel Lumen", "Park Suites", "Old Mill", "City Lodge", "Royal Garden",
    "Riverside Hotel", "Station Hotel", "Hotel Aurora", "Casa Blanca", "Linden House",
)  # fmt: skip
CABINS = ("economy", "business")
KINDS = ("flight", "hotel")
SORTS = ("price", "rating")

TOOLS = [
    tool(
        "search_flights",
        "Flights between two cities on a day, cheapest first.",
        {
            "origin": {"type": "string", "enum": list(CITIES)},
            "destination": {"type": "string", "enum": list(CITIES)},
            "day": {"type": "string", "enum": list(DAYS)},
        },
        latency_s=0.8,
    ),
    tool(
        "get_flight_details",
        "Schedule, price and seats left of one flight.",
        {"flight_id": {"type": "string"}},
        latency_s=0.35,
    ),
    tool(
        "search_hotels",
        "Hotels with free rooms in a city for a stay, cheapest first or best rated first.",
        {
            "city": {"type": "string", "enum": list(CITIES)},
            "nights": {"type": "integer", "minimum": 1, "maximum": 14},
            "sort_by": {"type": "string", "enum": list(SORTS)},
        },
        required=["city", "nights"],
        latency_s=0.75,
    ),
    tool(
        "get_hotel_details",
        "Stars, guest rating, nightly price and rooms left of one hotel.",
        {"hotel_id": {"type": "string"}},
        latency_s=0.35,
    ),
    tool(
        "find_bookings",
        "The user's confirmed flight or hotel bookings for a city.",
        {"kind": {"type": "string", "enum": list(KINDS)}, "city": {"type": "string", "enum": list(CITIES)}},
        latency_s=0.3,
    ),
    tool(
        "book_flight",
        "Books seats on a flight.",
        {
            "flight_id": {"type": "string"},
            "passengers": {"type": "integer", "minimum": 1, "maximum": 6},
            "cabin": {"type": "string", "enum": list(CABINS)},
        },
        side_effect=True,
        latency_s=0.7,
    ),
    tool(
        "book_hotel",
        "Books one room at a hotel for a stay.",
        {
            "hotel_id": {"type": "string"},
            "check_in": {"type": "string", "enum": list(DAYS)},
            "nights": {"type": "integer", "minimum": 1, "maximum": 14},
        },
        side_effect=True,
        latency_s=0.7,
    ),
    tool(
        "cancel_booking",
        "Cancels a flight or hotel booking and refunds it.",
        {"booking_id": {"type": "string"}},
        side_effect=True,
        latency_s=0.5,
    ),
]


def initial_state(rng: random.Random) -> dict[str, Any]:
    """Five cities, three routes flown on three days each, two hotels per city, one flight and one hotel booked."""
    cities = rng.sample(CITIES, 5)
    routes: list[tuple[str, str]] = []
    while len(routes) < 3:
        pair = (cities[rng.randrange(5)], cities[rng.randrange(5)])
        if pair[0] != pair[1] and pair not in routes:
            routes.append(pair)
    flights: dict[str, dict[str, Any]] = {}
    for origin, destination in routes:
        for day in rng.sample(DAYS, 3):
            for _ in range(rng.randint(1, 2)):
                fid = f"fl{len(flights) + 1}"
                hour, minute = rng.randint(6, 20), rng.choice((0, 15, 30, 45))
                arrive = hour * 60 + minute + rng.randint(60, 240)
                flights[fid] = {
                    "id": fid,
                    "airline": rng.choice(AIRLINES),
                    "origin": origin,
                    "destination": destination,
                    "day": day,
                    "depart": f"{hour:02d}:{minute:02d}",
                    "arrive": f"{arrive // 60 % 24:02d}:{arrive % 60:02d}",
                    "price": rng.randint(60, 400),
                    "seats_left": rng.randint(4, 9),
                }
    hotels: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(rng.sample(HOTEL_NAMES, 10)):
        hid = f"ht{i + 1}"
        hotels[hid] = {
            "id": hid,
            "name": name,
            "city": cities[i // 2],
            "stars": rng.randint(2, 5),
            "rating": round(rng.uniform(6.5, 9.6), 1),
            "price_per_night": rng.randint(60, 320),
            "rooms_left": rng.randint(1, 5),
        }
    flight = flights[rng.choice(list(flights))]
    hotel = hotels[rng.choice(list(hotels))]
    nights = rng.randint(1, 4)
    bookings = {
        "bk1": {
            "id": "bk1",
            "kind": "flight",
            "item_id": flight["id"],
            "city": flight["destination"],
            "day": flight["day"],
            "passengers": 1,
            "cabin": "economy",
            "total": flight["price"],
            "status": "confirmed",
        },
        "bk2": {
            "id": "bk2",
            "kind": "hotel",
            "item_id": hotel["id"],
            "city": hotel["city"],
            "day": rng.choice(DAYS),
            "nights": nights,
            "total": hotel["price_per_night"] * nights,
            "status": "confirmed",
        },
    }
    return {"cities": cities, "flights": flights, "hotels": hotels, "bookings": bookings}
