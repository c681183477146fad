"""Reading ``template.yaml``: CloudFormation's short-form tags (``!Ref``, ``!Sub``, ...) as their long forms.

Only the tooling and the tests read the template, from the source checkout they run in; the code in Lambda
gets what it needs from its environment (the layer holds neither the template nor PyYAML).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml


class _CfnLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types: its loader is Any to mypy
    """A YAML loader that accepts CloudFormation's short-form intrinsic tags (``!Ref``, ``!Sub``, ...)."""


def _intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if tag_suffix == "Ref" else f"Fn::{tag_suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def find_template() -> Path:
    """The ``template.yaml`` at the top of the source checkout."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "template.yaml"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no template.yaml above {Path(__file__).resolve()}: the template is read from a Punctual source checkout"
    )


@lru_cache(maxsize=4)
def load_template(path: str | None = None) -> dict[str, Any]:
    """The template at ``path`` (None: :func:`find_template`), intrinsics in their long form (``{"Ref": ...}``)."""
    with open(path or find_template(), encoding="utf-8") as handle:
        template: dict[str, Any] = yaml.load(handle, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    return template
