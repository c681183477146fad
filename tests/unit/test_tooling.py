"""The development tooling's files agree with each other: the Lambda layer's requirements.txt is uv.lock's export and
the lock is current, `make setup` installs every dependency group with the uv the lock asks for, the extras users
install name what the groups do, and the pre-commit hooks run what `make style` and `make typecheck` run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _make_variable(name: str) -> str:
    found = re.search(rf"^{name}\s*:=\s*(.*)$", MAKEFILE, re.MULTILINE)
    assert found is not None, f"{name} is not defined in the Makefile"
    return found.group(1).strip()


def _make_words(name: str) -> list[str]:
    """The words of a Makefile variable, each ``$(OTHER)`` among them replaced by the words of that variable."""
    words = []
    for word in _make_variable(name).split():
        inner = re.fullmatch(r"\$\((\w+)\)", word)
        words += _make_words(inner.group(1)) if inner else [word]
    return words


def _recipe(target: str) -> list[str]:
    """The commands of a Makefile target, as run from the top of the tree (``$(BIN)`` is ``.venv/bin``), a
    ``for x in $(LIST); do cmd $$x || exit 1; done`` line as one command per item."""
    found = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert found is not None, f"no recipe for {target} in the Makefile"
    commands = []
    for raw in found.group(1).splitlines():
        line = raw.strip().replace("$(BIN)", ".venv/bin")
        loop = re.fullmatch(r"for (\w+) in \$\((\w+)\); do (.+) \$\$\1 \|\| exit 1; done", line)
        if loop is None:
            commands.append(line)
        else:
            commands += [f"{loop.group(3)} {item}" for item in _make_words(loop.group(2))]
    return commands


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ;@]", requirement, maxsplit=1)[0]).lower()


def test_the_layer_requirements_are_the_locks_export_and_the_lock_is_current(tmp_path: Path) -> None:
    # Given pyproject.toml and uv.lock alone in an empty folder, and uv offline (the lock is all it may read)
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy2(ROOT / name, tmp_path / name)
    target = _make_variable("LAYER_REQUIREMENTS")
    (tmp_path / target).parent.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")} | {"UV_OFFLINE": "1"}

    def uv(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "uv", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env,
            check=False,
        )

    # When uv checks the lock against pyproject.toml, and exports it as `make requirements` does
    assert "$(UV) --quiet $(LAYER_EXPORT) -o $(LAYER_REQUIREMENTS)" in MAKEFILE
    checked = uv("lock", "--check")
    exported = uv(*_make_variable("LAYER_EXPORT").split(), "-o", target)
    # Then the lock needs no change, and the layer's requirements.txt is what the export writes
    assert checked.returncode == 0, f"uv.lock is stale: run `make requirements` ({checked.stderr})"
    assert exported.returncode == 0, exported.stderr
    assert (ROOT / target).read_text(encoding="utf-8") == (tmp_path / target).read_text(encoding="utf-8"), (
        f"{target} is stale: run `make requirements`"
    )


def test_make_setup_installs_every_group_with_the_uv_the_lock_asks_for() -> None:
    # Given pyproject.toml's dependency groups and the uv version the Makefile bootstraps
    groups: dict[str, list[Any]] = PYPROJECT["dependency-groups"]
    version = _make_variable("UV_VERSION")
    # Then make setup syncs every group from the lock, and the lock's uv is the one it bootstraps
    assert sorted(_make_variable("UV_GROUPS").split()) == sorted(groups)
    assert "$(UV) sync --quiet --locked" in MAKEFILE
    assert f"uv=={version}" in [r for group in groups.values() for r in group]
    assert PYPROJECT["tool"]["uv"]["required-version"] == f"=={version}"


def test_pyyaml_is_the_toolings_not_the_runtimes() -> None:
    # Given the runtime's dependencies and the groups make setup installs
    runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    groups = {_name(r) for group in PYPROJECT["dependency-groups"].values() for r in group if isinstance(r, str)}
    # Then PyYAML (read by the tooling, never imported by a handler) is in a group, not in the runtime's list
    assert "pyyaml" not in runtime
    assert "pyyaml" in groups


def test_each_extra_names_a_requirement_of_a_group_as_it_is_written_there() -> None:
    # Given the extras a user installs (plots, sim, load) and the groups make setup installs
    in_groups = {r for group in PYPROJECT["dependency-groups"].values() for r in group if isinstance(r, str)}
    # Then each of their requirements is in a group with the same specifier: what is tested is what users get
    for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items():
        assert set(requirements) <= in_groups, extra


def test_make_tests_parallel_run_measures_the_runtimes_coverage_under_a_floor() -> None:
    # Given the pytest runs of make test (and make e2e's) and the coverage options the first is given
    (covered, parallel) = [line for line in _recipe("test") if " pytest " in line]
    (serial,) = [line for line in _recipe("e2e") if " pytest " in line]
    coverage = _make_variable("COVERAGE").split()
    # Then the first (the runtime's own tiers), and only it, measures the runtime package and fails under a floor
    assert "$(COVERAGE)" in covered.split()
    assert "$(COVERED_TIERS)" in covered.split()
    assert "$(COVERAGE)" not in parallel.split() + serial.split()
    assert "--cov=punctual" in coverage
    assert "--cov-fail-under=$(COVERAGE_FLOOR)" in coverage
    assert any(option.startswith("--cov-report=term") for option in coverage)
    assert 0 < int(_make_variable("COVERAGE_FLOOR")) <= 100


def test_the_pre_commit_hooks_run_the_commands_of_make_style_and_make_typecheck() -> None:
    # Given .pre-commit-config.yaml
    config_path = ROOT / ".pre-commit-config.yaml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    (repo,) = config["repos"]
    hooks = repo["hooks"]
    # Then its hooks are local commands of the venv (nothing fetched), each run once over the whole tree, in the
    # Makefile's order
    assert repo["repo"] == "local"
    assert all(hook["language"] == "system" and hook["pass_filenames"] is False for hook in hooks)
    commands = [" ".join([hook["entry"], *hook.get("args", [])]) for hook in hooks]
    assert commands == _recipe("style") + _recipe("typecheck")
    # And pre-commit reads the file as valid
    done = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
