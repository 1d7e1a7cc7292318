"""Banking: account balances, transactions, payees, transfers, bill pay and card freezes."""

from __future__ import annotations

import random
from typing import Any

from data_gen.domains.base import Domain, ToolError, tool
from data_gen.task import Answer, Task, TaskContext, call, ref

ACCOUNTS = ("checking", "savings", "joint")
BALANCE_RANGES = {"checking": (400, 6000), "savings": (1000, 25000), "joint": (200, 4000)}
CARDS = ("debit", "credit")
CATEGORIES = ("groceries", "dining", "travel", "utilities", "shopping", "entertainment")
MERCHANTS = {
    "groceries": ("Whole Foods", "Trader Joe's", "Safeway"),
    "dining": ("Chipotle", "Blue Bottle", "Olive Garden"),
    "travel": ("Delta", "Uber", "Shell"),
    "utilities": ("City Power", "Comcast", "Verizon"),
    "shopping": ("Amazon", "Target", "IKEA"),
    "entertainment": ("Netflix", "AMC Theatres", "Spotify"),
}
PAYEES = (
    ("City Power", "utilities"),
    ("City Water", "utilities"),
    ("Comcast", "internet"),
    ("Verizon", "phone"),
    ("State Farm", "insurance"),
    ("Oak Street Apartments", "rent"),
    ("Visa Card", "credit card"),
    ("Doctor Patel", "medical"),
    ("Green Lawn Care", "services"),
)
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five")
FILLERS = ("", "", "hey,", "so", "um", "okay so")

TOOLS = [
    tool(
        "get_balance",
        "Current balance of one of the user's accounts.",
        {"account": {"type": "string", "enum": list(ACCOUNTS)}},
        latency_s=0.4,
    ),
    tool(
        "list_transactions",
        "Recent transactions on an account, newest first, optionally in one spending category, with their total.",
        {
            "account": {"type": "string", "enum": list(ACCOUNTS)},
            "category": {"type": "string", "enum": list(CATEGORIES)},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        required=["account"],
        latency_s=0.9,
    ),
    tool(
        "find_payee",
        "Searches the user's saved payees by name, best match first.",
        {"payee_name": {"type": "string"}},
        latency_s=0.7,
    ),
    tool(
        "get_card_status",
        "Whether one of the user's cards is active or frozen.",
        {"card": {"type": "string", "enum": list(CARDS)}},
        latency_s=0.3,
    ),
    tool(
        "transfer_funds",
        "Moves money between two of the user's accounts.",
        {
            "from_account": {"type": "string", "enum": list(ACCOUNTS)},
            "to_account": {"type": "string", "enum": list(ACCOUNTS)},
            "amount": {"type": "number", "exclusiveMinimum": 0},
        },
        side_effect=True,
        latency_s=1.0,
    ),
    tool(
        "pay_bill",
        "Pays a saved payee from one of the user's accounts.",
        {
            "payee_id": {"type": "string"},
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "from_account": {"type": "string", "enum": list(ACCOUNTS)},
        },
        side_effect=True,
        latency_s=1.1,
    ),
    tool(
        "set_card_frozen",
        "Freezes or unfreezes one of the user's cards.",
        {"card": {"type": "string", "enum": list(CARDS)}, "frozen": {"type": "boolean"}},
        side_effect=True,
        latency_s=0.6,
    ),
]


def initial_state(rng: random.Random) -> dict[str, Any]:
    """Three accounts with a few recent transactions each, six saved payees and two cards."""
    accounts = {}
    transactions: dict[str, list[dict[str, Any]]] = {}
    serial = 0
    for account in ACCOUNTS:
        low, high = BALANCE_RANGES[account]
        accounts[account] = {"balance": round(rng.uniform(low, high), 2), "last4": str(rng.randint(1000, 9999))}
        day = rng.randint(20, 28)
        history = []
        for _ in range(rng.randint(2, 3) if account == "savings" else rng.randint(3, 5)):
            serial += 1
            category = rng.choice(CATEGORIES)
            history.append(
                {
                    "id": f"t{serial}",
                    "date": f"June {day}",
                    "merchant": rng.choice(MERCHANTS[category]),
                    "category": category,
                    "amount": round(rng.uniform(4, 180), 2),
                }
            )
            day -= rng.randint(1, 3)
        transactions[account] = history
    payees = [{"id": f"py{i + 1}", "name": name, "kind": kind} for i, (name, kind) in enumerate(rng.sample(PAYEES, 6))]
    cards = {card: {"last4": str(rng.randint(1000, 9999)), "frozen": rng.random() < 0.2} for card in CARDS}
    return {
        "accounts": accounts,
        "transactions": transactions,
        "payees": payees,
        "cards": cards,
        "transfers": [],
        "payments": [],
    }


def _withdraw(state: dict[str, Any], account: str, amount: float) -> None:
    balance = state["accounts"][account]["balance"]
    if amount > balance:
        raise ToolError(f"insufficient funds in {account}: {balance:.2f} available")
    state["accounts"][account]["balance"] = round(balance - amount, 2)


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one banking call against ``state``."""
    if name == "get_balance":
        a = state["accounts"][arguments["account"]]
        return {"account": arguments["account"], "balance": a["balance"], "last4": a["last4"]}
    if name == "list_transactions":
        category = arguments.get("category")
        hits = [
            t for t in state["transactions"][arguments["account"]] if category is None or t["category"] == category
        ]
        hits = hits[: arguments.get("limit", 10)]
        total = round(sum(t["amount"] for t in hits), 2)
        return {"account": arguments["account"], "transactions": hits, "count": len(hits), "total": total}
    if name == "find_payee":
        query = arguments["payee_name"].lower().strip()
        hits = [p for p in state["payees"] if query in p["name"].lower() or p["name"].lower() in query]
        hits.sort(key=lambda p: (p["name"].lower() != query, p["name"]))
        return {"results": [dict(p) for p in hits], "count": len(hits)}
    if name == "get_card_status":
        c = state["cards"][arguments["card"]]
        return {"card": arguments["card"], "last4": c["last4"], "frozen": c["frozen"]}
    if name == "transfer_funds":
        source, target, amount = (arguments["from_account"], arguments["to_account"], arguments["amount"])
        if source == target:
            raise ToolError("cannot transfer to the same account")
        _withdraw(state, source, amount)
        state["accounts"][target]["balance"] = round(state["accounts"][target]["balance"] + amount, 2)
        state["transfers"].append({"from": source, "to": target, "amount": amount})
        return {
            "ok": True,
            "transfer_id": f"tr{len(state['transfers'])}",
            "amount": amount,
            "from_balance": state["accounts"][source]["balance"],
            "to_balance": state["accounts"][target]["balance"],
        }
    if name == "pay_bill":
        payee = next((p for p in state["payees"] if p["id"] == arguments["payee_id"]), None)
        if payee is None:
            raise ToolError(f"no payee {arguments['payee_id']}")
        _withdraw(state, arguments["from_account"], arguments["amount"])
        state["payments"].append(
            {"payee_id": payee["id"], "amount": arguments["amount"], "from": arguments["from_account"]}
        )
        return {
            "ok": True,
            "payment_id": f"pm{len(state['payments'])}",
            "payee": payee["name"],
            "amount": arguments["amount"],
            "balance": state["accounts"][arguments["from_account"]]["balance"],
        }
    if name == "set_card_frozen":
        c = state["cards"][arguments["card"]]
        if c["frozen"] == arguments["frozen"]:
            raise ToolError(f"{arguments['card']} card is already {'frozen' if c['frozen'] else 'active'}")
        c["frozen"] = arguments["frozen"]
        return {"ok": True, "card": arguments["card"], "last4": c["last4"], "frozen": c["frozen"]}
    raise ToolError(f"unknown tool {name}")


def _money(x: float) -> str:
    return f"{x:.2f}"


def _account_phrase(ctx: TaskContext, account: str) -> str:
    return ctx.pick([account, f"my {account} account", f"the {account} account", f"my {account}"])


def balance_lookup(ctx: TaskContext) -> Task:
    """One balance; checking is assumed until the account is named, so some early lookups get redone."""
    account = ctx.pick(ACCOUNTS)
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.25:
        opener, closer = ctx.pick(
            [
                ("what's my", ("balance", "account balance")),
                ("what's the balance on my", ("account",)),
                ("check my", ("balance",)),
            ]
        )
        u.say(opener, account, ctx.pick(closer))
    else:
        opener, joiners = ctx.pick(
            [
                ("how much do I have", ("in", "sitting in")),
                ("how much money is", ("in", "sitting in", "left in")),
                ("what's my balance", ("in", "on", "for")),
                ("what's the balance", ("on", "for")),
            ]
        )
        u.say(opener).reading([call("b", "get_balance", account="checking")], ctx.guess())
        u.say(ctx.pick(joiners), _account_phrase(ctx, account))
    u.reading([call("b", "get_balance", account=account)], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        b = results["b"]
        return Answer(f"Your {account} account has ${_money(b['balance'])}.", [_money(b["balance"])])

    return Task("lookup", [u.done(answer=answer)])


def compare_accounts(ctx: TaskContext) -> Task:
    """Two balances, or spending in two categories on one account: parallel read-only calls."""
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.5:
        first, second = ctx.rng.sample(ACCOUNTS, 2)
        opener, joiners = ctx.pick(
            [
                ("do I have more in", ("or", "or in", "versus")),
                ("which has more money,", ("or", "versus")),
                ("compare my balances in", ("and", "versus")),
            ]
        )
        u.say(opener, first)
        u.reading([call("a", "get_balance", account=first)], ctx.unsure())
        u.say(ctx.pick(joiners), second)
        calls = [call("a", "get_balance", account=first), call("b", "get_balance", account=second)]
        u.reading(calls, ctx.confident())

        def balance_answer(results: dict[str, Any]) -> Answer:
            a, b = results["a"]["balance"], results["b"]["balance"]
            more = first if a >= b else second
            text = f"{first.title()} has ${_money(a)} and {second} has ${_money(b)}, so {more} has more."
            return Answer(text, [_money(a), _money(b), more])

        return Task("compare", [u.done(answer=balance_answer)])

    first, second = ctx.rng.sample(CATEGORIES, 2)
    account = ctx.pick(["checking", "checking", "joint"])
    lead = account != "checking" or ctx.rng.random() < 0.3
    if lead:
        u.say(ctx.pick(["on", "for"]), _account_phrase(ctx, account) + ",")
    u.say(ctx.pick(["how much did I spend on", "what did I spend on", "compare my spending on"]), first)
    u.reading([call("a", "list_transactions", account=account, category=first)], ctx.unsure())
    u.say(ctx.pick(["versus", "compared to", "and"]), second)
    calls = [
        call("a", "list_transactions", account=account, category=first),
        call("b", "list_transactions", account=account, category=second),
    ]
    u.reading(calls, ctx.confident())
    if not lead:
        u.say(ctx.pick(["", "lately", "this month"]))

    def spend_answer(results: dict[str, Any]) -> Answer:
        a, b = results["a"]["total"], results["b"]["total"]
        text = f"Recently on {account} you spent ${_money(a)} on {first} and ${_money(b)} on {second}."
        return Answer(text, [_money(a), _money(b)])

    return Task("compare", [u.done(answer=spend_answer)])


def pay_payee(ctx: TaskContext) -> Task:
    """Look up a payee by name, then pay its first match by reference: a read-only to state-changing chain."""
    state = ctx.state
    payee = ctx.pick(state["payees"])["name"]
    amount = ctx.rng.randint(20, 180)
    source = ctx.pick(ACCOUNTS) if ctx.rng.random() < 0.5 else None
    find = call("p", "find_payee", payee_name=payee)
    payee_id = ref("p", "results.0.id")
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    dollars = ctx.pick([f"{amount} dollars", f"{amount} bucks", f"${amount}"])
    if ctx.rng.random() < 0.5:
        u.say(ctx.pick(["pay", "send", "make a payment of"]), dollars, "to", payee)
    else:
        u.say(ctx.pick(["pay", "can you pay"]), payee).reading([find], ctx.confident())
        u.say(dollars)
    u.reading(
        [find, call("pay", "pay_bill", payee_id=payee_id, amount=amount, from_account="checking")], ctx.confident()
    )
    if source:
        u.say(ctx.pick(["from", "out of", "using"]), _account_phrase(ctx, source))
        u.reading(
            [find, call("pay", "pay_bill", payee_id=payee_id, amount=amount, from_account=source)], ctx.confident()
        )
    account = source or "checking"

    def answer(results: dict[str, Any]) -> Answer:
        p = results["pay"]
        text = f"Paid ${amount} to {p['payee']} from {account}; confirmation {p['payment_id']}."
        return Answer(text, [p["payee"], p["payment_id"], str(amount)])

    return Task("dependent", [u.done(answer=answer)])


def sweep_account(ctx: TaskContext) -> Task:
    """Move a whole balance: read the balance, then transfer exactly that amount by reference."""
    source, target = ctx.rng.sample(ACCOUNTS, 2)
    balance = call("bal", "get_balance", account=source)
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    u.say(ctx.pick(["move everything from", "transfer all the money in", "empty out", "sweep the whole balance of"]))
    u.say(_account_phrase(ctx, source)).reading([balance], ctx.confident())
    u.say(ctx.pick(["into", "over to", "to"]), _account_phrase(ctx, target))
    transfer = call("move", "transfer_funds", from_account=source, to_account=target, amount=ref("bal", "balance"))
    u.reading([balance, transfer], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        m = results["move"]
        text = f"Moved ${_money(m['amount'])} from {source} to {target}; {target} now has ${_money(m['to_balance'])}."
        return Answer(text, [_money(m["amount"]), _money(m["to_balance"])])

    return Task("dependent", [u.done(answer=answer)])


def transfer_correction(ctx: TaskContext) -> Task:
    """A transfer whose amount or destination the user corrects mid-sentence."""
    accounts = ctx.state["accounts"]
    source = ctx.pick(ACCOUNTS)
    cap = max(100, min(1000, int(accounts[source]["balance"]) // 50 * 50))
    wrong, amount = ctx.rng.sample(range(50, cap + 1, 50), 2) if cap >= 100 else (10, 20)
    others = [a for a in ACCOUNTS if a != source]
    target = ctx.pick(others)
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS), ctx.pick(["transfer", "move", "send"]))
    if ctx.rng.random() < 0.5:
        u.say(f"{wrong}", ctx.pick(["dollars", "bucks"]), "from", source, "to", target + ",")
        u.reading([call("t", "transfer_funds", from_account=source, to_account=target, amount=wrong)], ctx.confident())
        u.say(ctx.pick(["actually, make it", "no wait,", "sorry, I meant", "hmm, make that"]), f"{amount}")
    else:
        wrong_target = others[0] if others[1] == target else others[1]
        u.say(f"{amount}", ctx.pick(["dollars", "bucks"]), "from", source, "to", wrong_target + ",")
        calls = [call("t", "transfer_funds", from_account=source, to_account=wrong_target, amount=amount)]
        u.reading(calls, ctx.confident())
        u.say(ctx.pick(["actually, to", "no wait, into", "sorry, I mean to"]), _account_phrase(ctx, target))
    u.reading([call("t", "transfer_funds", from_account=source, to_account=target, amount=amount)], ctx.confident())

    def answer(results: dict[str, Any]) -> Answer:
        t = results["t"]
        text = f"Transferred ${amount} from {source} to {target}; {source} now has ${_money(t['from_balance'])}."
        return Answer(text, [str(amount), _money(t["from_balance"])])

    return Task("correction", [u.done(answer=answer)])


def card_or_account_late_intent(ctx: TaskContext) -> Task:
    """A card or account is named first and a status/balance check guessed; the real intent comes last."""
    state = ctx.state
    u = ctx.utterance()
    u.say(ctx.pick(FILLERS))
    if ctx.rng.random() < 0.6:
        card = ctx.pick(CARDS)
        frozen = state["cards"][card]["frozen"]
        status = call("c", "get_card_status", card=card)
        u.say(ctx.pick(["so my", "about my", "it's my", "regarding my"]), card, "card,")
        u.reading([status], ctx.guess())
        if ctx.rng.random() < 0.65:
            if frozen:
                u.say(ctx.pick(["I found it,", "it turned up,", ""]))
                u.say(ctx.pick(["can you unfreeze it", "please turn it back on", "unlock it again"]))
            else:
                u.say(ctx.pick(["I think I lost it,", "I can't find it,", "someone might have used it,", ""]))
                u.say(ctx.pick(["can you freeze it", "please lock it", "freeze it right away"]))
            u.reading([call("f", "set_card_frozen", card=card, frozen=not frozen)], ctx.confident())

            def freeze_answer(results: dict[str, Any]) -> Answer:
                f = results["f"]
                word = "frozen" if f["frozen"] else "active again"
                return Answer(f"Your {card} card ending in {f['last4']} is now {word}.", [f["last4"], word])

            return Task("late_intent", [u.done(answer=freeze_answer)])
        u.say(ctx.pick(["is it still active", "is it frozen", "is it working right now", "is it locked"]))
        u.reading([status], ctx.confident())

        def status_answer(results: dict[str, Any]) -> Answer:
            c = results["c"]
            word = "frozen" if c["frozen"] else "active"
            return Answer(f"Your {card} card ending in {c['last4']} is {word}.", [c["last4"], word])

        return Task("late_intent", [u.done(answer=status_answer)])

    account = ctx.pick(ACCOUNTS)
    limit = ctx.rng.randint(2, 3)
    u.say(ctx.pick(["on", "for", "about"]), _account_phrase(ctx, account) + ",")
    u.reading([call("b", "get_balance", account=account)], ctx.guess())
    u.say(ctx.pick([f"what were my last {NUMBER_WORDS[limit]}", f"show me the last {NUMBER_WORDS[limit]}"]))
    u.say(ctx.pick(["transactions", "charges", "purchases"]))
    u.reading([call("tx", "list_transactions", account=account, limit=limit)], ctx.confident())

    def tx_answer(results: dict[str, Any]) -> Answer:
        items = results["tx"]["transactions"]
        listed = ", ".join(f"{t['merchant']} ${_money(t['amount'])} on {t['date']}" for t in items)
        return Answer(f"Your latest {account} transactions: {listed}.", [t["merchant"] for t in items])

    return Task("late_intent", [u.done(answer=tx_answer)])


def two_turn_payment(ctx: TaskContext) -> Task:
    """The user states a goal without details; the agent asks, and the second turn carries the calls."""
    state = ctx.state
    first = ctx.utterance()
    first.say(ctx.pick(FILLERS))
    second = ctx.utterance()
    second.say(ctx.pick(["", "sure,", "okay", "yeah,"]))
    if ctx.rng.random() < 0.5:
        payee = ctx.pick(state["payees"])["name"]
        amount = ctx.rng.randint(20, 180)
        first.say(ctx.pick(["I need to pay a bill", "can you help me pay a bill", "I want to make a payment"]))
        question = Answer(
            ctx.pick(["Sure, who are you paying, and how much?", "Happy to. Who's the payee and amount?"])
        )
        turn1 = first.done(calls=[], answer=lambda results: question)
        find = call("p", "find_payee", payee_name=payee)
        second.say(ctx.pick(["it's", "pay", ""]), payee).reading([find], ctx.confident())
        second.say(ctx.pick(["", "for", "and it's"]), f"{amount}", ctx.pick(["dollars", "bucks"]))
        pay = call("pay", "pay_bill", payee_id=ref("p", "results.0.id"), amount=amount, from_account="checking")
        second.reading([find, pay], ctx.confident())

        def pay_answer(results: dict[str, Any]) -> Answer:
            p = results["pay"]
            return Answer(
                f"Done: ${amount} to {p['payee']}, confirmation {p['payment_id']}.", [p["payee"], p["payment_id"]]
            )

        return Task("multi_turn", [turn1, second.done(answer=pay_answer)])

    target = ctx.pick(ACCOUNTS)
    source = ctx.pick([a for a in ACCOUNTS if a != target])
    amount = ctx.rng.randint(1, max(1, min(20, int(state["accounts"][source]["balance"]) // 50))) * 50
    first.say(ctx.pick(["can you move some money into", "I want to put some money in", "transfer money to"]))
    first.say(_account_phrase(ctx, target))
    question = Answer(ctx.pick(["Sure, how much, and from which account?", "How much should I move, and from where?"]))
    turn1 = first.done(calls=[], answer=lambda results: question)
    second.say(f"{amount}", ctx.pick(["dollars,", "bucks,", "dollars"]))
    guess = "checking" if target != "checking" else "savings"
    second.reading([call("t", "transfer_funds", from_account=guess, to_account=target, amount=amount)], ctx.unsure())
    second.say(ctx.pick(["from", "out of", "and take it from"]), _account_phrase(ctx, source))
    second.reading(
        [call("t", "transfer_funds", from_account=source, to_account=target, amount=amount)], ctx.confident()
    )

    def transfer_answer(results: dict[str, Any]) -> Answer:
        t = results["t"]
        text = f"Moved ${amount} from {source} to {target}; {target} now has ${_money(t['to_balance'])}."
        return Answer(text, [str(amount), _money(t["to_balance"])])

    return Task("multi_turn", [turn1, second.done(answer=transfer_answer)])


DOMAIN = Domain(
    name="banking",
    tools=TOOLS,
    initial_state=initial_state,
    execute=execute,
    grammars=[
        (balance_lookup, 2.0),
        (compare_accounts, 3.0),
        (pay_payee, 2.5),
        (sweep_account, 2.0),
        (transfer_correction, 2.5),
        (card_or_account_late_intent, 1.5),
        (two_turn_payment, 1.0),
    ],
)
