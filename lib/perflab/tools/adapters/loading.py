"""Import a CS336 ``adapters`` module from a file path or a dotted module name, and call its
functions, telling "not provided" (missing, or raising ``NotImplementedError`` as the course's
template does) from "failed"."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
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


#: The adapters of each year's ``tests/adapters.py`` (both years: FlashAttention and the
#: sharded optimizer).
YEARS = {
    "2026": (
        "get_flashattention_autograd_function_pytorch",
        "get_flashattention_autograd_function_triton",
        "get_ddp",
        "ddp_on_after_backward",
        "get_fsdp",
        "fsdp_on_after_backward",
        "fsdp_gather_full_params",
        "get_sharded_optimizer",
    ),
    "2025": (
        "get_flashattention_autograd_function_pytorch",
        "get_flashattention_autograd_function_triton",
        "get_ddp_individual_parameters",
        "ddp_individual_parameters_on_after_backward",
        "get_ddp_bucketed",
        "ddp_bucketed_on_after_backward",
        "ddp_bucketed_on_train_batch_start",
        "get_sharded_optimizer",
    ),
}
#: Names only one year's file defines: they tell which year a file is.
_ONLY = {
    year: set(names) - set().union(*(set(n) for y, n in YEARS.items() if y != year))
    for year, names in YEARS.items()
}


class AdapterLoadError(RuntimeError):
    """The adapters could not be imported; the message is one line naming the file."""


class NotProvided(Exception):
    """An adapter the module does not provide (absent, or raises ``NotImplementedError``)."""


def load_adapters(spec: str) -> ModuleType:
    """The module ``spec`` names: a ``.py`` path or a dotted module name. A path in a package
    (``tests/adapters.py`` with ``tests/__init__.py``) imports as ``tests.adapters``, its
    folder's parent (the repository root) on ``sys.path``, so relative imports work; a path
    outside a package imports by its file name, its folder on ``sys.path``.

    Loaded again in the same process after the student edited the adapters file or a module
    it imported from their code, it imports that code anew: the results are named
    by the file's current hash, so they must come from the current code."""
    module = _load(spec)
    if _edited_since_import(module):
        _forget(module)
        module = _load(spec)
    _remember(module)
    return module


#: Folders whose modules are never the student's: perflab itself and the environment.
_NOT_STUDENT = (Path(__file__).resolve().parents[2], Path(sys.prefix), Path(sys.base_prefix))
#: The SHA-1 of each student source file as it was imported.
_IMPORTED: dict[Path, str] = {}


def _student_modules(module: ModuleType) -> dict[str, Path]:
    """Imported modules (by name) whose files lie under the student's folder of ``module``
    (``student_root``), but not in perflab or an environment's packages."""
    root = student_root(module)
    if root is None:
        return {}
    found = {}
    for name, imported in list(sys.modules.items()):
        file = file_of(imported)
        if (
            file is not None
            and file.is_relative_to(root)
            and not any(file.is_relative_to(folder) for folder in _NOT_STUDENT)
            and not {"site-packages", "dist-packages"} & set(file.parts)
        ):
            found[name] = file
    return found


def _code_digest(module: ModuleType) -> str:
    """The first 8 hex digits of a SHA-1 over the adapters file and the student's modules it
    imported (``_student_modules``: imported when the adapters were; a module an adapter
    imports only when called is not counted), each by its path under the student's folder and
    its contents; "nofile" for a module without a file."""
    file = file_of(module)
    if file is None:
        return "nofile"
    root = student_root(module)
    files = sorted({file, *_student_modules(module).values()})
    sha = hashlib.sha1()
    for path in files:
        shown = path.relative_to(root) if root is not None and path.is_relative_to(root) else path
        sha.update(f"{shown.as_posix()}\0{_digest(path)}\0".encode())
    return sha.hexdigest()[:8]


def _digest(file: Path) -> str | None:
    try:
        return hashlib.sha1(file.read_bytes()).hexdigest()
    except OSError:
        return None


def _edited_since_import(module: ModuleType) -> bool:
    return any(
        file in _IMPORTED and _IMPORTED[file] != _digest(file)
        for file in _student_modules(module).values()
    )


def _forget(module: ModuleType) -> None:
    """Drop the student's modules from ``sys.modules`` (and the bytecode of edited files, which
    Python would reuse for an edit of the same size in the same second) so they import anew."""
    for name, file in _student_modules(module).items():
        if _IMPORTED.get(file) != _digest(file):
            Path(importlib.util.cache_from_source(str(file))).unlink(missing_ok=True)
        _IMPORTED.pop(file, None)
        del sys.modules[name]
    importlib.invalidate_caches()


def _remember(module: ModuleType) -> None:
    for file in _student_modules(module).values():
        _IMPORTED.setdefault(file, _digest(file))


def _load(spec: str) -> ModuleType:
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
    in_package = (folder / "__init__.py").is_file()
    top = folder.name if in_package else path.stem  # the name that goes into sys.modules
    root = folder.parent if in_package else folder
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    known = sys.modules.get(top)
    expected = folder / "__init__.py" if in_package else path
    if known is not None and file_of(known) != expected:
        # Another module or package of that name is imported already (a "tests" package of
        # some other project, say): import this one under a private name, its package with
        # it so that relative imports still work.
        top = "_perflab_adapters_" + hashlib.sha1(str(expected).encode()).hexdigest()[:12]
        if top not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                top, expected, submodule_search_locations=[str(folder)] if in_package else None
            )
            module = importlib.util.module_from_spec(spec)
            sys.modules[top] = module
            try:
                spec.loader.exec_module(module)
            except Exception as error:
                del sys.modules[top]
                raise AdapterLoadError(f"cannot import {path}: {_one_line(error)}") from None
    name = f"{top}.{path.stem}" if in_package else top
    try:
        return importlib.import_module(name)
    except Exception as error:
        raise AdapterLoadError(f"cannot import {path}: {_one_line(error)}") from None


def file_of(module: ModuleType) -> Path | None:
    """The resolved path of the file ``module`` was loaded from; None for one without a file."""
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


def years_of(module: ModuleType) -> list[str]:
    """The handout years whose adapters ``module`` defines (by the names only one year has):
    one year for a course checkout, both for ``perflab.cs336``; both when it tells neither."""
    found = [
        year
        for year, names in _ONLY.items()
        if any(callable(getattr(module, name, None)) for name in names)
    ]
    return sorted(found, reverse=True) or sorted(YEARS, reverse=True)


def year_adapters(module: ModuleType) -> set[str]:
    """The adapter names of the years ``module`` is (``years_of``)."""
    return set().union(*(set(YEARS[year]) for year in years_of(module)))


def student_root(module: ModuleType) -> Path | None:
    """The folder of the code behind ``module``: a course checkout's root for its
    ``tests/adapters.py`` (the package's parent), else the module file's folder."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    folder = Path(file).resolve().parent
    return folder.parent if (folder / "__init__.py").is_file() else folder


def results_name(spec: str) -> str:
    """A folder name for results measured with the adapters ``spec``, apart for every
    implementation and version: ``yours-`` with the repository's folder name (a course
    checkout's, for its ``tests/adapters.py``) or the module's name, and the first 8 hex
    digits of a SHA-1 over the adapters file and every module it imported from the student's
    folder (``_code_digest``), e.g. ``yours-assignment2-systems-3f2a9c1d``: an edit of the
    student's kernel names a new folder, not only an edit of the adapters. A model
    class, ``package.module:Class`` (notebook 01), is named by the spec and its module's file:
    ``yours-course-model-courseshapedlm-1b2c3d4e``."""
    if re.fullmatch(r"[\w.]+:[A-Za-z_]\w*", spec) and not Path(spec).exists():  # not C:\...
        from perflab.implementations.model_loading import (
            load_model_class,  # one line if it does not import
        )

        file = getattr(sys.modules[load_model_class(spec).__module__], "__file__", None)
        digest = hashlib.sha1(Path(file).read_bytes()).hexdigest()[:8] if file else "nofile"
        return f"yours-{re.sub(r'[^a-z0-9]+', '-', spec.lower()).strip('-')}-{digest}"
    module = load_adapters(spec)
    root = student_root(module)
    name = root.name if root is not None and spec.endswith(".py") else spec.removesuffix(".py")
    digest = _code_digest(module)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "adapters"
    return f"yours-{slug}-{digest}"
