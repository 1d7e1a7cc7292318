"""Shopping: product search, product details and stock, the cart, orders, order status and returns."""

from __future__ import annotations

import random
from typing import Any

from data_gen.domains.base import Domain, ToolError, tool
from data_gen.task import Answer, Task, TaskContext, call, ref

CATEGORIES = ("headphones", "backpack", "coffee maker", "desk lamp", "running shoes", "keyboard")
PLURALS = {
    "headphones": "headphones",
    "backpack": "backpacks",
    "coffee maker": "coffee makers",
    "desk lamp": "desk lamps",
    "running shoes": "running shoes",
    "keyboard": "keyboards",
}
PRICE_RANGES = {
    "headphones": (30, 250),
    "backpack": (25, 140),
    "coffee maker": (40, 300),
    "desk lamp": (15, 90),
    "running shoes": (50, 180),
    "keyboard": (20, 160),
}
BRANDS = ("Aero", "Nova", "Trek", "Pulse", "Echo", "Summit", "Volt", "Orbit")
SHIPPING = ("standard", "express")
EXPRESS_FEE = 9.99
REASONS = ("damaged", "wrong_item", "does_not_fit", "no_longer_needed")
REASON_WORDS = {
    "damaged": ("it arrived damaged", "it showed up broken", "the box was crushed and it's damaged"),
    "wrong_item": ("it's the wrong item", "you sent me the wrong thing", "that's not what I ordered"),
    "does_not_fit": ("it doesn't fit", "it's the wrong size", "it's too small"),
    "no_longer_needed": ("I don't need it anymore", "I changed my mind", "I ended up not needing it"),
}
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five")
FILLERS = ("", "", "hey,", "so", "um", "okay so")

TOOLS = [
    tool(
        "search_products",
        "Searches in-stock products in a category, cheapest first, optionally under a maximum price.",
        {
            "category": {"type": "string", "enum": list(CATEGORIES)},
            "max_price": {"type": "number", "exclusiveMinimum": 0},
        },
        required=["category"],
        latency_s=1.0,
    ),
    tool(
        "get_product",
        "Price and stock of one product by id (the product name in lowercase with hyphens).",
        {"product_id": {"type": "string"}},
        latency_s=0.4,
    ),
    tool("view_cart", "The items in the user's cart and the cart total.", {}, latency_s=0.3),
    tool(
        "get_order_status",
        "Status and delivery date of one of the user's orders.",
        {"order_id": {"type": "string"}},
        latency_s=0.5,
    ),
    tool(
        "add_to_cart",
        "Adds a quantity of a product to the user's cart.",
        {"product_id": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1, "maximum": 10}},
        side_effect=True,
        latency_s=0.5,
    ),
    tool(
        "place_order",
        "Orders a product directly, charging the user's saved card.",
        {
            "product_id": {"type": "string"},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
            "shipping": {"type": "string", "enum": list(SHIPPING)},
        },
        side_effect=True,
        latency_s=1.1,
    ),
    tool(
        "request_return",
        "Starts a return of a delivered order and emails a return label.",
        {"order_id": {"type": "string"}, "reason": {"type": "string", "enum": list(REASONS)}},
        side_effect=True,
        latency_s=0.8,
    ),
]


def _slug(name: str) -> str:
    return name.lower().replace(" ", "-")


def initial_state(rng: random.Random) -> dict[str, Any]:
    """Two products per category (the first always well stocked), a short cart and four past orders."""
    products: dict[str, dict[str, Any]] = {}
    for category in CATEGORIES:
        low, high = PRICE_RANGES[category]
        for i, brand in enumerate(rng.sample(BRANDS, 2)):
            name = f"{brand} {category}"
            stock = rng.randint(3, 12) if i == 0 else rng.choice((0, 0, 1, 2, 4, 7, 10))
            products[_slug(name)] = {
                "name": name,
                "brand": brand,
                "category": category,
                "price": round(rng.randint(low, high) - 0.01, 2),
                "stock": stock,
            }
    ids = list(products)
    cart = [
        {"product_id": pid, "quantity": 1} for pid in rng.sample(ids, rng.randint(0, 2)) if products[pid]["stock"] >= 2
    ]
    statuses = ["delivered", "delivered", "shipped", "processing"]
    rng.shuffle(statuses)
    numbers = sorted(rng.sample(range(1000, 9000), 4))
    orders = {}
    for number, status in zip(numbers, statuses, strict=True):
        pid = rng.choice(ids)
        orders[f"A{number}"] = {
            "product_id": pid,
            "item": products[pid]["name"],
            "total": products[pid]["price"],
            "status": status,
            "day": rng.choice(DAYS),
        }
    return {"products": products, "cart": cart, "orders": orders, "returns": [], "next_order": numbers[-1] + 1}


def _product(state: dict[str, Any], product_id: str) -> dict[str, Any]:
    if product_id not in state["products"]:
        raise ToolError(f"no product {product_id}")
    return state["products"][product_id]


def _order(state: dict[str, Any], order_id: str) -> dict[str, Any]:
    if order_id not in state["orders"]:
        raise ToolError(f"no order {order_id}")
    return state["orders"][order_id]


def _cart_total(state: dict[str, Any]) -> float:
    return round(sum(state["products"][i["product_id"]]["price"] * i["quantity"] for i in state["cart"]), 2)


def _in_cart(state: dict[str, Any], product_id: str) -> int:
    return sum(item["quantity"] for item in state["cart"] if item["product_id"] == product_id)


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one shopping call against ``state``."""
    if name == "search_products":
        cap = arguments.get("max_price")
        hits = [
            {"id": pid, "name": p["name"], "price": p["price"], "stock": p["stock"]}
            for pid, p in state["products"].items()
            if p["category"] == arguments["category"] and p["stock"] > 0 and (cap is None or p["price"] <= cap)
        ]
        hits.sort(key=lambda h: (h["price"], h["id"]))
        return {"category": arguments["category"], "count": len(hits), "results": hits}
    if name == "get_product":
        p = _product(state, arguments["product_id"])
        return {"id": arguments["product_id"], "name": p["name"], "price": p["price"], "stock": p["stock"]}
    if name == "view_cart":
        items = [
            {
                "product_id": i["product_id"],
                "name": state["products"][i["product_id"]]["name"],
                "quantity": i["quantity"],
            }
            for i in state["cart"]
        ]
        return {"items": items, "total": _cart_total(state)}
    if name == "get_order_status":
        o = _order(state, arguments["order_id"])
        return {"order_id": arguments["order_id"], "item": o["item"], "status": o["status"], "day": o["day"]}
    if name == "add_to_cart":
        pid, quantity = arguments["product_id"], arguments["quantity"]
        p = _product(state, pid)
        if _in_cart(state, pid) + quantity > p["stock"]:
            raise ToolError(f"only {p['stock']} {p['name']} in stock")
        for item in state["cart"]:
            if item["product_id"] == pid:
                item["quantity"] += quantity
                break
        else:
            state["cart"].append({"product_id": pid, "quantity": quantity})
        return {"ok": True, "name": p["name"], "quantity": _in_cart(state, pid), "cart_total": _cart_total(state)}
    if name == "place_order":
        pid, quantity = arguments["product_id"], arguments["quantity"]
        p = _product(state, pid)
        if quantity > p["stock"]:
            raise ToolError(f"only {p['stock']} {p['name']} in stock")
        p["stock"] -= quantity
        fee = EXPRESS_FEE if arguments["shipping"] == "express" else 0.0
        order_id = f"A{state['next_order']}"
        state["next_order"] += 1
        total = round(p["price"] * quantity + fee, 2)
        day = DAYS[(len(state["orders"]) + (1 if fee else 4)) % 7]
        state["orders"][order_id] = {
            "product_id": pid,
            "item": p["name"],
            "total": total,
            "status": "processing",
            "day": day,
        }
        return {"ok": True, "order_id": order_id, "name": p["name"], "quantity": quantity, "total": total, "day": day}
    if name == "request_return":
        order_id = arguments["order_id"]
        o = _order(state, order_id)
        if o["status"] != "delivered":
            raise ToolError(f"order {order_id} is {o['status']}, not delivered")
        o["status"] = "return_requested"
        state["returns"].append({"order_id": order_id, "reason": arguments["reason"]})
        return {"ok": True, "return_id": f"R{len(state['returns'])}", "order_id": order_id, "refund": o["total"]}
    raise ToolError(f"unknown tool {name}")


def _money(x: float) -> str:
    return f"{x:.2f}"


def _plural(name: str) -> str:
    return name if name.endswith("s") else name + "s"


def _stocked_categories(state: dict[str, Any]) -> list[str]:
    return [c for c in CATEGORIES if any(p["category"] == c and p["stock"] > 0 for p in state["products"].values())]


def _cheapest(state: dict[str, Any], category: str) -> str:
    hits = [(p["price"], pid) for pid, p in state["products"].items() if p["category"] == category and p["stock"] > 0]
    return min(hits)[1]


def _status_phrase(status: dict[str, Any]) -> str:
    if status["status"] == "delivered":
        return f"was delivered on {status['day']}"
    if status["status"] == "shipped":
        return f"has shipped and should arrive {status['day']}"
    if status["status"] == "processing":
        return f"is still processing and should ship by {status['day']}"
    return "has a return in progress"


def product_search(ctx: TaskContext) -> Task:
    """A category search; no price cap is assumed until the user names one, so some early searches are redone."""
    state = ctx.state
    category = ctx.pick(_stocked_categories(state))
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    u.say(ctx.pick(["show me", "can you find me some", "search for", "I'm looking for", "what do you have in"]))
    u.say(PLURALS[category]).reading([call("s", "search_products", category=category)], ctx.guess())
    if ctx.rng.random() < 0.7:
        prices = [p["price"] for p in state["products"].values() if p["category"] == category and p["stock"] > 0]
        cap = int(ctx.pick(prices)) // 10 * 10 + 10
        u.say(ctx.pick(["under", "below", "for less than", "that cost under", "for at most"]), str(cap))
        u.say(ctx.pick(["dollars", "bucks", ""]))
        u.reading([call("s", "search_products", category=category, max_price=cap)], ctx.confident())
    else:
        u.say(ctx.pick(["that are in stock", "you have right now", "available today"]))
        u.reading([call("s", "search_products", category=category)], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        s = results["s"]
        top = s["results"][0]
        text = (
            f"I found {s['count']} {PLURALS[category]}; the cheapest is the {top['name']} at ${_money(top['price'])}."
        )
        return Answer(text, [top["name"], _money(top["price"])])

    return Task("lookup", [u.done(answer=answer)])


def stock_check(ctx: TaskContext) -> Task:
    """Price and stock of one product; the brand alone suggests a product that the category may overturn."""
    products = ctx.state["products"]
    pid = ctx.pick(list(products))
    product = products[pid]
    guess = next(i for i, p in products.items() if p["brand"] == product["brand"])
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    opener, closer = ctx.pick(
        [
            ("is the", "in stock"),
            ("do you still have the", ""),
            ("how much is the", ""),
            ("check the price on the", ""),
            ("can you tell me if the", "is available"),
        ]
    )
    u.say(opener, product["brand"]).reading([call("p", "get_product", product_id=guess)], ctx.guess())
    u.say(product["category"]).reading([call("p", "get_product", product_id=pid)], ctx.confident())
    u.say(closer)

    def answer(results: dict[str, Any]) -> Answer:
        p = results["p"]
        price = _money(p["price"])
        if p["stock"] > 0:
            text = f"The {p['name']} is in stock, {p['stock']} left, at ${price}."
            return Answer(text, [p["name"], str(p["stock"]), price])
        return Answer(
            f"The {p['name']} is out of stock right now; it's normally ${price}.", [p["name"], "out of stock"]
        )

    return Task("lookup", [u.done(answer=answer)])


def compare_products(ctx: TaskContext) -> Task:
    """Two products of a category side by side, or the cart next to an order: parallel read-only calls."""
    state = ctx.state
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.6:
        category = ctx.pick(CATEGORIES)
        first, second = [pid for pid, p in state["products"].items() if p["category"] == category]
        if ctx.rng.random() < 0.5:
            first, second = second, first
        names = state["products"][first]["name"], state["products"][second]["name"]
        opener, joiner = ctx.pick(
            [
                ("which is cheaper, the", ("or the", "versus the")),
                ("compare the", ("and the", "with the", "versus the")),
                ("what's the price difference between the", ("and the",)),
                ("should I get the", ("or the",)),
            ]
        )
        u.say(opener, names[0]).reading([call("a", "get_product", product_id=first)], ctx.unsure())
        u.say(ctx.pick(joiner), names[1])
        calls = [call("a", "get_product", product_id=first), call("b", "get_product", product_id=second)]
        u.reading(calls, ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            a, b = results["a"], results["b"]
            cheaper = a if a["price"] <= b["price"] else b
            text = (
                f"The {a['name']} is ${_money(a['price'])} and the {b['name']} is ${_money(b['price'])}, "
                f"so the {cheaper['name']} is cheaper."
            )
            return Answer(text, [_money(a["price"]), _money(b["price"]), cheaper["name"]])

        return Task("compare", [u.done(answer=answer)])

    order_id = ctx.pick(list(state["orders"]))
    u.say(ctx.pick(["what's in my cart", "what do I have in my cart", "show me my cart"]))
    u.reading([call("cart", "view_cart")], ctx.confident())
    u.say(ctx.pick(["and where's order", "and what's the status of order", "and also check on order"]), order_id)
    u.reading([call("cart", "view_cart"), call("o", "get_order_status", order_id=order_id)], ctx.confident())

    def cart_answer(results: dict[str, Any]) -> Answer:
        cart, o = results["cart"], results["o"]
        phrase = _status_phrase(o)
        if cart["items"]:
            count = sum(i["quantity"] for i in cart["items"])
            first = f"Your cart has {count} items totalling ${_money(cart['total'])}"
            facts = [_money(cart["total"]), phrase]
        else:
            first, facts = "Your cart is empty", ["empty", phrase]
        return Answer(f"{first}, and order {order_id} {phrase}.", facts)

    return Task("compare", [u.done(answer=cart_answer)])


def buy_cheapest(ctx: TaskContext) -> Task:
    """Search a category, then order or add to cart its cheapest in-stock result by reference."""
    state = ctx.state
    category = ctx.pick(_stocked_categories(state))
    cheapest = state["products"][_cheapest(state, category)]
    first = ref("s", "results.0.id")
    search = call("s", "search_products", category=category)
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.5:
        u.say(
            ctx.pick(
                ["order me the cheapest", "buy the cheapest", "get me the cheapest", "I want to order the cheapest"]
            )
        )
        u.say(category, ctx.pick(["you have", "in stock", "", "available"]))
        u.reading(
            [search, call("buy", "place_order", product_id=first, quantity=1, shipping="standard")], ctx.confident()
        )
        shipping = "express" if ctx.rng.random() < 0.5 else "standard"
        if shipping == "express":
            u.say(ctx.pick(["with express shipping", "and ship it express", "and I need it fast, express please"]))
        else:
            u.say(ctx.pick(["", "standard shipping is fine", "with regular shipping"]))
        u.reading(
            [search, call("buy", "place_order", product_id=first, quantity=1, shipping=shipping)], ctx.confident()
        )

        def order_answer(results: dict[str, Any]) -> Answer:
            b = results["buy"]
            text = f"Ordered the {b['name']} for ${_money(b['total'])}; your order number is {b['order_id']}."
            return Answer(text, [b["name"], b["order_id"]])

        return Task("dependent", [u.done(answer=order_answer)])

    quantity = ctx.rng.randint(1, min(3, cheapest["stock"] - _in_cart(state, _cheapest(state, category))))
    amount = "the cheapest" if quantity == 1 else f"{NUMBER_WORDS[quantity]} of the cheapest"
    noun = category if quantity == 1 else PLURALS[category]
    verb = ctx.pick(["add", "put", "throw"])
    u.say(verb, amount, noun)
    u.reading([search], ctx.unsure())
    u.say(
        ctx.pick(["to my cart", "to the cart", "into my cart"])
        if verb == "add"
        else ctx.pick(["in my cart", "in the cart"])
    )
    u.reading([search, call("add", "add_to_cart", product_id=first, quantity=quantity)], ctx.confident())

    def cart_answer(results: dict[str, Any]) -> Answer:
        a = results["add"]
        return Answer(
            f"Added the {a['name']}; your cart total is now ${_money(a['cart_total'])}.",
            [a["name"], _money(a["cart_total"])],
        )

    return Task("dependent", [u.done(answer=cart_answer)])


def cart_correction(ctx: TaskContext) -> Task:
    """An add-to-cart whose quantity or product the user corrects mid-sentence."""
    state = ctx.state
    products = state["products"]
    stocked = [pid for pid, p in products.items() if p["stock"] - _in_cart(state, pid) >= 2]
    pid = ctx.pick(stocked)
    name = products[pid]["name"]
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    other = [
        i for i, p in products.items() if p["category"] == products[pid]["category"] and i != pid and p["stock"] > 0
    ]
    if other and ctx.rng.random() < 0.4:
        wrong = products[other[0]]["name"]
        verb, place = ctx.pick(
            [("add the", "to my cart,"), ("put the", "in my cart,"), ("can you add the", "to the cart,")]
        )
        u.say(verb, wrong, place)
        u.reading([call("add", "add_to_cart", product_id=other[0], quantity=1)], ctx.confident())
        u.say(ctx.pick(["sorry, I meant the", "no wait, the", "actually make that the"]), name)
        u.reading([call("add", "add_to_cart", product_id=pid, quantity=1)], ctx.confident())
        quantity = 1
    else:
        limit = min(4, products[pid]["stock"] - _in_cart(state, pid))
        wrong, quantity = ctx.rng.sample(range(1, limit + 1), 2)
        if ctx.rng.random() < 0.5:
            verb, place = ctx.pick([("add", "to my cart,"), ("put", "in my cart,"), ("throw", "in the cart,")])
            u.say(verb, NUMBER_WORDS[wrong], "of the", _plural(name), place)
        else:
            verb, place = ctx.pick(
                [("add the", "to my cart,"), ("put the", "in my cart,"), ("add the", "to the cart,")]
            )
            u.say(verb, name, place, ctx.pick(["quantity", "I need", "I'll take"]), NUMBER_WORDS[wrong] + ",")
        u.reading([call("add", "add_to_cart", product_id=pid, quantity=wrong)], ctx.confident())
        u.say(ctx.pick(["actually, make it", "no wait,", "sorry, I mean", "hmm, make that"]), NUMBER_WORDS[quantity])
        u.reading([call("add", "add_to_cart", product_id=pid, quantity=quantity)], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        a = results["add"]
        text = f"Added {quantity} {name} to your cart; the cart total is now ${_money(a['cart_total'])}."
        return Answer(text, [name, _money(a["cart_total"])])

    return Task("correction", [u.done(answer=answer)])


def order_late_intent(ctx: TaskContext) -> Task:
    """The order number comes first and a status check is guessed; the intent (status or a return) comes last."""
    orders = ctx.state["orders"]
    order_id = ctx.pick(list(orders))
    status = call("o", "get_order_status", order_id=order_id)
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    u.say(ctx.pick(["about my order", "regarding order", "for order", "so order", "it's about order"]), order_id + ",")
    u.reading([status], ctx.guess())
    u.say(ctx.pick(["", f"the {orders[order_id]['item']},", "the one I placed last week,"]))
    if orders[order_id]["status"] == "delivered" and ctx.rng.random() < 0.6:
        reason = ctx.pick(REASONS)
        u.say(ctx.pick(["I'd like to return it", "I want to send it back", "can I return it", "I need to return it"]))
        u.reading([call("ret", "request_return", order_id=order_id, reason="no_longer_needed")], ctx.unsure())
        u.say(ctx.pick(["because", "since", "as", "cause"]), ctx.pick(REASON_WORDS[reason]))
        u.reading([call("ret", "request_return", order_id=order_id, reason=reason)], ctx.confident())

        def return_answer(results: dict[str, Any]) -> Answer:
            r = results["ret"]
            text = (
                f"I've started return {r['return_id']} for order {order_id}; you'll get ${_money(r['refund'])} back "
                "once it arrives, and the label is in your email."
            )
            return Answer(text, [r["return_id"], _money(r["refund"])])

        return Task("late_intent", [u.done(answer=return_answer)])

    u.say(ctx.pick(["where is it", "when will it get here", "has it shipped yet", "what's the status", "any update"]))
    u.reading([status], ctx.confident())

    def status_answer(results: dict[str, Any]) -> Answer:
        o = results["o"]
        phrase = _status_phrase(o)
        return Answer(f"Order {order_id}, the {o['item']}, {phrase}.", [o["item"], phrase])

    return Task("late_intent", [u.done(answer=status_answer)])


def return_two_turns(ctx: TaskContext) -> Task:
    """The user opens without an order number; the agent asks for it and the second turn carries the call."""
    orders = ctx.state["orders"]
    delivered = [i for i, o in orders.items() if o["status"] == "delivered"]
    first = ctx.utterance()
    first.say(ctx.pick(FILLERS))
    second = ctx.utterance()
    second.say(ctx.pick(["", "sure,", "yeah", "okay"]))
    if delivered and ctx.rng.random() < 0.6:
        order_id, reason = ctx.pick(delivered), ctx.pick(REASONS)
        first.say(
            ctx.pick(["I need to return something", "I want to make a return", "can you help me return an item"])
        )
        question = Answer("Sure, which order is it, and what's wrong with it?")
        turn1 = first.done(calls=[], answer=lambda results: question)
        second.say(ctx.pick(["it's order", "the order number is", "order"]), order_id)
        second.reading([call("ret", "request_return", order_id=order_id, reason="no_longer_needed")], ctx.unsure())
        second.say(ctx.pick(["and", "", "well"]), ctx.pick(REASON_WORDS[reason]))
        second.reading([call("ret", "request_return", order_id=order_id, reason=reason)], ctx.confident())

        def return_answer(results: dict[str, Any]) -> Answer:
            r = results["ret"]
            text = f"Done, return {r['return_id']} is open and ${_money(r['refund'])} will be refunded to your card."
            return Answer(text, [r["return_id"], _money(r["refund"])])

        return Task("multi_turn", [turn1, second.done(answer=return_answer)])

    order_id = ctx.pick(list(orders))
    first.say(ctx.pick(["can you check on my order", "where's my package", "I'm waiting on a delivery"]))
    question = Answer(ctx.pick(["Sure, what's the order number?", "Of course, which order is it?"]))
    turn1 = first.done(calls=[], answer=lambda results: question)
    second.say(ctx.pick(["it's", "the number is", "order", ""]), order_id)
    second.reading([call("o", "get_order_status", order_id=order_id)], ctx.confident())

    def status_answer(results: dict[str, Any]) -> Answer:
        phrase = _status_phrase(results["o"])
        return Answer(f"Your {results['o']['item']} {phrase}.", [results["o"]["item"], phrase])

    return Task("multi_turn", [turn1, second.done(answer=status_answer)])


DOMAIN = Domain(
    name="shopping",
    tools=TOOLS,
    initial_state=initial_state,
    execute=execute,
    grammars=[
        (product_search, 2.0),
        (stock_check, 1.5),
        (compare_products, 3.0),
        (buy_cheapest, 3.0),
        (cart_correction, 2.5),
        (order_late_intent, 1.5),
        (return_two_turns, 1.0),
    ],
)
