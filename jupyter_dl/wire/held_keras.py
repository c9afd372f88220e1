"""Keras models, layers and optimizers held by an object of a notebook class (`agent.model`, `agent.optimizer` of an
`Agent` whose own method trains them in the cell, or the models of its dict or list attribute).

The cell names `agent`, not the model, so the model travels inside the agent as a copy and rank 0's training would
stay there. Each one the cell changed goes back under a name of its own (`agent.model`: not an identifier, so never
a notebook name) by the same path as a model the cell names, updating the notebook's object under that attribute in
place (other references to it see the training, as in one process)."""

from jupyter_dl.wire import object_state, payload


def held(value, named_ids) -> dict:
    """{path: model, layer or optimizer} of a notebook class's object, a path being (attribute,) or, for models in
    a list or dict attribute (`self.nets = {"actor": ..., "critic": ...}`), (attribute, key): each model by a name of
    its own, so that an optimizer built over several of them finds each. Not those the cell also reads by a name of
    their own (`named_ids`), which come back by that name."""
    if not object_state.of_a_notebook_class(value):
        return {}
    found: dict = {}
    for attribute, part in vars(value).items():
        if type(part) in (list, dict):
            items = part.items() if type(part) is dict else enumerate(part)
            found.update(((attribute, key), item) for key, item in items if _one_keras_object(item))
        elif payload.trained_in_place(part):
            found[(attribute,)] = part
    return {path: part for path, part in found.items() if id(part) not in named_ids}


def _one_keras_object(value) -> bool:
    return type(value) not in (list, tuple, dict) and payload.trained_in_place(value)


def travel_name(name, index, path) -> str:
    keys = "".join(f"[{key!r}]" for key in path[1:])
    return f"{name}{'' if index is None else f'[{index}]'}.{path[0]}{keys}"


def value_at(owner, path):
    value = getattr(owner, path[0])
    for key in path[1:]:
        value = value[key]
    return value


def notebook_objects(namespace, entries) -> dict:
    """{travel name: the notebook's object at that place now} for the entries rank 0 sent back."""
    found = {}
    for travel, name, index, path in entries:
        try:
            found[travel] = value_at(object_state.at(namespace, name, index), path)
        except (KeyError, IndexError, TypeError, AttributeError):  # the notebook's object changed meanwhile
            pass
    return found


def put_back(values, problems, namespace, entries) -> list:
    """Take the travel names out of `values` and `problems` (they are not notebook names), setting each value in
    the notebook's object where it was not updated in place. Returns a line for each that did not come back."""
    lines = []
    for travel, name, index, path in entries:
        if travel in problems:
            lines.append(f"'{travel}' did not come back from the engines ({problems.pop(travel)}); it is as it was")
        if travel not in values:
            continue
        value = values.pop(travel)
        try:
            owner = object_state.at(namespace, name, index)
            if len(path) == 1:
                if getattr(owner, path[0], None) is not value:
                    setattr(owner, path[0], value)
            else:
                container = value_at(owner, path[:-1])
                if container[path[-1]] is not value:
                    container[path[-1]] = value
        except Exception as exc:
            lines.append(f"'{travel}' did not come back ({type(exc).__name__}: {exc})")
    return lines
