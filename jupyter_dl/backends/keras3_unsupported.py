"""The one error the Keras 3 Horovod layer raises for what cannot work (its own module so both halves import it)."""


class Keras3Unsupported(NotImplementedError):
    """A Horovod API that cannot work on Keras 3; the message says what to use instead."""
