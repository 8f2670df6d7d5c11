"""The house: a small engine top level, no file past 500 lines, no import cycle (function-level imports
included), the cost model's document within 300 lines. Read from the tracked files, so a new module that breaks a
rule fails here before review."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("specdec_core", "components", "tools")
MAX_LINES, MAX_TOP_LEVEL, MAX_DOC_LINES = 500, 12, 300


def tracked_python() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.split()]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Module → the project's modules it imports, anywhere in the file (a function's body included). ``from
    pkg import name`` points at ``pkg.name`` where that is a module, else at ``pkg`` itself."""
    modules = {module_name(p): p for p in paths if module_name(p).split(".")[0] in PACKAGES + ("app",)}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_engine_top_level_is_small():
    top = sorted(p.name for p in (ROOT / "specdec_core").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"specdec_core/ holds {len(top)} top-level modules: {top}"
    for package in sorted(p for p in (ROOT / "specdec_core").iterdir() if (p / "__init__.py").exists()):
        assert ast.get_docstring(ast.parse((package / "__init__.py").read_text())), \
            f"{package.name}/__init__.py has no docstring saying what the package owns"


def test_no_file_past_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in tracked_python()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines (split them by responsibility): {long}"


def test_no_import_cycle():
    found = cycles(import_graph(tracked_python()))
    assert not found, f"import cycles (function-level imports count): {found}"


def test_cycle_finder_sees_a_hidden_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_cost_model_document_is_short():
    n = len((ROOT / "docs" / "cost-model.md").read_text().splitlines())
    assert n <= MAX_DOC_LINES, f"docs/cost-model.md is {n} lines"
