"""The package's import graph: no cycle, not even through imports inside functions, and layers that follow the data
path (io → capture → methods → maps/overlay → pipelines → commands/CLI).

The graph is read from the source with :mod:`ast`, so an import hidden in a function body or under
``if TYPE_CHECKING:`` counts as much as one at the top of a module: each ties the two modules together.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import vitroll

PACKAGE_ROOT = Path(vitroll.__file__).parent


@dataclass(frozen=True)
class ImportEdge:
    """``importer`` imports ``imported`` at ``line`` (both dotted module names; a package is its ``__init__``)."""

    importer: str
    imported: str
    line: int


def module_files(root: Path) -> dict[str, Path]:
    """Dotted name → source file of every module in the package at ``root`` (a package is named by its ``__init__``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module name of ``from <node.module> import …`` written in ``importer``."""
    if node.level == 0:
        return node.module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_edges(modules: dict[str, Path], top: str) -> list[ImportEdge]:
    """Every import of a module of ``top`` by another, at module level or inside any function or class."""
    edges = []
    for importer, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, importer, is_package)
                submodules = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in modules]
                names_only = len(submodules) < len(node.names)  # some names are attributes of ``source`` itself
                targets = submodules + ([source] if names_only else [])
            for target in targets:
                if target == top or target.startswith(top + "."):
                    edges.append(ImportEdge(importer, target, node.lineno))
    return edges


def find_cycle(edges: list[ImportEdge]) -> list[ImportEdge]:
    """One cycle of the directed graph as the edges along it (``[]`` when there is none), by depth-first search."""
    outgoing: dict[str, list[ImportEdge]] = {}
    for edge in edges:
        if edge.importer != edge.imported:
            outgoing.setdefault(edge.importer, []).append(edge)
    finished: set[str] = set()
    path: list[ImportEdge] = []
    on_path: dict[str, int] = {}

    def visit(module: str) -> list[ImportEdge]:
        on_path[module] = len(path)
        for edge in outgoing.get(module, []):
            if edge.imported in on_path:
                return path[on_path[edge.imported]:] + [edge]
            if edge.imported not in finished:
                path.append(edge)
                cycle = visit(edge.imported)
                if cycle:
                    return cycle
                path.pop()
        del on_path[module]
        finished.add(module)
        return []

    for start in sorted(outgoing):
        if start not in finished:
            cycle = visit(start)
            if cycle:
                return cycle
    return []


def describe(cycle: list[ImportEdge], modules: dict[str, Path]) -> str:
    """One line per edge of ``cycle``: who imports whom, and where."""
    return "\n".join(f"  {edge.importer} imports {edge.imported} "
                     f"({modules[edge.importer].relative_to(PACKAGE_ROOT.parent)}:{edge.line})" for edge in cycle)


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_package_has_no_import_cycle():
    modules = module_files(PACKAGE_ROOT)
    edges = import_edges(modules, "vitroll")
    assert len(edges) > 100, "the walk found too few imports to be reading the package"
    cycle = find_cycle(edges)
    assert not cycle, "import cycle (counting imports inside functions):\n" + describe(cycle, modules)


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg.sub import high\n    return high\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/high.py": "from ..low import f\n",
        "pkg/alone.py": "import pkg.low\n",
    })
    modules = module_files(package)
    cycle = find_cycle(import_edges(modules, "pkg"))
    assert [(edge.importer, edge.imported, edge.line) for edge in cycle] in (
        [("pkg.low", "pkg.sub.high", 2), ("pkg.sub.high", "pkg.low", 1)],
        [("pkg.sub.high", "pkg.low", 1), ("pkg.low", "pkg.sub.high", 2)],
    )


def test_a_name_imported_from_a_package_is_an_edge_to_its_init(tmp_path):
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "from pkg.part import thing\nVERSION = '1'\n",
        "pkg/part.py": "from pkg import VERSION\nthing = VERSION\n",
        "pkg/other.py": "from . import part\n",
    })
    modules = module_files(package)
    edges = {(edge.importer, edge.imported) for edge in import_edges(modules, "pkg")}
    assert edges == {("pkg", "pkg.part"), ("pkg.part", "pkg"), ("pkg.other", "pkg.part")}
    assert len(find_cycle(import_edges(modules, "pkg"))) == 2


LAYERS = [
    ("vitroll.errors", "vitroll._version", "vitroll.wording", "vitroll.registry", "vitroll.lazy"),
    ("vitroll.io", "vitroll.checkpoints", "vitroll.testbed.shapes"),
    ("vitroll.models", "vitroll.testbed", "vitroll.preprocess", "vitroll.capture", "vitroll.adapters"),
    ("vitroll.methods",),
    ("vitroll.maps", "vitroll.overlay", "vitroll.colormaps", "vitroll.metrics", "vitroll.words", "vitroll.text_view"),
    ("vitroll.pipelines", "vitroll.audit", "vitroll.templates"),
    ("vitroll.app",),
    ("vitroll.commands",),
    ("vitroll.cli", "vitroll.__main__"),
]
"""Floors of the data path, lowest first: reading files; the model, its adapters, its input transform and the
capture of its attention; methods; maps and overlays; pipelines, the audit and the HTML pages' templates; the
explorer's page; commands; the command line. A module may import its own floor and those below, never one above. A
name stands for the module and everything under it; the longest name that matches decides (``vitroll.testbed.shapes``
sits below the rest of ``vitroll.testbed``)."""

FACADE = "vitroll"
"""``vitroll/__init__.py`` re-exports the public names of every floor, so it sits above them all."""


def floor_of(module: str) -> int:
    if module == FACADE:
        return len(LAYERS)
    matches = [(len(name), floor) for floor, names in enumerate(LAYERS) for name in names
               if module == name or module.startswith(name + ".")]
    assert matches, f"{module} is on no floor of LAYERS; place it there"
    return max(matches)[1]


def test_lower_floors_never_import_higher_ones():
    modules = module_files(PACKAGE_ROOT)
    upward = [f"{edge.importer} (floor {floor_of(edge.importer)}) imports {edge.imported} "
              f"(floor {floor_of(edge.imported)}) at line {edge.line}"
              for edge in import_edges(modules, "vitroll") if floor_of(edge.imported) > floor_of(edge.importer)]
    assert not upward, "imports against the data path:\n" + "\n".join(upward)


def test_the_package_version_is_the_one_pyproject_declares():
    pyproject = (PACKAGE_ROOT.parent / "pyproject.toml").read_text(encoding="utf-8")
    declared = re.findall(r'^version = "([^"]+)"$', pyproject, flags=re.MULTILINE)
    assert declared == [vitroll.__version__]


def test_lazy_names_import_a_name_on_first_use_keep_it_and_refuse_the_others(tmp_path, monkeypatch):
    _write_package(tmp_path, {"pkg/__init__.py": "", "pkg/part.py": "thing = 7\n", "pkg/sub.py": ""})
    monkeypatch.syspath_prepend(str(tmp_path))
    from vitroll.lazy import LazyNames

    for submodules in (False, True):
        for name in ("pkg", "pkg.part", "pkg.sub"):
            monkeypatch.delitem(sys.modules, name, raising=False)
        package = importlib.import_module("pkg")
        names = LazyNames("pkg", {"pkg.part": ("thing",)}, submodules=submodules)
        package.__all__ = names.all
        assert "pkg.part" not in sys.modules and "thing" in names.dir()
        assert names.getattr("thing") == 7 and vars(package)["thing"] == 7
        with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'other'"):
            names.getattr("other")
        if submodules:
            assert names.getattr("sub") is sys.modules["pkg.sub"]
        else:
            with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'sub'"):
                names.getattr("sub")


def test_dir_of_the_package_is_its_public_api_and_none_of_the_machinery():
    import vitroll.cli  # noqa: F401  (binds sub-modules in the package: they are not its API)
    import vitroll.io

    vitroll.rollout  # a name once reached is kept in the namespace, and still listed once
    assert dir(vitroll) == sorted(vitroll.__all__)
    assert {"LazyNames", "_NAMES", "_PUBLIC", "defer", "lazy", "registry", "sys"}.isdisjoint(dir(vitroll))
    assert {"load_image", "rollout", "overlay", "__version__"} <= set(dir(vitroll))
    assert dir(vitroll.io) == ["IMAGE_SUFFIXES", "encode_png", "load_image", "write_atomic"]


def test_the_readme_layout_names_every_module_once_on_its_floor():
    """The README's Layout listed packages by some of their modules (methods/map_checks.py, capture/precision.py,
    io/dicom/ and every command's module were not named): each module now has a line, and its floor is LAYERS'."""
    readme = (PACKAGE_ROOT.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0].split("```")[1]
    lines = [re.match(r"(\d) (vitroll/\S*)\s", line) for line in block.splitlines()]
    named = [(match[2], int(match[1])) for match in lines if match]
    assert len(named) == len(dict(named)), "a module is named twice"
    expected = {}
    for name, path in module_files(PACKAGE_ROOT).items():
        relative = path.relative_to(PACKAGE_ROOT.parent)
        is_package = path.name == "__init__.py" and name != FACADE
        expected[f"{relative.parent}/" if is_package else str(relative)] = floor_of(name)
    assert dict(named) == expected
