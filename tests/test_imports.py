"""The package's import structure: cheap entry points, no cycles, no borrowed private names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tb_monitor", "tb_plugin")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _module_name(path): path
    for package in PACKAGES
    for path in sorted((ROOT / package).rglob("*.py"))
}
#: The optional C accelerators, modules too.
EXTENSIONS = {_module_name(path) for package in PACKAGES for path in (ROOT / package).rglob("*.c")}

#: The layers, bottom up: a unit (a subpackage of tb_monitor, one of its top-level modules, the
#: plugin) imports only units of lower layers, inside functions and for type checking too, so
#: the order a reader sees in the tree is the order the code runs in.
LAYERS: tuple[tuple[str, ...], ...] = (
    # what our guards on the user's thread let through
    ("_guard",),
    # foundations: settings, exit hooks, events, tensors as values, progress lines
    ("_env", "_shutdown", "_event", "_tensors", "_accumulator", "_patience", "progress"),
    # the data contract, value checks, the Stat's accumulators and timer
    ("contract", "_checks", "_accumulators", "_stat_timer"),
    # the compatible APIs and where bytes live
    ("_stat", "elastic", "logdir", "timeline"),
    # what the reading side computes; what runs inside each rank
    ("analysis", "rank", "_wait_counter"),
    # where records go (sinks, torch's own registries) and what readers make of a logdir
    ("sinks", "torch_bridge", "export", "notebook", "tb_plugin"),
    # one call that wires it all (init), the SummaryWriter, synthetic jobs, imported dumps
    ("monitor", "summary", "synthetic", "fr_import"),
    # the public surface, helpers for tests, tb-monitor run's agent side
    ("tb_monitor", "testing", "launcher"),
    # framework adapters and the demo
    ("integrations", "demo"),
    # the command line
    ("cli",),
)


def _top_level_imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` imported when the module runs: not in functions or TYPE_CHECKING."""
    found: list[tuple[str, list[str]]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((alias.name, []) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((node.module, [alias.name for alias in node.names]))
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return found


def _every_import(path: Path, name: str) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in the module: at load time, inside functions and
    for type checking alike (relative imports resolved)."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = name.split(".")[
                    : len(name.split(".")) - node.level + (path.stem == "__init__")
                ]
                module = ".".join([*base, module] if module else base)
            found.append((module, [alias.name for alias in node.names]))
    return found


def _graph(imports=_top_level_imports) -> dict[str, set[str]]:
    """Edges from each of our modules to the modules of ours it imports (at load time, unless
    ``imports`` says otherwise)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges: set[str] = set()
        for module, names in (
            imports(path) if imports is _top_level_imports else imports(path, name)
        ):
            if module.split(".")[0] not in PACKAGES:
                continue
            submodules = {f"{module}.{n}" for n in names} & (MODULES.keys() | EXTENSIONS)
            edges |= submodules or {module}
        graph[name] = edges - {name}
    return graph


def _is_ancestor(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def _unit(module: str) -> str:
    """The unit ``LAYERS`` places a module in."""
    parts = module.split(".")
    if parts[0] == "tb_plugin" or module == "tb_monitor":
        return parts[0]
    return parts[1]


def test_every_unit_has_a_layer():
    """Each subpackage and top-level module of tb_monitor, and the plugin, sits in one layer."""
    placed = [unit for layer in LAYERS for unit in layer]
    units = {_unit(module) for module in MODULES.keys() | EXTENSIONS}
    assert sorted(units - set(placed)) == []
    assert len(placed) == len(set(placed))


def test_imports_between_units_run_downward():
    """No import from one unit to another runs up or sideways, lazy and type-only ones
    included (``LAYERS``)."""
    layer = {unit: n for n, units in enumerate(LAYERS) for unit in units}
    upward = sorted(
        f"{importer} -> {imported}"
        for importer, edges in _graph(_every_import).items()
        for imported in edges
        if _unit(importer) != _unit(imported)
        and layer.get(_unit(imported), 0) >= layer.get(_unit(importer), 0)
    )
    assert upward == []


@pytest.mark.parametrize("imports", ["at load time", "anywhere"])
def test_no_import_cycles(imports):
    """No module imports, directly or through others, a module that imports it back: at load
    time, nor inside functions or for type checking (a loop closed that way marks a piece in
    the wrong module)."""
    graph = _graph(_top_level_imports if imports == "at load time" else _every_import)
    state: dict[str, int] = {}  # 1 visiting, 2 done
    cycles: list[list[str]] = []

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            # A package's __init__ re-exporting its own submodules is not a cycle.
            if _is_ancestor(nxt, node) or _is_ancestor(node, nxt):
                continue
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif state.get(nxt) is None:
                walk(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    assert cycles == []


def _package_of(module: str) -> str:
    """The package a module belongs to (a package belongs to itself)."""
    if MODULES[module].name == "__init__.py":
        return module
    return module.rsplit(".", 1)[0]


def test_no_module_imports_private_names_of_another_package():
    """``from tb_monitor.x import _name`` happens only inside the package that owns ``x`` (its
    subpackages included: ``tb_monitor._shutdown`` serves all of tb_monitor)."""
    offenders = []
    for name in MODULES:
        for module, names in _top_level_imports(MODULES[name]):
            if module not in MODULES:
                continue
            owner, importer = _package_of(module), _package_of(name)
            if importer == owner or _is_ancestor(owner, importer):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                offenders.append(f"{name}: from {module} import {', '.join(private)}")
    assert offenders == []


def _loaded_after(statement: str) -> set[str]:
    code = (
        "import sys; before = set(sys.modules)\n"
        f"{statement}\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.parametrize("statement", ["import tb_monitor", "import tb_monitor.elastic.metrics"])
def test_cheap_entry_points_load_no_tensorboard_protos_torch_or_pandas(statement):
    """The two cheap entry points load no TensorBoard, protobuf, torch or pandas."""
    heavy = {"tensorboard", "google.protobuf", "torch", "pandas", "tensorboardX"}
    loaded = _loaded_after(statement)
    assert {
        m for m in loaded if m.split(".")[0] in heavy or m.startswith("google.protobuf")
    } == set()


def test_a_read_helper_loads_no_tensorflow_stub_or_cloud_sdk():
    """A read helper process starts without TensorBoard's TensorFlow stub (and the boto3 it
    pulls in): ~0.7 s of CPU each at a cold TensorBoard's busiest moment."""
    loaded = _loaded_after("import tb_plugin.read_workers, tb_plugin.event_files")
    heavy = {m for m in loaded if m.startswith("tensorboard.compat.tensorflow_stub")}
    assert heavy | {m for m in loaded if m.split(".")[0] in ("boto3", "botocore")} == set()


def test_a_stat_and_an_event_load_only_the_monitor_surface():
    """Using Stat and log_event pulls in only the torch.monitor surface of tb_monitor."""
    loaded = _loaded_after(
        "import tb_monitor; tb_monitor.Stat; tb_monitor.log_event; tb_monitor.Aggregation"
    )
    ours = {m for m in loaded if m.split(".")[0] == "tb_monitor"}
    assert ours <= {
        "tb_monitor",
        "tb_monitor._stat",
        "tb_monitor._stat_timer",
        "tb_monitor._accumulators",
        "tb_monitor._env",
        "tb_monitor._event",
        "tb_monitor._guard",
        "tb_monitor._shutdown",
        "tb_monitor._tensors",
        "tb_monitor._accumulator",
        "tb_monitor.contract",
        "tb_monitor.contract._binary",
        "tb_monitor.contract._columnar_index",
        "tb_monitor.contract.batches",
        "tb_monitor.contract.columnar",
        "tb_monitor.contract.ranks",
        "tb_monitor.contract.records",
        "tb_monitor.contract.runs",
        "tb_monitor.contract.tags",
    }
