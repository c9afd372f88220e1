"""Static analysis of a cell: which notebook names it reads and which it binds.

Kernel-side only. We over-approximate reads (any loaded name that exists in the notebook is shipped) because a
missing variable on a rank is a hard failure, while an extra one only costs bytes.
"""

import ast
import builtins
from dataclasses import dataclass, field

from jupyter_dl.errors import UsageError
from jupyter_dl.wire import payload

# IPython's own bookkeeping: never ship these, never bring them back.
_IPYTHON_NAMES = {
    "In",
    "Out",
    "get_ipython",
    "exit",
    "quit",
    "_",
    "__",
    "___",
    "_ih",
    "_oh",
    "_dh",
    "_i",
    "_ii",
    "_iii",
}


@dataclass
class CellNames:
    reads: set = field(default_factory=set)
    binds: list = field(default_factory=list)  # top-level bindings, in order of first appearance
    deletes: list = field(default_factory=list)  # top-level names the cell deletes (and does not bind again)
    shows_last: bool = False  # the cell ends in an expression (no `;`): IPython would show its value as Out[n]


class _NameCollector(ast.NodeVisitor):
    def __init__(self):
        self.loads = set()
        self.top_binds = []
        self.deleted: list = []
        self._depth = 0  # >0 inside function/class/lambda/comprehension bodies

    def _bind(self, name):
        if self._depth == 0 and name not in self.top_binds:
            self.top_binds.append(name)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self.loads.add(node.id)
        elif self._depth == 0:
            self._bind(node.id)
            if isinstance(node.ctx, ast.Del):  # `del x` needs x there first, and leaves the notebook without it
                self.top_binds.remove(node.id)
                self.loads.add(node.id)
                self.deleted.append(node.id)

    def visit_AugAssign(self, node):
        # `x += 1` reads x as well as binding it.
        if isinstance(node.target, ast.Name):
            self.loads.add(node.target.id)
        self.generic_visit(node)

    def visit_Global(self, node):
        # `global n` in a function the cell defines: calling it binds the notebook-level name, so it comes back
        # (and is read: the function may use its value first).
        for name in node.names:
            self.loads.add(name)
            if name not in self.top_binds:
                self.top_binds.append(name)

    def visit_Import(self, node):
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def _scoped(self, node, name=None):
        if name:
            self._bind(name)
        for deco in getattr(node, "decorator_list", []):
            self.visit(deco)
        self._depth += 1
        for child in ast.iter_child_nodes(node):
            if child not in getattr(node, "decorator_list", []):
                self.visit(child)
        self._depth -= 1

    def visit_FunctionDef(self, node):
        self._scoped(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._scoped(node, node.name)

    def visit_Lambda(self, node):
        self._scoped(node)

    def visit_ListComp(self, node):
        self._scoped(node)

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_ExceptHandler(self, node):
        if node.name:
            self._bind(node.name)
        self.generic_visit(node)


CELL_FILENAME = "<distribute-cell>"  # the file name a cell's SyntaxError carries


def parse_cell(code: str, filename: str = CELL_FILENAME, first_line: int = 1) -> ast.Module:
    """Parse the cell; a SyntaxError is raised here, before anything is launched, at the line the user sees
    (first_line: the number of the code's first line, 2 below a %%distribute line). IPython's own syntax (`%time`,
    `!ls`) is refused in one line: the ranks run the cell as Python, in a namespace of their own that magics do
    not see."""
    try:
        return ast.parse(numbered_from(code, first_line), filename=filename)
    except SyntaxError:
        _refuse_ipython_syntax(code, first_line)
        raise


def _refuse_ipython_syntax(code: str, first_line: int):
    from IPython.core.inputtransformer2 import TransformerManager

    python = TransformerManager().transform_cell(code)
    try:
        ast.parse(python)
    except SyntaxError:
        return  # a plain syntax error: shown as IPython shows one
    for number, (theirs, ours) in enumerate(zip(code.splitlines(), python.splitlines()), start=first_line):
        if theirs != ours:
            raise UsageError(
                f"line {number} is IPython syntax ({theirs.strip()[:40]}), which the ranks cannot run: "
                "move it to a cell of its own, or write it in Python (subprocess.run for a shell command)"
            )


def numbered_from(code: str, first_line: int) -> str:
    """The code with blank lines ahead so that its line numbers (in errors and tracebacks) are the user's."""
    return "\n" * (first_line - 1) + code


# Statements that bind their names whenever they run; a name bound by one of these at top level before any read
# is the cell's own (e.g. `model = build()` then `model.fit`) and need not be shipped, which matters on re-runs
# where the notebook still holds the previous, possibly large, `model`.
_UNCONDITIONAL = (
    ast.Assign,
    ast.AnnAssign,
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)


# tf.distribute strategies that spread one process over several devices or workers. On N ranks each rank is one
# process with one device; on TensorFlow's collectives a strategy would also see the other ranks' devices.
STRATEGIES = {
    "MirroredStrategy",
    "MultiWorkerMirroredStrategy",
    "CentralStorageStrategy",
    "ParameterServerStrategy",
    "TPUStrategy",
}


def refuse_strategies(tree):
    """A cell that makes its own tf.distribute strategy is refused, in one line, before anything starts."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in STRATEGIES:
                raise UsageError(
                    f"line {node.lineno} makes a tf.distribute.{called}: remove it and its "
                    "scope(); %%distribute already runs the cell on every rank, one device each"
                )


# Calls that wait for the person at the keyboard: on a rank they read an empty stdin and fail (EOFError) after
# the job has started; refused before, with what to do instead.
PROMPTS = {"input": "input()", "getpass": "getpass()"}


def refuse_prompts(tree):
    """A cell that asks the person something (input(), getpass()) is refused in one line before anything starts,
    unless the cell defines that name itself."""
    own = {
        node.id if isinstance(node, ast.Name) else node.name
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store))
        or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) and func.attr == "getpass" else None
            called = called or (func.id if isinstance(func, ast.Name) and func.id not in own else None)
            if called in PROMPTS:
                raise UsageError(
                    f"line {node.lineno} calls {PROMPTS[called]}, which the ranks cannot answer (they have no "
                    "keyboard): ask in a plain cell before, and use the answer in this one"
                )


def names_through_globals(tree) -> tuple[set, list]:
    """(reads, binds): the notebook names the cell reaches through globals() with a written key (`globals()["lr"]`,
    `globals().get("lr", 0.1)`, `"lr" in globals()`, `globals()["best"] = ...`), shipped and brought back like
    names the cell writes out. Any other use (a computed key, update, iteration) is refused in one line: a rank's
    globals() holds only the names the cell was sent, so it would read or change a different namespace."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    reads: set = set()
    binds: list = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "globals" and not node.args):
            continue
        name, binding = _written_global(node, parents)
        if name is None:
            raise UsageError(
                f"line {node.lineno} uses globals() without a written name, which the ranks cannot follow (they "
                'hold only the names the cell uses): write the names themselves, or globals()["name"]'
            )
        reads.add(name)
        if binding and name not in binds:
            binds.append(name)
    return reads, binds


def _written_global(call, parents) -> tuple[str | None, bool]:
    """(name, whether it is bound) for a `globals()` call used with a constant string key, else (None, False)."""
    parent = parents.get(call)
    grandparent = parents.get(parent)
    if isinstance(parent, ast.Subscript) and parent.value is call:
        return _constant_name(parent.slice), isinstance(parent.ctx, ast.Store)
    if isinstance(parent, ast.Attribute) and parent.attr in ("get", "setdefault") and isinstance(grandparent, ast.Call):
        first = grandparent.args[0] if grandparent.func is parent and grandparent.args else None
        return _constant_name(first), parent.attr == "setdefault"
    if (
        isinstance(parent, ast.Compare)
        and parent.comparators == [call]
        and isinstance(parent.ops[0], ast.In | ast.NotIn)
    ):
        return _constant_name(parent.left), False
    return None, False


def _constant_name(node) -> str | None:
    is_name = isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier()
    return node.value if is_name else None


def analyse(code: str, first_line: int = 1) -> CellNames:
    collector = _NameCollector()
    own: set = set()  # names bound unconditionally by an earlier top-level statement
    loads = set()
    tree = parse_cell(code, first_line=first_line)
    refuse_strategies(tree)
    refuse_prompts(tree)
    for statement in tree.body:
        before = set(collector.loads)
        collector.loads = set()
        collector.visit(statement)
        loads |= collector.loads - own
        collector.loads = before | collector.loads
        if isinstance(statement, _UNCONDITIONAL):
            own.update(collector.top_binds)
    global_reads, global_binds = names_through_globals(tree)
    loads |= global_reads
    reads = {n for n in loads if n not in _IPYTHON_NAMES and not n.startswith("_jdl")}
    top_binds = collector.top_binds + [n for n in global_binds if n not in collector.top_binds]
    binds = [n for n in top_binds if n not in _IPYTHON_NAMES and not n.startswith("_")]
    deletes = [n for n in dict.fromkeys(collector.deleted) if n not in binds]
    shows_last = bool(tree.body) and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";")
    return CellNames(reads=reads, binds=binds, deletes=deletes, shows_last=shows_last)


def shippable_reads(names: CellNames, namespace: dict) -> list:
    """The names the cell reads that the notebook actually defines (builtins stay on the engines), and the
    notebook names that the notebook's functions among them read when called."""
    out: set = set()
    pending = sorted(names.reads)
    while pending:
        name = pending.pop()
        if name in out or name not in namespace:
            continue
        if hasattr(builtins, name) and namespace[name] is getattr(builtins, name):
            continue
        out.add(name)
        pending.extend(sorted(globals_read_by(namespace[name])))
    return sorted(out)


def globals_read_by(value) -> set:
    """The global names the notebook's own code in `value` uses (a function, or the methods of a notebook class).
    A `train_step` from an earlier cell trains the notebook's `model` and `optimizer`, a model's train_step
    updates the notebook's `loss_tracker`: they travel beside it, the code runs over the rank's objects, and
    they come back as the cell left them."""
    return payload.notebook_globals(value)
