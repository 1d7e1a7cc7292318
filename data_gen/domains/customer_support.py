"""Customer support: order lookup, support tickets, help-center search, refunds and escalations."""

from __future__ import annotations

import random
from typing import Any

from data_gen.domains.base import Domain, ToolError, tool
from data_gen.task import Answer, PlannedCall, Task, TaskContext, call, ref

# Items a customer orders, with the word they call them by.
ITEMS = (
    ("wireless headphones", "headphones"), ("running shoes", "shoes"), ("coffee maker", "coffee maker"),
    ("yoga mat", "yoga mat"), ("phone case", "phone case"), ("desk lamp", "lamp"), ("hiking backpack", "backpack"),
    ("blender", "blender"), ("winter jacket", "jacket"), ("smart watch", "watch"), ("water bottle", "water bottle"),
    ("mechanical keyboard", "keyboard"),
)  # fmt: skip
KEYWORDS = dict(ITEMS)
ORDER_STATUSES = ("processing", "shipped", "delivered", "cancelled")
TICKET_STATUSES = ("open", "pending", "escalated", "resolved")
CATEGORIES = ("damaged", "wrong_item", "late", "missing_parts", "billing")
REASONS = ("damaged", "wrong_item", "not_received", "no_longer_needed")
# Help-center articles: title, the query that finds them, how users ask, and the answer they hold.
ARTICLES = (
    ("Resetting your password", "reset password",
     ("how do I reset my password", "I forgot my password, what do I do", "how can I reset my password"),
     "Use the Forgot password link on the sign-in page and follow the email."),
    ("Changing your shipping address", "change shipping address",
     ("how do I change my shipping address", "can I change the shipping address on an order",
      "I need to change my shipping address"),
     "You can change the address under Orders until the order ships."),
    ("Our return policy", "return policy",
     ("what's your return policy", "how does your return policy work", "tell me about the return policy"),
     "Most items can be returned within 30 days in their original packaging."),
    ("Tracking a package", "track package",
     ("how do I track my package", "where can I track a package", "how can I track the package"),
     "Open the order and tap Track package for live updates."),
    ("Updating your payment method", "update payment method",
     ("how do I update my payment method", "I need to update my payment method", "where do I update payment details"),
     "Go to Account, then Payment methods, and add or replace a card."),
    ("Cancelling an order", "cancel order",
     ("how do I cancel an order", "can I cancel an order after placing it", "what's the way to cancel an order"),
     "Orders can be cancelled from the Orders page until they ship."),
    ("Redeeming a gift card", "redeem gift card",
     ("how do I redeem a gift card", "can I redeem a gift card online", "where do I redeem my gift card"),
     "Enter the gift card code at checkout or under Account, Gift cards."),
    ("International shipping", "international shipping",
     ("do you do international shipping", "how does international shipping work", "what about international shipping"),
     "We ship to over 40 countries; duties are shown at checkout."),
    ("Making a warranty claim", "warranty claim",
     ("how do I make a warranty claim", "how do warranty claims work", "I want to file a warranty claim"),
     "Start a warranty claim from the order page within one year of delivery."),
    ("Deleting your account", "delete account",
     ("how do I delete my account", "can I delete my account", "I want to delete my account, how"),
     "Request deletion under Account, Privacy; it completes within 14 days."),
)  # fmt: skip

TOOLS = [
    tool(
        "lookup_order",
        "Status, total and any open ticket of one order.",
        {"order_id": {"type": "string", "pattern": "^ord[0-9]+$"}},
        latency_s=0.4,
    ),
    tool(
        "list_orders",
        "The customer's orders, most recent first, optionally filtered by item name or status.",
        {"item": {"type": "string"}, "status": {"type": "string", "enum": list(ORDER_STATUSES)}},
        required=[],
        latency_s=0.6,
    ),
    tool(
        "get_ticket_status",
        "Status of one support ticket.",
        {"ticket_id": {"type": "string", "pattern": "^tk[0-9]+$"}},
        latency_s=0.3,
    ),
    tool(
        "search_knowledge_base",
        "Help-center articles matching a query, best match first.",
        {"query": {"type": "string", "minLength": 2}},
        latency_s=1.0,
    ),
    tool(
        "open_ticket",
        "Opens a support ticket about an order.",
        {
            "order_id": {"type": "string", "pattern": "^ord[0-9]+$"},
            "category": {"type": "string", "enum": list(CATEGORIES)},
        },
        side_effect=True,
        latency_s=0.7,
    ),
    tool(
        "request_refund",
        "Refunds a shipped or delivered order in full.",
        {
            "order_id": {"type": "string", "pattern": "^ord[0-9]+$"},
            "reason": {"type": "string", "enum": list(REASONS)},
        },
        side_effect=True,
        latency_s=0.9,
    ),
    tool(
        "escalate_ticket",
        "Escalates an open or pending ticket to a senior agent.",
        {"ticket_id": {"type": "string", "pattern": "^tk[0-9]+$"}},
        side_effect=True,
        latency_s=0.6,
    ),
]


def initial_state(rng: random.Random) -> dict[str, Any]:
    """Six orders (two at least refundable), three tickets (one at least open), eight help articles."""
    numbers = rng.sample(range(100, 1000), 6)
    ages = sorted(rng.sample(range(1, 45), 6))
    statuses = [rng.choice(("processing", "shipped"))]
    statuses += [rng.choice(("delivered", "delivered", "delivered", "shipped", "cancelled")) for _ in range(5)]
    for index in rng.sample(range(1, 6), 2):
        statuses[index] = "delivered"
    orders = [
        {
            "id": f"ord{number}",
            "item": name,
            "status": status,
            "total": round(rng.uniform(8.0, 250.0), 2),
            "days_ago": age,
            "eta_days": rng.randint(1, 5) if status in ("processing", "shipped") else 0,
            "refund_id": "",
        }
        for number, (name, _), status, age in zip(numbers, rng.sample(ITEMS, 6), statuses, ages, strict=True)
    ]
    tickets = [
        {
            "id": f"tk{number}",
            "order_id": order["id"],
            "category": rng.choice(CATEGORIES),
            "status": rng.choice(("open", "pending")) if i == 0 else rng.choice(("open", "pending", "resolved")),
            "days_open": rng.randint(1, 14),
        }
        for i, (number, order) in enumerate(zip(rng.sample(range(1000, 5000), 3), rng.sample(orders, 3), strict=True))
    ]
    kb = [
        {
            "id": f"kb{i + 1}",
            "title": title,
            "keywords": sorted({*query.split(), *title.lower().split()}),
            "summary": text,
        }
        for i, (title, query, _, text) in enumerate(rng.sample(ARTICLES, 8))
    ]
    return {"orders": orders, "tickets": tickets, "kb": kb, "refunds": [], "next_ticket": 5001}


def _order(state: dict[str, Any], order_id: str) -> dict:
    for order in state["orders"]:
        if order["id"] == order_id:
            return order
    raise ToolError(f"no order {order_id}")


def _ticket(state: dict[str, Any], ticket_id: str) -> dict:
    for ticket in state["tickets"]:
        if ticket["id"] == ticket_id:
            return ticket
    raise ToolError(f"no ticket {ticket_id}")


def _open_ticket(state: dict[str, Any], order_id: str) -> str:
    for ticket in state["tickets"]:
        if ticket["order_id"] == order_id and ticket["status"] != "resolved":
            return ticket["id"]
    return ""


def _brief(order: dict) -> dict[str, Any]:
    return {"id": order["id"], "item": order["item"], "status": order["status"], "total": order["total"]}


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one customer-support call against ``state``."""
    if name == "lookup_order":
        order = _order(state, arguments["order_id"])
        return {
            **_brief(order),
            "eta_days": order["eta_days"],
            "refund_id": order["refund_id"],
            "open_ticket": _open_ticket(state, order["id"]),
        }
    if name == "list_orders":
        item, status = arguments.get("item", "").lower(), arguments.get("status")
        found = [
            _brief(order)
            for order in state["orders"]
            if item in order["item"] and (status is None or order["status"] == status)
        ]
        return {"orders": found}
    if name == "get_ticket_status":
        ticket = _ticket(state, arguments["ticket_id"])
        return {"ticket_id": ticket["id"], **{k: v for k, v in ticket.items() if k != "id"}}
    if name == "search_knowledge_base":
        words = arguments["query"].lower().split()
        scored = [(sum(word in article["keywords"] for word in words), i) for i, article in enumerate(state["kb"])]
        ranked = sorted((pair for pair in scored if pair[0]), key=lambda pair: (-pair[0], pair[1]))[:3]
        results = [{k: state["kb"][i][k] for k in ("id", "title", "summary")} for _, i in ranked]
        return {"query": arguments["query"], "results": results}
    if name == "open_ticket":
        order = _order(state, arguments["order_id"])
        ticket = {
            "id": f"tk{state['next_ticket']}",
            "order_id": order["id"],
            "category": arguments["category"],
            "status": "open",
            "days_open": 0,
        }
        state["next_ticket"] += 1
        state["tickets"].append(ticket)
        return {"ok": True, "ticket_id": ticket["id"], "order_id": order["id"], "status": "open"}
    if name == "request_refund":
        order = _order(state, arguments["order_id"])
        if order["refund_id"]:
            raise ToolError(f"order {order['id']} was already refunded ({order['refund_id']})")
        if order["status"] not in ("shipped", "delivered"):
            raise ToolError(f"order {order['id']} is {order['status']} and cannot be refunded")
        refund = {
            "id": f"rf{len(state['refunds']) + 1}",
            "order_id": order["id"],
            "amount": order["total"],
            "reason": arguments["reason"],
        }
        state["refunds"].append(refund)
        order["refund_id"] = refund["id"]
        return {
            "ok": True,
            "refund_id": refund["id"],
            "order_id": order["id"],
            "item": order["item"],
            "amount": order["total"],
        }
    if name == "escalate_ticket":
        ticket = _ticket(state, arguments["ticket_id"])
        if ticket["status"] in ("escalated", "resolved"):
            raise ToolError(f"ticket {ticket['id']} is already {ticket['status']}")
        ticket["status"] = "escalated"
        return {"ok": True, "ticket_id": ticket["id"], "order_id": ticket["order_id"], "status": "escalated"}
    raise ToolError(f"unknown tool {name}")


def _number(order_or_ticket_id: str) -> str:
    return order_or_ticket_id[2:] if order_or_ticket_id.startswith("tk") else order_or_ticket_id[3:]


def _say_order(ctx: TaskContext, order_id: str) -> str:
    return ctx.pick(
        [f"order {_number(order_id)}", f"order number {_number(order_id)}", f"my order {_number(order_id)}"]
    )


def _refundable(ctx: TaskContext) -> list[dict]:
    return [o for o in ctx.state["orders"] if o["status"] in ("shipped", "delivered") and not o["refund_id"]]


def _order_text(r: dict) -> tuple[str, list[str]]:
    text = f"Order {_number(r['id'])}, your {r['item']}, is {r['status']}"
    if r["status"] in ("processing", "shipped"):
        text += f" and should arrive in {r['eta_days']} days"
    return text + ".", [r["item"], r["status"]]


def _order_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        return Answer(*_order_text(results[key]))

    return answer


def _ticket_text(r: dict) -> tuple[str, list[str]]:
    return f"Ticket {_number(r['ticket_id'])} is {r['status']}, opened {r['days_open']} days ago.", [r["status"]]


def _ticket_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        return Answer(*_ticket_text(results[key]))

    return answer


def _refund_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        r = results[key]
        text = f"I've issued refund {r['refund_id']} of ${r['amount']} for your {r['item']}; expect it in 3 to 5 days."
        return Answer(text, [r["refund_id"], str(r["amount"])])

    return answer


def _opened_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        r = results[key]
        number = _number(r["ticket_id"])
        return Answer(f"I've opened ticket {number} for order {_number(r['order_id'])}; we'll be in touch.", [number])

    return answer


def _escalated_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        number = _number(results[key]["ticket_id"])
        return Answer(f"Ticket {number} is escalated to a senior agent, who will reply within a day.", [number])

    return answer


def _reason_phrase(ctx: TaskContext, reason: str, plural: bool) -> str:
    it, obj = ("they", "them") if plural else ("it", "it")
    phrases = {
        "damaged": [f"{it} arrived damaged", f"{it} came broken", f"{it} showed up smashed"],
        "wrong_item": ["you sent the wrong item", "I got the wrong thing", "that's not what I ordered"],
        "not_received": [f"{it} never arrived", f"{it} never showed up", f"I never received {obj}"],
        "no_longer_needed": [f"I don't need {obj} anymore", "I changed my mind", f"I no longer want {obj}"],
    }
    return ctx.pick(phrases[reason])


CATEGORY_PHRASES = {
    "damaged": ["it arrived damaged", "it came broken", "the box was crushed"],
    "wrong_item": ["you sent the wrong item", "I got the wrong thing", "that's not what I ordered"],
    "late": ["it's really late", "it's taking forever", "it's way past the delivery date"],
    "missing_parts": ["some parts are missing", "it came with pieces missing", "half the parts aren't in the box"],
    "billing": ["I was charged twice", "the charge on my card is wrong", "I got billed the wrong amount"],
}


def support_lookup(ctx: TaskContext) -> Task:
    """An order, a ticket or a help article; the most recent order or ticket is guessed before the number."""
    u = ctx.utterance()
    u.say(ctx.pick(["", "hi,", "hey,", "so", "um"]))
    variant = ctx.pick(["order", "order", "ticket", "kb"])
    if variant == "order":
        order = ctx.pick(ctx.state["orders"])
        latest = ctx.state["orders"][0]["id"]
        ask = ctx.pick(
            ["where's my order", "what's the status of my order", "can you check on my order", "has my order"]
        )
        u.say(ask).reading([call("o", "lookup_order", order_id=latest)], ctx.guess())
        u.say(ctx.pick(["", "number"]), _number(order["id"]))
        u.reading([call("o", "lookup_order", order_id=order["id"])], ctx.confident())
        if ask == "has my order":
            u.say(ctx.pick(["shipped yet", "arrived yet", "gone out"]))
        return Task("lookup", [u.done(answer=_order_answer("o"))])
    if variant == "ticket":
        ticket = ctx.pick(ctx.state["tickets"])
        u.say(
            ctx.pick(["any update on my ticket", "what's happening with ticket", "can you check the status of ticket"])
        )
        u.reading([call("t", "get_ticket_status", ticket_id=ctx.state["tickets"][0]["id"])], ctx.guess())
        u.say(ctx.pick(["", "number"]), _number(ticket["id"]))
        u.reading([call("t", "get_ticket_status", ticket_id=ticket["id"])], ctx.confident())
        return Task("lookup", [u.done(answer=_ticket_answer("t"))])
    title = ctx.pick(ctx.state["kb"])["title"]
    _, query, asks, _ = next(article for article in ARTICLES if article[0] == title)
    u.say(ctx.pick(asks)).reading([call("kb", "search_knowledge_base", query=query)], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        hits = results["kb"]["results"]
        if not hits:
            return Answer("I couldn't find a help article on that; want me to open a ticket?")
        return Answer(f'From the help center, "{hits[0]["title"]}": {hits[0]["summary"]}', [hits[0]["title"]])

    return Task("lookup", [u.done(answer=answer)])


def compare_status(ctx: TaskContext) -> Task:
    """Two or three orders, or an order and a ticket, checked in one breath: parallel read-only calls."""
    u = ctx.utterance()
    u.say(ctx.pick(["", "hi,", "so", "okay"]))
    if ctx.rng.random() < 0.6:
        orders = ctx.rng.sample(ctx.state["orders"], ctx.pick([2, 2, 3]))
        calls = [call(f"o{i}", "lookup_order", order_id=o["id"]) for i, o in enumerate(orders)]
        u.say(ctx.pick(["can you check orders", "what's the status of orders", "where are orders"]))
        u.say(_number(orders[0]["id"]) + ("," if len(orders) == 3 else "")).reading(calls[:1], ctx.confident())
        if len(orders) == 3:
            u.say(_number(orders[1]["id"])).reading(calls[:2], ctx.confident())
        u.say("and", _number(orders[-1]["id"])).reading(calls, ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            texts = [_order_text(results[f"o{i}"]) for i in range(len(orders))]
            return Answer(" ".join(text for text, _ in texts), [fact for _, facts in texts for fact in facts])

        return Task("compare", [u.done(answer=answer)])
    order, ticket = ctx.pick(ctx.state["orders"]), ctx.pick(ctx.state["tickets"])
    first = call("o", "lookup_order", order_id=order["id"])
    second = call("t", "get_ticket_status", ticket_id=ticket["id"])
    u.say(ctx.pick(["can you check", "what's the status of", "give me an update on"]), _say_order(ctx, order["id"]))
    u.reading([first], ctx.confident())
    u.say(ctx.pick(["and ticket", "and also ticket", "plus ticket"]), _number(ticket["id"]))
    u.reading([first, second], ctx.confident())

    def order_and_ticket(results: dict[str, Any]) -> Answer:
        (a, facts_a), (b, facts_b) = _order_text(results["o"]), _ticket_text(results["t"])
        return Answer(f"{a} {b}", facts_a + facts_b)

    return Task("compare", [u.done(answer=order_and_ticket)])


def refund_by_item(ctx: TaskContext) -> Task:
    """Finds the order by the item's name, then refunds it: a read-only lookup feeding a refund."""
    order = ctx.pick(_refundable(ctx))
    word = KEYWORDS[order["item"]]
    plural = word.endswith("s")
    reasons = ["damaged", "wrong_item", "no_longer_needed"] if order["status"] == "delivered" else REASONS[2:]
    reason = ctx.pick(reasons)
    find = call("find", "list_orders", item=word)
    refund = call("refund", "request_refund", order_id=ref("find", "orders.0.id"), reason=reason)
    u = ctx.utterance()
    u.say(ctx.pick(["", "hi,", "hey,", "so"]))
    if ctx.rng.random() < 0.5:
        u.say(ctx.pick(["I want a refund for the", "can I get my money back for the", "I'd like to return the"]), word)
        u.reading([find], ctx.confident())
        u.say(ctx.pick(["I ordered,", "I bought,", ""]), ctx.pick(["", "because", "since"]))
        u.say(_reason_phrase(ctx, reason, plural)).reading([find, refund], ctx.confident())
    else:
        u.say("the", word, ctx.pick(["I ordered", "I bought", "from my last order"])).reading([find], ctx.confident())
        u.say(_reason_phrase(ctx, reason, plural) + ",")
        u.say(ctx.pick(["I want a refund", "can I get my money back", "please refund me"]))
        u.reading([find, refund], ctx.confident())
    return Task("dependent", [u.done(answer=_refund_answer("refund"))])


def ticket_via_order(ctx: TaskContext) -> Task:
    """Looks up an order to find its open ticket, then escalates or checks that ticket by the id found."""
    ticket = ctx.pick([t for t in ctx.state["tickets"] if t["status"] in ("open", "pending")])
    order_id = ticket["order_id"]
    lookup = call("order", "lookup_order", order_id=order_id)
    found = ref("order", "open_ticket")
    u = ctx.utterance()
    u.say(ctx.pick(["", "hi,", "so", "look,"]))
    u.say(
        ctx.pick(["my ticket about", "the complaint I opened about", "my support request for"]),
        _say_order(ctx, order_id),
    )
    u.reading([lookup], ctx.confident())
    if ctx.rng.random() < 0.6:
        u.say(ctx.pick(["still isn't resolved,", "has been open forever,", "is going nowhere,"]))
        u.reading([lookup, call("ticket", "get_ticket_status", ticket_id=found)], ctx.unsure())
        u.say(ctx.pick(["please escalate it", "can you escalate it", "I want it escalated"]))
        u.reading([lookup, call("ticket", "escalate_ticket", ticket_id=found)], ctx.confident())
        return Task("dependent", [u.done(answer=_escalated_answer("ticket"))])
    u.say(ctx.pick(["what's happening with it", "any news on it", "where does it stand"]))
    u.reading([lookup, call("ticket", "get_ticket_status", ticket_id=found)], ctx.confident())
    return Task("dependent", [u.done(answer=_ticket_answer("ticket"))])


def order_then_intent(ctx: TaskContext) -> Task:
    """The order and the problem come first and the request last; an order lookup is the early guess."""
    intent = ctx.pick(["refund", "ticket", "status"])
    order = ctx.pick(_refundable(ctx) if intent == "refund" else ctx.state["orders"])
    lookup = call("order", "lookup_order", order_id=order["id"])
    u = ctx.utterance()
    u.say(ctx.pick(["", "hi,", "so", "okay so"]), ctx.pick(["about", "regarding", "it's about"]))
    u.say(_say_order(ctx, order["id"]) + ",").reading([lookup], ctx.guess())
    if intent == "refund":
        reason = ctx.pick(
            ["damaged", "wrong_item", "no_longer_needed"] if order["status"] == "delivered" else REASONS[2:]
        )
        u.say(
            _reason_phrase(ctx, reason, False) + ",",
            ctx.pick(["I'd like a refund", "can I get my money back", "refund it"]),
        )
        u.reading([call("refund", "request_refund", order_id=order["id"], reason=reason)], ctx.confident())
        answer = _refund_answer("refund")
    elif intent == "ticket":
        category = ctx.pick(CATEGORIES)
        u.say(ctx.pick(CATEGORY_PHRASES[category]) + ",")
        u.say(ctx.pick(["please open a ticket", "can you file a complaint", "I want to report it"]))
        u.reading([call("new", "open_ticket", order_id=order["id"], category=category)], ctx.confident())
        answer = _opened_answer("new")
    else:
        u.say(ctx.pick(["where is it", "when will it get here", "what's going on with it", "has it shipped"]))
        u.reading([lookup], ctx.confident())
        answer = _order_answer("order")
    return Task("late_intent", [u.done(answer=answer)])


def ticket_with_correction(ctx: TaskContext) -> Task:
    """A ticket or an order check whose order number or problem the user corrects mid-sentence."""
    wrong, right = ctx.rng.sample(ctx.state["orders"], 2)
    u = ctx.utterance()
    u.say(ctx.pick(["", "hi,", "so", "um"]))
    fix = ctx.pick(["order", "category", "lookup"])
    if fix == "lookup":
        u.say(ctx.pick(["can you check", "look up", "what's the status of"]), _say_order(ctx, wrong["id"]))
        u.reading([call("order", "lookup_order", order_id=wrong["id"])], ctx.confident())
        u.say(ctx.pick(["wait, I mean", "sorry, it's", "no, actually"]), _number(right["id"]))
        u.reading([call("order", "lookup_order", order_id=right["id"])], ctx.confident())
        return Task("correction", [u.done(answer=_order_answer("order"))])
    first, second = ctx.rng.sample(CATEGORIES, 2)
    category = second if fix == "category" else first
    order_id = right["id"]

    def make(order: str, cat: str) -> PlannedCall:
        return call("new", "open_ticket", order_id=order, category=cat)

    opener = ["open a ticket for", "I need to file a complaint about", "please open a ticket on"]
    if fix == "order":
        u.say(ctx.pick(CATEGORY_PHRASES[category]) + ",", ctx.pick(opener), _say_order(ctx, wrong["id"]))
        u.reading([make(wrong["id"], category)], ctx.confident())
        u.say(ctx.pick(["no sorry,", "wait, I mean", "actually"]), _number(right["id"]))
    else:
        u.say(ctx.pick(opener), _say_order(ctx, order_id) + ",", ctx.pick(CATEGORY_PHRASES[first]))
        u.reading([make(order_id, first)], ctx.confident())
        u.say(ctx.pick(["well actually", "no wait,", "I mean"]), ctx.pick(CATEGORY_PHRASES[second]))
    u.reading([make(order_id, category)], ctx.confident())
    return Task("correction", [u.done(answer=_opened_answer("new"))])


def two_turn_request(ctx: TaskContext) -> Task:
    """The first utterance lacks the order or ticket number; the agent asks, the second utterance gives it."""
    first, second = ctx.utterance(), ctx.utterance()
    first.say(ctx.pick(["", "hi,", "hello,", "hey,"]))
    second.say(ctx.pick(["", "um", "sure,", "yeah,"]))
    variant = ctx.pick(["refund", "refund", "escalate", "ticket"])
    if variant == "refund":
        order = ctx.pick(_refundable(ctx))
        reason = ctx.pick(
            ["damaged", "wrong_item", "no_longer_needed"] if order["status"] == "delivered" else REASONS[2:]
        )
        first.say(ctx.pick(["I'd like a refund", "I want my money back for something", "can I get a refund"]))
        question = "Sure, which order is it for?"
        second.say(ctx.pick(["it's", "", "that's"]), _say_order(ctx, order["id"]) + ",")
        second.say(_reason_phrase(ctx, reason, False))
        second.reading([call("refund", "request_refund", order_id=order["id"], reason=reason)], ctx.confident())
        answer = _refund_answer("refund")
    else:
        open_tickets = [t for t in ctx.state["tickets"] if t["status"] in ("open", "pending")]
        ticket = ctx.pick(open_tickets if variant == "escalate" else ctx.state["tickets"])
        if variant == "escalate":
            first.say(
                ctx.pick(["can you escalate my ticket", "I want to escalate a ticket", "please escalate my case"])
            )
            gold, answer = call("t", "escalate_ticket", ticket_id=ticket["id"]), _escalated_answer("t")
        else:
            first.say(
                ctx.pick(["I want to check on a ticket", "what's the status of my ticket", "any news on my case"])
            )
            gold, answer = call("t", "get_ticket_status", ticket_id=ticket["id"]), _ticket_answer("t")
        question = "Sure, what's the ticket number?"
        second.say(ctx.pick(["it's", "", "ticket"]), _number(ticket["id"])).reading([gold], ctx.confident())
    turn1 = first.done(calls=[], answer=lambda results: Answer(question), tail=0.3)
    return Task("multi_turn", [turn1, second.done(answer=answer)])


DOMAIN = Domain(
    name="customer_support",
    tools=TOOLS,
    initial_state=initial_state,
    execute=execute,
    grammars=[
        (support_lookup, 2.0),
        (compare_status, 3.0),
        (refund_by_item, 3.0),
        (ticket_via_order, 2.5),
        (order_then_intent, 1.5),
        (ticket_with_correction, 2.5),
        (two_turn_request, 1.5),
    ],
)
