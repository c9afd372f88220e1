"""Regenerate examples/quickstart.ipynb from the cells below (kept here so the notebook diff stays reviewable)."""

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

TRAIN = """import keras

keras.utils.set_random_seed(0)
model = keras.Sequential([
    keras.Input((64,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=10, validation_split=0.1, verbose=2)"""

cells = [
    new_markdown_cell(
        "# jupyter-dl quickstart\n\nAn ordinary single-GPU Keras cell, then the same cell, unchanged, "
        "as a 2-rank Horovod job on a local ipyparallel cluster that `%%distribute` starts for us."
    ),
    new_code_cell("%load_ext jupyter_dl"),
    new_code_cell(
        "from sklearn.datasets import load_digits\n\n"
        "digits = load_digits()  # ships with scikit-learn: no download\n"
        'x = (digits.data / 16.0).astype("float32")\n'
        "y = digits.target\n"
        "x_train, y_train, x_test, y_test = x[:1400], y[:1400], x[1400:], y[1400:]\n"
        "x_train.shape, x_test.shape"
    ),
    new_markdown_cell("## The cell as you would write it for one GPU"),
    new_code_cell(TRAIN),
    new_code_cell("single_process = model.evaluate(x_test, y_test, verbose=0)\nsingle_process"),
    new_markdown_cell(
        "## The same cell on 2 ranks\n\nThe optimizer averages gradients across ranks, each rank "
        "trains on its half of `x_train`, the learning rate is scaled by 2, and only rank 0 prints. "
        "The cell shows a live loss plot and progress bar while it trains, and a summary at the end."
    ),
    new_code_cell("%%distribute -n 2\n" + TRAIN),
    new_markdown_cell("The trained `model` and `history` are back in the notebook:"),
    new_code_cell(
        "distributed = model.evaluate(x_test, y_test, verbose=0)\n"
        'print(f"test accuracy: single process {single_process[1]:.3f}, 2 ranks {distributed[1]:.3f}")\n'
        'history.history["val_accuracy"][-1]'
    ),
    new_code_cell("%dl_cluster status"),
    new_code_cell("%dl_cluster stop"),
]

nb = new_notebook(
    cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
)
nbformat.write(nb, "examples/quickstart.ipynb")
