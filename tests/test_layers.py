"""The library's layers (docs/layout.md): a module imports only from its own layer or the ones
below it, and no modules import each other in a circle. Two wings by reader besides: the
implementations a student compares with import only torch, Triton and each other, and the
measuring core imports no implementation and no experiment. Read from the source with ``ast``
(imports inside functions included), so a late import cannot hide an upward one."""

import ast
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib"
#: Layer of each top-level part of ``perflab``, from the ground up (docs/layout.md).
LAYERS = {
    "device": 0,
    "ranges": 0,
    "checkpointing": 0,
    "paths": 0,
    "settings": 0,
    "progress": 0,
    "handout": 0,
    "hardware": 0,
    "lease": 0,
    "attention": 1,
    "precision": 1,
    "fused_cross_entropy": 1,
    "model": 2,
    "bench": 3,
    "profiling": 3,
    "memory": 3,
    "report": 3,
    "writeup": 3,
    "claims": 3,
    "layer_norm": 3,
    "loss_scaling": 3,
    "distributed": 4,
    "training": 4,
    "decode": 4,
    "cli": 5,
    "__main__": 5,
    "__init__": 5,
    "widgets": 5,
    "adapters": 5,
    "cs336": 5,
    "smoke": 5,
    "finding_rates": 5,
    "lessons": 5,
}


#: The code a student writes and compares with: the model, attention and FlashAttention in
#: PyTorch and Triton, checkpointing, the fused loss head, LayerNorm, the DDP variants, ZeRO,
#: FSDP, the KV caches and decoding steps, int8 weights (docs/layout.md).
IMPLEMENTATIONS = {
    "perflab.model",
    "perflab.attention",
    "perflab.attention.reference",
    "perflab.attention.annotated",
    "perflab.attention.flash_torch",
    "perflab.attention.flash_triton",
    "perflab.attention.flash_triton_plain",
    "perflab.attention.flash_configs",
    "perflab.attention.weighted_sum",
    "perflab.checkpointing",
    "perflab.fused_cross_entropy",
    "perflab.layer_norm",
    "perflab.distributed.ddp",
    "perflab.distributed.fsdp",
    "perflab.distributed.sharded_optimizer",
    "perflab.decode.caches",
    "perflab.decode.steps",
    "perflab.decode.quantize",
}
#: What an implementation may use beside torch, Triton and the others: the ranges it opens (the
#: annotated attention's lesson), and the kernel compiler with the GPUs' figures, which the
#: autotuner's pruner asks which tile configurations fit a GPU.
IMPLEMENTATION_HELPERS = {"perflab.ranges", "perflab.attention.triton_compile", "perflab.hardware"}
#: Third-party packages an implementation may import (pandas for the tables of presets and
#: kernel configurations that they print).
IMPLEMENTATION_PACKAGES = {"torch", "triton", "numpy", "pandas"}
#: The measuring core: it times, compares, profiles and stores any callable's results.
MEASURING_CORE = {
    "perflab.bench.timer",
    "perflab.bench.stats",
    "perflab.bench.comparison",
    "perflab.bench.simulate",
    "perflab.bench.sweep",
    "perflab.bench.peak",
    "perflab.bench.crosscheck",
    "perflab.bench.conclusions",
    "perflab.bench.tables",
    "perflab.profiling.capture",
    "perflab.profiling.trace",
    "perflab.profiling.summary",
    "perflab.profiling.hotspots",
    "perflab.profiling.nsys",
    "perflab.memory.timeline",
    "perflab.paths",
    "perflab.device",
    "perflab.progress",
    "perflab.ranges",
    "perflab.hardware",
}


def _module(path: Path) -> str:
    return _module_in(path, LIB)


def _imports(lib: Path = LIB, everything: bool = False) -> dict[str, set[str]]:
    """perflab module -> the perflab modules it imports (every module it imports when
    ``everything``: third-party and the standard library's too). Relative imports are resolved
    against the module's package; ``from package import name`` counts the submodule ``name``
    where there is one, else the package."""
    paths = sorted((lib / "perflab").rglob("*.py"))
    known = {_module_in(path, lib) for path in paths}
    graph = {}
    for path in paths:
        module = _module_in(path, lib)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x, from ..model import y
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found.update(n for n in names if everything or _is_perflab(n))
        graph[module] = found - {module}
    return graph


def _is_perflab(name: str) -> bool:
    return name == "perflab" or name.startswith("perflab.")


def _module_in(path: Path, lib: Path) -> str:
    parts = path.relative_to(lib).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _defining(name: str, known: set[str]) -> str:
    """The module that defines ``name`` (``perflab.bench.timer.time_fn`` -> its module)."""
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


def wing_problems(graph: dict[str, set[str]], everything: dict[str, set[str]]) -> list[str]:
    """An implementation (or one of its helpers) that imports other perflab code than the
    implementations and their helpers, or a third-party package other than
    ``IMPLEMENTATION_PACKAGES``; a measuring-core module that imports outside the core (the
    package's face, ``import perflab`` for its version, aside). A module's own imports: importing
    one also runs its packages' ``__init__``. One sentence each."""
    known = set(graph)
    problems = []
    for module in sorted((IMPLEMENTATIONS | IMPLEMENTATION_HELPERS) & known):
        wrong = (
            {_defining(t, known) for t in graph[module]} - IMPLEMENTATIONS - IMPLEMENTATION_HELPERS
        )
        third = {n.split(".")[0] for n in everything[module] if not _is_perflab(n)}
        third -= set(sys.stdlib_module_names) | {"__future__"} | IMPLEMENTATION_PACKAGES
        problems += [f"{module} (an implementation) imports {t}" for t in sorted(wrong | third)]
    for module in sorted(MEASURING_CORE & known):
        wrong = {_defining(t, known) for t in graph[module]} - MEASURING_CORE - {"perflab"}
        problems += [f"{module} (measuring core) imports {t}" for t in sorted(wrong)]
    return problems


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    assert part in LAYERS, f"{module} is in no layer: add {part!r} to LAYERS and docs/layout.md"
    return LAYERS[part]


def test_no_module_imports_from_a_higher_layer():
    upward = [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in _imports().items()
        for target in targets
        if target != "perflab" and _layer(target) > _layer(module)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_circles():
    graph = _imports()
    known = set(graph)

    def resolve(target: str) -> str | None:  # "perflab.bench" is its __init__
        target = _defining(target, known)
        return target if target in known else None

    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(filter(None, map(resolve, graph[module]))):
            if state.get(target) == 1:
                circle = path[path.index(target) :] + [target]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_scan_sees_imports():
    graph = _imports()
    assert "perflab.checkpointing" in graph["perflab.model"]
    assert "perflab.bench.timer" in graph["perflab.bench.peak"]


def test_the_wings_listed_exist():
    assert (IMPLEMENTATIONS | IMPLEMENTATION_HELPERS | MEASURING_CORE) - set(_imports()) == set()


def test_implementations_import_only_each_other_and_the_core_no_experiment():
    assert wing_problems(_imports(), _imports(everything=True)) == []


@pytest.mark.parametrize(
    "module, source, problem",
    [
        ("model.py", "def f():\n    from perflab.bench.timer import time_fn\n",
         "perflab.model (an implementation) imports perflab.bench.timer"),
        ("model.py", "import scipy\nimport torch\nimport triton.language\n",
         "perflab.model (an implementation) imports scipy"),
        ("bench/timer.py", "from perflab.model import TransformerLM\n",
         "perflab.bench.timer (measuring core) imports perflab.model"),
        ("paths.py", "import perflab.decode.bench\n",
         "perflab.paths (measuring core) imports perflab.decode.bench"),
        ("paths.py", "from perflab import model\n",
         "perflab.paths (measuring core) imports perflab.model"),
        ("bench/timer.py", "from ..decode import bench\n",
         "perflab.bench.timer (measuring core) imports perflab.decode.bench"),
        ("model.py", "from .bench.timer import time_fn\n",
         "perflab.model (an implementation) imports perflab.bench.timer"),
    ],
)  # fmt: skip
def test_a_planted_wrong_import_is_found(tmp_path, module, source, problem):
    for name in ("__init__.py", "bench/__init__.py", "bench/timer.py", "model.py", "paths.py",
                 "decode/__init__.py", "decode/bench.py"):  # fmt: skip
        (tmp_path / "perflab" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "perflab" / name).write_text("import torch\n")
    (tmp_path / "perflab" / module).write_text(source)
    assert wing_problems(_imports(tmp_path), _imports(tmp_path, everything=True)) == [problem]


NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def notebook_imports(path: Path) -> tuple[set[str], set[str]]:
    """The perflab modules a notebook's script imports, and the private names (a leading
    underscore) it imports from them."""
    modules, private = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and _is_perflab(node.module or ""):
            modules.add(node.module)
            private |= {a.name for a in node.names if a.name.startswith("_")}
        elif isinstance(node, ast.Import):
            modules |= {a.name for a in node.names if _is_perflab(a.name)}
    return modules, private


@pytest.mark.parametrize("notebook", sorted(p.name for p in NOTEBOOKS.glob("[0-9]*.py")))
def test_a_notebook_imports_its_lesson_module_at_most_four_perflab_modules_no_private_name(
    notebook,
):
    modules, private = notebook_imports(NOTEBOOKS / notebook)
    assert f"perflab.lessons.nb{Path(notebook).stem}" in modules
    assert len(modules) <= 4, sorted(modules)
    assert not private


def test_the_notebook_scan_sees_modules_and_private_names(tmp_path):
    script = tmp_path / "01_x.py"
    script.write_text(
        "import pandas as pd\nfrom perflab.lessons.nb01_x import a\n"
        "from perflab.bench.timer import _clock, time_fn\nimport perflab.model\n"
    )
    assert notebook_imports(script) == (
        {"perflab.lessons.nb01_x", "perflab.bench.timer", "perflab.model"},
        {"_clock"},
    )
