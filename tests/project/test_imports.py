"""The package's import graph, counting imports inside functions too: no cycles (a lazy import that closes a loop is
still two modules that cannot be understood or tested apart), and the layers of ARCHITECTURE.md: engine code
(runtime/) and kernel-side code (everything that runs in the notebook's kernel or the server) never import each
other; both may import the shared layers (wire/, backends/, host/, errors), which import neither."""

import ast
import pathlib

import pytest

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "jupyter_dl"


def _modules():
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "labextension" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name, path, modules):
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: None if is_package else -1]
                base = base[: len(base) - (node.level - 1)] + ([node.module] if node.module else [])
                base_name = ".".join(base)
            else:
                base_name = node.module or ""
            for alias in node.names:
                target = f"{base_name}.{alias.name}"
                yield target if target in modules else base_name
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def import_graph():
    modules = _modules()
    return {
        name: {t for t in _imports(name, path, modules) if t in modules and t != name} for name, path in modules.items()
    }


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan; recursive, the graph is small)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_checker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    assert sum(map(len, graph.values())) > 100  # the graph was read (a parse that found nothing proves nothing)
    assert cycles(graph) == []


# The layers, by package prefix. The facade modules are what users import by name; they reach both sides lazily.
ENGINE = ("jupyter_dl.runtime",)
SHARED = ("jupyter_dl.wire", "jupyter_dl.backends", "jupyter_dl.host", "jupyter_dl.errors", "jupyter_dl._version")
FACADE = ("jupyter_dl", "jupyter_dl.__main__", "jupyter_dl.horovod_compat", "jupyter_dl.collectives")


def _in(module, layer):
    return any(module == prefix or module.startswith(prefix + ".") for prefix in layer)


def layer_of(module):
    if module in FACADE:
        return "facade"
    if _in(module, ENGINE):
        return "engine"
    return "shared" if _in(module, SHARED) else "kernel"


ALLOWED = {"engine": {"engine", "shared"}, "kernel": {"kernel", "shared"}, "shared": {"shared"}}


def layer_violations(graph):
    return sorted(
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in graph.items()
        if layer_of(module) != "facade"
        for target in targets
        if layer_of(target) not in ALLOWED[layer_of(module)]
    )


def test_the_layer_checker_sees_a_crossing():
    graph = {
        "jupyter_dl.kernel.api": {"jupyter_dl.runtime.rank", "jupyter_dl.wire.payload"},
        "jupyter_dl.runtime.rank": {"jupyter_dl.live.view"},
        "jupyter_dl.wire.payload": {"jupyter_dl.kernel.cell"},
        "jupyter_dl": {"jupyter_dl.runtime.metrics_callback"},
    }
    assert layer_violations(graph) == [
        "jupyter_dl.kernel.api (kernel) imports jupyter_dl.runtime.rank (engine)",
        "jupyter_dl.runtime.rank (engine) imports jupyter_dl.live.view (kernel)",
        "jupyter_dl.wire.payload (shared) imports jupyter_dl.kernel.cell (kernel)",
    ]


def test_engine_and_kernel_code_do_not_import_each_other():
    graph = import_graph()
    assert {layer_of(m) for m in graph} == {"facade", "engine", "shared", "kernel"}
    assert layer_violations(graph) == []


def test_every_engine_function_the_kernel_names_exists():
    import importlib

    from jupyter_dl.wire import remote

    named = [value for value in vars(remote).values() if isinstance(value, remote.EngineFunction)]
    assert len(named) >= 8
    for function in named:
        assert function.module.startswith(("jupyter_dl.runtime.", "jupyter_dl.backends.")), function
        assert callable(getattr(importlib.import_module(function.module), function.name)), function
