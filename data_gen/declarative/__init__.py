"""Declarative domains: your own tools, state, task templates and backend in one YAML (or JSON) file.

``clocktune-datagen generate --domain FILE`` (or ``domain_files: [FILE]`` in a generator config) generates from it
as from a built-in domain. The format, keys in order (``examples/pharmacy.yaml`` is a complete one)::

    name: pharmacy                         # the timelines' domain
    tools:                                 # OpenAI function format, or the bare {name, description, parameters}
      - type: function
        function:
          name: find_prescription
          description: Looks up the patient's prescription for a medication.
          parameters: {type: object, properties: {medication: {type: string}}, required: [medication]}
        latency_s: 0.5                     # median latency (default 0.6)
      - name: refill_prescription
        description: Orders a refill of a prescription.
        parameters: {type: object, properties: {prescription_id: {type: string}}, required: [prescription_id]}
        side_effect: true                  # state-changing: runs only after the agent commits
    state: {prescriptions: {...}}          # the backend's initial state (JSON)
    backend:
      execute: pharmacy_backend:execute    # execute(state, name, arguments) -> result; raise ToolError to refuse
      # or recorded responses:  responses: [{tool, arguments, result}]  (or `error` for a refusal)
    tasks:
      - name: refill                       # the timelines' task
        weight: 2                          # relative frequency (default 1)
        slots: {medication: [ibuprofen, amoxicillin]}    # one value drawn per dialogue
        turns:
          - utterance:                     # phrases in order; a list is alternatives, one drawn
              - say: ["", "hi,", "okay so"]
              - say: "can you refill my {medication}"
                reading: {calls: [refill], confidence: confident}   # what these words make likely
            calls:                         # the gold calls, by key; "{slot}" alone keeps the value's type
              find: {tool: find_prescription, arguments: {medication: "{medication}"}}
              refill: {tool: refill_prescription, arguments: {prescription_id: {$ref: find.id}}}
            answer:                        # placeholders: slots and results ("{find.id}", "{find.items.0}")
              text: "Your {medication} refill {refill.refill_id} is on its way."
              facts: ["{refill.refill_id}"]

A **reading** after a phrase says which calls the words heard so far settle: a list of call keys, or
``{call: KEY, arguments: {...}}`` for a guess with other arguments (later corrected), and a ``confidence``: a number
in (0, 1], or ``confident`` (at or above the teacher's threshold), ``unsure`` (below it) or ``guess`` (above it with
the config's ``early_wrong_rate``). The calls a reading's calls depend on (``$ref``) come along. At the end of the
utterance the gold reading is every call of the turn, with confidence 1. A ``$ref`` names a call declared above it in
the same turn (``KEY`` or ``KEY.path.0``). ``tail`` (default 0.6) is the probability of a closing "please"/"thanks".

The backend callable's module is a ``.py`` file in the domain file's own folder (``pharmacy_backend:execute`` is
``pharmacy_backend.py`` beside the file; a symlink out of the folder does not count) or a module of an installed
clocktune plugin (a package with entry points in group ``clocktune.domains``); any other name (``os:system``, the
standard library, whatever else is importable) is refused. Each timeline's initial state holds ``{"domain_file":
{"path", "sha256"}, "state": ...}``, so that ``data_gen.backends.make_backend`` (behind ``clocktune eval``,
``clocktune rollout``, ``clocktune train``'s live evaluation and ``clocktune-datagen validate``) rebuilds the backend
from the same, unchanged file.

**What is trusted.** A domain file you pass on the command line (``--domain FILE``, or ``domain_files`` in the
generator config you pass with ``--config``) is yours: its backend module is imported. A domain file named by a
timeline or a dataset's ``generation.json`` is data: its tools, tasks and recorded responses are read, but its
backend module is imported only with ``--trust-domain-code`` (on ``validate``, ``eval``, ``rollout`` and
``train``); without it the command refuses in one line naming the module and the flag, before anything runs. The
settings stamp of ``generate`` covers the backend module's source as well as the file.
"""

from __future__ import annotations

from data_gen.declarative.domain import (
    TRUST_FLAG,
    UntrustedDomainCodeError,
    backend_digest,
    declared_backend,
    file_digest,
    load_domain_file,
)
from data_gen.declarative.spec import DomainFileError, DomainSpec, load_spec

__all__ = [
    "TRUST_FLAG",
    "DomainFileError",
    "DomainSpec",
    "UntrustedDomainCodeError",
    "backend_digest",
    "declared_backend",
    "file_digest",
    "load_domain_file",
    "load_spec",
]
