"""Public names that load on first use (PEP 562), for a package's `__init__`.

    __getattr__, __dir__ = lazy_exports(__name__, {"Trainer": "rl_lab.trainer", ...}, __all__)

`package.Name` imports the module that defines it the first time it is read; a submodule read as
an attribute (`rl_lab.trainer` after `import rl_lab`) is imported too; any other name is an
AttributeError.  So importing the package costs nothing until something is used.
"""
from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, exports: dict[str, str], public: list[str]):
    """The module-level `__getattr__` and `__dir__` for `package` with these `exports`
    ({name: module that defines it})."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            namespace[name] = value
            return value
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__
