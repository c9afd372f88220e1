"""What a cell reads and binds decides what travels; pure functions, no engines needed."""

import pytest

from jupyter_dl.kernel.cell import analyse, shippable_reads

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


def test_reads_and_binds():
    code = (
        "import keras\n"
        "from numpy import mean as m\n"
        "model = build(width)\n"
        "history = model.fit(x_train, y_train)\n"
        "def helper(a):\n    local = a + offset\n    return local\n"
        "total += 1\n"
        "squares = [i * i for i in range(n)]\n"
    )
    names = analyse(code)
    assert names.binds == ["keras", "m", "model", "history", "helper", "total", "squares"]
    assert {"build", "width", "x_train", "y_train", "offset", "total", "n"} <= names.reads
    assert "model" not in names.reads  # bound by the cell before it is read
    assert "local" not in names.binds and "i" not in names.binds and "a" not in names.binds


def test_shippable_reads_skips_builtins_and_unknown_names():
    names = analyse("y = len(x) + missing")
    assert shippable_reads(names, {"x": [1], "len": len, "unrelated": 3}) == ["x"]


def test_syntax_error_is_raised_before_anything():
    with pytest.raises(SyntaxError):
        analyse("def broken(:\n    pass")


def test_ipython_internals_never_travel():
    names = analyse("a = In[1] + _ + Out[2]")
    assert names.reads.isdisjoint({"In", "Out", "_"})


def test_names_the_cell_binds_first_are_not_shipped():
    names = analyse("import keras\nmodel = keras.Sequential()\nmodel.fit(x)\nif flag:\n    other = 1\nother.run()")
    assert "model" not in names.reads and "keras" not in names.reads
    assert {"x", "flag", "other"} <= names.reads  # `other` may still come from the notebook


def test_a_name_read_in_its_own_binding_is_shipped():
    assert "model" in analyse("model = wrap(model)").reads
    assert "total" in analyse("total += 1").reads


def test_a_cell_that_makes_its_own_strategy_is_refused_naming_its_line():
    """Kept from the distributed-training guide, a MirroredStrategy on TensorFlow's collectives spans the other
    ranks' devices and killed the engine; on Horovod it trained and then could not come back. One line instead."""
    from jupyter_dl.errors import UsageError

    cell = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\nwith strategy.scope():\n    pass\n"
    refused = r"^line 3 makes a tf.distribute.MirroredStrategy: remove it and its scope\(\)"
    with pytest.raises(UsageError, match=refused):
        analyse(cell, first_line=2)  # the %%distribute line is line 1
    assert analyse("strategy = None\n").binds == ["strategy"]  # the name alone is fine


def test_names_written_through_globals_are_read_and_bound_and_computed_ones_refused():
    """`globals()["lr"]` read nothing the ranks were sent (KeyError: 'lr' on every rank); with a written key it is
    the name itself. A key known only when the cell runs is refused in one line, naming its line."""
    from jupyter_dl.errors import UsageError

    cell = (
        'opt = SGD(globals()["lr"])\nn = globals().get("epochs", 1)\nif "x" in globals():\n    globals()["best"] = 1\n'
    )
    names = analyse(cell)
    assert {"lr", "epochs", "x"} <= names.reads and names.binds == ["opt", "n", "best"]
    for computed in ("[print(globals()[k]) for k in ['lr']]", "globals().update(settings)", "print(globals())"):
        with pytest.raises(UsageError, match=r"^line 3 uses globals\(\) without a written name"):
            analyse(computed, first_line=3)


def test_a_global_declared_in_a_function_of_the_cell_is_read_and_bound():
    names = analyse("def count():\n    global n_calls\n    n_calls += 1\ncount()\n")
    assert "n_calls" in names.reads and "n_calls" in names.binds


def test_an_unsendable_old_value_of_a_name_the_cell_binds_is_left_behind(tmp_path):
    """`with open(path, "w") as f:` in the cell, while the notebook holds a closed file `f` from earlier: the cell
    binds its own `f`, so the old one need not (and cannot) travel; one the cell only reads is still refused."""
    from jupyter_dl.errors import ShipError
    from jupyter_dl.kernel.job.work import CellWork, prepare

    with open(tmp_path / "old.txt", "w") as f:
        f.write("x")
    code = "with open(path, 'w') as f:\n    f.write('hi')\n"
    shipment = prepare(CellWork(code, {"f": f, "path": str(tmp_path / "new.txt")}))
    assert "f" not in shipment.names_in and "path" in shipment.names_in
    with pytest.raises(ShipError, match="cannot send variable 'f'"):
        prepare(CellWork("print(f.closed)\n", {"f": f}))


def test_ipython_syntax_in_the_cell_is_refused_in_one_line_naming_it():
    from jupyter_dl.errors import UsageError

    with pytest.raises(UsageError, match=r"^line 3 is IPython syntax \(%time y = 2\), which the ranks cannot run"):
        analyse("x = 1\n%time y = 2\n", first_line=2)
    with pytest.raises(UsageError, match=r"^line 2 is IPython syntax \(!ls\)"):
        analyse("!ls\n", first_line=2)
    with pytest.raises(SyntaxError):  # plain Python mistakes stay SyntaxErrors
        analyse("x = (\n", first_line=2)


def test_a_cell_that_asks_the_person_something_is_refused_before_it_starts():
    from jupyter_dl.errors import UsageError

    with pytest.raises(UsageError, match=r"^line 3 calls input\(\), which the ranks cannot answer .*plain cell before"):
        analyse("x = 1\nname = input('name? ')\n", first_line=2)
    with pytest.raises(UsageError, match=r"^line 2 calls getpass\(\)"):
        analyse("token = getpass.getpass()\n", first_line=2)
    with pytest.raises(UsageError, match=r"^line 3 calls getpass\(\)"):
        analyse("from getpass import getpass\ntoken = getpass()\n", first_line=2)
    analyse("def input(prompt):\n    return 'x'\nname = input('?')\n")  # the cell's own input is fine
    analyse("model.input\nlayer(model.input)\n")  # an attribute of that name is not the builtin


def test_a_deleted_name_is_read_first_and_gone_after():
    names = analyse("y = scratch * 2\ndel scratch\n")
    assert "scratch" in names.reads and names.deletes == ["scratch"] and names.binds == ["y"]
    assert analyse("del a\na = 1\n").deletes == []  # bound again: it comes back


def test_a_cell_ending_in_an_expression_shows_it_unless_a_semicolon_says_not():
    assert analyse("x = 1\nx + 1\n").shows_last
    assert not analyse("x = 1\nx + 1;\n").shows_last
    assert not analyse("x = 1\n").shows_last
