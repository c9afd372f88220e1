"""Keras models, layers and optimizers held by an object of a notebook class (`agent.model`, `agent.optimizer` of an
`Agent` whose own method trains them in the cell).

The cell names `agent`, not the model, so the model travels inside the agent as a copy and rank 0's training would
stay there. Each one the cell changed goes back under a name of its own (`agent.model`: not an identifier, so never
a notebook name) by the same path as a model the cell names, updating the notebook's object under that attribute in
place (other references to it see the training, as in one process)."""

from jupyter_dl.wire import object_state, payload


def held(value, named_ids) -> dict:
    """{attribute: model, layer or optimizer} of a notebook class's object; not those the cell also reads by a name
    of their own (`named_ids`), which come back by that name."""
    if not object_state.of_a_notebook_class(value):
        return {}
    return {k: v for k, v in vars(value).items() if payload.trained_in_place(v) and id(v) not in named_ids}


def travel_name(name, index, attribute) -> str:
    return f"{name}{'' if index is None else f'[{index}]'}.{attribute}"


def notebook_objects(namespace, entries) -> dict:
    """{travel name: the notebook's object under that attribute now} for the entries rank 0 sent back."""
    found = {}
    for travel, name, index, attribute in entries:
        try:
            found[travel] = getattr(object_state.at(namespace, name, index), attribute)
        except (KeyError, IndexError, TypeError, AttributeError):  # the notebook's object changed meanwhile
            pass
    return found


def put_back(values, problems, namespace, entries) -> list:
    """Take the travel names out of `values` and `problems` (they are not notebook names), setting each value on
    the notebook's object where it was not updated in place. Returns a line for each that did not come back."""
    lines = []
    for travel, name, index, attribute in entries:
        if travel in problems:
            lines.append(f"'{travel}' did not come back from the engines ({problems.pop(travel)}); it is as it was")
        if travel not in values:
            continue
        value = values.pop(travel)
        try:
            owner = object_state.at(namespace, name, index)
            if getattr(owner, attribute, None) is not value:
                setattr(owner, attribute, value)
        except Exception as exc:
            lines.append(f"'{travel}' did not come back ({type(exc).__name__}: {exc})")
    return lines
