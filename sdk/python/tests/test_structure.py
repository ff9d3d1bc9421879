"""The package's shape: its modules import each other one way only (no
cycle, counting the imports made inside functions), and its public API is one
list, soniq_handler.__all__."""

import ast
from pathlib import Path

import soniq_handler

PKG = Path(soniq_handler.__file__).resolve().parent

# The public API, as the README documents it. A name added to or removed from
# soniq_handler.__all__ must be added or removed here too, on purpose.
PUBLIC = {
    "App",
    "CallNext",
    "ChildJobError",
    "JobContext",
    "Middleware",
    "PermanentError",
    "PROTOCOL_VERSIONS",
    "ProtocolError",
    "ServeError",
    "Snooze",
    "Validator",
    "__version__",
    "negotiate_version",
}


def _modules():
    return sorted(p.stem for p in PKG.glob("*.py"))


def _imports(name):
    """The package's modules that module `name` imports, anywhere in it
    (top level or inside a function), with the line of each."""
    tree = ast.parse((PKG / f"{name}.py").read_text(), filename=f"{name}.py")
    mods = set(_modules())
    out = {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module:
                    targets.append(node.module.split(".")[0])
                else:
                    targets.extend(a.name for a in node.names)
            elif node.level == 0 and (node.module or "").startswith("soniq_handler"):
                rest = node.module.split(".")[1:]
                targets.extend(rest[:1] if rest else [a.name for a in node.names])
            else:
                assert node.level == 0, f"{name}.py:{node.lineno}: import from outside the package"
        elif isinstance(node, ast.Import):
            targets.extend(a.name.split(".")[1] for a in node.names if a.name.startswith("soniq_handler."))
        for t in targets:
            if t in mods and t != name:
                out.setdefault(t, node.lineno)
    return out


def _check_acyclic(graph):
    state = {}  # 1: on the current path, 2: done

    def visit(m, path):
        state[m] = 1
        for dep, line in graph[m].items():
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)} ({m}.py:{line} imports {dep})")
            if state.get(dep) is None:
                visit(dep, path + [dep])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_the_import_graph_has_no_cycle():
    graph = {m: _imports(m) for m in _modules()}
    assert "app" in graph["_cli"], "the command line serves an App"
    _check_acyclic(graph)


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import(tmp_path, monkeypatch):
    # As app.run's `from ._cli import ...` against _cli's `from .app import App` once did.
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    monkeypatch.setattr(f"{__name__}.PKG", tmp_path)
    graph = {m: _imports(m) for m in _modules()}
    assert graph == {"a": {"b": 1}, "b": {"a": 2}}
    try:
        _check_acyclic(graph)
    except AssertionError as e:
        assert "a -> b -> a" in str(e)
    else:
        raise AssertionError("no cycle found")


def _defines_all(name):
    tree = ast.parse((PKG / f"{name}.py").read_text())
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def test_the_public_api_is_one_list():
    assert set(soniq_handler.__all__) == PUBLIC
    assert len(soniq_handler.__all__) == len(PUBLIC), "a name listed twice"
    for name in soniq_handler.__all__:
        assert hasattr(soniq_handler, name), name
    namespace = {}
    exec("from soniq_handler import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC
    # No other list: only the package and its public codec submodule say what
    # they export; every other module is internal.
    assert [m for m in _modules() if _defines_all(m)] == ["__init__", "protocol"]
