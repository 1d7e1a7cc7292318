"""Importing the Berkeley Function Calling Leaderboard (BFCL v4) multi-turn data as streaming timelines.

BFCL ships in the ``bfcl-eval`` wheel, whose pinned dependencies clash with ours, so it is installed with
``pip install --no-deps --target ~/.cache/clocktune/bfcl-eval bfcl-eval`` (``make bfcl``). Only its data files
and the simulated API classes in ``eval_checker/multi_turn_eval/func_source_code`` are used: the parent packages
are registered as empty namespace modules so that no ``__init__`` of ``bfcl_eval`` runs, and nothing of BFCL is
ever ``eval``-ed: ground-truth call strings are parsed with :mod:`ast` into literal arguments.

Each BFCL entry becomes one timeline: every user turn is spoken through the speech model, and the turn's
ground-truth calls are the gold reading the teacher plays out on the virtual clock against :class:`BfclBackend`
(the BFCL classes themselves). Simplifications, stated so that users can judge the data:

- BFCL states nothing about what a partial utterance implies, so each call's one reading is placed at its earliest
  determinable point (``data_gen.determinable``: every argument value heard, or known from an earlier turn); a call
  none of whose values is spoken waits for the end of the turn. The ``speculative`` teacher runs consecutive
  read-only calls in parallel, but keeps BFCL's order within a turn, since each call acts on the state the earlier ones leave (``cd``
  then ``ls``): a call waits for the results of earlier state-changing calls, a state-changing call for all
  earlier calls (the expert's ``program_order`` option on the backend's ``sequential`` executor). The ``sync``
  teacher makes one call at a time anyway.
- ``multi_turn_miss_func``: every function of the involved classes is listed from the start, and the calls of
  the turn in which BFCL reveals the held-out function (a turn without user words) are folded into the turn
  before it, the request that needed the function.
- ``multi_turn_miss_param``: a turn whose ground truth is empty ends with the agent asking for the missing
  details, without calls. Empty-ground-truth turns of other categories end with an apology.
- ``excluded_function`` of an entry is ignored, as the BFCL version this was written against ignores it.
- The final answer of a turn summarises the results; BFCL states no facts an answer must contain.

The package, in the order the data flows:

- ``wheel``: locating the installed wheel, loading its API classes (``api_class``) and function docs.
- ``schemas`` with ``side_effects.yaml``: function docs as tool schemas; the read-only/state-changing table.
- ``calls``: ground-truth call strings parsed into literal arguments.
- ``entries``: a category's entries split into spoken turns, as tasks with their answers.
- ``backend``: the BFCL classes as a session's backend, and their state as JSON.
- ``importer``: entries played out on the virtual clock as timelines; a whole category written as a dataset.

:class:`BfclError` (module ``errors``) is what every step raises for bad input.
"""

from __future__ import annotations

from data_gen.importers.bfcl.backend import (
    STATELESS_CLASSES,
    BfclBackend,
    BfclCallError,
    backend_for_timeline,
    to_json,
)
from data_gen.importers.bfcl.calls import parse_call
from data_gen.importers.bfcl.entries import (
    ASK_FOR_DETAILS,
    CANNOT_DO,
    CATEGORIES,
    build_task,
    load_entries,
    plan_turns,
    summarise,
)
from data_gen.importers.bfcl.errors import BfclError
from data_gen.importers.bfcl.importer import DOMAIN, SHARD_NAME, entry_timeline, import_bfcl
from data_gen.importers.bfcl.schemas import (
    DEFAULT_MEDIAN_S,
    DOC_FIXES,
    SIDE_EFFECTS,
    doc_to_schema,
    parameter_names,
    tool_schemas,
)
from data_gen.importers.bfcl.wheel import (
    API_CLASSES,
    BFCL_VERSION,
    DEFAULT_DIR,
    ENV_DIR,
    api_class,
    find_bfcl_root,
    function_docs,
    installed_version,
)

__all__ = [
    "API_CLASSES",
    "ASK_FOR_DETAILS",
    "BFCL_VERSION",
    "CANNOT_DO",
    "CATEGORIES",
    "DEFAULT_DIR",
    "DEFAULT_MEDIAN_S",
    "DOC_FIXES",
    "DOMAIN",
    "ENV_DIR",
    "SHARD_NAME",
    "SIDE_EFFECTS",
    "STATELESS_CLASSES",
    "BfclBackend",
    "BfclCallError",
    "BfclError",
    "api_class",
    "backend_for_timeline",
    "build_task",
    "doc_to_schema",
    "entry_timeline",
    "find_bfcl_root",
    "function_docs",
    "import_bfcl",
    "installed_version",
    "load_entries",
    "parameter_names",
    "parse_call",
    "plan_turns",
    "summarise",
    "to_json",
    "tool_schemas",
]
