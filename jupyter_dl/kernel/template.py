"""`%dl_template X Y`: from the shape and values of the notebook's arrays to a ready-to-run `%%distribute` cell
(model, compile, fit). The rules are simple and stated in the cell's first comment, so the user sees why.

Kinds: tabular (N, F) floats; images (N, H, W[, C]); sequences (N, T, F) floats; token ids (N, T) non-negative
integers. Tasks: classification (integer or one-hot Y with few values), binary, or regression (float Y)."""

from dataclasses import dataclass

import numpy as np

from jupyter_dl.errors import UsageError

KINDS = ("tabular", "image", "sequence", "tokens")
TASKS = ("classification", "regression")
MAX_CLASSES = 1000


@dataclass
class DataShape:
    kind: str
    task: str  # "binary", "classification", "onehot" or "regression"
    x_shape: tuple  # one sample's shape
    classes: int = 0  # classification: number of classes
    outputs: int = 1  # regression: number of targets
    vocab: int = 0  # tokens: largest id + 1
    scale: float = 1.0  # images: divide pixels by this (255 for bytes)
    channels_first: bool = False


def _as_array(value, name):
    if hasattr(value, "to_numpy"):  # pandas frames and series
        value = value.to_numpy()
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - anything NumPy cannot take is the same user error
        array = None
    if array is None or array.dtype.kind not in "biuf" or array.ndim == 0:
        raise UsageError(
            f"%dl_template: {name} must be a NumPy array or a pandas frame of numbers (got {type(value).__name__})"
        )
    return array


def _is_integral(a):
    if np.issubdtype(a.dtype, np.integer) or a.dtype == bool:
        return True
    sample = a.ravel()[:100_000]
    whole = np.all(np.isfinite(sample)) and np.all(sample == np.round(sample))
    return np.issubdtype(a.dtype, np.floating) and bool(whole)


def infer_kind(x):
    if x.ndim == 2 and np.issubdtype(x.dtype, np.integer) and x.shape[1] >= 8 and x.min() >= 0:
        return "tokens"  # a row of small non-negative integers, long enough to be a sentence
    if x.ndim == 2:
        return "tabular"
    if x.ndim == 4:
        return "image"
    if x.ndim == 3:
        h, w = x.shape[1:]
        # Near-square and at least 8x8 reads as a grayscale image; otherwise steps x features.
        return "image" if h >= 8 and w >= 8 and 0.5 <= h / w <= 2 else "sequence"
    raise UsageError(
        f"%dl_template: X has shape {x.shape}; expected (samples, features), (samples, steps, features),"
        f" (samples, height, width[, channels]) or token ids (samples, steps)"
    )


def infer_task(y):
    if (
        y.ndim == 2
        and y.shape[1] > 1
        and _is_integral(y)
        and set(np.unique(y[:10_000])) <= {0, 1}
        and np.all(y[:10_000].sum(axis=1) == 1)
    ):
        return "onehot", y.shape[1]
    if y.ndim > 2 or (y.ndim == 2 and y.shape[1] > 1):
        return "regression", int(np.prod(y.shape[1:]))
    flat = y.ravel()
    if _is_integral(flat) and flat.min() >= 0:
        values = np.unique(flat)
        if len(values) <= min(MAX_CLASSES, max(2, len(flat) // 5)) and values.max() < MAX_CLASSES:
            return ("binary", 2) if values.max() <= 1 else ("classification", int(values.max()) + 1)
    return "regression", 1


def describe(x, y, kind=None, task=None):
    x, y = _as_array(x, "X"), _as_array(y, "Y")
    if len(x) != len(y):
        raise UsageError(f"%dl_template: X has {len(x)} samples but Y has {len(y)}; pass matching arrays")
    if len(x) < 2:
        raise UsageError("%dl_template: X needs at least 2 samples")
    kind = kind or infer_kind(x)
    found_task, count = infer_task(y)
    if task == "regression":
        found_task, count = "regression", int(np.prod(y.shape[1:])) or 1
    elif task == "classification" and found_task == "regression":
        if not _is_integral(y) or y.min() < 0:
            raise UsageError("%dl_template: --task classification needs integer class ids >= 0 (or one-hot) in Y")
        found_task, count = "classification", int(y.max()) + 1
    shape = DataShape(kind, found_task, tuple(x.shape[1:]))
    if found_task == "regression":
        shape.outputs = count
    else:
        shape.classes = count
    if kind == "tokens":
        if not np.issubdtype(x.dtype, np.integer) and not _is_integral(x):
            raise UsageError("%dl_template: --kind tokens needs integer token ids in X")
        shape.vocab = int(x.max()) + 1
    if kind == "image":
        if x.ndim not in (3, 4):
            raise UsageError(f"%dl_template: images need X of shape (N, H, W) or (N, H, W, C), got {x.shape}")
        shape.channels_first = x.ndim == 4 and x.shape[1] in (1, 3) and x.shape[3] not in (1, 3)
        peak = float(np.max(x[:10_000]))
        # Pixels in [0, 1] stay; bytes are /255; any other range is divided by its peak (digits: 0..16).
        shape.scale = 1.0 if peak <= 1.5 else 255.0 if 128 < peak <= 255 else peak
    return shape


def _layers(shape, x_name):
    """(setup lines before the model, the model's layer lines)."""
    build = {"tabular": _tabular_layers, "image": _image_layers, "sequence": _sequence_layers}
    return build.get(shape.kind, _token_layers)(shape, shape.x_shape, x_name)


def _tabular_layers(shape, s, x_name):
    return (
        [
            "norm = keras.layers.Normalization()",
            f"norm.adapt(np.asarray({x_name}, dtype='float32'))  # feature means/variances from the data",
        ],
        [
            f"keras.Input(shape={s!r})",
            "norm",
            "keras.layers.Dense(128, activation='relu')",
            "keras.layers.Dropout(0.1)",
            "keras.layers.Dense(64, activation='relu')",
        ],
    )


def _image_layers(shape, s, x_name):
    layers = [f"keras.Input(shape={s!r})"]
    if len(s) == 2:
        layers.append(f"keras.layers.Reshape({(*s, 1)!r})  # one channel")
    elif shape.channels_first:
        layers.append("keras.layers.Permute((2, 3, 1))  # channels last")
    if shape.scale != 1.0:
        layers.append(f"keras.layers.Rescaling(1 / {shape.scale:g})  # pixels to [0, 1]")
    small = min(s[:2] if not shape.channels_first else s[1:3]) < 16
    layers += [
        "keras.layers.Conv2D(32, 3, padding='same', activation='relu')",
        "keras.layers.MaxPooling2D()",
        "keras.layers.Conv2D(64, 3, padding='same', activation='relu')",
    ]
    if not small:
        layers += [
            "keras.layers.MaxPooling2D()",
            "keras.layers.Conv2D(128, 3, padding='same', activation='relu')",
            "keras.layers.GlobalAveragePooling2D()",
        ]
    else:
        layers.append("keras.layers.Flatten()")
    return [], layers + ["keras.layers.Dropout(0.2)", "keras.layers.Dense(128, activation='relu')"]


def _sequence_layers(shape, s, x_name):
    steps = s if len(s) == 2 else (s[0], 1)  # (N, T) floats: one feature per step
    reshape = [f"keras.layers.Reshape({steps!r})  # one feature per step"] if len(s) == 1 else []
    return (
        [
            "norm = keras.layers.Normalization(axis=-1)",
            f"norm.adapt(np.asarray({x_name}, dtype='float32').reshape((-1,) + {steps!r}))",
        ],
        [
            f"keras.Input(shape={s!r})",
            *reshape,
            "norm",
            "keras.layers.Conv1D(64, 5, padding='same', activation='relu')",
            "keras.layers.Conv1D(64, 3, padding='same', activation='relu')",
            "keras.layers.GlobalAveragePooling1D()",
            "keras.layers.Dense(64, activation='relu')",
        ],
    )


def _token_layers(shape, s, x_name):
    return (
        [],
        [
            f"keras.Input(shape={s!r}, dtype='int32')",
            f"keras.layers.Embedding({shape.vocab}, 64)  # vocabulary: ids 0..{shape.vocab - 1}",
            "keras.layers.Conv1D(64, 5, padding='same', activation='relu')",
            "keras.layers.GlobalMaxPooling1D()",
            "keras.layers.Dense(64, activation='relu')",
        ],
    )


def _head(shape):
    """(output layer, loss, metrics)."""
    if shape.task == "binary":
        return "keras.layers.Dense(1, activation='sigmoid')", "binary_crossentropy", ["accuracy"]
    if shape.task == "onehot":
        return (f"keras.layers.Dense({shape.classes}, activation='softmax')", "categorical_crossentropy", ["accuracy"])
    if shape.task == "classification":
        return (
            f"keras.layers.Dense({shape.classes}, activation='softmax')",
            "sparse_categorical_crossentropy",
            ["accuracy"],
        )
    return f"keras.layers.Dense({shape.outputs})", "mse", ["mae"]


def _summary(shape, x, y, x_name, y_name):
    what = {
        "binary": "2 classes",
        "onehot": f"{shape.classes} classes (one-hot)",
        "classification": f"{shape.classes} classes",
        "regression": f"regression, {shape.outputs} target{'s' if shape.outputs > 1 else ''}",
    }[shape.task]
    return (
        f"# %dl_template: {x_name} {tuple(np.shape(x))} {np.asarray(x).dtype} -> {shape.kind}; "
        f"{y_name} {tuple(np.shape(y))} -> {what}"
    )


def template_code(
    x,
    y,
    x_name="X",
    y_name="Y",
    kind=None,
    task=None,
    epochs=None,
    batch_size=None,
    distribute_line="%%distribute --recommend",
):
    """The cell %dl_template writes for arrays x, y bound to x_name, y_name in the notebook."""
    shape = describe(x, y, kind, task)
    setup, layers = _layers(shape, x_name)
    output, loss, metrics = _head(shape)
    n = len(x)
    batch_size = batch_size or (32 if n < 20_000 else 128)
    # About 1,000 optimizer steps in all (5 to 20 epochs): enough to learn, short to try; edit to taste.
    epochs = epochs or int(min(20, max(5, round(1000 * batch_size / max(n, 1)))))
    # A layer's comment goes after its comma.
    body = "\n    ".join(
        f"{code},  # {note}" if note else f"{code},"
        for code, _, note in (layer.partition("  # ") for layer in [*layers, output])
    )
    imports = "import keras\nimport numpy as np\n" if setup else "import keras\n"
    setup_text = "\n".join(setup) + "\n" if setup else ""
    return (
        f"{distribute_line}\n{_summary(shape, x, y, x_name, y_name)}\n{imports}{setup_text}"
        f"model = keras.Sequential([\n    {body}\n])\n"
        f"model.compile(optimizer=keras.optimizers.Adam(1e-3), loss={loss!r}, metrics={metrics!r})\n"
        f"history = model.fit({x_name}, {y_name}, batch_size={batch_size}, epochs={epochs}, "
        f"validation_split=0.1)\n"
    )


def parser():
    from jupyter_dl.kernel.options import Parser
    from jupyter_dl.wire.options import positive_int

    p = Parser(
        prog="%dl_template",
        add_help=False,
        description="Write a new cell below with a Keras model, compile and fit for X, Y under %%distribute.",
    )
    p.add_argument("x", metavar="X")
    p.add_argument("y", metavar="Y")
    p.add_argument("--kind", choices=KINDS, default=None, help="override the data kind read from X")
    p.add_argument("--task", choices=TASKS, default=None, help="override the task read from Y")
    p.add_argument("--epochs", type=positive_int, default=None, help="default: about 1,000 steps in all, 5 to 20")
    p.add_argument(
        "--batch-size", dest="batch_size", type=positive_int, default=None, help="default: 32, or 128 from 20,000 rows"
    )
    return p


def dl_template_magic(shell, line):
    """Parse `%dl_template X Y [...]`, write the cell below, and return its code."""
    import shlex

    args = parser().parse_args(shlex.split(line))
    missing = [name for name in (args.x, args.y) if name not in shell.user_ns]
    if missing:
        raise UsageError(f"%dl_template: no variable named {', '.join(map(repr, missing))} in the notebook")
    code = template_code(
        shell.user_ns[args.x], shell.user_ns[args.y], args.x, args.y, args.kind, args.task, args.epochs, args.batch_size
    )
    shell.set_next_input(code, replace=False)
    return code
