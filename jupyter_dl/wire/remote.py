"""The engine functions the kernel calls, by name.

Kernel-side code never imports engine code (`runtime/`): it hands ipyparallel one of the `EngineFunction`s below,
which pickles as two strings and imports its function only where it is called, on the engine. This list is
the whole of what the kernel may ask an engine to run outside a job; tests/project/test_imports.py checks each one
resolves."""

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineFunction:
    module: str
    name: str

    def __call__(self, *args, **kwargs):
        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)


RUN_RANK = EngineFunction("jupyter_dl.runtime.rank", "run")  # one rank of one job: RankSpec -> outcome dict
MANIFEST = EngineFunction("jupyter_dl.runtime.rank", "manifest")  # names an engine holds, with fingerprints
RECEIVE = EngineFunction("jupyter_dl.runtime.rank", "receive")  # shipped values into the engine's store
PRELOADED = EngineFunction("jupyter_dl.runtime.rank", "preloaded")  # TensorFlow (and Horovod) imported yet?
DESCRIBE = EngineFunction("jupyter_dl.runtime.rank", "describe")  # hostname, pid; ends with its kernel if owned
DEVICE_KIND = EngineFunction("jupyter_dl.runtime.probe", "device_kind")  # 'cpu' or 'gpu:<name>'
PROFILE = EngineFunction("jupyter_dl.runtime.probe", "profile")  # a cell's fit timed at a few batch sizes
REACH = EngineFunction("jupyter_dl.runtime.reach", "probe")  # which kernel addresses this engine reaches
RANGE_TEST = EngineFunction("jupyter_dl.runtime.lr_range", "range_test")  # LR range test (also run in the kernel)
TF_ADDRESS = EngineFunction("jupyter_dl.backends.tf", "address")  # this engine's collective server, kept or fresh
