"""No import cycles inside jupyter_dl, counting imports inside functions too: a lazy import that closes a loop is
still two modules that cannot be understood (or tested) apart."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jupyter_dl"


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
