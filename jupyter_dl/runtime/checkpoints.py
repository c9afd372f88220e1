"""Engine side: per-epoch checkpoints of a distributed `fit`, and resuming from them after a restart.

Each `fit` call in a cell has one file, `<dir>/fit-<k>.npz`: the model's and the optimizer's variables, the last
finished epoch and the (rank-averaged) history so far. Rank 0 writes it at every epoch end to a temporary name and
renames it into place, so a crash mid-write never leaves a torn checkpoint. When `fit` returns, the file becomes
`fit-<k>.complete.npz`: a new run of the cell starts afresh, while a restart of the same job (after a failure later
in the cell) restores the finished fit instead of training it again.
"""

import json
import os

import numpy as np

FORMAT = 1


class CheckpointMismatch(ValueError):
    pass


class FitCheckpoint:
    def __init__(self, directory, index):
        self.directory = directory
        self.path = os.path.join(directory, f"fit-{index}.npz")
        self.complete_path = os.path.join(directory, f"fit-{index}.complete.npz")

    # ------------------------------------------------------------------------------------------------ read
    def find(self, include_complete):
        """(path, meta) of the checkpoint to resume from, or None. Only rank 0 needs to see the directory."""
        candidates = [self.path] + ([self.complete_path] if include_complete else [])
        for path in candidates:
            if os.path.exists(path):
                with np.load(path, allow_pickle=False) as data:
                    meta = json.loads(str(data["__meta__"]))
                if meta.get("format") == FORMAT:
                    return path, meta
        return None

    def restore(self, path, model):
        """Load the model's and the optimizer's variables from `path` (rank 0; the others get them broadcast)."""
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["__meta__"]))
            model_values = [data[f"m{i}"] for i in range(meta["model_variables"])]
            optimizer_values = [data[f"o{i}"] for i in range(meta["optimizer_variables"])]
        restore_into(model, model_values, optimizer_values, _mismatch(path))

    # ----------------------------------------------------------------------------------------------- write
    def save(self, model, epoch, history):
        """Write the checkpoint for a finished epoch; atomic (a rename) so a crash leaves the previous one."""
        os.makedirs(self.directory, exist_ok=True)
        optimizer_variables = list(model.optimizer.variables) if model.optimizer is not None else []
        arrays = {f"m{i}": np.asarray(v.numpy()) for i, v in enumerate(model.variables)}
        arrays.update({f"o{i}": np.asarray(v.numpy()) for i, v in enumerate(optimizer_variables)})
        meta = {
            "format": FORMAT,
            "epoch": epoch,
            "history": history,
            "model_variables": len(model.variables),
            "optimizer_variables": len(optimizer_variables),
        }
        arrays["__meta__"] = np.array(json.dumps(meta))
        temporary = f"{self.path}.tmp-{os.getpid()}"
        with open(temporary, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)

    def mark_complete(self):
        if os.path.exists(self.path):
            os.replace(self.path, self.complete_path)


def restore_into(model, model_values, optimizer_values, mismatch):
    """Assign saved values to the model's variables, then to its optimizer's (built first: a fresh optimizer has no
    slot variables yet). Shared by checkpoints and elastic commits; `mismatch(what, index, variables, values)` makes
    each one's own error for another count of variables (index None) or another shape at `index`."""
    assign_checked(model.variables, model_values, mismatch, "model")
    if model.optimizer is not None and optimizer_values:
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        assign_checked(model.optimizer.variables, optimizer_values, mismatch, "optimizer")


def assign_checked(variables, values, mismatch, what):
    """Assign values to variables after checking that they fit, all of them, so a mismatch changes nothing here."""
    variables = list(variables)
    if len(variables) != len(values):
        raise mismatch(what, None, variables, values)
    for i, (variable, value) in enumerate(zip(variables, values)):
        if tuple(variable.shape) != tuple(value.shape):
            raise mismatch(what, i, variables, values)
    for variable, value in zip(variables, values):
        variable.assign(value)


def _mismatch(path):
    def error(what, index, variables, values):
        if index is None:
            return CheckpointMismatch(
                f"the checkpoint {path} holds {len(values)} {what} variables, this model has "
                f"{len(variables)}; delete it or pass another --checkpoint-dir"
            )
        return CheckpointMismatch(
            f"the checkpoint {path} does not fit this model ({what} variable {index} "
            f"'{variables[index].path}' is {tuple(variables[index].shape)}, saved {tuple(values[index].shape)}); "
            f"delete it or pass another --checkpoint-dir"
        )

    return error
