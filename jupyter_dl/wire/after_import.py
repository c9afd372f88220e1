"""Run a patch once a module has loaded, without importing it first (`import jupyter_dl` must not pull in TensorFlow):
now if it is loaded, else right after its import, through a one-shot meta-path finder."""

import importlib.util
import sys


def after_import(module_name: str, action) -> None:
    """`action(module)` now if `module_name` is loaded, else once it is (once per module and action)."""
    module = sys.modules.get(module_name)
    if module is not None:
        action(module)
    elif not any(isinstance(f, _AfterImport) and f.key == (module_name, action) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(module_name, action))


class _AfterImport:
    def __init__(self, module_name, action):
        self.key = (module_name, action)

    def find_spec(self, fullname, path=None, target=None):
        module_name, action = self.key
        if fullname != module_name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module):
            original_exec(module)
            action(module)

        spec.loader.exec_module = exec_module
        return spec
