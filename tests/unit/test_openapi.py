"""The committed OpenAPI document (openapi.json) is the one the API's resolver generates."""

from __future__ import annotations

import json
from pathlib import Path

from punctual.api import build_app, openapi_document
from punctual.config.tenant_map import TenantMap

ROOT = Path(__file__).resolve().parents[2]


def current() -> str:
    return openapi_document(build_app(lambda: None, TenantMap()))  # type: ignore[arg-type, return-value]


def test_the_committed_document_is_fresh() -> None:
    committed = (ROOT / "openapi.json").read_text()
    assert committed == current(), "openapi.json is stale: run `make openapi` and commit it"


def test_every_operation_is_authenticated_and_answers_problems() -> None:
    document = json.loads(current())
    assert {"sigv4", "localToken"} <= set(document["components"]["securitySchemes"])
    assert document["security"] == [{"sigv4": []}, {"localToken": []}]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            errors = {code: r for code, r in operation["responses"].items() if code.startswith("4")}
            assert "403" in errors, (method, path)
            for response in errors.values():
                assert list(response["content"]) == ["application/problem+json"], (method, path)
