"""The action kinds there are are read from one list (punctual.targets.kinds.ACTION_KINDS), not inferred from which
modules happened to be imported: every kind a target module defines is on it, and nothing registers itself."""

from __future__ import annotations

import ast
from pathlib import Path

from punctual.domain.model import known_action_kinds
from punctual.targets import ACTION_KINDS, action_kinds, kinds, registry

TARGETS = Path(registry.__file__).parent


def _kinds_defined() -> set[str]:
    """The module-level names bound to an ``ActionKind`` (or a helper that builds one) in punctual/targets."""
    found: set[str] = set()
    for path in TARGETS.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                called = node.value.func
                name = called.id if isinstance(called, ast.Name) else ""
                if name in ("ActionKind", "_aws_kind"):
                    found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return found


def test_every_kind_a_target_module_defines_is_on_the_one_list() -> None:
    # Given the ActionKind constants of punctual/targets  Then ACTION_KINDS lists each, once

    listed = {name for name, value in vars(kinds).items() if any(value is kind for kind in ACTION_KINDS)}
    assert listed == _kinds_defined()
    assert len({kind.name for kind in ACTION_KINDS}) == len(ACTION_KINDS)


def test_the_list_is_what_executors_fire_and_the_task_model_accepts() -> None:
    # Given the list  Then the registry and the task model know exactly its kinds
    names = sorted(kind.name for kind in ACTION_KINDS)
    assert [kind.name for kind in action_kinds()] == names
    assert set(names) <= set(known_action_kinds())


def test_nothing_registers_itself_on_import() -> None:
    # Given the registry module  Then it offers no registration: a kind is known only by being listed
    assert not hasattr(registry, "register")
    assert not hasattr(registry, "_KINDS")
