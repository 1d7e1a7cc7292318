"""Benchmark: constrained decoding of actions, its cost per token and its effect on live accuracy.

    .venv/bin/python scripts/bench_constrained_decoding.py --model runs/demo/checkpoint --data runs/demo/data/eval/data
    .venv/bin/python scripts/bench_constrained_decoding.py --libraries-only     # no checkpoint needed

Part 1 (grammar libraries): the teacher's actions of the held-out dialogues, written as the renderer writes them,
replayed through the grammars token by token with the checkpoint's tokenizer (or, with ``--libraries-only`` and no
checkpoint, the embedded SmolLM2 tokenizer extended for ChatML). llguidance runs the whole action grammar of
``clocktune.runtime.action_grammar``: ms per token for a full mask plus advancing, for the policy's fast path (check
the model's argmax, advance) and per grammar compile. xgrammar, where installed, runs the same tool-argument JSON
Schemas (its grammars cannot name the markers, special tokens): compile ms per schema and ms per token for a mask
plus advancing, next to llguidance on the same JSON tokens.

Part 2 (live, needs a checkpoint): N held-out dialogues played by the checkpoint in the runtime (virtual clock,
phone-135m profile, one session at a time, the same timelines and seeds) with the grammar and without: per-token
decode ms (single-token forwards plus the grammar's work, over tokens written) and the grammar's share, accuracy,
notices per dialogue, "invalid action" notices, and failures by type.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from clocktune.encoding import load_encoding
from clocktune.runtime.action_grammar import X_GUIDANCE, CallBook, action_grammar, arguments_schema, start_matcher
from clocktune.timeline.events import AGENT_KINDS

DEMO_CHECKPOINT = Path("runs/demo/checkpoint")
DEMO_DATA = Path("runs/demo/data/eval/data")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def _per_token(times: list[float]) -> str:
    # Mean and median: on a shared 2-core machine a preempted step costs tens of ms, which the median leaves out.
    return f"{_ms(statistics.fmean(times))} ms mean, {_ms(statistics.median(times))} ms median"


def _timelines(data: str | None, count: int) -> list:
    from clocktune.rendered_dataset import load_timeline_files

    if data and Path(data).exists():
        return load_timeline_files([data])[:count]
    from data_gen.config import GeneratorConfig
    from data_gen.dialogues import select_domains
    from data_gen.generate import generate_dialogue

    print(f"  ({data} not found: {count} freshly generated dialogues instead)")
    config = GeneratorConfig()
    domains = select_domains(config)
    return [generate_dialogue(index, 1, config, domains) for index in range(count)]


def _teacher_actions(timelines: list, tokenizer) -> list[tuple]:
    # (timeline, call state before the action, action event, token ids) for every agent action.
    fmt = load_encoding(tokenizer).model_format
    actions = []
    for timeline in timelines:
        calls = CallBook({tool.name: tool.side_effect for tool in timeline.tools})
        for event in timeline.events:
            if event.kind in AGENT_KINDS:
                text = fmt.action_body(event) + fmt.end
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
                actions.append((timeline, copy.deepcopy(calls), event, ids))
            calls.update(event)
    return actions


def bench_llguidance(actions: list, tokenizer) -> dict:
    """Replays actions through the action grammar: compile, full-mask and fast-path cost."""
    import llguidance
    import llguidance.hf

    fmt = load_encoding(tokenizer).model_format
    started = time.perf_counter()
    ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer)
    setup_s = time.perf_counter() - started  # the tokenizer's llguidance view, built once per process
    compile_s: list[float] = []
    full_s: list[float] = []
    fast_s: list[float] = []
    rejected = 0
    compiled: set[str] = set()
    for timeline, calls, _, ids in actions:
        grammar = action_grammar(tokenizer, fmt, timeline.tools)
        lark = grammar.lark(calls)
        if lark not in compiled:  # what a call state the policy has not met yet costs, uncached
            started = time.perf_counter()
            llguidance.LLMatcher(ll_tokenizer, lark)
            compile_s.append(time.perf_counter() - started)
            compiled.add(lark)
        matcher = start_matcher(tokenizer, grammar, calls)
        fast = start_matcher(tokenizer, grammar, calls)
        for token in ids:
            started = time.perf_counter()
            matcher.mask(len(tokenizer))
            matcher.advance(token)
            full_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            ok = fast.allows(token)
            fast.advance(token)
            fast_s.append(time.perf_counter() - started)
            rejected += not ok
    return {"setup_s": setup_s, "compile": compile_s, "full": full_s, "fast": fast_s, "rejected": rejected}


def _json_cases(actions: list, tokenizer) -> list[tuple[dict, list[int]]]:
    # (arguments schema, token ids of the arguments JSON) of every teacher call, refs allowed to the calls before.
    cases = []
    for timeline, calls, event, _ in actions:
        if event.kind == "tool_call":
            tool = timeline.tool(event.name)
            schema = arguments_schema(tool.parameters, calls.live_ids())
            text = json.dumps(event.arguments, ensure_ascii=False)
            cases.append((schema, tokenizer(text, add_special_tokens=False)["input_ids"]))
    return cases


def bench_json(cases: list, tokenizer) -> dict[str, dict]:
    """The same argument schemas and tokens under llguidance and (when installed) xgrammar."""
    import llguidance
    import llguidance.hf

    results = {}
    ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer)
    compile_s, mask_s = [], []
    for schema, ids in cases:
        started = time.perf_counter()
        matcher = llguidance.LLMatcher(ll_tokenizer, llguidance.LLMatcher.grammar_from_json_schema(schema))
        compile_s.append(time.perf_counter() - started)
        for token in ids:
            started = time.perf_counter()
            matcher.compute_bitmask()
            matcher.consume_token(token)
            mask_s.append(time.perf_counter() - started)
        assert not matcher.is_error(), matcher.get_error()
    results["llguidance"] = {"compile": compile_s, "mask": mask_s}
    try:
        import xgrammar as xgr
    except ImportError as error:
        results["xgrammar"] = {"skipped": f"cannot import it ({error}); pip install xgrammar==0.2.9 to compare"}
        return results
    started = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgr.GrammarCompiler(info, max_threads=torch.get_num_threads(), cache_enabled=False)
    setup_s = time.perf_counter() - started
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    compile_s, mask_s = [], []
    for schema, ids in cases:
        plain = {key: value for key, value in schema.items() if key != "x-guidance"}
        started = time.perf_counter()
        compiled = compiler.compile_json_schema(json.dumps(plain), any_whitespace=False, separators=(", ", ": "))
        compile_s.append(time.perf_counter() - started)
        matcher = xgr.GrammarMatcher(compiled)
        for token in ids:
            started = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            accepted = matcher.accept_token(token)
            mask_s.append(time.perf_counter() - started)
            assert accepted, f"xgrammar rejected a teacher token of {plain}"
    results["xgrammar"] = {"setup_s": setup_s, "compile": compile_s, "mask": mask_s}
    return results


def bench_tool_sets(timelines: list, tokenizer) -> dict[str, list[float]]:
    """Compile seconds of one schema per tool set, every tool's call as one alternative: what a grammar per call
    state costs to build (the ids in it change with every call issued)."""
    import llguidance
    import llguidance.hf

    schemas = {}
    for timeline in timelines:
        calls = [
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": arguments_schema(tool.parameters, [])},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for tool in timeline.tools
        ]
        schemas[json.dumps([tool.name for tool in timeline.tools])] = {"anyOf": calls}
    ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer)
    results: dict[str, list[float]] = {"llguidance": []}
    for schema in schemas.values():
        started = time.perf_counter()
        llguidance.LLMatcher(ll_tokenizer, llguidance.LLMatcher.grammar_from_json_schema(schema))
        results["llguidance"].append(time.perf_counter() - started)
    try:
        import xgrammar as xgr
    except ImportError:
        return results
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgr.GrammarCompiler(info, max_threads=torch.get_num_threads(), cache_enabled=False)
    results["xgrammar"] = []
    for schema in schemas.values():
        plain = json.loads(json.dumps(schema).replace(', "x-guidance": ' + json.dumps(X_GUIDANCE), ""))
        started = time.perf_counter()
        compiler.compile_json_schema(json.dumps(plain), any_whitespace=False, separators=(", ", ": "))
        results["xgrammar"].append(time.perf_counter() - started)
    return results


def part_libraries(tokenizer, timelines: list) -> None:
    actions = _teacher_actions(timelines, tokenizer)
    print(
        f"== grammar libraries: {len(actions)} teacher actions of {len(timelines)} dialogues, vocab {len(tokenizer)},"
        f" {torch.get_num_threads()} torch threads =="
    )
    ll = bench_llguidance(actions, tokenizer)
    print(
        f"  llguidance, whole action grammar: tokenizer view {ll['setup_s']:.2f} s once; {len(ll['compile'])} call"
        f" states compiled: {_per_token(ll['compile'])} each"
    )
    print(f"    full mask + advance: {_per_token(ll['full'])} per token over {len(ll['full'])} tokens")
    print(
        f"    fast path (is the argmax allowed?) + advance: {_per_token(ll['fast'])} per token;"
        f" teacher tokens it rejected: {ll['rejected']}"
    )
    cases = _json_cases(actions, tokenizer)
    if not cases:
        return
    print(f"  the {len(cases)} teacher calls' argument JSON alone, mask + advance per token, compile per schema:")
    for name, row in bench_json(cases, tokenizer).items():
        if "skipped" in row:
            print(f"    {name}: {row['skipped']}")
            continue
        setup = f"; tokenizer info {row['setup_s']:.2f} s once" if "setup_s" in row else ""
        print(f"    {name}: {_per_token(row['mask'])} per token; compile {_per_token(row['compile'])}{setup}")
    sets = bench_tool_sets(timelines, tokenizer)
    print(f"  a whole tool set as one schema (every tool's call an alternative), {len(sets['llguidance'])} tool sets:")
    for name, seconds in sets.items():
        print(f"    {name}: compile {_per_token(seconds)}")


def part_live(model, tokenizer, timelines: list) -> None:
    from clocktune.clock import PROFILES
    from clocktune.runtime.play import run_policy
    from clocktune.runtime.policy_factories import policy_factory
    from clocktune.runtime.session import SessionConfig
    from data_gen.backends import make_backend

    config = SessionConfig(device=PROFILES["phone-135m"])
    print(f"== live: {len(timelines)} held-out dialogues, virtual clock, phone-135m, one session at a time ==")
    header = (
        f"  {'grammar':<8}{'ms/token':>9}{'grammar ms':>11}{'accuracy':>9}{'notices':>8}{'invalid':>8}"
        f"{'tokens':>8}  failures"
    )
    rows = []
    for constrained in (False, True):
        policies = []
        factory = policy_factory("speculative", loaded=(model, tokenizer), constrained=constrained)

        def tracked(timeline, factory=factory, policies=policies):
            policies.append(factory(timeline))
            return policies[-1]

        run = run_policy("speculative", timelines, tracked, make_backend, config, concurrency=1)
        stats = Counter()
        for policy in policies:
            stats.update(policy.stats)
        invalid = sum(
            event.kind == "notice" and event.text.startswith("invalid action")
            for log in run.logs
            for event in log.timeline.events
        )
        tokens = max(stats["tokens"], 1)
        per_token = (stats["step_s"] + stats["grammar_s"]) / tokens
        rows.append(
            (
                constrained,
                per_token,
                stats["grammar_s"] / tokens,
                run.share("accurate"),
                run.per_dialogue("notices"),
                invalid,
                stats["tokens"],
                run.failures(),
            )
        )
    print(header)
    for constrained, per_token, grammar, accuracy, notices, invalid, tokens, failures in rows:
        print(
            f"  {'on' if constrained else 'off':<8}{_ms(per_token):>9}{_ms(grammar):>11}{accuracy:>9.2f}"
            f"{notices:>8.2f}{invalid:>8}{tokens:>8}  {json.dumps(failures)}"
        )


def main() -> None:
    """Runs the library comparison, then (with a checkpoint) the live comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help=f"checkpoint folder (default: {DEMO_CHECKPOINT} if it exists)")
    parser.add_argument("--data", default=str(DEMO_DATA), help="held-out timelines")
    parser.add_argument("--dialogues", type=int, default=20, help="held-out dialogues played live")
    parser.add_argument("--library-dialogues", type=int, default=20, help="dialogues replayed through the grammars")
    parser.add_argument("--libraries-only", action="store_true", help="part 1 only (no checkpoint needed)")
    args = parser.parse_args()

    model_path = args.model or (str(DEMO_CHECKPOINT) if DEMO_CHECKPOINT.exists() else None)
    if model_path is None and not args.libraries_only:
        sys.exit(f"no checkpoint: run `make demo` (it writes {DEMO_CHECKPOINT}) or pass --model, or --libraries-only")
    model = None
    if model_path is not None:
        from clocktune.runtime.policy_factories import load_policy_model

        model, tokenizer = load_policy_model(model_path)
        print(f"checkpoint {model_path}")
    else:
        from clocktune.tokenizers import load_tokenizer, prepare_tokenizer

        tokenizer = load_tokenizer("embedded")
        prepare_tokenizer(tokenizer, "chatml", None)
        print("embedded SmolLM2-135M tokenizer, extended for chatml")
    part_libraries(tokenizer, _timelines(args.data, args.library_dialogues))
    if model is not None and not args.libraries_only:
        part_live(model, tokenizer, _timelines(args.data, args.dialogues))


if __name__ == "__main__":
    main()
