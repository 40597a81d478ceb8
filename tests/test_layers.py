"""The library's layers (docs/layout.md): a module imports only from its own layer or the ones
below it, and no modules import each other in a circle. Read from the source with ``ast``
(imports inside functions included), so a late import cannot hide an upward one."""

import ast
from pathlib import Path

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
}


def _module(path: Path) -> str:
    parts = path.relative_to(LIB).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """perflab module -> the perflab modules it imports."""
    graph = {}
    for path in sorted((LIB / "perflab").rglob("*.py")):
        module = _module(path)
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found.update(n for n in names if n == "perflab" or n.startswith("perflab."))
        graph[module] = found - {module}
    return graph


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
