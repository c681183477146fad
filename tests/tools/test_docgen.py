"""The docs site's generated blocks (docs/rest-api.md from openapi.json, docs/cli.md from the CLI's parser,
docs/contributing.md's layers, their picture and the source layout from the tree) are the ones
punctual_tools.docgen makes: never typed."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

from punctual_tools import docgen
from punctual_tools.cli import build_parser
from punctual_tools.layout import PARTS

ROOT = Path(__file__).resolve().parents[2]


def test_every_generated_block_is_the_one_its_source_makes() -> None:
    # Given the committed pages  Then each block equals what docgen makes of openapi.json, the parser, the tree
    assert docgen.stale_pages(ROOT / "docs") == [], "run `make docs-pages`"


def test_the_rest_api_page_names_every_operation_and_schema_of_openapi_json() -> None:
    spec = json.loads((ROOT / "openapi.json").read_text())
    page = (ROOT / "docs" / "rest-api.md").read_text()
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"`{method.upper()} {path}`" in page
    for name in spec["components"]["schemas"]:
        assert f"### {name}\n" in page


def test_the_cli_page_names_every_command() -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert commands is not None
    for name in commands:
        assert f"### punctual {name}\n" in page


def test_the_layout_lists_each_module_of_the_tree_once(tmp_path: Path) -> None:
    # Given a small tree with a package, a module and a folder without Python
    package = tmp_path / "src" / "shared" / "punctual"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The runtime. More."""\n')
    (package / "sub" / "__init__.py").write_text('"""A part."""\n')
    (package / "sub" / "mod.py").write_text('"""Does one thing. And why."""\n')
    (package / "data").mkdir()
    # When its layout is made
    lines = docgen.layout_block(tmp_path)
    # Then each Python part is a row with its docstring's first sentence, and nothing else is
    assert lines[2:] == [
        "| `src/shared/punctual/` | The runtime |",
        "| `src/shared/punctual/sub/` | A part |",
        "| `src/shared/punctual/sub/mod.py` | Does one thing |",
    ]


def test_a_block_is_replaced_between_its_markers_and_the_prose_is_kept() -> None:
    name = "x"
    text = f"intro\n{docgen.begin_marker(name)}\nold\n{docgen.end_marker(name)}\nafter\n"
    made = docgen.with_block(text, name, ["new"])
    assert made == f"intro\n{docgen.begin_marker(name)}\n\nnew\n\n{docgen.end_marker(name)}\nafter\n"


def test_every_relative_link_of_the_readme_names_a_file_that_exists() -> None:
    # Given the README (the site checks its own links when make docs builds it strict)
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\((?!https?:|#|mailto:)([^)#\s]+)", text)
    # Then each relative link leads to a file of the tree
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert targets
    assert missing == []


_PATH = re.compile(r"`((?:src|tests|bench|loadtest|docs)/[\w./-]*\w/?|punctual(?:_tools)?/[\w./-]+\.py)`")
_DOTTED = re.compile(r"`(punctual(?:_tools)?(?:\.\w+)+)`")
# EventBridge sources in the tenant examples (`punctual.<tenant>`), not modules
_EVENT_SOURCES = {"punctual.acme.orders", "punctual.beta", "punctual.acmex"}


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of the tree, or a name one of them holds."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_module_and_path_the_docs_name_is_in_the_tree() -> None:
    # Given the README and every page of the site (modules move: a page must follow them)
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    missing = []
    for page in pages:
        text = page.read_text()
        for path in _PATH.findall(text):
            where = ROOT / path if not path.startswith("punctual") else None
            candidates = [where] if where else [ROOT / "src" / "shared" / path, ROOT / "src" / "tools" / path]
            if not any(c.exists() for c in candidates):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
        missing += [
            f"{page.relative_to(ROOT)}: {name}"
            for name in _DOTTED.findall(text)
            if name not in _EVENT_SOURCES and not _resolves(name)
        ]
    # Then each names a file, a module or a name that exists
    assert missing == [], "the docs name what the tree lacks:\n" + "\n".join(missing)


def _write_kinds() -> set[str]:
    """The members of the store's ``WriteKind`` enum, wherever in src/shared the class lives."""
    for source in (ROOT / "src" / "shared").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == "WriteKind":
                return {
                    t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)
                }
    raise AssertionError("no WriteKind in src/shared")


def test_the_life_cycle_table_names_every_kind_of_write_the_store_makes() -> None:
    # Given the life cycle table of docs/concepts.md (its second column: the write)
    text = (ROOT / "docs" / "concepts.md").read_text().split("## The life cycle", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    written = set(rows[1:])
    # Then it has a row for each kind of conditional write, and for the create, and no other
    assert written == _write_kinds() | {"CREATE"}


def test_the_picture_draws_an_import_only_where_no_other_import_implies_it() -> None:
    # Given a imports b and c, b imports c, c imports nothing
    parts = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    # When reduced  Then a's arrow to c goes, since a reaches c through b
    assert docgen.direct_imports(parts) == {"a": {"b"}, "b": {"c"}, "c": set()}


def test_the_layers_table_and_picture_name_every_part_of_the_runtime() -> None:
    # Given the layers the tooling names

    table, picture = "\n".join(docgen.layers_block()), docgen.layers_svg()
    # Then each part has its row in the table and its box in the picture
    for part in PARTS:
        assert f"| `{part}` |" in table
        label = "punctual (public API)" if part == "punctual" else part.removeprefix("punctual.")
        assert f">{label}</text>" in picture
