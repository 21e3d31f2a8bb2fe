"""Dependencies between tflabench's modules: no import circles, and analysis never imports bench.

Every ``import`` of a tflabench module counts, also those inside functions (a lazy import is still a
dependency).
"""

import ast
import subprocess
import sys
from pathlib import Path

import tflabench

PACKAGE_ROOT = Path(tflabench.__file__).parent

def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE_ROOT.rglob("*.py")}


def _imported_modules(path: Path) -> set[str]:
    """The tflabench modules that ``path`` imports (``from package import module`` names the module, not
    the package)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                imported.add(submodule if submodule in MODULES else node.module)
    return {name for name in imported if name in MODULES and name.startswith("tflabench.")}


def _import_graph() -> dict[str, set[str]]:
    """module -> the tflabench modules it imports (a package's ``__init__`` is the package's name)."""
    return {name: _imported_modules(path) for name, path in MODULES.items()}


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = lowlink[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                lowlink[node] = min(lowlink[node], lowlink[successor])
            elif successor in on_stack:
                lowlink[node] = min(lowlink[node], index[successor])
        if lowlink[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_graph_sees_lazy_imports():
    graph = _import_graph()
    assert "tflabench.bench.worker" in graph["tflabench.bench.groups"]
    assert "tflabench.core" in graph["tflabench.bench.registry"]


def _imports_ray(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "ray" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
            return True
    return False


def test_only_the_ray_engine_imports_ray():
    """ray is optional (extra ``cluster``): one module imports it, inside the functions that need it."""
    assert {name for name, path in MODULES.items() if _imports_ray(path)} == {"tflabench.bench.ray_engine"}


def test_no_import_circles():
    circles = list(_circles(_import_graph()))
    assert circles == []


def test_a_circle_is_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_analysis_does_not_import_bench():
    graph = _import_graph()
    offending = {module: sorted(name for name in imported if name.startswith("tflabench.bench"))
                 for module, imported in graph.items() if module.startswith("tflabench.analysis")}
    assert {module: names for module, names in offending.items() if names} == {}


def test_core_imports_no_tflabench_module():
    assert _import_graph()["tflabench.core"] == set()


def test_the_cost_models_need_no_torch():
    """The analysis commands start without torch: the families import it only for references and inputs."""
    script = ("import sys, tflabench.cli\n"
              "from tflabench.analysis.models import kernel_cost\n"
              "from tflabench.core import FAMILIES\n"
              "for name in FAMILIES:\n"
              "    kernel_cost(name, batch=1, seq_len=256, heads=2, head_dim_qk=64, head_dim_v=64)\n"
              "assert 'torch' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", script], check=True)
