"""Files a callback writes during `fit` are written once, by rank 0.

Every rank runs the cell's callbacks (a GAN monitor saving a generated image each epoch, a plot saved by
`savefig`), and on a shared folder each would write the same file, racing. Writes that go through one of the
functions below are skipped on the other ranks while `fit` runs; rank 0's file is the one the notebook would have
made (the ranks' models are equal). Writes outside these functions (`open(path, "w")`) are not guarded: the
README says so. Keras' own saving (`model.save`, ModelCheckpoint) has its own guard in keras_hooks.
"""

import sys

# (module, attribute path, position of the target argument) of the writing functions guarded, where loaded.
GUARDED = (
    ("keras.src.utils.image_utils", "save_img", 0),
    ("PIL.Image", "Image.save", 1),
    ("matplotlib.figure", "Figure.savefig", 1),
    ("numpy", "save", 0),
    ("numpy", "savez", 0),
    ("numpy", "savez_compressed", 0),
    ("tensorflow._api.v2.io", "write_file", 0),  # tf.io.write_file, called eagerly from a callback
)


def patches(skip_now) -> list:
    """(owner, name, replacement) for each guarded function that is loaded: the replacement does nothing while
    `skip_now()` is true (a rank other than 0, inside fit)."""
    found = []
    for module_name, path, target in GUARDED:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        owner_path, _, name = path.rpartition(".")
        owner = getattr(module, owner_path) if owner_path else module
        original = getattr(owner, name, None)
        if original is not None:
            found.append((owner, name, _skipping(original, skip_now, target)))
    return found


def _skipping(original, skip_now, target):
    def write(*args, **kwargs):
        # Into a buffer (`savefig(io.BytesIO())` for a TensorBoard image) every rank must write: it reads it back.
        into_buffer = len(args) > target and hasattr(args[target], "write")
        if skip_now() and not into_buffer:
            return None
        return original(*args, **kwargs)

    write.__wrapped__ = original
    write.__doc__ = original.__doc__
    return write
