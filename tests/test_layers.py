"""The library's layers (docs/layout.md): a module imports only from its own layer or the ones
below it, and no modules import each other in a circle. Four wings by reader besides, each a
folder: the implementations a student compares with import only torch, Triton (numpy, pandas)
and each other, with three helpers of the measuring core; the measuring core imports no
implementation and no experiment; nothing but a tool or a lesson module imports
a tool. One of each: one model builder, one kernel compiler, one default for rounds, one module
per name. Read from the source with ``ast`` (imports inside functions included), so a late
import cannot hide an upward one."""

import ast
import re
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib"
#: Layer of each top-level part of ``perflab``, from the ground up (docs/layout.md).
LAYERS = {
    "measure": 0,
    "settings": 0,
    "implementations": 1,
    "model": 2,
    "attention": 2,
    "decode": 2,
    "bench": 3,
    "profiling": 3,
    "memory": 3,
    "distributed": 4,
    "training": 4,
    "__main__": 5,
    "__init__": 5,
    "cs336": 5,
    "lessons": 5,
    "findings": 5,
    "plots": 5,
    "tools": 5,
}


#: The code a student writes and compares with, the folder ``lib/perflab/implementations/``:
#: the model, attention and FlashAttention in PyTorch and Triton, checkpointing, the fused loss
#: head, LayerNorm, the DDP variants, ZeRO, FSDP, the KV caches and decoding steps, int8 weights
#: (docs/layout.md).
IMPLEMENTATIONS = {"perflab.implementations"}  # the folder: everything below it
#: The names the workbook's specification promises a script (``perflab.model``,
#: ``perflab.attention``, ``perflab.decode``): faces that re-export implementations, held to the
#: implementations' rule.
IMPLEMENTATION_FACES = {"perflab.model", "perflab.attention", "perflab.decode"}
#: What an implementation may use beside torch, Triton and the others: the ranges it opens (the
#: annotated attention's lesson), and the kernel compiler with the GPUs' figures, which the
#: autotuner's pruner asks which tile configurations fit a GPU.
IMPLEMENTATION_HELPERS = {
    "perflab.measure.ranges",
    "perflab.measure.triton_compile",
    "perflab.measure.hardware",
}
#: Third-party packages an implementation may import (pandas for the tables of presets and
#: kernel configurations that they print).
IMPLEMENTATION_PACKAGES = {"torch", "triton", "numpy", "pandas"}
#: The measuring core, the folder ``lib/perflab/measure/``: the timer, the statistics and
#: ``Comparison``, the simulations of the intervals, sweeps, peaks, the timer cross-check, the
#: conclusions and tables, profiler capture, traces and their summaries, hotspots, nsys, memory
#: timelines, the results store with provenance (``paths``), devices, progress bars, named
#: ranges and the GPUs' figures. It times, compares, profiles and stores any callable's results.
MEASURING_CORE = {"perflab.measure"}  # the folder: everything below lib/perflab/measure/


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
    """The module that defines ``name`` (``perflab.measure.timer.time_fn`` -> its module)."""
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


#: The tools, the folder ``lib/perflab/tools/``: the command line, ``perflab check`` and its
#: adapters, check-results, the kernels compiled for GPU targets, the write-ups, the claims, the
#: handout map, the lease plan, the widgets, the smoke command and the finding rates; beside it
#: the two public faces, ``cs336`` (the course's adapter names) and ``__main__``. A tool may
#: import anything; nothing but another tool or a lesson module imports a tool, so that an
#: implementation, the core or an experiment runs without them.
TOOLS = {
    "perflab.tools",  # the folder: everything below lib/perflab/tools/
    "perflab.__main__",
    "perflab.cs336",
}


def _in(module: str, wing: set[str]) -> bool:
    return any(module == part or module.startswith(part + ".") for part in wing)


def tool_problems(graph: dict[str, set[str]]) -> list[str]:
    """A module other than a tool or a lesson module that imports a tool (its own imports).
    One sentence each."""
    known = set(graph)
    return [
        f"{module} imports the tool {target}"
        for module in sorted(graph)
        if not _in(module, TOOLS | {"perflab.lessons"}) and module != "perflab"
        for target in sorted({_defining(t, known) for t in graph[module]})
        if _in(target, TOOLS)
    ]


def test_no_implementation_core_or_experiment_imports_a_tool():
    assert tool_problems(_imports()) == []


def test_a_planted_import_of_a_tool_is_found():
    graph = {
        "perflab.memory.study": {
            "perflab.tools.adapters.loading",
            "perflab.implementations.model",
        },
        "perflab.lessons.nb04_memory": {"perflab.tools.widgets"},
        "perflab.tools.cli": {"perflab.tools.report"},
        "perflab.implementations.model": {"perflab.tools.check_results"},
        "perflab.tools.adapters.loading": set(),
        "perflab.tools.widgets": set(),
        "perflab.tools.report": set(),
        "perflab.tools.check_results": set(),
    }
    assert tool_problems(graph) == [
        "perflab.implementations.model imports the tool perflab.tools.check_results",
        "perflab.memory.study imports the tool perflab.tools.adapters.loading",
    ]


def wing_problems(graph: dict[str, set[str]], everything: dict[str, set[str]]) -> list[str]:
    """An implementation (or one of its helpers) that imports other perflab code than the
    implementations and their helpers, or a third-party package other than
    ``IMPLEMENTATION_PACKAGES``; a measuring-core module that imports outside the core (the
    package's face, ``import perflab`` for its version, aside). A module's own imports: importing
    one also runs its packages' ``__init__``. One sentence each."""
    known = set(graph)
    problems = []
    for module in sorted(m for m in known if _is_implementation(m)):
        wrong = {
            target
            for target in {_defining(t, known) for t in graph[module]}
            if not _is_implementation(target)
        }
        third = {n.split(".")[0] for n in everything[module] if not _is_perflab(n)}
        third -= set(sys.stdlib_module_names) | {"__future__"} | IMPLEMENTATION_PACKAGES
        problems += [f"{module} (an implementation) imports {t}" for t in sorted(wrong | third)]
    for module in sorted(m for m in known if _in(m, MEASURING_CORE)):
        targets = {_defining(t, known) for t in graph[module]} - {"perflab"}
        wrong = {t for t in targets if not _in(t, MEASURING_CORE)}
        problems += [f"{module} (measuring core) imports {t}" for t in sorted(wrong)]
    return problems


def _is_implementation(module: str) -> bool:
    """An implementation, one of the helpers it may use, or a face of them."""
    return _in(module, IMPLEMENTATIONS) or module in IMPLEMENTATION_HELPERS | IMPLEMENTATION_FACES


def _is_tool(module: str) -> bool:
    return any(module == tool or module.startswith(tool + ".") for tool in TOOLS)


def _lessons_using(module: str, graph: dict[str, set[str]], seen: frozenset = frozenset()) -> set:
    """The notebooks (lesson packages) whose code uses ``module``: a lesson's own modules, and a
    findings or plots module through the lessons that import it; None for any other user (a
    topic package's module, shared). Tools do not count: they may import anything."""
    users: set = set()
    for user in sorted(u for u, targets in graph.items() if module in targets and u != module):
        if _is_tool(user) or user in seen:
            continue
        if user.startswith("perflab.lessons.") and user.count(".") >= 2:
            users.add(user.split(".")[2])
        elif user.startswith(("perflab.findings.", "perflab.plots.")):
            users |= _lessons_using(user, graph, seen | {module}) or {None}
        else:
            users.add(None)
    return users


def misplaced_experiments(graph: dict[str, set[str]]) -> list[str]:
    """Each module of experiments or sentences (in no wing, outside ``lessons`` and ``plots``)
    that one notebook's code alone uses: it belongs in that notebook's lesson package
    (``perflab.lessons.nbNN_name.<module>``), beside the front door that shows it. The figures
    stay in ``plots``, one module per topic."""
    problems = []
    for module in sorted(graph):
        if (
            _is_implementation(module)
            or _in(module, MEASURING_CORE | TOOLS)
            or module.count(".") < 2  # perflab itself and the top-level packages' faces
            and module.rpartition(".")[2] in PACKAGES
            or module.startswith(("perflab.lessons", "perflab.plots"))
        ):
            continue
        users = _lessons_using(module, graph)
        if len(users) == 1 and None not in users:
            problems.append(f"{module} is used by {users.pop()} alone: move it into that lesson")
    return problems


#: The library's packages (their ``__init__`` is the package's face, not a module of its own).
PACKAGES = {"perflab", "attention", "bench", "decode", "distributed", "implementations",
            "measure", "memory", "profiling", "training", "tools", "findings", "plots",
            "lessons"}  # fmt: skip


def test_each_notebooks_own_experiments_live_in_its_lesson_package():
    assert misplaced_experiments(_imports(everything=True)) == []


def test_a_planted_experiment_of_one_notebook_outside_its_lesson_is_found():
    graph = {
        "perflab.memory": set(),  # a package's face, imported by one lesson: not an experiment
        "perflab.lessons.nb04_memory": {
            "perflab.memory",
            "perflab.memory.study",
            "perflab.memory.shared",
            "perflab.findings.memory",
            "perflab.findings.shared",
        },
        "perflab.lessons.nb09_training_step": {"perflab.memory.shared", "perflab.findings.shared"},
        "perflab.findings.memory": {"perflab.memory.sentences_of"},
        "perflab.findings.shared": set(),
        "perflab.plots.memory": set(),
        "perflab.lessons.nb04_memory.at_scale": {"perflab.plots.memory"},
        "perflab.memory.study": set(),
        "perflab.memory.shared": set(),
        "perflab.memory.sentences_of": set(),
        "perflab.memory.for_the_cli": set(),
        "perflab.tools.cli": {"perflab.memory.for_the_cli", "perflab.memory.study"},
    }
    assert misplaced_experiments(graph) == [
        "perflab.findings.memory is used by nb04_memory alone: move it into that lesson",
        "perflab.memory.sentences_of is used by nb04_memory alone: move it into that lesson",
        "perflab.memory.study is used by nb04_memory alone: move it into that lesson",
    ]


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


#: Inside the implementations, from the ground up: the building blocks (attention and its
#: kernels, the parallel strategies, the loss head, LayerNorm, rotary, checkpointing) know no
#: model; the model is built from them; decoding runs the model (docs/layout.md).
IMPLEMENTATION_LAYERS = {
    "attention": 0,
    "checkpointing": 0,
    "ddp": 0,
    "fsdp": 0,
    "fsdp_shards": 0,
    "fused_cross_entropy": 0,
    "layer_norm": 0,
    "rotary": 0,
    "sharded_optimizer": 0,
    "model_config": 1,
    "model_loading": 1,
    "model": 1,
    "decode": 2,
}


def _implementation_layer(module: str) -> int | None:
    """The layer of an implementation inside its wing (None for the folder's own face)."""
    parts = module.split(".")
    if parts[:2] != ["perflab", "implementations"] or len(parts) == 2:
        return None
    assert parts[2] in IMPLEMENTATION_LAYERS, (
        f"{module} is in no implementations layer: add {parts[2]!r} to IMPLEMENTATION_LAYERS "
        "and docs/layout.md"
    )
    return IMPLEMENTATION_LAYERS[parts[2]]


def upward_implementation_imports(graph: dict[str, set[str]]) -> list[str]:
    """An implementation importing one of a higher layer inside the wing. One line each."""
    found = []
    for module, targets in sorted(graph.items()):
        own = _implementation_layer(module)
        for target in sorted(targets):
            theirs = _implementation_layer(target)
            if own is not None and theirs is not None and theirs > own:
                found.append(f"{module} (layer {own}) imports {target} (layer {theirs})")
    return found


def test_no_implementation_imports_from_a_higher_layer_of_its_wing():
    assert upward_implementation_imports(_imports()) == []


def test_the_implementations_folder_face_imports_nothing():
    """Its layer is None: an import through it would skip the order above."""
    assert _imports()["perflab.implementations"] == set()


def test_a_planted_upward_import_inside_the_implementations_is_found():
    graph = {
        "perflab.implementations.attention.flash_torch": {"perflab.implementations.model"},
        "perflab.implementations.model": {"perflab.implementations.decode.caches"},
        "perflab.implementations.decode.decoder": {"perflab.implementations.model"},
        "perflab.implementations.fsdp": {"perflab.implementations.ddp"},
    }
    assert upward_implementation_imports(graph) == [
        "perflab.implementations.attention.flash_torch (layer 0) imports "
        "perflab.implementations.model (layer 1)",
        "perflab.implementations.model (layer 1) imports "
        "perflab.implementations.decode.caches (layer 2)",
    ]
    with pytest.raises(AssertionError, match="add 'tokenizer' to IMPLEMENTATION_LAYERS"):
        upward_implementation_imports({"perflab.implementations.tokenizer": set()})


def _with_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with the packages whose ``__init__`` importing a module runs first: importing
    ``perflab.lessons.nb04_memory.step_memory`` from outside that lesson runs
    ``perflab.lessons.nb04_memory`` (its front door) before it. A module's own packages are
    already running, so they add nothing."""
    known = set(graph)
    added = {}
    for module, targets in graph.items():
        own = {module.rsplit(".", n)[0] for n in range(module.count(".") + 1)}
        inits = set()
        for target in map(lambda t: _defining(t, known), targets):
            parts = target.split(".")
            inits |= {".".join(parts[:n]) for n in range(1, len(parts))} - own
        added[module] = targets | (inits & known)
    return added


def import_circle(graph: dict[str, set[str]]) -> list[str]:
    """The first circle of imports in ``graph`` (package ``__init__`` runs included), or []."""
    graph = _with_package_inits(graph)
    known = set(graph)

    def resolve(target: str) -> str | None:  # "perflab.bench" is its __init__
        target = _defining(target, known)
        return target if target in known else None

    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str]:
        state[module] = 1
        for target in sorted(filter(None, map(resolve, graph[module]))):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                circle = visit(target, path + [target])
                if circle:
                    return circle
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state:
            circle = visit(module, [module])
            if circle:
                return circle
    return []


def test_no_import_circles():
    assert import_circle(_imports()) == []


def test_a_planted_circle_through_a_package_front_door_is_found():
    graph = {
        "perflab": set(),
        "perflab.findings": set(),
        "perflab.findings.memory": {"perflab.lessons.nb04_memory.step_memory"},
        "perflab.lessons": set(),
        "perflab.lessons.nb04_memory": {
            "perflab.findings.memory",
            "perflab.lessons.nb04_memory.step_memory",
        },
        "perflab.lessons.nb04_memory.step_memory": set(),
    }
    assert import_circle(graph) == [
        "perflab.findings.memory",
        "perflab.lessons.nb04_memory",
        "perflab.findings.memory",
    ]
    graph["perflab.findings.memory"] = set()  # the lesson imports its own modules: no circle
    assert import_circle(graph) == []


def test_the_scan_sees_imports():
    graph = _imports()
    assert "perflab.implementations.checkpointing" in graph["perflab.implementations.model"]
    assert "perflab.measure.timer" in graph["perflab.measure.peak"]


def test_the_wings_listed_exist():
    wings = IMPLEMENTATIONS | IMPLEMENTATION_HELPERS | MEASURING_CORE | TOOLS
    assert wings - set(_imports()) == set()


def test_implementations_import_only_each_other_and_the_core_no_experiment():
    assert wing_problems(_imports(), _imports(everything=True)) == []


@pytest.mark.parametrize(
    "module, source, problem",
    [
        ("implementations/model.py", "def f():\n    from perflab.measure.timer import time_fn\n",
         "perflab.implementations.model (an implementation) imports perflab.measure.timer"),
        ("implementations/model.py", "import scipy\nimport torch\nimport triton.language\n",
         "perflab.implementations.model (an implementation) imports scipy"),
        ("implementations/model.py", "from ..lessons.nb10_x.measurements import tokens\n",
         "perflab.implementations.model (an implementation) imports "
         "perflab.lessons.nb10_x.measurements"),
        ("implementations/attention/flash.py", "from perflab.measure.paths import save_table\n",
         "perflab.implementations.attention.flash (an implementation) imports "
         "perflab.measure.paths"),
        ("measure/ranges.py", "from perflab.measure.paths import save_table\n",
         "perflab.measure.ranges (an implementation) imports perflab.measure.paths"),
        ("model.py", "from perflab.measure.timer import time_fn\n",
         "perflab.model (an implementation) imports perflab.measure.timer"),
        ("measure/timer.py", "from perflab.implementations.model import TransformerLM\n",
         "perflab.measure.timer (measuring core) imports perflab.implementations.model"),
        ("measure/paths.py", "import perflab.lessons.nb10_x.measurements\n",
         "perflab.measure.paths (measuring core) imports perflab.lessons.nb10_x.measurements"),
        ("measure/paths.py", "from perflab.implementations import model\n",
         "perflab.measure.paths (measuring core) imports perflab.implementations.model"),
        ("measure/timer.py", "from ..lessons.nb10_x import measurements\n",
         "perflab.measure.timer (measuring core) imports perflab.lessons.nb10_x.measurements"),
        ("implementations/model.py", "from ..measure.timer import time_fn\n",
         "perflab.implementations.model (an implementation) imports perflab.measure.timer"),
    ],
)  # fmt: skip
def test_a_planted_wrong_import_is_found(tmp_path, module, source, problem):
    for name in ("__init__.py", "measure/__init__.py", "measure/timer.py", "measure/paths.py",
                 "measure/ranges.py", "implementations/__init__.py", "implementations/model.py",
                 "implementations/attention/__init__.py", "implementations/attention/flash.py",
                 "model.py", "lessons/__init__.py", "lessons/nb10_x/__init__.py",
                 "lessons/nb10_x/measurements.py"):  # fmt: skip
        (tmp_path / "perflab" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "perflab" / name).write_text("import torch\n")
    (tmp_path / "perflab" / module).write_text(source)
    assert wing_problems(_imports(tmp_path), _imports(tmp_path, everything=True)) == [problem]


#: The most lines an implementation's module may have: small enough to read in one sitting,
#: like picotron's files (issue #51).
IMPLEMENTATION_LINES = 300


def long_implementations(lib: Path = LIB) -> list[str]:
    """Each implementation module over ``IMPLEMENTATION_LINES`` lines, with its count."""
    long = []
    for path in sorted((lib / "perflab" / "implementations").rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > IMPLEMENTATION_LINES:
            long.append(f"{_module_in(path, lib)}: {lines} lines")
    return long


def test_every_implementation_is_at_most_300_lines():
    assert long_implementations() == []


def test_a_planted_long_implementation_is_found(tmp_path):
    folder = tmp_path / "perflab" / "implementations"
    (folder / "attention").mkdir(parents=True)
    (folder / "attention" / "__init__.py").write_text("x = 1\n" * IMPLEMENTATION_LINES)
    (folder / "model.py").write_text("x = 1\n" * (IMPLEMENTATION_LINES + 1))
    assert long_implementations(tmp_path) == [
        f"perflab.implementations.model: {IMPLEMENTATION_LINES + 1} lines"
    ]


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
        "from perflab.measure.timer import _clock, time_fn\nimport perflab.implementations.model\n"
    )
    assert notebook_imports(script) == (
        {"perflab.lessons.nb01_x", "perflab.measure.timer", "perflab.implementations.model"},
        {"_clock"},
    )


#: What a comparison function may return: one ``Comparison`` (labels and details inside it), a
#: list of them, or, where it also measures a table of its own, the table and then them.
COMPARISON_RETURNS = {
    "Comparison",
    "Comparison | None",
    "list[Comparison]",
    "tuple[pd.DataFrame, Comparison]",
    "tuple[pd.DataFrame, list[Comparison]]",
}
#: What a findings function (``perflab.findings``, a lesson's ``findings``) that concludes from
#: comparisons it times may return
#: instead: the sentences it concludes (``yours_against_naive``).
FINDINGS_RETURNS = {"list[Finding]"}
#: A comparison function's name: compare_*, *_comparison(s), *_against_*, *_vs_*.
COMPARISON_NAME = re.compile(r"^(compare_\w+|\w+_comparisons?|\w+_against_\w+|\w+_vs_\w+)$")


def _called(function: ast.FunctionDef) -> set[str]:
    """The names ``function`` calls (the last part of a dotted call)."""
    return {
        ast.unparse(node.func).split(".")[-1]
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
    }


def comparison_functions(trees: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """The library's functions that time a comparison, as (file, name): named like one
    (``COMPARISON_NAME``) and calling ``compare`` or ``paired_comparison``, or another of them
    (so that one built on others, like ``bf16_against_fp32``, is held to the same returns), or
    a private helper that does (``ddp_benchmark._paired``: the helper itself is not held, it
    only carries the timing). A call is known by its name alone, so calling any function of a
    comparison's name, or of a carrying helper's, counts."""
    named = {
        (name, node.name): _called(node)
        for name, tree in trees.items()
        if name.startswith("lib/")
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and (node.name.startswith("_") or COMPARISON_NAME.match(node.name))
    }
    timing = {"compare", "paired_comparison"}
    found: set[tuple[str, str]] = set()
    while True:
        names = timing | {function for _, function in found}
        more = {key for key, called in named.items() if called & names} - found
        if not more:
            return {key for key in found if not key[1].startswith("_")}
        found |= more


def one_of_each_problems(sources: dict[str, str]) -> list[str]:
    """Where the library makes a second of what it keeps one of (docs/layout.md): a
    ``TransformerLM(...)`` built outside ``model.build_model``, a Triton kernel compiled for a
    GPU outside ``measure.triton_compile``, a ``rounds`` parameter whose default is a number
    of its own instead of ``measure.stats.ROUNDS``, a comparison function (``comparison_functions``)
    that returns something other than ``COMPARISON_RETURNS`` (or, in ``perflab.findings``,
    ``FINDINGS_RETURNS``). ``sources``: a file's name -> its text."""
    problems = []
    trees = {name: ast.parse(text) for name, text in sources.items()}
    comparisons = comparison_functions(trees)
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.FunctionDef)
                and name.startswith("lib/")
                and (name, node.name) in comparisons
            ):
                returns = ast.unparse(node.returns) if node.returns else "nothing declared"
                allowed = COMPARISON_RETURNS | (
                    FINDINGS_RETURNS
                    if re.match(r"lib/perflab/(findings/|lessons/\w+/findings\.py)", name)
                    else set()
                )
                if returns not in allowed:
                    problems.append(f"{name}: {node.name} returns {returns}, not a Comparison")
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                builder = name.endswith("implementations/model.py")
                if called.endswith("TransformerLM") and not builder:
                    problems.append(f"{name} builds a TransformerLM itself (use build_model)")
                if called == "triton.compile" and not name.endswith("measure/triton_compile.py"):
                    problems.append(f"{name} compiles a kernel itself (use triton_compile)")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                spec = node.args
                positional = [*spec.posonlyargs, *spec.args][::-1]  # defaults fill from the end
                pairs = [
                    *zip(positional, spec.defaults[::-1], strict=False),
                    *zip(spec.kwonlyargs, spec.kw_defaults, strict=True),
                ]
                problems += [
                    f"{name}: {node.name}'s rounds default to {ast.unparse(default)} (use ROUNDS)"
                    for argument, default in pairs
                    if argument.arg == "rounds"
                    and isinstance(default, ast.Constant)
                    and default.value is not None
                ]
    return sorted(problems)


def test_one_model_builder_one_kernel_compiler_one_default_for_rounds_one_comparison_type():
    scripts = [*sorted((LIB / "perflab").rglob("*.py")), *sorted(NOTEBOOKS.glob("[0-9]*.py"))]
    sources = {str(path.relative_to(LIB.parent)): path.read_text() for path in scripts}
    assert one_of_each_problems(sources) == []


def test_a_planted_second_builder_compiler_rounds_default_or_comparison_shape_is_found():
    sources = {
        "lib/perflab/implementations/model.py": (
            "def build_model(c, rounds=ROUNDS):\n    TransformerLM(c)\n"
        ),
        "lib/perflab/decode/x.py": "m = TransformerLM(c)\ndef f(a, *, rounds=5): pass\n",
        "lib/perflab/bench/y.py": "def g(rounds=6, warmup=2): pass\ndef h(a, rounds=None): pass\n",
        "notebooks/09_x.py": "k = triton.compile(src)\nm = perflab.model.TransformerLM(c)\n",
        "lib/perflab/measure/triton_compile.py": "k = triton.compile(src)\n",
        "lib/perflab/decode/z.py": (
            "def compare_rows(a, b) -> dict:\n    return compare(a, b).as_row()\n"
            "def caches_vs_none(a) -> list[Comparison]:\n    return [compare(a, a)]\n"
            "def kv_against_mha(a):\n    return paired_comparison(a, a), a\n"
            "def compare_sizes(a) -> dict:\n    return {}\n"  # times nothing: not one
            "def sizes_vs_rows(a) -> dict:\n    return {'x': caches_vs_none(a)}\n"  # built on one
            "def _paired(a) -> dict:\n    return {'x': paired_comparison(a, a)}\n"  # a helper
            "def rows_comparison(a) -> dict:\n    return _paired(a)\n"  # carried by the helper
        ),
        "lib/perflab/findings/w.py": (
            "def yours_against_mine(a) -> list[Finding]:\n    return [kv_against_mha(a)]\n"
            "def yours_vs_theirs(a) -> dict:\n    return {'x': compare(a, a)}\n"
        ),
        "lib/perflab/decode/v.py": "def yours_against_it(a) -> list[Finding]:\n    compare(a)\n",
    }
    assert one_of_each_problems(sources) == [
        "lib/perflab/bench/y.py: g's rounds default to 6 (use ROUNDS)",
        "lib/perflab/decode/v.py: yours_against_it returns list[Finding], not a Comparison",
        "lib/perflab/decode/x.py builds a TransformerLM itself (use build_model)",
        "lib/perflab/decode/x.py: f's rounds default to 5 (use ROUNDS)",
        "lib/perflab/decode/z.py: compare_rows returns dict, not a Comparison",
        "lib/perflab/decode/z.py: kv_against_mha returns nothing declared, not a Comparison",
        "lib/perflab/decode/z.py: rows_comparison returns dict, not a Comparison",
        "lib/perflab/decode/z.py: sizes_vs_rows returns dict, not a Comparison",
        "lib/perflab/findings/w.py: yours_vs_theirs returns dict, not a Comparison",
        "notebooks/09_x.py builds a TransformerLM itself (use build_model)",
        "notebooks/09_x.py compiles a kernel itself (use triton_compile)",
    ]


def shared_names(modules: list[str]) -> dict[str, list[str]]:
    """Names given to more than one module or package of ``modules`` (dotted names, packages
    included), each with its holders. ``findings`` and ``plots`` hold one module per topic,
    named after the topic's package (``plots.memory`` draws what ``memory`` measured;
    ``findings.attention`` concludes from ``implementations.attention``): those
    pairs are one name for one topic, not a clash; nor is a lesson's own ``findings`` module,
    the sentences of that notebook alone."""
    holders: dict[str, list[str]] = {}
    for module in modules:
        holders.setdefault(module.rpartition(".")[2], []).append(module)
    shared = {}
    for name, found in sorted(holders.items()):
        topics = {f"perflab.findings.{name}", f"perflab.plots.{name}", f"perflab.{name}",
                  f"perflab.implementations.{name}"}  # fmt: skip
        lessons_own = name == "findings" and all(  # a lesson's own sentences
            f == "perflab.findings" or re.fullmatch(r"perflab\.lessons\.\w+\.findings", f)
            for f in found
        )
        if len(found) > 1 and not set(found) <= topics and not lessons_own:
            shared[name] = sorted(found)
    return shared


def test_no_two_modules_share_a_name():
    modules = [m for m in _imports() if m.rpartition(".")[2] not in ("__init__", "__main__")]
    assert shared_names([m for m in modules if m != "perflab"]) == {}


def test_a_planted_shared_name_is_found():
    modules = ["perflab.bench", "perflab.bench.steps", "perflab.decode", "perflab.decode.steps",
               "perflab.decode.bench", "perflab.memory", "perflab.findings.memory",
               "perflab.plots.memory", "perflab.plots.bench", "perflab.findings",
               "perflab.lessons.nb04_memory.findings", "perflab.lessons.nb10_decoding.findings",
               "perflab.lessons.nb04_memory.findings.x",
               "perflab.implementations.decode", "perflab.plots.decode",  # one topic: allowed
               "perflab.implementations.steps", "perflab.decode.x"]  # fmt: skip
    assert shared_names(modules) == {
        "bench": ["perflab.bench", "perflab.decode.bench", "perflab.plots.bench"],
        "steps": ["perflab.bench.steps", "perflab.decode.steps", "perflab.implementations.steps"],
        "x": ["perflab.decode.x", "perflab.lessons.nb04_memory.findings.x"],
    }
