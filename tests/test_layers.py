"""The code's shape: imports point down the layer diagram, nothing imports itself through a cycle, files stay small,
and every reference to the design document names a section it has.

The import graph is read with :mod:`ast` (nothing is executed), imports inside functions included: a lazy import
is still a dependency. The layers are those of docs/layout.md and docs/design.md §9.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("clocktune", "data_gen")
MAX_LINES = 600

# Lowest first. A module belongs to the layer of the longest prefix that names it.
LAYERS: list[tuple[str, ...]] = [
    (
        "clocktune.timeline",
        "clocktune.clock",
        "clocktune.atomic",
        "clocktune.data_files",
        "clocktune.heap",
        "clocktune.settings_stamp",
        "clocktune.yaml_config",
    ),
    (
        "clocktune.encoding",
        "clocktune.render",
        "clocktune.masks",
        "clocktune.collate",
        "clocktune.state_line",
        "clocktune.actions",
        "clocktune.rendered_dataset",
        "clocktune.models",
        "clocktune.tokenizers",
        "clocktune.inspection",
    ),
    (
        "clocktune.tools",
        "clocktune.runtime",
        "clocktune.serve",
        "clocktune.train",
        "clocktune.hub",
        "clocktune.model_card",
    ),
    ("data_gen",),
    ("clocktune.cli", "clocktune.integrations", "data_gen.cli"),
]
TOP = ("clocktune", "data_gen")  # the packages' own __init__ modules import nothing of the project


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports, anywhere in its file."""
    named = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            # `from package import submodule` imports the submodule.
            named.update(f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names)
    found = set()
    for module in named:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        if module and module != name:
            found.add(module)
    return found


def import_graph() -> dict[str, set[str]]:
    """Every module of the two packages and the project modules it imports."""
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest prefix naming ``module``."""
    if module in TOP:
        return 0
    best, index = "", None
    for number, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, index = prefix, number
    assert index is not None, f"{module} is in no layer of tests/test_layers.py: add it where it belongs"
    return index


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first repeated last), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module], _ = 1, path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module], _ = 2, path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_library_below_the_cli_never_imports_the_generator():
    offenders = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith("clocktune") and layer_of(module) < layer_of("clocktune.cli")
        for target in sorted(targets)
        if target.startswith("data_gen")
    ]
    assert offenders == []


def test_no_module_imports_itself_through_a_cycle():
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_finds_a_cycle():
    # Without this the test above could pass by never looking.
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_import_points_down_the_layer_diagram():
    offenders = [
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in import_graph().items()
        if module not in TOP
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert offenders == []


def test_no_source_file_is_over_600_lines():
    long = []
    for folder in ("clocktune", "data_gen", "tests", "scripts", "recipes"):
        for path in (ROOT / folder).rglob("*.py"):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == []


def test_every_design_reference_names_a_section_of_docs_design():
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "design.md").read_text(encoding="utf-8"), re.M))
    references = []
    for folder in ("clocktune", "data_gen", "tests", "scripts", "recipes"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            founding = "DESIGN" + ".md §"  # the founding design, which is not in the repository
            assert founding not in text, f"{path.relative_to(ROOT)} cites the founding design, not docs/design.md"
            for match in re.finditer(r"docs/design\.md((?:,? ?§\d+)+)", text):
                references += [(path.relative_to(ROOT), n) for n in re.findall(r"§(\d+)", match.group(1))]
    assert references, "no module cites docs/design.md"
    missing = [f"{path}: §{number}" for path, number in references if number not in sections]
    assert missing == []
