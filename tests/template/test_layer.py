"""What `sam build` puts in the Lambda layer and the functions: the runtime only, never the tooling.

The layer (SharedLayer, ``BuildMethod: python3.11``) is its ContentUri directory copied as it is on disk, minus
the names aws-lambda-builders' pip workflow drops, into ``python/``, plus what its requirements.txt installs.
A function (CodeUri) is built the same way. `sam` is not run here (CI has none): the files are listed with the
same rules, and the layer is copied to a temporary ``python/`` and imported from there with the tooling and
the test packages made unimportable, as they are in Lambda.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from template_tools import ROOT

# aws-lambda-builders, workflows/python_pip/workflow.py: PythonPipWorkflow.EXCLUDED_FILES, the names (at any
# depth, shutil.ignore_patterns) that the copy of a source directory leaves out.
BUILD_EXCLUDES = (
    ".aws-sam",
    ".chalice",
    ".git",
    ".gitignore",
    "*.pyc",
    "__pycache__",
    "*.so",
    ".Python",
    "*.egg-info",
    "*.egg",
    "pip-log.txt",
    "pip-delete-this-directory.txt",
    "htmlcov",
    ".tox",
    ".nox",
    ".coverage",
    ".cache",
    ".pytest_cache",
    ".python-version",
    ".mypy_cache",
    ".dmypy.json",
    ".pyre",
    ".env",
    ".venv",
    "venv",
    "venv.bak",
    "env.bak",
    "ENV",
    "env",
    ".vscode",
    ".idea",
)
# Module and package names of the tooling (punctual_tools and what used to ship inside punctual).
TOOLING_NAMES = frozenset(
    {"punctual_tools", "cli", "cost", "demo", "checker", "progress", "stats", "local", "target", "doubles"}
)
# Top-level packages no runtime file may import: the tooling, PyYAML (only the tooling reads template.yaml), and what
# only tests and load tests install.
NOT_IN_LAMBDA = frozenset({"punctual_tools", "yaml", "moto", "locust", "hypothesis", "pytest", "freezegun"})


def built_files(source: Path) -> list[Path]:
    """The files a build copies from ``source`` (relative paths, sorted), as ``CopySourceAction`` does."""

    def excluded(name: str) -> bool:
        return any(fnmatch.fnmatch(name, pattern) for pattern in BUILD_EXCLUDES)

    found = []
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if not excluded(d)]
        found += [Path(folder, f).relative_to(source) for f in files if not excluded(f)]
    return sorted(found)


def code_dir(uri: str) -> Path:
    assert isinstance(uri, str), f"not a local code path: {uri!r}"
    assert not uri.startswith("s3://"), f"not a local code path: {uri!r}"
    return ROOT / uri


def imported_names(path: Path) -> set[str]:
    """Top-level names of the absolute imports of a Python file, including ``importlib.import_module("x.y")``
    and ``__import__("x")`` with a literal name."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value.split(".")[0])
    return names


def requirement_names(text: str) -> set[str]:
    """Normalised distribution names of requirement lines (comments, options and blank lines skipped)."""
    names = set()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ;@]", line, maxsplit=1)[0]).lower())
    return names


@pytest.fixture(scope="module")
def layer(sam_resources: dict[str, Any]) -> dict[str, Any]:
    (name,) = [n for n, r in sam_resources.items() if r["Type"] == "AWS::Serverless::LayerVersion"]
    result: dict[str, Any] = sam_resources[name]
    return result


@pytest.fixture(scope="module")
def layer_dir(layer: dict[str, Any]) -> Path:
    return code_dir(layer["Properties"]["ContentUri"])


@pytest.fixture(scope="module")
def layer_files(layer_dir: Path) -> list[Path]:
    return built_files(layer_dir)


def test_the_layer_holds_the_runtime_package_and_its_requirements(
    layer: dict[str, Any], layer_files: list[Path]
) -> None:
    # Given the SharedLayer as template.yaml defines it  When it is built
    # Then it holds the `punctual` package and the requirements.txt pip installs from, nothing else of ours
    assert layer["Metadata"]["BuildMethod"].startswith("python")  # copied into python/, requirements installed
    assert {f.parts[0] for f in layer_files} == {"punctual", "requirements.txt"}
    assert Path("punctual/__init__.py") in layer_files


def test_no_tooling_module_is_in_the_layer(layer_files: list[Path]) -> None:
    # Given every file the build copies into the layer  Then none is (or lies inside) a tooling module
    tooling = [f for f in layer_files if {Path(p).stem for p in f.parts} & TOOLING_NAMES]
    assert not tooling, f"tooling in the Lambda layer (move it to src/tools/punctual_tools): {tooling}"


def test_no_file_of_the_layer_or_a_function_imports_the_tooling_or_a_test_package(
    layer_dir: Path, layer_files: list[Path], sam_resources: dict[str, Any]
) -> None:
    # Given every Python file that ships (the layer's, and each function's handler)
    shipped = [layer_dir / f for f in layer_files if f.suffix == ".py"]
    for resource in sam_resources.values():
        if resource["Type"] == "AWS::Serverless::Function":
            folder = code_dir(resource["Properties"]["CodeUri"])
            shipped += [folder / f for f in built_files(folder) if f.suffix == ".py"]
    assert len(shipped) > 10
    # When its imports are read  Then none names the tooling, moto, locust, Hypothesis, pytest or freezegun
    offending = {str(p.relative_to(ROOT)): sorted(imported_names(p) & NOT_IN_LAMBDA) for p in shipped}
    assert not {p: names for p, names in offending.items() if names}


_IMPORT_ALL = """
import importlib, importlib.abc, json, sys

BLOCKED = set(sys.argv[2].split(","))

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{name} is not in Lambda", name=name)
        return None

sys.meta_path.insert(0, Blocker())
sys.path.insert(0, sys.argv[1])  # the built layer: a -c process finds it only so, ahead of the install
failed, outside = {}, []
for module in sys.argv[3].split(","):
    try:
        loaded = importlib.import_module(module)
    except Exception as exc:
        failed[module] = f"{type(exc).__name__}: {exc}"
        continue
    if not (loaded.__file__ or "").startswith(sys.argv[1]):
        outside.append(module)
print(json.dumps({"failed": failed, "outside": outside}))
"""


def test_every_runtime_module_imports_without_the_tooling_or_moto(
    layer_dir: Path, layer_files: list[Path], tmp_path: Path
) -> None:
    # Given the layer as built (copied into python/) and a Python where punctual_tools, moto and the test
    # packages cannot be imported (they are on this machine, not in Lambda)
    python = tmp_path / "python"
    for f in layer_files:
        (python / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(layer_dir / f, python / f)
    modules = [".".join(f.with_suffix("").parts).removesuffix(".__init__") for f in layer_files if f.suffix == ".py"]
    # When every module of the layer is imported from the copy
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCTUAL_")}  # -I ignores PYTHON*
    done = subprocess.run(
        [sys.executable, "-I", "-c", _IMPORT_ALL, str(python), ",".join(sorted(NOT_IN_LAMBDA)), ",".join(modules)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Then each imports, and from the layer (not from the source checkout)
    assert result["failed"] == {}
    assert result["outside"] == []
    assert "punctual.executing.executor" in modules
    assert "punctual.stores.dynamodb.due" in modules


def test_the_layer_requirements_list_no_dev_package(layer_dir: Path) -> None:
    # Given the layer's requirements.txt, and the extras (plots, sim, load) and dependency groups of pyproject.toml
    layer_requirements = requirement_names((layer_dir / "requirements.txt").read_text(encoding="utf-8"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    runtime = requirement_names("\n".join(pyproject["project"]["dependencies"]))
    lists = [*pyproject["project"]["optional-dependencies"].values(), *pyproject["dependency-groups"].values()]
    tooling = requirement_names("\n".join(r for group in lists for r in group if isinstance(r, str)))
    # Then the layer installs none of what only they need (moto, pytest, Hypothesis, locust, PyYAML, ...)
    assert {"moto", "pytest", "hypothesis", "locust", "pyyaml"} <= tooling - runtime
    assert not layer_requirements & (tooling - runtime)
    assert runtime <= layer_requirements


def test_each_function_ships_only_its_handler(sam_resources: dict[str, Any]) -> None:
    # Given each function of the template  When its CodeUri is built
    functions = {n: r["Properties"] for n, r in sam_resources.items() if r["Type"] == "AWS::Serverless::Function"}
    assert set(functions) == {"PollerFunction", "ExecutorFunction", "FastPathFunction", "ApiFunction"}
    for name, props in functions.items():
        module, _, _ = props["Handler"].rpartition(".")
        # Then it holds the handler module alone (the package comes from the layer; no requirements to install)
        assert built_files(code_dir(props["CodeUri"])) == [Path(*module.split(".")).with_suffix(".py")], name
