"""Import a CS336 ``adapters`` module from a file path or a dotted module name, and call its
functions, telling "not provided" (missing, or raising ``NotImplementedError`` as the course's
template does) from "failed"."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: Every adapter name of the 2026 and 2025 handouts (``perflab.cs336`` implements them all).
ADAPTER_NAMES = (
    "get_flashattention_autograd_function_pytorch",
    "get_flashattention_autograd_function_triton",
    "get_ddp",
    "ddp_on_after_backward",
    "get_ddp_individual_parameters",
    "ddp_individual_parameters_on_after_backward",
    "get_ddp_bucketed",
    "ddp_bucketed_on_after_backward",
    "ddp_bucketed_on_train_batch_start",
    "get_fsdp",
    "fsdp_on_after_backward",
    "fsdp_gather_full_params",
    "get_sharded_optimizer",
)


class AdapterLoadError(RuntimeError):
    """The adapters could not be imported; the message is one line naming the file."""


class NotProvided(Exception):
    """An adapter the module does not provide (absent, or raises ``NotImplementedError``)."""


def load_adapters(spec: str) -> ModuleType:
    """The module ``spec`` names: a ``.py`` path (its folder's parent goes on ``sys.path`` when
    the folder is a package, so ``tests/adapters.py`` imports as ``tests.adapters`` with its
    relative imports, and the repository root is importable) or a dotted module name."""
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        return _load_path(Path(spec))
    try:
        return importlib.import_module(spec)
    except Exception as error:
        raise AdapterLoadError(
            f"cannot import adapters module {spec!r}: {_one_line(error)}"
        ) from None


def _load_path(path: Path) -> ModuleType:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise AdapterLoadError(f"no adapters file at {path} (give a .py file or a dotted module)")
    folder = path.parent
    if (folder / "__init__.py").is_file():
        root, name = folder.parent, f"{folder.name}.{path.stem}"
    else:
        root, name = folder, path.stem
    for entry in (str(root), str(folder)):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    package = sys.modules.get(name.rpartition(".")[0]) if "." in name else None
    known = sys.modules.get(name)
    taken = (known is not None and _file_of(known) != path) or (
        package is not None and _file_of(package) != folder / "__init__.py"
    )
    if taken:
        # Another module or package of that name is imported already (perflab's own tests/,
        # say): load this file under a private name instead.
        name = f"_perflab_adapters_{abs(hash(str(path)))}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            raise AdapterLoadError(f"cannot import {path}: {_one_line(error)}") from None
        return module
    try:
        return importlib.import_module(name)
    except Exception as error:
        raise AdapterLoadError(f"cannot import {path}: {_one_line(error)}") from None


def _file_of(module: ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return text.splitlines()[0] if text else type(error).__name__


def call(module: ModuleType, name: str, *args, **kwargs):
    """``module.name(*args, **kwargs)``; ``NotProvided`` if it is absent or not implemented."""
    function = getattr(module, name, None)
    if function is None:
        raise NotProvided(f"{name} is not defined")
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise NotProvided(f"{name} raises NotImplementedError") from None


def provided_names(module: ModuleType) -> list[str]:
    """The adapter names ``module`` defines (whether they are implemented shows when called)."""
    return [name for name in ADAPTER_NAMES if callable(getattr(module, name, None))]
