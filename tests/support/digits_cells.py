"""Notebook cells shared by tests: the small digits classifier most magic tests train (x_train, y_train: the
`digits` fixture's arrays)."""

DIGITS_MODEL = """
import keras
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
"""
