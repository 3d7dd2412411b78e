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


def _graph() -> dict[str, set[str]]:
    """Edges from each of our modules to the modules of ours it imports at load time."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges: set[str] = set()
        for module, names in _top_level_imports(path):
            if module.split(".")[0] not in PACKAGES:
                continue
            submodules = {f"{module}.{n}" for n in names} & MODULES.keys()
            edges |= submodules or {module}
        graph[name] = edges - {name}
    return graph


def _is_ancestor(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def test_no_import_cycles():
    """No module imports, directly or through others, a module that imports it back."""
    graph = _graph()
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
