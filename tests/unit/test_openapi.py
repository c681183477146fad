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


def test_every_answer_naming_a_task_or_schedule_links_to_the_operations_on_it() -> None:
    # (the stateful fuzz, tests/integration/test_api_fuzz.py, follows these links)
    document = json.loads(current())
    linked = 0
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for code, response in operation["responses"].items():
                schema = json.dumps(response.get("content", {}).get("application/json", {}).get("schema", {}))
                names = [n for n in ("TaskOut", "ScheduleOut", "TaskResults") if schema.endswith(f'/{n}"}}')]
                if not names:
                    assert "links" not in response, (method, path, code)
                    continue
                links = response["links"]
                name = "schedule_id" if names == ["ScheduleOut"] else "task_id"
                at = "/results/0" if names == ["TaskResults"] else ""  # a batch's: its first task's
                for link in links.values():
                    assert link["parameters"] == {name: f"$response.body#{at}/{name}"}, (method, path, link)
                    *_, target, target_method = link["operationRef"].split("/")
                    target_path = target.replace("~1", "/").replace("~0", "~")
                    assert {p["name"] for p in document["paths"][target_path][target_method]["parameters"]} >= {name}
                linked += 1
    assert linked >= 15
