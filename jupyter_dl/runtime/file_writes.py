"""Files a callback writes during `fit` are written once, by rank 0.

Every rank runs the cell's callbacks (a GAN monitor saving a generated image each epoch, a plot saved by
`savefig`), and on a shared folder each would write the same file, racing. Writes that go through one of the
functions below are skipped on the other ranks while `fit` runs; rank 0's file is the one the notebook would have
made (the ranks' models are equal). Writes outside these functions (`open(path, "w")`) are not guarded: the
README says so. Keras' own saving (`model.save`, ModelCheckpoint) has its own guard in keras_hooks.
"""

import sys

# (module, attribute path) of the writing functions guarded, where the module is loaded.
GUARDED = (
    ("keras.src.utils.image_utils", "save_img"),
    ("PIL.Image", "Image.save"),
    ("matplotlib.figure", "Figure.savefig"),
    ("numpy", "save"),
    ("numpy", "savez"),
    ("numpy", "savez_compressed"),
    ("tensorflow._api.v2.io", "write_file"),  # tf.io.write_file, called eagerly from a callback
)


def patches(skip_now) -> list:
    """(owner, name, replacement) for each guarded function that is loaded: the replacement does nothing while
    `skip_now()` is true (a rank other than 0, inside fit)."""
    found = []
    for module_name, path in GUARDED:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        owner_path, _, name = path.rpartition(".")
        owner = getattr(module, owner_path) if owner_path else module
        original = getattr(owner, name, None)
        if original is not None:
            found.append((owner, name, _skipping(original, skip_now)))
    return found


def _skipping(original, skip_now):
    def write(*args, **kwargs):
        if skip_now():
            return None
        return original(*args, **kwargs)

    write.__wrapped__ = original
    write.__doc__ = original.__doc__
    return write
