"""`import jupyter_dl.horovod_compat` at the top of a script run by `horovodrun` makes Horovod's TensorFlow 2 and
Keras APIs (DistributedGradientTape, broadcast_variables, horovod.keras / horovod.tensorflow.keras with
DistributedOptimizer, the callbacks and load_model) work on Keras 3, as they do in a `%%distribute --manual` cell.
See jupyter_dl/backends/horovod_keras3.py for what is patched and why."""

from jupyter_dl.backends.horovod_keras3 import Keras3Unsupported, install

install()

__all__ = ["Keras3Unsupported", "install"]
