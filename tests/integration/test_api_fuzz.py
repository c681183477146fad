"""The API fuzzed from its OpenAPI document (schemathesis), against the local API server on DynamoDB Local.

Every operation gets valid and invalid requests, bounded in number; whatever is sent, the API never answers a
5xx, answers only the statuses and content types its document lists, with bodies that match its schemas, and
refuses what the document says is invalid. Then sequences of calls follow the document's links (a task or
schedule created, then read, changed, paused, cancelled, run, deleted by the id the API gave), with the same
checks at every step: whatever state earlier calls left, no call answers a 5xx."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from punctual.config.clients import make_dynamodb_client
from punctual.config.settings import Settings
from punctual.runtime.wiring import build_api
from punctual_tools.local.api_server import LocalApi
from punctual_tools.template import ensure_table

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
# Each request's bound: only a hang reaches it. What is checked is each answer against the document, not how fast
# it comes (schemathesis's default of 10 s was reached once by a busy machine's DynamoDB Local).
REQUEST_BOUND_S = 120.0

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fuzz-token"
EXAMPLES = 30  # per operation and mode (17 operations, valid and invalid): about 1,000 requests, ~25 s
SCENARIOS, STEPS = 40, 6  # linked sequences, each of at most STEPS calls: at most 240 requests
schema = schemathesis.openapi.from_path(ROOT / "openapi.json")
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=EXAMPLES, deterministic=True
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
STATEFUL_CHECKS = CHECKS[:-1]  # a linked call's id comes from an answer: "negative" data may then be valid
# A batch checks each task on its own and answers 200 with each one's outcome: a task the document calls invalid is
# an "invalid" result of a 200, by design (what is checked of it is the rest: no 5xx, the statuses and the schemas)
PER_TASK = {("POST", "/v1/tasks:batch")}


@pytest.fixture(scope="module")
def api(ddb_local: str) -> Iterator[LocalApi]:
    settings = Settings(
        table_name=f"punctual-fuzz-{uuid.uuid4().hex[:8]}",
        endpoint_url=ddb_local,
        ntp_server=None,
        allowed_targets="127.0.0.1",
    )
    client = make_dynamodb_client(settings)
    ensure_table(client, settings.table_name)
    try:
        with LocalApi(lambda: build_api(settings, make_dynamodb_client(settings)), {TOKEN: "fuzz"}) as server:
            yield server
    finally:
        client.delete_table(TableName=settings.table_name)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_api_holds_to_its_document(case: Any, api: LocalApi) -> None:
    checks = STATEFUL_CHECKS if (case.method.upper(), case.path) in PER_TASK else CHECKS
    case.call_and_validate(
        base_url=api.url, headers={"Authorization": f"Bearer {TOKEN}"}, checks=checks, timeout=REQUEST_BOUND_S
    )


def test_linked_sequences_of_calls_never_answer_a_server_error(api: LocalApi) -> None:
    base = schema.as_state_machine()

    class Workflow(base):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": api.url, "headers": {"Authorization": f"Bearer {TOKEN}"}, "timeout": REQUEST_BOUND_S}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(response, checks=STATEFUL_CHECKS, transport_kwargs=kwargs)

    Workflow.run(
        settings=settings(
            max_examples=SCENARIOS,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
    )
