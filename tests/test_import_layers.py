"""The import graph, built from the sources (AST, imports inside functions included): no cycle, no import
from a lower layer into a higher one, and every import by the one installed name (``privaudit.core``, never a
bare ``core``).

Layers, lowest first; a module may import its own package and any package before it:

    core -> accountants -> defenses -> attacks -> audit -> privaudit

``accountants`` sits below ``defenses`` because every defense states and calibrates the privacy
claim it implements (``PrivacyClaim``, ``calibrate``); accountants themselves need no defense.

Inside ``audit``, the subpackages import one way too, lowest first (a module may import its own tier and any
tier before it):

    audit (the package, failures, device) -> sensitivity -> step -> report -> suite -> gate -> run -> verify
    -> benchmark -> user -> commands, cli

A step audit is run by a suite, gated and rendered, so ``step`` sits below ``report`` (its table) and ``gate``
(its verdict); the gate's rules judge records without running anything, so ``run`` calls ``gate`` at the end of
a run and ``verify`` (a finished run's evidence recomputed, the gate's power) reads what ``run`` wrote;
``benchmark`` reads a benchmark run's report into its reference, page and utility claims' verdicts; ``user`` (your own
scores or model) writes its output directory with ``run``'s keyed cache; ``commands`` and
``cli`` are the command line over all of them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "accountants", "defenses", "attacks", "audit", "privaudit")


def module_files(root: Path, packages: tuple[str, ...] = LAYERS) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``packages`` under ``root``."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _folder_name(name: str) -> str:
    """``privaudit.core.io`` -> ``core.io``: the graph names modules by their folders (the front door stays
    ``privaudit``)."""
    head, _, rest = name.partition(".")
    return rest if head == "privaudit" and rest.split(".")[0] in LAYERS[:-1] else name


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of our modules (None for third-party names)."""
    name = _folder_name(name)
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@functools.lru_cache(maxsize=None)
def _parsed(source: str) -> ast.AST:
    """A module's syntax tree, parsed once per distinct source (the planted trees differ from ours in one file)."""
    return ast.parse(source)


def import_graph(root: Path, packages: tuple[str, ...] = LAYERS) -> dict[str, set[str]]:
    """module -> the modules of ours it imports anywhere in its source (relative imports resolved;
    ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``)."""
    modules = module_files(root, packages)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(_parsed(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(t for a in node.names if (t := _owner(a.name, modules)))
            elif isinstance(node, ast.ImportFrom):
                base = _folder_name(node.module or "")
                if node.level:
                    prefix = package[: len(package) - node.level + 1]
                    base = ".".join(prefix + ([base] if base else []))
                for alias in node.names:
                    full = _folder_name(f"{base}.{alias.name}")
                    target = full if full in modules else _owner(base, modules)
                    if target:
                        targets.add(target)
        targets.discard(module)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """``a -> b`` for each import of a module in a higher layer than the importer's."""
    rank = {name: i for i, name in enumerate(layers)}
    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                  if rank[t.split(".")[0]] > rank[m.split(".")[0]])


AUDIT_TIERS: tuple[tuple[str, ...], ...] = (
    ("audit", "audit.failures", "audit.device", "audit.findings", "audit.junit"),
    ("audit.sensitivity",), ("audit.step",), ("audit.report",), ("audit.suite",), ("audit.gate",), ("audit.run",),
    ("audit.verify",), ("audit.benchmark",), ("audit.user",),
    ("audit.commands", "audit.cli"),
)


def audit_tier(module: str, tiers: tuple[tuple[str, ...], ...] = AUDIT_TIERS) -> int | None:
    """The tier of an ``audit`` module: that of the longest tier name it is or lies under (None: no tier)."""
    best: tuple[int, int] | None = None
    for rank, names in enumerate(tiers):
        for name in names:
            if (module == name or (name != "audit" and module.startswith(name + "."))) and \
                    (best is None or len(name) > best[1]):
                best = (rank, len(name))
    return None if best is None else best[0]


def upward_audit_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for each import inside ``audit`` of a module in a higher tier than the importer's."""
    tier = {m: audit_tier(m) for m in graph if m.split(".")[0] == "audit"}
    return sorted(f"{m} -> {t}" for m, targets in graph.items() if tier.get(m) is not None
                  for t in targets if tier.get(t) is not None and tier[t] > tier[m])


def test_no_import_cycles():
    assert cycles(import_graph(ROOT)) == []


def test_no_upward_imports():
    assert upward_imports(import_graph(ROOT)) == []


def test_every_audit_module_has_a_tier():
    assert [m for m in import_graph(ROOT) if m.split(".")[0] == "audit" and audit_tier(m) is None] == []


def test_audit_subpackages_import_one_way():
    assert upward_audit_imports(import_graph(ROOT)) == []


def test_every_layer_is_scanned():
    graph = import_graph(ROOT)
    present = {m.split(".")[0] for m in graph}
    assert {"core", "accountants", "defenses", "attacks", "audit"} <= present
    assert len(graph) > 100
    # core imports nothing of ours but core.
    assert all(t.startswith("core") for m, ts in graph.items() if m.startswith("core") for t in ts)


def test_front_door_reexports_only_our_modules_and_nothing_imports_it():
    """``privaudit`` imports its names by string (lazily), which the AST graph cannot see: check them here."""
    import privaudit

    modules = module_files(ROOT)
    assert {_folder_name(module) for module, _ in privaudit._EXPORTS.values()} <= set(modules)
    assert all(module.startswith("privaudit.") for module, _ in privaudit._EXPORTS.values())
    graph = import_graph(ROOT)
    assert "privaudit" in graph
    assert [m for m, ts in graph.items() if not m.startswith("privaudit") and any(t.startswith("privaudit") for t in ts)] == []


def bare_layer_imports(root: Path) -> list[str]:
    """``file:line`` of each absolute import of a layer by its folder name (``from core.io import ...``): such an
    import works only from a checkout; installed, the layers exist only as ``privaudit.<layer>``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if {".venv", ".git", "build"} & set(path.relative_to(root).parts):
            continue
        for node in ast.walk(_parsed(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] in LAYERS[:-1] for n in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_every_import_uses_the_installed_name():
    assert bare_layer_imports(ROOT) == []


def test_detects_a_planted_bare_layer_import(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("import os\nfrom privaudit.core import io\nfrom core.io import read_json\n")
    assert bare_layer_imports(tmp_path) == ["tests/t.py:3"]


def _copy_tree(tmp_path: Path) -> Path:
    for path in module_files(ROOT).values():
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    return tmp_path


@pytest.mark.parametrize("where, line", [
    ("defenses/training/sampling.py", "from privaudit.audit.run.runner import run_suite\n"),       # module level
    ("core/errors.py", "def f():\n    import privaudit.defenses.base\n"),              # inside a function
    ("accountants/rdp/rdp.py", "def f():\n    from ...attacks import bounds\n"),          # relative, deferred
])
def test_detects_a_planted_upward_import(tmp_path, where, line):
    root = _copy_tree(tmp_path)
    with open(root / where, "a") as handle:
        handle.write("\n" + line)
    found = upward_imports(import_graph(root))
    assert len(found) == 1 and found[0].startswith(where[:-3].replace("/", "."))


@pytest.mark.parametrize("where, line", [
    ("audit/gate/judge.py", "from privaudit.audit.run.runner import run_suite\n"),          # module level
    ("audit/step/audit.py", "def f():\n    from privaudit.audit.report import write_report\n"),  # deferred
    ("audit/run/cache.py", "def f():\n    from ..verify import evidence\n"),             # relative, deferred
    ("audit/failures.py", "def f():\n    import privaudit.audit.sensitivity\n"),         # the shared leaves
])
def test_detects_a_planted_upward_audit_import(tmp_path, where, line):
    root = _copy_tree(tmp_path)
    with open(root / where, "a") as handle:
        handle.write("\n" + line)
    found = upward_audit_imports(import_graph(root))
    assert len(found) == 1 and found[0].startswith(where[:-3].replace("/", "."))


def test_detects_a_planted_cycle(tmp_path):
    root = _copy_tree(tmp_path)
    with open(root / "defenses/training/seeding.py", "a") as handle:
        handle.write("\ndef f():\n    from privaudit.defenses.training.training import run_training\n")
    cycle = {"defenses.training.seeding", "defenses.training.training"}
    assert any(cycle <= set(c) for c in cycles(import_graph(root)))
