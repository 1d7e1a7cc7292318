"""Importing the Berkeley Function Calling Leaderboard (BFCL v4) multi-turn data as streaming timelines.

BFCL ships in the ``bfcl-eval`` wheel, whose pinned dependencies clash with ours, so it is installed with
``pip install --no-deps --target ~/.cache/clocktune/bfcl-eval bfcl-eval`` (``make bfcl``). Only its data files
and the simulated API classes in ``eval_checker/multi_turn_eval/func_source_code`` are used: the parent packages
are registered as empty namespace modules so that no ``__init__`` of ``bfcl_eval`` runs, and nothing of BFCL is
ever ``eval``-ed: ground-truth call strings are parsed with :mod:`ast` into literal arguments.

Each BFCL entry becomes one timeline: every user turn is spoken through the speech model, and the turn's
ground-truth calls are the gold reading the teacher plays out on the virtual clock against :class:`BfclBackend`
(the BFCL classes themselves). Simplifications, stated so that users can judge the data:

- BFCL has no information about what a partial utterance implies, so there are no speculative readings: the
  teacher acts once the user has finished. The ``speculative`` teacher still runs consecutive read-only calls in
  parallel, but keeps BFCL's order within a turn, since each call acts on the state the earlier ones leave (``cd``
  then ``ls``): a call waits for the results of earlier state-changing calls, a state-changing call for all
  earlier calls. The ``sync`` teacher makes one call at a time anyway.
- ``multi_turn_miss_func``: every function of the involved classes is listed from the start, and the calls of
  the turn in which BFCL reveals the held-out function (a turn without user words) are folded into the turn
  before it, the request that needed the function.
- ``multi_turn_miss_param``: a turn whose ground truth is empty ends with the agent asking for the missing
  details, without calls. Empty-ground-truth turns of other categories end with an apology.
- ``excluded_function`` of an entry is ignored, as the BFCL version this was written against ignores it.
- The final answer of a turn summarises the results; BFCL states no facts an answer must contain.
"""

from __future__ import annotations

import ast
import copy
import datetime
import decimal
import importlib
import inspect
import json
import math
import os
import sys
import time
import types
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from clocktune.timeline.events import GroundTruth, GroundTruthCall, Timeline, ToolSchema
from clocktune.timeline.io import atomic_write_lines, timeline_to_json
from clocktune.timeline.validate import validate_timeline
from data_gen.config import GeneratorConfig, config_to_dict
from data_gen.domains.base import BrokenCallError, Domain, ToolError
from data_gen.generate import dialogue_seed
from data_gen.planner import ACKNOWLEDGEMENTS, PlannerError, Simulation
from data_gen.stats import DatasetStats
from data_gen.task import Answer, AnswerFn, PlannedCall, Reading, Task, Turn
from data_gen.writer import MANIFEST

__all__ = [
    "API_CLASSES",
    "BFCL_VERSION",
    "CATEGORIES",
    "SIDE_EFFECTS",
    "BfclBackend",
    "BfclCallError",
    "BfclError",
    "backend_for_timeline",
    "find_bfcl_root",
    "function_docs",
    "import_bfcl",
    "load_entries",
    "parse_call",
    "to_json",
    "tool_schemas",
]

BFCL_VERSION = "2026.3.23"  # the wheel SIDE_EFFECTS and the tests were checked against (`make bfcl` pins it)
DOMAIN = "bfcl"
CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
ENV_DIR = "CLOCKTUNE_BFCL_DIR"
DEFAULT_DIR = "~/.cache/clocktune/bfcl-eval/bfcl_eval"
DEFAULT_MEDIAN_S = 0.6  # BFCL states no latencies: every tool gets the project's default median
SHARD_NAME = "train-00000-of-00001.jsonl"

# Each class of the multi-turn categories: its module in func_source_code and its function doc file in
# data/multi_turn_func_doc (BFCL's constants/executable_backend_config.py maps them the same way).
API_CLASSES: dict[str, tuple[str, str]] = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
STATELESS_CLASSES = frozenset({"MathAPI"})  # BFCL loads no scenario into these

# Whether each function changes its instance's state (True: runs only after a commit) or only reads it.
# Every function of every class above must be listed: an unlisted one is an error at import time.
SIDE_EFFECTS: dict[str, dict[str, bool]] = {
    "GorillaFileSystem": {
        "pwd": False,
        "ls": False,
        "cd": True,  # moves the current directory, which every later file call resolves names against
        "mkdir": True,
        "touch": True,
        "echo": True,  # writes the content into file_name when one is given
        "cat": False,
        "find": False,
        "wc": False,
        "sort": False,  # returns the sorted lines; the file itself is not rewritten
        "grep": False,
        "du": False,
        "tail": False,
        "diff": False,
        "mv": True,
        "rm": True,
        "rmdir": True,
        "cp": True,
    },
    # Pure arithmetic on the arguments; the class keeps no state.
    "MathAPI": {
        "absolute_value": False,
        "add": False,
        "divide": False,
        "imperial_si_conversion": False,
        "logarithm": False,
        "max_value": False,
        "mean": False,
        "min_value": False,
        "multiply": False,
        "percentage": False,
        "power": False,
        "round_number": False,
        "si_unit_conversion": False,
        "square_root": False,
        "standard_deviation": False,
        "subtract": False,
        "sum_values": False,
    },
    "MessageAPI": {
        "list_users": False,
        "get_user_id": False,
        "message_login": True,  # sets the current user that sends and reads messages
        "message_get_login_status": False,
        "send_message": True,
        "delete_message": True,
        "view_messages_sent": False,
        "add_contact": True,
        "search_messages": False,
        "get_message_stats": False,
    },
    "TwitterAPI": {
        "authenticate_twitter": True,  # sets the authenticated flag every posting call checks
        "posting_get_login_status": False,
        "post_tweet": True,
        "retweet": True,
        "comment": True,
        "mention": True,  # appends the usernames to the tweet's mentions
        "follow_user": True,
        "list_all_following": False,
        "unfollow_user": True,
        "get_tweet": False,
        "get_user_tweets": False,
        "search_tweets": False,
        "get_tweet_comments": False,
        "get_user_stats": False,
    },
    "TicketAPI": {
        "create_ticket": True,
        "get_ticket": False,
        "close_ticket": True,
        "resolve_ticket": True,
        "edit_ticket": True,
        "ticket_login": True,  # sets the current user
        "ticket_get_login_status": False,
        "logout": True,
        "get_user_tickets": False,
    },
    "TradingBot": {
        "get_current_time": False,
        "get_symbol_by_name": False,
        "get_stock_info": False,
        "get_order_details": False,
        "cancel_order": True,
        "place_order": True,
        "withdraw_funds": True,
        "get_account_info": False,
        "trading_login": True,  # sets the authenticated flag
        "trading_get_login_status": False,
        "trading_logout": True,
        "fund_account": True,
        "remove_stock_from_watchlist": True,
        "get_watchlist": False,
        "get_order_history": False,
        "get_transaction_history": False,
        "get_available_stocks": False,
        "filter_stocks_by_price": False,
        "add_to_watchlist": True,
        "notify_price_change": False,
    },
    "TravelAPI": {
        "authenticate_travel": True,  # issues the access token later calls must present
        "travel_get_login_status": False,
        "get_budget_fiscal_year": False,
        "register_credit_card": True,
        "get_flight_cost": False,
        "get_credit_card_balance": False,
        "book_flight": True,
        "retrieve_invoice": False,
        "get_booking_history": False,
        "list_all_airports": False,
        "cancel_booking": True,
        "compute_exchange_rate": False,
        "verify_traveler_information": False,
        "set_budget_limit": True,
        "get_nearest_airport_by_city": False,
        "purchase_insurance": True,  # charges the credit card
        "contact_customer_support": False,  # returns a canned reply; nothing is recorded
        "get_all_credit_cards": False,
    },
    "VehicleControlAPI": {
        "startEngine": True,
        "fillFuelTank": True,
        "lockDoors": True,
        "adjustClimateControl": True,
        "get_outside_temperature_from_google": False,
        "get_outside_temperature_from_weather_com": False,
        "setHeadlights": True,
        "displayCarStatus": False,
        "activateParkingBrake": True,
        "pressBrakePedal": True,
        "releaseBrakePedal": True,
        "setCruiseControl": True,
        "get_current_speed": False,
        "display_log": False,  # echoes the messages back
        "estimate_drive_feasibility_by_mileage": False,
        "liter_to_gallon": False,
        "gallon_to_liter": False,
        "estimate_distance": False,
        "get_zipcode_based_on_city": False,
        "set_navigation": True,
        "check_tire_pressure": False,
        "find_nearest_tire_shop": False,
    },
}

# Attributes left out of the state: back-references, which BFCL's own equality ignores too
# (Directory.__eq__ compares name and contents) and which would make the state cyclic.
_BACK_REFERENCES: dict[str, frozenset[str]] = {"Directory": frozenset({"parent"})}

ASK_FOR_DETAILS = "I need a bit more information to do that. Could you give me the missing details?"
CANNOT_DO = "Sorry, I can't do that with the tools I have."
_SUMMARY_CHARS = 80  # longest value quoted in an answer
_SUMMARY_ITEMS = 5  # longest list quoted item by item


class BfclError(ValueError):
    """Missing or malformed BFCL input; the message names the file, the entry id and the field."""


class BfclCallError(BrokenCallError):
    """A call BFCL cannot run at all (unknown function, wrong arguments, an exception inside the class).

    Unlike a plain :class:`ToolError` (a refusal the service states as ``{"error": ...}``, which BFCL's ground
    truth sometimes contains), this means the call itself is broken.
    """


# Locating and loading the wheel ------------------------------------------------------------------------------


def find_bfcl_root(path: str | os.PathLike | None = None) -> Path:
    """The ``bfcl_eval`` package folder of an installed ``bfcl-eval`` wheel.

    Args:
        path: The ``bfcl_eval`` folder (or the ``--target`` folder holding it); defaults to the environment
            variable ``CLOCKTUNE_BFCL_DIR``, then to ``~/.cache/clocktune/bfcl-eval/bfcl_eval``.

    Returns:
        The resolved ``bfcl_eval`` folder.

    Raises:
        BfclError: When no BFCL package is there, naming what to run.
    """
    if path is not None:
        where = "the given path"
    elif os.environ.get(ENV_DIR):
        path, where = os.environ[ENV_DIR], f"${ENV_DIR}"
    else:
        path, where = DEFAULT_DIR, "the default location"
    folder = Path(path).expanduser()
    if (folder / "bfcl_eval").is_dir() and not (folder / "eval_checker").is_dir():
        folder = folder / "bfcl_eval"  # the --target folder was given
    if (
        not (folder / "eval_checker" / "multi_turn_eval" / "func_source_code").is_dir()
        or not (folder / "data").is_dir()
    ):
        raise BfclError(
            f"no bfcl_eval package at {folder} ({where}); run `make bfcl` (pip install --no-deps --target "
            f"~/.cache/clocktune/bfcl-eval bfcl-eval=={BFCL_VERSION}), or pass --bfcl-dir or set {ENV_DIR}"
        )
    return folder.resolve()


def installed_version(root: Path) -> str:
    """The version of the wheel at ``root`` from its ``.dist-info`` folder, or ``"unknown"``."""
    infos = sorted(root.parent.glob("bfcl_eval-*.dist-info"))
    return infos[-1].name[len("bfcl_eval-") : -len(".dist-info")] if infos else "unknown"


_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"


def _register_packages(root: Path) -> None:
    # The API modules import each other by absolute name (bfcl_eval....long_context). Registering the parent
    # packages as empty modules lets those imports resolve without running any bfcl_eval __init__, which in some
    # versions imports the clashing dependencies.
    parts = _PACKAGE.split(".")
    folder = root.parent
    for depth, part in enumerate(parts, start=1):
        name = ".".join(parts[:depth])
        folder = folder / part
        module = sys.modules.get(name)
        if module is None:
            module = types.ModuleType(name)
            module.__path__ = [str(folder)]
            module.__package__ = name
            sys.modules[name] = module
            if depth > 1:
                setattr(sys.modules[".".join(parts[: depth - 1])], part, module)
        elif str(folder) not in [str(Path(entry).resolve()) for entry in getattr(module, "__path__", [])]:
            raise BfclError(
                f"{name} is already loaded from {list(getattr(module, '__path__', []))}, not {folder}; "
                "use one BFCL installation per process"
            )


def _api_module(root: Path, module: str) -> types.ModuleType:
    _register_packages(root)
    try:
        return importlib.import_module(f"{_PACKAGE}.{module}")
    except ImportError as error:
        raise BfclError(
            f"cannot import BFCL module {module} from {root}: {error}; install the missing package "
            f"{error.name!r} into the project environment"
        ) from error


def api_class(class_name: str, bfcl_dir: str | os.PathLike | None = None) -> type:
    """The simulated API class ``class_name`` of the wheel.

    Args:
        class_name: A key of :data:`API_CLASSES`, e.g. ``"GorillaFileSystem"``.
        bfcl_dir: See :func:`find_bfcl_root`.

    Returns:
        The class.

    Raises:
        BfclError: For a class outside the multi-turn categories or a wheel that cannot be loaded.
    """
    if class_name not in API_CLASSES:
        raise BfclError(f"unsupported BFCL class {class_name!r}; supported: {', '.join(API_CLASSES)}")
    return getattr(_api_module(find_bfcl_root(bfcl_dir), API_CLASSES[class_name][0]), class_name)


@lru_cache(maxsize=64)
def _function_docs(root: Path, class_name: str) -> tuple[dict, ...]:
    path = root / "data" / "multi_turn_func_doc" / API_CLASSES[class_name][1]
    return tuple(_read_jsonl(path))


def function_docs(class_name: str, bfcl_dir: str | os.PathLike | None = None) -> list[dict]:
    """The BFCL function docs of one class, as the wheel ships them (``name``, ``description``, ``parameters``).

    Args:
        class_name: A key of :data:`API_CLASSES`.
        bfcl_dir: See :func:`find_bfcl_root`.

    Returns:
        One dict per function, in file order (do not modify: they are cached).
    """
    if class_name not in API_CLASSES:
        raise BfclError(f"unsupported BFCL class {class_name!r}; supported: {', '.join(API_CLASSES)}")
    return list(_function_docs(find_bfcl_root(bfcl_dir), class_name))


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise BfclError(f"{path}: no such file")
    records = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise BfclError(f"{path}:{line_no}: not valid JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise BfclError(f"{path}:{line_no}: expected a JSON object")
            records.append(record)
    return records


# Function docs -> tool schemas --------------------------------------------------------------------------------

_TYPE_NAMES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer",
               "str": "string", "bool": "boolean"}  # fmt: skip
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def _json_schema(spec: Any, where: str) -> dict:
    if not isinstance(spec, dict):
        raise BfclError(f"{where}: expected a parameter spec object, got {type(spec).__name__}")
    schema: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "type":
            if value == "any":
                continue  # JSON Schema says "any type" by leaving the type out
            mapped = _TYPE_NAMES.get(value, value)
            if mapped not in _JSON_TYPES:
                raise BfclError(f"{where}.type: unknown BFCL type {value!r}")
            schema["type"] = mapped
        elif key == "properties":
            schema[key] = {name: _json_schema(sub, f"{where}.{name}") for name, sub in value.items()}
        elif key == "items":
            schema[key] = _json_schema(value, f"{where}.items")
        else:
            schema[key] = copy.deepcopy(value)
    return schema


# Where BFCL's own ground truth calls a function with an argument type its doc does not allow, the schema takes
# the union, so that the entry imports faithfully instead of being dropped. (class, function, argument) -> schema.
DOC_FIXES: dict[tuple[str, str, str], dict[str, Any]] = {
    # multi_turn_*_173 closes "ticket_001"; the doc says integer; TicketAPI compares ids with ==, so both work.
    ("TicketAPI", "close_ticket", "ticket_id"): {"type": ["integer", "string"]},
}


def doc_to_schema(doc: dict, class_name: str, config: GeneratorConfig | None = None) -> ToolSchema:
    """Converts one BFCL function doc to a tool schema.

    Args:
        doc: The function doc (``name``, ``description``, ``parameters`` with BFCL types).
        class_name: The class that owns the function, for the side-effect table.
        config: Generator config whose ``tools`` sets the latency model (defaults when ``None``).

    Returns:
        The schema, with ``parameters`` in JSON Schema (an object that allows no undocumented argument).

    Raises:
        BfclError: For a malformed doc or a function missing from :data:`SIDE_EFFECTS`.
    """
    name = doc.get("name")
    where = f"{API_CLASSES.get(class_name, ('', class_name))[1]}:{name}"
    if not isinstance(name, str) or not isinstance(doc.get("parameters", {}), dict):
        raise BfclError(f"{where}: a function doc needs a name and a parameters object")
    try:
        side_effect = SIDE_EFFECTS[class_name][name]
    except KeyError:
        raise BfclError(
            f"{where}: {class_name}.{name} is not classified in SIDE_EFFECTS "
            f"(data_gen/importers/bfcl.py); add it as read-only (False) or state-changing (True)"
        ) from None
    parameters = _json_schema(doc.get("parameters") or {"type": "dict"}, f"{where}.parameters")
    parameters["type"] = "object"
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    parameters["additionalProperties"] = False
    for (fixed_class, fixed_name, argument), schema in DOC_FIXES.items():
        if (fixed_class, fixed_name) == (class_name, name) and argument in parameters["properties"]:
            parameters["properties"][argument] = {**parameters["properties"][argument], **schema}
    latency = (config or GeneratorConfig()).tools.apply(DEFAULT_MEDIAN_S)
    return ToolSchema(name, str(doc.get("description", "")), parameters, side_effect, latency)


def tool_schemas(
    involved_classes: Sequence[str], config: GeneratorConfig | None = None, bfcl_dir: str | os.PathLike | None = None
) -> list[ToolSchema]:
    """The tools of an entry: every function of its involved classes.

    Args:
        involved_classes: BFCL class names, in the entry's order.
        config: Generator config (latency model).
        bfcl_dir: See :func:`find_bfcl_root`.

    Returns:
        One schema per function name; where two classes share a name the later class's doc wins, as BFCL
        resolves the call to the later class.
    """
    schemas: dict[str, ToolSchema] = {}
    for class_name in involved_classes:
        for doc in function_docs(class_name, bfcl_dir):
            schema = doc_to_schema(doc, class_name, config)
            schemas.pop(schema.name, None)
            schemas[schema.name] = schema
    return list(schemas.values())


def parameter_names(
    involved_classes: Sequence[str], bfcl_dir: str | os.PathLike | None = None
) -> dict[str, list[str]]:
    """Parameter names of each documented function in the order its method declares them.

    Positional arguments of a call string bind in this order, as they do when BFCL evaluates the string. The
    docs mostly list parameters in the same order, but not always (``purchase_insurance``).

    Args:
        involved_classes: BFCL class names; a later class wins a shared function name.
        bfcl_dir: See :func:`find_bfcl_root`.

    Returns:
        Function name -> parameter names.
    """
    names: dict[str, list[str]] = {}
    for class_name in involved_classes:
        cls = api_class(class_name, bfcl_dir)
        for doc in function_docs(class_name, bfcl_dir):
            method = getattr(cls, doc["name"], None)
            if method is None:
                raise BfclError(f"{API_CLASSES[class_name][1]}:{doc['name']}: {class_name} has no such method")
            names[doc["name"]] = [
                parameter.name
                for parameter in list(inspect.signature(method).parameters.values())[1:]  # after self
                if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
            ]
    return names


# Call strings -------------------------------------------------------------------------------------------------


def parse_call(
    text: str, parameters: Mapping[str, Sequence[str]] | None = None, where: str = "<call>"
) -> tuple[str, dict[str, Any]]:
    """Parses a BFCL call string such as ``mv(source='a', destination='b')`` without evaluating it.

    Args:
        text: One call: a plain function name and literal arguments (strings, numbers, booleans, ``None``,
            lists, tuples and dicts of those).
        parameters: Documented parameter names per function, to name positional arguments.
        where: Where the string comes from (entry id, turn), for errors.

    Returns:
        ``(name, arguments)`` with JSON-compatible arguments (tuples become lists).

    Raises:
        BfclError: Naming ``where`` and the string when it is not such a call.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise BfclError(f"{where}: cannot parse call {text!r} ({error.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise BfclError(f"{where}: {text!r} is not a call of a plain function name")
    name = node.func.id
    arguments: dict[str, Any] = {}
    if node.args:
        names = (parameters or {}).get(name)
        if names is None:
            raise BfclError(
                f"{where}: {text!r} passes arguments by position and {name!r} has no documented parameters"
            )
        if len(node.args) > len(names):
            raise BfclError(f"{where}: {text!r} passes {len(node.args)} positional arguments; {name} takes {names}")
        for parameter, value in zip(names, node.args, strict=False):
            arguments[parameter] = _literal(value, text, where)
    for keyword in node.keywords:
        if keyword.arg is None:
            raise BfclError(f"{where}: {text!r} unpacks **arguments, which is not a literal")
        if keyword.arg in arguments:
            raise BfclError(f"{where}: {text!r} gives {keyword.arg!r} twice")
        arguments[keyword.arg] = _literal(keyword.value, text, where)
    return name, arguments


def _literal(node: ast.expr, text: str, where: str) -> Any:
    if isinstance(node, ast.Starred):
        raise BfclError(f"{where}: {text!r} unpacks *arguments, which is not a literal")
    try:
        value = ast.literal_eval(node)  # literals only: names, calls and attributes raise
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise BfclError(f"{where}: in {text!r}, {ast.unparse(node)!r} is not a literal value") from None
    return _json_literal(value, text, where)


def _json_literal(value: Any, text: str, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BfclError(f"{where}: {text!r} holds the non-finite number {value}")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_literal(item, text, where) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise BfclError(f"{where}: {text!r} holds a dict with non-string keys")
        return {key: _json_literal(item, text, where) for key, item in value.items()}
    raise BfclError(f"{where}: {text!r} holds a {type(value).__name__}, which JSON cannot carry")


# State and results as JSON --------------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """Converts a BFCL value (results, instance attributes) to JSON-compatible data, deterministically.

    Dicts keep their order with keys as strings, tuples become lists, sets sorted lists, dates ISO strings,
    non-finite floats strings, objects the dict of their public attributes (back-references left out), and
    anything else its ``str``.

    Args:
        value: Any value.

    Returns:
        The JSON-compatible value.
    """
    return _to_json(value, ())


def _to_json(value: Any, ancestors: tuple[int, ...]) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if id(value) in ancestors:
        return f"<cycle {type(value).__name__}>"
    inner = ancestors + (id(value),)
    if isinstance(value, dict):
        return {key if isinstance(key, str) else str(key): _to_json(item, inner) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(item, inner) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_to_json(item, inner) for item in value), key=lambda item: json.dumps(item, sort_keys=True))
    if hasattr(value, "__dict__") and not isinstance(value, (type, types.ModuleType)) and not callable(value):
        skip = _BACK_REFERENCES.get(type(value).__name__, frozenset())
        return {
            key: _to_json(item, inner)
            for key, item in vars(value).items()
            if not key.startswith("_") and key not in skip
        }
    return str(value)


# The backend ----------------------------------------------------------------------------------------------------


class BfclBackend:
    """BFCL's simulated services for one session, behind the project's ``ToolBackend`` protocol.

    Instances are created and loaded as BFCL's ``execute_multi_turn_func_call`` does: one instance per involved
    class, ``_load_scenario(deepcopy(initial_config[class]), long_context=...)`` for stateful classes, and each
    public method name resolved to the class that owns it (the later class when two share a name).

    Args:
        involved_classes: BFCL class names.
        initial_config: The entry's ``initial_config`` (scenario per class).
        long_context: Load the long-context variant of the scenarios (``multi_turn_long_context``).
        bfcl_dir: See :func:`find_bfcl_root`.
    """

    # Reads depend on earlier writes (``ls`` after ``cd``): the runtime's executor keeps program order.
    sequential = True

    def __init__(
        self,
        involved_classes: Sequence[str],
        initial_config: Mapping[str, Any],
        long_context: bool = False,
        bfcl_dir: str | os.PathLike | None = None,
    ):
        self.involved_classes = list(involved_classes)
        self._instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}
        for class_name in self.involved_classes:
            instance = api_class(class_name, bfcl_dir)()
            if class_name not in STATELESS_CLASSES:
                # A scenario keeps references into its config: a private copy keeps the caller's config intact.
                scenario = copy.deepcopy(dict(initial_config).get(class_name, {}))
                try:
                    instance._load_scenario(scenario, long_context=long_context)
                except Exception as error:  # a malformed scenario: BFCL's loaders index into it freely
                    raise BfclError(
                        f"initial_config.{class_name}: cannot load the scenario ({type(error).__name__}: {error})"
                    ) from error
            self._instances[class_name] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self._methods[name] = method

    def execute(self, name: str, arguments: dict[str, Any]) -> Any:
        """Runs one call.

        Args:
            name: Function name.
            arguments: Resolved arguments (copied: BFCL classes store argument lists in their state).

        Returns:
            The JSON-compatible result; ``{}`` for functions that return nothing.

        Raises:
            ToolError: When the service answers ``{"error": ...}``.
            BfclCallError: For an unknown function, arguments it does not take, or an exception inside it.
        """
        method = self._methods.get(name)
        if method is None:
            raise BfclCallError(f"{name}: no such function in {', '.join(self.involved_classes)}")
        try:
            result = method(**copy.deepcopy(arguments))
        except Exception as error:  # whatever the class raises (TypeError for wrong arguments too): a broken call
            raise BfclCallError(f"{name}: {type(error).__name__}: {error}") from error
        if isinstance(result, dict) and "error" in result:
            raise ToolError(str(result["error"]))
        return {} if result is None else to_json(result)

    def state(self) -> dict[str, Any]:
        """Each instance's public attributes, what BFCL's multi-turn state checker compares.

        Returns:
            ``{class name: {attribute: JSON value}}`` in the order of ``involved_classes``.
        """
        return {
            class_name: {key: to_json(value) for key, value in vars(instance).items() if not key.startswith("_")}
            for class_name, instance in self._instances.items()
        }


def _initial_state(timeline: Timeline) -> tuple[list[str], dict, bool]:
    state = timeline.initial_state
    classes, config, long_context = (
        state.get("involved_classes"),
        state.get("initial_config"),
        state.get("long_context", False),
    )
    if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes):
        raise BfclError(f"timeline {timeline.id!r}: initial_state.involved_classes must be a list of class names")
    if not isinstance(config, dict):
        raise BfclError(f"timeline {timeline.id!r}: initial_state.initial_config must be an object")
    if not isinstance(long_context, bool):
        raise BfclError(f"timeline {timeline.id!r}: initial_state.long_context must be true or false")
    return classes, config, long_context


def backend_for_timeline(timeline: Timeline, bfcl_dir: str | os.PathLike | None = None) -> BfclBackend:
    """A fresh backend in the initial state of an imported BFCL timeline.

    Args:
        timeline: A timeline whose ``initial_state`` holds ``involved_classes``, ``initial_config`` and
            ``long_context``.
        bfcl_dir: See :func:`find_bfcl_root`.

    Returns:
        The backend.

    Raises:
        BfclError: For a malformed initial state or a missing wheel.
    """
    classes, config, long_context = _initial_state(timeline)
    return BfclBackend(classes, config, long_context, bfcl_dir)


# Entries -> tasks -> timelines ------------------------------------------------------------------------------------


def load_entries(category: str, data_dir: str | os.PathLike) -> list[tuple[dict, list]]:
    """Reads the entries of a category with their per-turn ground truth.

    Args:
        category: One of :data:`CATEGORIES`.
        data_dir: Folder holding ``BFCL_v4_<category>.json`` and ``possible_answer/BFCL_v4_<category>.json``.

    Returns:
        ``(entry, ground_truth)`` pairs in file order; ``ground_truth`` holds one list of call strings per turn.

    Raises:
        BfclError: For an unknown category, missing files, bad lines or an entry without a possible answer.
    """
    if category not in CATEGORIES:
        raise BfclError(f"unknown BFCL category {category!r}; choose one of {', '.join(CATEGORIES)}")
    data_dir = Path(data_dir)
    path = data_dir / f"BFCL_v4_{category}.json"
    answer_path = data_dir / "possible_answer" / f"BFCL_v4_{category}.json"
    answers: dict[str, Any] = {}
    for record in _read_jsonl(answer_path):
        if not isinstance(record.get("id"), str) or not isinstance(record.get("ground_truth"), list):
            raise BfclError(f"{answer_path}: every line needs an id and a ground_truth list ({record.get('id')!r})")
        answers[record["id"]] = record["ground_truth"]
    pairs = []
    for line_no, entry in enumerate(_read_jsonl(path), start=1):
        entry_id = entry.get("id")
        if not isinstance(entry_id, str):
            raise BfclError(f"{path}:{line_no}: entry without an id")
        for key, kind in (("question", list), ("involved_classes", list), ("initial_config", dict)):
            if not isinstance(entry.get(key), kind):
                raise BfclError(f"{path}:{line_no}: entry {entry_id}: {key} must be a {kind.__name__}")
        if entry_id not in answers:
            raise BfclError(f"{answer_path}: no ground truth for entry {entry_id}")
        pairs.append((entry, answers[entry_id]))
    return pairs


def plan_turns(
    entry: dict, ground_truth: list, parameters: Mapping[str, Sequence[str]]
) -> list[tuple[list[str], list[tuple[str, dict]]]]:
    """Splits an entry into spoken turns, each with the words and the parsed ground-truth calls.

    A turn without user words (where ``multi_turn_miss_func`` reveals the held-out function) gives its calls to
    the turn before it.

    Args:
        entry: A BFCL entry.
        ground_truth: Its per-turn call strings.
        parameters: Documented parameter names per function (for positional arguments).

    Returns:
        ``(words, [(name, arguments), ...])`` per spoken turn.

    Raises:
        BfclError: Naming the entry id and turn for mismatched turns, empty words or bad call strings.
    """
    entry_id = entry.get("id")
    question = entry["question"]
    if len(question) != len(ground_truth):
        raise BfclError(f"entry {entry_id}: {len(question)} question turns but {len(ground_truth)} ground-truth turns")
    turns: list[tuple[list[str], list[tuple[str, dict]]]] = []
    for index, (messages, calls) in enumerate(zip(question, ground_truth, strict=True)):
        if not isinstance(messages, list) or not isinstance(calls, list):
            raise BfclError(f"entry {entry_id}: turn {index}: question and ground truth must be lists")
        parsed = []
        for number, text in enumerate(calls):
            if not isinstance(text, str):
                raise BfclError(f"entry {entry_id}: turn {index} call {number}: expected a call string, got {text!r}")
            parsed.append(parse_call(text, parameters, f"entry {entry_id}: turn {index} call {number}"))
        if not messages:
            if not turns:
                raise BfclError(f"entry {entry_id}: turn {index} has no user message and no turn before it")
            turns[-1][1].extend(parsed)
            continue
        text = " ".join(
            str(message.get("content", ""))
            for message in messages
            if isinstance(message, dict) and message.get("role") == "user"
        )
        if not text.split():
            raise BfclError(f"entry {entry_id}: turn {index}: no user words")
        turns.append((text.split(), parsed))
    return turns


def _shorten(text: str) -> str:
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 3].rstrip() + "..."


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return _shorten(" ".join(value.split()))
    if isinstance(value, list):
        if len(value) <= _SUMMARY_ITEMS and all(not isinstance(item, (list, dict)) for item in value):
            return _shorten(", ".join(str(item) for item in value)) if value else "none"
        return f"{len(value)} items"
    if isinstance(value, dict):
        return f"{len(value)} entries"
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "none"}[value]
    return str(value)


def summarise(name: str, result: Any) -> str:
    """One sentence about a call's result for the turn's answer (empty when there is nothing to report).

    Args:
        name: Function name.
        result: Its JSON result.

    Returns:
        ``"name: key value, key value."`` with long values shortened and nested values counted.
    """
    if result in ({}, None, "", []):
        return ""
    if isinstance(result, dict):
        parts = [f"{key.replace('_', ' ')} {_describe(value)}" for key, value in result.items()]
        return f"{name}: {'; '.join(parts)}."
    return f"{name}: {_describe(result)}."


def _answer(category: str, calls: list[PlannedCall]) -> AnswerFn:
    if not calls:
        text = ASK_FOR_DETAILS if category == "multi_turn_miss_param" else CANNOT_DO
        return lambda results: Answer(text)

    def answer(results: dict[str, Any]) -> Answer:
        parts = [summarise(call.name, results.get(call.key)) for call in calls]
        parts = [part for part in parts if part]
        return Answer(" ".join(["Done."] + parts))

    return answer


def build_task(category: str, turns: list[tuple[list[str], list[tuple[str, dict]]]]) -> Task:
    """The task the teacher plays: per turn, the words and one gold reading at the last word.

    Args:
        category: BFCL category (the task kind).
        turns: From :func:`plan_turns`.

    Returns:
        The task.
    """
    task_turns = []
    for index, (words, calls) in enumerate(turns):
        planned = [
            PlannedCall(f"t{index}c{number}", name, arguments) for number, (name, arguments) in enumerate(calls)
        ]
        task_turns.append(Turn(list(words), [Reading(len(words), 1.0, planned)], _answer(category, planned)))
    return Task(category, task_turns)


class _BfclSimulation(Simulation):
    """The planner's simulation with BFCL's ordering rule for the speculative teacher.

    BFCL calls within a turn are sequential: each acts on the state the earlier ones leave (``cd`` then ``ls``).
    The teacher keeps that order the way a readers-writer lock would, so it holds on any executor: a read-only
    call is issued once every earlier state-changing call of the turn has returned, and a state-changing call once
    every earlier call has. Consecutive read-only calls still run in parallel.
    """

    def _decide_speculative(self, turn: Turn) -> tuple[str, dict[str, Any]]:
        if not self._final:
            return "wait", {}  # BFCL has no readings of partial words: nothing to act on before the end
        change_pending = read_pending = False
        for planned in turn.gold.calls:
            call = self._by_key.get(planned.key)
            if call is None:
                if change_pending or (read_pending and self._tools[planned.name].side_effect):
                    break
                return "tool_call", {"planned": planned, "arguments": planned.arguments}
            if call.seen_version != call.version:
                change_pending = change_pending or call.side_effect
                read_pending = read_pending or not call.side_effect
        else:
            return self._finish_turn(turn)
        if any(call.turn == self._turn and call.side_effect and call.open for call in self._calls.values()):
            return "commit", {}
        if self._ack_wanted and not self._acked:
            self._acked = True
            return "say", {"answer": Answer(self._agent_rng.choice(ACKNOWLEDGEMENTS)), "final": False}
        return "wait", {}


def entry_timeline(
    entry: dict,
    ground_truth: list,
    category: str,
    seed: int,
    config: GeneratorConfig,
    bfcl_dir: str | os.PathLike | None = None,
) -> Timeline:
    """Plays one BFCL entry out under the config's teacher.

    Args:
        entry: The BFCL entry.
        ground_truth: Its per-turn call strings.
        category: Its category (the timeline's task).
        seed: The dialogue's own seed (speech, latencies, acknowledgements).
        config: Generator config.
        bfcl_dir: See :func:`find_bfcl_root`.

    Returns:
        The timeline; ``ground_truth.calls`` are the calls that reached the backend (the possible answer's, less
        any the config's failure rate timed out), and ``final_state`` is the state after replaying them on a fresh
        backend.

    Raises:
        BfclError: For bad input, a ground-truth call BFCL cannot run, or a played-out dialogue whose final state
            differs from the replay.
    """
    entry_id = entry["id"]
    classes = list(entry["involved_classes"])
    long_context = "long_context" in category
    tools = tool_schemas(classes, config, bfcl_dir)
    task = build_task(category, plan_turns(entry, ground_truth, parameter_names(classes, bfcl_dir)))
    backend = BfclBackend(classes, entry["initial_config"], long_context, bfcl_dir)
    # The ground truth is what reached the backend, in order: with injected failures (tools.failure_rate) a
    # timed-out call never runs, and the later turns act on the state without it.
    calls: list[GroundTruthCall] = []

    def execute(state: dict, name: str, arguments: dict) -> Any:
        calls.append(GroundTruthCall(name, copy.deepcopy(arguments)))
        return backend.execute(name, arguments)

    # The backend carries the state, so the state dict the planner copies stays empty.
    domain = Domain(DOMAIN, tools, lambda rng: {}, execute, [])
    events = _BfclSimulation(domain, tools, task, {}, config, seed, config.teacher).run()
    replay = BfclBackend(classes, entry["initial_config"], long_context, bfcl_dir)
    for index, call in enumerate(calls):
        try:
            replay.execute(call.name, call.arguments)
        except BfclCallError as error:
            raise BfclError(f"entry {entry_id}: ground-truth call {index} cannot run: {error}") from None
        except ToolError:
            continue  # a refusal in BFCL's ground truth; the dialogue shows it as an error result
    final_state = replay.state()
    if final_state != backend.state():
        raise BfclError(f"entry {entry_id}: the played-out dialogue ends in another state than its ground truth")
    return Timeline(
        id=entry_id,
        domain=DOMAIN,
        task=category,
        seed=seed,
        teacher=config.teacher,
        tools=tools,
        initial_state={
            "involved_classes": classes,
            "initial_config": entry["initial_config"],
            "long_context": long_context,
        },
        ground_truth=GroundTruth(calls=calls, final_state=final_state, facts=[]),
        events=events,
    )


def import_bfcl(
    category: str,
    out_dir: str | os.PathLike,
    limit: int | None = None,
    seed: int = 0,
    config: GeneratorConfig | None = None,
    bfcl_dir: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Imports one BFCL multi-turn category as timelines, in the generator's dataset layout.

    Writes ``out_dir/data/train-00000-of-00001.jsonl`` (atomically), ``out_dir/generation.json`` (what determines
    the file) and ``out_dir/stats.json`` (dataset statistics plus the skipped entries). An entry that cannot be
    converted is skipped and reported with its reason, never dropped silently.

    Args:
        category: One of :data:`CATEGORIES`.
        out_dir: Output folder.
        limit: Import only the first ``limit`` entries.
        seed: Seed of the run; entry ``i`` gets its own seed from it, so a limit does not change the others.
        config: Generator config (speech, latencies, device, teacher); defaults when ``None``.
        bfcl_dir: The ``bfcl_eval`` folder; see :func:`find_bfcl_root`.
        data_dir: Folder with the entry and possible-answer files; defaults to the wheel's ``data`` folder.

    Returns:
        ``path`` (the shard), ``entries`` (read), ``written``, ``skipped`` (entry id -> reason), ``seconds`` and
        ``stats`` (what ``stats.json`` holds).

    Raises:
        BfclError: For a missing wheel, an unknown category, unreadable files, or an ``out_dir`` written with
            other settings.
    """
    started = time.perf_counter()
    config = config or GeneratorConfig()
    if limit is not None and limit < 0:
        raise BfclError(f"limit must be non-negative, got {limit}")
    root = find_bfcl_root(bfcl_dir)
    pairs = load_entries(category, Path(data_dir) if data_dir is not None else root / "data")
    if limit is not None:
        pairs = pairs[:limit]
    out_dir = Path(out_dir)
    manifest = {
        "source": "bfcl",
        "bfcl_version": installed_version(root),
        "category": category,
        "data_dir": None if data_dir is None else str(Path(data_dir)),
        "limit": limit,
        "seed": seed,
        "format": "jsonl",
        "config": config_to_dict(config),
    }
    manifest_path = out_dir / MANIFEST
    if manifest_path.exists() and json.loads(manifest_path.read_text()) != manifest:
        raise BfclError(
            f"{manifest_path} was written with other settings; use a new --out folder or delete it to start over"
        )
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    atomic_write_lines(manifest_path, [json.dumps(manifest, indent=2) + "\n"])

    lines, skipped, stats = [], {}, DatasetStats()
    for index, (entry, ground_truth) in enumerate(pairs):
        try:
            timeline = entry_timeline(entry, ground_truth, category, dialogue_seed(seed, index), config, root)
        except (BfclError, PlannerError) as error:
            skipped[entry["id"]] = str(error)
            continue
        issues = validate_timeline(timeline)
        if issues:
            # BFCL's ground truth can break its own docs (e.g. a string ticket_id for an integer parameter).
            shown = "; ".join(f"{issue.field}: {issue.message}" for issue in issues[:3])
            more = f" (and {len(issues) - 3} more)" if len(issues) > 3 else ""
            skipped[entry["id"]] = f"the timeline is invalid: {shown}{more}"
            continue
        stats.add(timeline)
        lines.append(timeline_to_json(timeline) + "\n")
    path = out_dir / "data" / SHARD_NAME
    atomic_write_lines(path, lines)
    summary = stats.to_dict()
    summary.update({"entries": len(pairs), "skipped": len(skipped), "skipped_entries": skipped})
    atomic_write_lines(out_dir / "stats.json", [json.dumps(summary, indent=2) + "\n"])
    return {
        "path": path,
        "entries": len(pairs),
        "written": len(lines),
        "skipped": skipped,
        "seconds": time.perf_counter() - started,
        "stats": summary,
    }
