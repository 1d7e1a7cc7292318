"""The README and docs/ stay true to the tree: every relative link resolves, and every command shown parses.

Links: every markdown link ``[text](target)`` in README.md and docs/*.md that is not a URL names a file that exists,
and a ``#anchor`` names a heading of its page by GitHub's rules. Commands: every ``clocktune ...`` and
``clocktune-datagen ...`` line of a ```bash block (continuation lines joined, ``# comments`` dropped) is parsed by the
command's own argparse parser, and the recipe arguments of ``clocktune train`` and ``accelerate launch ...
recipes/sft.py`` or ``recipes/grpo.py`` by the recipe's parser (``make_parser`` of ``clocktune.train.sft`` or
``clocktune.train.grpo``), without running anything: a misspelled flag or subcommand fails here, not in a reader's
terminal.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import unicodedata
from pathlib import Path

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # of the recipes' TRL fields, not of the docs

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+).+?\1")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1, with inline code removed."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, INLINE_CODE.sub("", line)))
    return lines


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading's text: its rendered text lowercased, every character but letters, digits,
    spaces, '-' and '_' dropped, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = re.sub(r"<[^>]+>", "", text).lower()
    kept = (ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a markdown page: its headings' (duplicates get -1, -2, ...) and explicit ``<a id=...>``."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    lines, fenced = text.splitlines(), False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(HTML_ANCHOR.findall(line))
        if match := HEADING.match(line):
            anchor = github_anchor(match.group(2))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def relative_links() -> list[tuple[str, Path, str]]:
    """``(where, page, target)`` for every link of the pages that is not a URL."""
    links = []
    for page in PAGES:
        for number, line in _prose_lines(page.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
                    continue
                links.append((f"{page.relative_to(ROOT)}:{number}", page, target))
    return links


def shown_commands() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` for every command line of the pages' ```bash blocks, ``&&``/``;``/``|`` chains split."""
    commands = []
    for page in PAGES:
        block: str | None = None
        pending, start = "", 0
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            if FENCE.match(line):
                block = line.strip().strip("`~").strip().lower() if block is None else None
                continue
            if block not in ("bash", "sh", "shell", "console"):
                continue
            if not pending:
                start = number
            stripped = line.rstrip()
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            words, pending = shlex.split(pending + stripped, comments=True), ""
            command: list[str] = []
            for word in [*words, "&&"]:
                if word in ("&&", "||", ";", "|"):
                    if command:
                        commands.append((f"{page.relative_to(ROOT)}:{start}", command))
                    command = []
                else:
                    command.append(word)
    return commands


def _parses(parse) -> str | None:
    """None when ``parse()`` returns; else what argparse or the recipe's parser said."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parse()
    except SystemExit:
        return errors.getvalue().strip().splitlines()[-1] if errors.getvalue().strip() else "argparse exited"
    except ValueError as error:  # the recipe's parser: an argument no dataclass has, or a value a field refuses
        return str(error)
    return None


@pytest.fixture(scope="module")
def recipe_parser():
    from clocktune.train.sft import make_parser

    return make_parser


def _runs_on_cpu(config: str | None, args: list[str]) -> bool:
    """Whether a recipe asks for the CPU (``use_cpu: true`` in its YAML or ``--use_cpu true`` among the flags)."""
    import yaml

    settings = yaml.safe_load((ROOT / config).read_text(encoding="utf-8")) if config else {}
    use_cpu = str(settings.get("use_cpu", False)).lower() == "true"
    for flag, value in zip(args, args[1:], strict=False):
        if flag == "--use_cpu":
            use_cpu = value.lower() == "true"
    return use_cpu


def _not_spelled_out(args: list[str], parser) -> str | None:
    """The ``--flags`` among ``args`` that are not one of ``parser``'s option strings in full: argparse takes an
    abbreviation (``--max_step``) silently, a page shows the whole name."""
    known = {*parser._option_string_actions, "--config"}  # TrlParser reads --config before its dataclasses
    flags = [arg.split("=")[0] for arg in args if arg.startswith("--")]
    unknown = [flag for flag in flags if flag not in known]
    return f"flags not spelled as the parser names them: {' '.join(unknown)}" if unknown else None


def _check_recipe_args(args: list[str], make_parser) -> str | None:
    """Parses a recipe's arguments as ``clocktune train`` does (with a ``--config`` that is not in the tree, only
    checks that every ``--flag`` is one of the recipe's)."""
    if problem := _not_spelled_out(args, make_parser()):
        return problem
    config = args[args.index("--config") + 1] if "--config" in args[:-1] else None
    if config is not None and not (ROOT / config).is_file():
        return None
    if not _runs_on_cpu(config, args):
        # A GPU recipe (bf16) is refused by transformers on a machine without one: parse it as on this machine,
        # every other field as shown (flags given last win, over the YAML too).
        args = [*args, "--use_cpu", "true", "--bf16", "false"]
    return _parses(lambda: make_parser().parse_args_and_config(args=args))


def _subcommand_parser(parser, name: str):
    """The parser of subcommand ``name``."""
    return next(action for action in parser._actions if action.choices and name in action.choices).choices[name]


def _check_command(argv: list[str], make_parser) -> str | None:
    """What is wrong with one shown command line, or None; commands other than clocktune's are not checked."""
    program, args = argv[0], argv[1:]
    # Files of the repository a command names (configs, examples, recipes) must be there; data/ and runs/ are its
    # outputs or the reader's own.
    for arg in args:
        if arg.startswith(("configs/", "examples/", "recipes/")) and not (ROOT / arg).is_file():
            return f"{arg}: no such file in the repository"
    if program == "clocktune-datagen":
        from data_gen.cli import build_parser

        parser = build_parser()
        return _parses(lambda: parser.parse_args(args)) or _not_spelled_out(args, _subcommand_parser(parser, args[0]))
    if program == "clocktune":
        from clocktune.cli.main import build_parser, cmd_train

        parser = build_parser()
        parsed: list = []
        if problem := _parses(lambda: parsed.append(parser.parse_known_args(args))):
            return problem
        namespace, unknown = parsed[0]
        if namespace.func is cmd_train:  # as clocktune.cli.main.main hands them on
            return _check_recipe_args(unknown + namespace.recipe_args, make_parser)
        if unknown:
            return f"unrecognized arguments: {' '.join(unknown)}"
        return _not_spelled_out(args, _subcommand_parser(parser, args[0]))
    from clocktune.train.grpo import make_parser as grpo_parser

    recipes = {"recipes/sft.py": make_parser, "recipes/grpo.py": grpo_parser}
    recipe = next((name for name in recipes if name in args), None)
    if program == "accelerate" and recipe is not None:
        config_file = args[args.index("--config_file") + 1] if "--config_file" in args[:-1] else None
        if config_file is not None and not (ROOT / config_file).is_file():
            return f"no accelerate config {config_file}"
        return _check_recipe_args(args[args.index(recipe) + 1 :], recipes[recipe])
    return None


def test_the_pages_hold_links_and_commands_to_check():
    # An extraction that silently finds nothing would pass every check below.
    assert len(relative_links()) >= 30
    assert sum(argv[0] == "clocktune" for _, argv in shown_commands()) >= 10
    assert sum(argv[0] == "clocktune-datagen" for _, argv in shown_commands()) >= 10


def test_a_heading_anchor_follows_githubs_rules():
    assert github_anchor("Where `make demo`'s 20 minutes would have to come from (2026-12-03)") == (
        "where-make-demos-20-minutes-would-have-to-come-from-2026-12-03"
    )
    assert github_anchor("3. Encoding: train ≡ serve") == "3-encoding-train--serve"
    assert github_anchor("A fair share of the CPU: `cpu_fair_share`") == "a-fair-share-of-the-cpu-cpu_fair_share"
    assert github_anchor("See [the runtime](runtime.md) now") == "see-the-runtime-now"


LINKS = relative_links()
COMMANDS = [
    (where, argv) for where, argv in shown_commands() if argv[0] in ("clocktune", "clocktune-datagen", "accelerate")
]


@pytest.mark.parametrize(("where", "page", "target"), LINKS, ids=[f"{where} {target}" for where, _, target in LINKS])
def test_every_relative_link_resolves_to_a_file_and_heading(where, page, target):
    path, _, anchor = target.partition("#")
    destination = (page.parent / path).resolve() if path else page
    assert destination.exists(), f"{where}: {target} names no file ({destination})"
    if anchor:
        assert destination.suffix == ".md", f"{where}: {target}: an anchor into a file that is not markdown"
        assert anchor in anchors(destination), f"{where}: {target}: {destination.name} has no heading #{anchor}"


@pytest.mark.parametrize(
    ("where", "argv"), COMMANDS, ids=[f"{where} {' '.join(argv[:2])}" for where, argv in COMMANDS]
)
def test_every_command_shown_parses(where, argv, recipe_parser, monkeypatch):
    monkeypatch.chdir(ROOT)  # the commands' paths are relative to the repository root
    problem = _check_command(argv, recipe_parser)
    assert problem is None, f"{where}: {shlex.join(argv)}\n{problem}"
