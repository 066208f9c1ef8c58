"""The layering holds: data flows one way (docs/architecture.md).

- Nothing outside ``commands/``, ``cli.py`` and ``plot/`` imports ``attnroof.commands``; nothing
  outside those and ``text/`` itself imports the text layer ``attnroof.text``.
- No module imports torch, matplotlib or sympy when it is imported (only inside a function),
  except the optional extras' own packages: ``measure/`` may not either (torch is loaded by the
  handlers), ``plot/`` may import matplotlib.
- No module is longer than about 350 lines unless its docstring says why (a line starting "Length:").
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "attnroof"
MODULES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 360
"""About 350 lines (the issue's "~350"): a module past it splits or says why."""
HEAVY = {"torch", "matplotlib", "sympy", "scipy"}


def _rel(p: Path) -> str:
    return p.relative_to(PKG).as_posix()


def _imports(tree: ast.Module, top_level_only: bool) -> list[str]:
    """Absolute module names imported (at module level only, when asked)."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: list[str] = []
    for node in nodes:
        if isinstance(node, ast.If) and top_level_only:  # `if TYPE_CHECKING:` blocks don't run
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def _tree(p: Path) -> ast.Module:
    return ast.parse(p.read_text(encoding="utf-8"), str(p))


def _is_ui(rel: str) -> bool:
    return rel.startswith(("commands/", "plot/")) or rel in ("cli.py", "__main__.py")


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_imports_run_downhill(path: Path) -> None:
    rel = _rel(path)
    names = _imports(_tree(path), top_level_only=False)
    if not _is_ui(rel):
        assert not [n for n in names if n.startswith("attnroof.commands")], rel
        if not rel.startswith("text/"):
            assert not [n for n in names if n == "attnroof.text" or n.startswith("attnroof.text.")], rel
    if rel.startswith("text/"):
        assert not [n for n in names if n.startswith("attnroof.commands")], rel


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_heavy_import_at_import_time(path: Path) -> None:
    rel = _rel(path)
    allowed = {"matplotlib"} if rel.startswith("plot/") and rel != "plot/__init__.py" else set()
    top = {n.split(".")[0] for n in _imports(_tree(path), top_level_only=True)}
    assert not (top & (HEAVY - allowed)), (rel, top & HEAVY)


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_modules_are_small_or_say_why(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").count("\n")
    if lines <= MAX_LINES:
        return
    doc = ast.get_docstring(_tree(path)) or ""
    assert any(line.startswith("Length:") for line in doc.splitlines()), (
        f"{_rel(path)} has {lines} lines; split it or say why at its top (a line 'Length: ...')"
    )


def test_the_command_index_names_each_commands_module() -> None:
    """cli.py builds the top-level parser from the index alone and imports a command's module
    only when that command runs: the index must list every command, each at the module that
    defines it, and nothing else."""
    import importlib
    import pkgutil

    import attnroof.commands as pkg

    found = {}
    for m in pkgutil.iter_modules(pkg.__path__):
        if not m.name.startswith("_"):
            for command in importlib.import_module(f"attnroof.commands.{m.name}").COMMANDS:
                found[command.name] = m.name
    assert found == pkg.MODULE_OF_COMMAND
    assert len(pkg.COMMAND_INDEX) == len(found)


def test_the_lazy_parser_is_the_full_parser() -> None:
    """``attnroof --help`` from the index reads exactly as from every command's module."""
    from attnroof.cli import build_parser

    lazy = build_parser(lazy=True)
    assert lazy.format_help() == build_parser().format_help()
    assert lazy.format_usage() == build_parser().format_usage()


def test_command_modules_import_each_other_one_way() -> None:
    """No loop among the command modules, counting imports inside functions: a module that
    another one needs is below it (shared pieces go to a third module, as ``_results`` for
    ``measure`` and ``_collectives``)."""
    commands = {p.stem: p for p in MODULES if _rel(p).startswith("commands/") and p.stem != "__init__"}
    needs = {
        name: {
            n.rsplit(".", 1)[-1]
            for n in _imports(_tree(path), top_level_only=False)
            if n.startswith("attnroof.commands.") and n.rsplit(".", 1)[-1] in commands
        }
        - {name}
        for name, path in commands.items()
    }
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path[path.index(name) :], name))
        if name in done:
            return
        for other in sorted(needs[name]):
            visit(other, (*path, name))
        done.add(name)

    for name in sorted(commands):
        visit(name, ())


# ---------------------------------------------------------------- the import graph


def _module_name(p: Path) -> str:
    parts = ("attnroof", *p.relative_to(PKG).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {_module_name(p): p for p in MODULES}


def _edges(path: Path) -> set[str]:
    """The attnroof modules ``path`` imports, at any level (inside functions too): ``from a.b
    import c`` is an import of ``a.b.c`` where that is a module, of ``a.b`` otherwise."""
    out: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            names = [s for s in subs if s in NAMES] + [node.module] * any(s not in NAMES for s in subs)
        else:
            continue
        for name in names:
            while name and name not in NAMES:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    out.discard(_module_name(path))
    return out


GRAPH = {name: _edges(path) for name, path in NAMES.items()}


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_loops_between_modules():
    """No two modules import each other, directly or round a loop, even from inside a function."""
    assert _loops(GRAPH) == []


def _unit(name: str) -> str:
    """A module's top-level part: ``attnroof.model.layers`` → ``model``; the package's own
    ``__init__`` → ``attnroof``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "attnroof"


def test_no_import_loops_between_packages():
    units: dict[str, set[str]] = {}
    for name, deps in GRAPH.items():
        units.setdefault(_unit(name), set()).update(_unit(d) for d in deps if _unit(d) != _unit(name))
    assert _loops(units) == []


PACKAGE_RANKS = [
    {"errors", "units", "jsonable", "escaping"},
    {"dtypes", "validate", "outfile", "limits", "progress"},
    {"formats"},
    {"cost", "arrays", "devices"},
    {"ops"},
    {"roofline", "row", "footprint"},
    {"operators", "solve"},
    {"profiles"},  # efficiency profiles and a kernel's forecast (issue 34)
    {"attnroof", "analysis", "passes"},
    {"sheet", "sheet_backward", "model"},
    {"beyond"},  # attention beyond softmax (issue 23): the variants, and the hybrids' caches
    {"calibration", "measure"},
    {"serve"},
    {"trace"},  # any PyTorch module on the roofline (issue 38)
    {"text"},
    {"plot", "explore"},
    {"commands"},
    {"cli"},
    {"__main__"},
]
"""attnroof's parts from the bottom up (docs/architecture.md): a part imports only parts below it."""

MODEL_RANKS = [
    {"fields", "train_options", "schedules"},
    {"architectures", "unmodelled", "quantization", "hybrid"},
    {"spec"},  # the config's shapes
    {"hf_config", "hub"},  # reading a config, finding its file
    {"hybrid_config"},  # a hybrid's config (issue 23): its family's fields, then the base reader
    {"config"},  # a model by name, path or repository
    {"rows", "shard"},  # a layer's rows; a row cut for one device
    {"hybrid_rows"},  # a hybrid's layer rows (issue 23)
    {"layers", "parallel"},  # the layer table; plans and their groups
    {"weights"},  # the weights by format
    {"costs", "memory", "notes"},  # a step's operators and memory
    {"analysis", "grid"},  # a step on a roof
    {"batching", "training_memory"},
    {"training"},
    {"comms"},  # many devices: collectives
    {"sharding"},  # the data-parallel sharding policies: what each sends and keeps
    {"busy"},  # a stage's time from its kernels and collectives, on arrays
    {"spread"},  # prefill and decode across devices
    {"train_spread", "plans", "search"},  # training across devices; choosing a plan, searching them all
    {"plan_table"},
    {"forecast"},  # a plan's forecast (issue 34)
    {"planner"},  # a plan search as a library (issue 35)
    {"model"},  # the package's face (model/__init__.py)
]
"""The model package's modules from the bottom up: each imports only modules of lower ranks."""


def _rank_violations(ranks: list[set[str]], key: Any, names: list[str]) -> list[str]:
    rank = {part: r for r, parts in enumerate(ranks) for part in parts}
    missing = sorted({key(n) for n in names} - set(rank))
    assert not missing, f"parts with no rank in the table: {missing}"
    bad = []
    for name in names:
        for dep in GRAPH[name]:
            if (
                dep in NAMES
                and key(dep) in rank
                and key(dep) != key(name)
                and rank[key(dep)] >= rank[key(name)]
            ):
                bad.append(f"{name} imports {dep}")
    return sorted(bad)


def test_parts_import_only_parts_below_them():
    assert _rank_violations(PACKAGE_RANKS, _unit, list(GRAPH)) == []


def test_model_modules_import_only_lower_ranks():
    def key(name: str) -> str:
        return name.split(".")[2] if name.count(".") >= 2 else "model"

    model = [n for n in GRAPH if n == "attnroof.model" or n.startswith("attnroof.model.")]
    internal = {
        n: {d for d in GRAPH[n] if d == "attnroof.model" or d.startswith("attnroof.model.")} for n in model
    }
    rank = {part: r for r, parts in enumerate(MODEL_RANKS) for part in parts}
    assert sorted({key(n) for n in model} - set(rank)) == []
    bad = [f"{n} imports {d}" for n in model for d in internal[n] if rank[key(d)] >= rank[key(n)]]
    assert bad == []
