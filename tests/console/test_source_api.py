"""A tenant's source through the local REST API server (bearer tokens) over DynamoDB Local: its own tasks a page at a
time through the API's paging, the load ahead from its listing, its FAILED tasks as its dead letters, and its
changes through the API; no operator's views. And a tenant's console on a deployed API: each request SigV4-signed
with the caller's credentials, as API Gateway's IAM authorization checks it (a gate in front of the local API)."""

from __future__ import annotations

import hmac
import json
import re
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from punctual.config.settings import Settings
from punctual.domain.model import TaskStatus
from punctual.errors import ApiError, PunctualError
from punctual.runtime.client import Client
from punctual.scheduling.api_client import ApiClient
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import HttpAction
from punctual_tools.cli import build_parser
from punctual_tools.cli.console import source_of
from punctual_tools.console.model import ConsoleSource, TaskFilter
from punctual_tools.console.source import TenantSource, api_source
from punctual_tools.doubles import FakeClock
from punctual_tools.local.api_server import LocalApi
from support import TaskFactory, make_failed, read_task, serving_api

pytestmark = pytest.mark.integration  # on the session's DynamoDB Local

TOKENS = {"token-acme": "acme", "token-beta": "beta"}


@pytest.fixture
def api(ddb_local_client: Any, settings: Settings, clock: FakeClock) -> Iterator[LocalApi]:
    with serving_api(ddb_local_client, settings, clock, TOKENS) as server:
        yield server


@pytest.fixture
def acme(api: LocalApi) -> TenantSource:
    return api_source(ApiClient(api.url, token="token-acme"), "acme")


def test_a_tenant_pages_through_its_own_tasks_only(acme: TenantSource, tasks: TaskFactory, now: int) -> None:
    # Given five tasks of acme's (one an http task) and two of beta's
    for i in range(4):
        tasks.create(now + 60_000, f"acme/t-{i}", now_ms=now)
    tasks.create(now + 60_000, "acme/t-4", now_ms=now, action=HttpAction(url="https://example.com/hook"))
    for i in range(2):
        tasks.create(now + 60_000, f"beta/t-{i}", now_ms=now)
    # When acme's console pages through its tasks, 2 a page
    pages = [acme.tasks(TaskFilter(limit=2), now)]
    while pages[-1].next_cursor is not None:
        assert len(pages) < 20
        pages.append(acme.tasks(TaskFilter(limit=2, after=pages[-1].next_cursor), now))
    # Then it saw its own five in id order, from the API, and none of beta's; and a kind filter holds
    assert [t.task_id for page in pages for t in page.tasks] == [f"t-{i}" for i in range(5)]
    assert all(page.index == "api" and len(page.tasks) <= 2 for page in pages)
    http = acme.tasks(TaskFilter(kind="http", limit=2), now)
    assert [t.task_id for t in http.tasks] == ["t-4"]


def test_a_tenants_now_page_counts_its_own_load_and_no_operator_figures(
    acme: TenantSource, tasks: TaskFactory, now: int
) -> None:
    # Given acme's tasks due 1.5 s and 10 s ahead and one 5 s overdue, and beta's due 1.5 s ahead
    tasks.create(now + 1_500, "acme/soon", now_ms=now)
    tasks.create(now + 10_000, "acme/later", now_ms=now)
    tasks.create(now - 5_000, "acme/late", now_ms=now)
    tasks.create(now + 1_500, "beta/soon", now_ms=now)
    # When acme's Now page is read
    view = acme.now(now, 60)
    # Then it counts acme's alone, and has no figures or executors (the operator's)
    assert (view.due_per_second[1], view.due_per_second[10], sum(view.due_per_second)) == (1, 1, 2)
    assert view.overdue == 1
    assert (view.minutes, view.executors) == ([], None)
    assert view.notes
    as_port: ConsoleSource = acme  # the port the pages read, implemented
    assert as_port.operator is False
    assert as_port.tenants() is None


def test_a_tenants_failed_tasks_are_its_dead_letters_and_redrive_through_the_api(
    acme: TenantSource, stores: DynamoStores, tasks: TaskFactory, now: int
) -> None:
    # Given a FAILED task of acme's and one of beta's
    make_failed(stores, tasks, "acme/broken", now)
    make_failed(stores, tasks, "beta/broken", now)
    # When acme's console lists its dead letters and redrives its own, beta's and a missing one
    letters = acme.dead_letters()
    outcome = acme.redrive(["broken", "missing"])
    # Then it saw its own failure with its detail, and only its own task became PENDING again
    assert [(letter.task_id, letter.reason) for letter in letters] == [("broken", "boom")]
    assert outcome.redriven == ["broken"]
    assert set(outcome.skipped) == {"missing"}
    assert read_task(stores, "acme/broken").status is TaskStatus.PENDING
    assert read_task(stores, "beta/broken").status is TaskStatus.FAILED


def test_a_tenants_changes_go_through_the_api(
    acme: TenantSource, stores: DynamoStores, tasks: TaskFactory, now: int
) -> None:
    tasks.create(now + 600_000, "acme/a", now_ms=now)
    tasks.create(now + 600_000, "acme/b", now_ms=now)
    acme.cancel("a")
    moved = acme.reschedule("b", now + 660_000)
    assert read_task(stores, "acme/a").status is TaskStatus.CANCELLED
    assert read_task(stores, "acme/b").due_ms == moved.due_ms == now + 660_000
    assert acme.task("b") is not None
    assert acme.task("nowhere") is None


def test_a_tenants_console_needs_the_rest_api(settings: Settings) -> None:
    with pytest.raises(PunctualError, match="REST API"):
        api_source(Client(settings), "acme")


# -- through SigV4, as against a deployed stack ----------------------------------------------------------------------
SECRETS = {"AKIDACME": "acme-secret-key"}  # the gate's IAM users: an access key and its secret
PRINCIPALS = {"AKIDACME": "token-acme"}  # ... and whose they are (the local API's token of that tenant)
SKEW_S = 300  # API Gateway refuses a request signed more than 5 minutes from its clock
SIGNATURE = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<day>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, "
    r"SignedHeaders=(?P<headers>[a-z0-9;-]+), Signature=(?P<signature>[0-9a-f]{64})"
)


def signer_of(method: str, url: str, headers: Mapping[str, str], body: bytes) -> str | None:
    """The access key whose secret signed the request, as API Gateway's IAM authorization checks it: the signature
    recomputed over what arrived (method, path, query, the headers it names, the body's hash) with the secret of the
    key it names, for execute-api, within the clock skew; None when any of it does not hold."""
    found = SIGNATURE.fullmatch(headers.get("Authorization", ""))
    stamp = headers.get("X-Amz-Date", "")
    if found is None or found["service"] != "execute-api" or found["key"] not in SECRETS or stamp[:8] != found["day"]:
        return None
    signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    if abs((datetime.now(UTC) - signed_at).total_seconds()) > SKEW_S:
        return None
    named = [h for h in found["headers"].split(";") if h != "host"]  # the host is the URL's
    if any(h not in {k.lower() for k in headers} for h in named):
        return None
    request = AWSRequest(
        method=method, url=url, data=body, headers={k: v for k, v in headers.items() if k.lower() in named}
    )
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(found["key"], SECRETS[found["key"]]), "execute-api", found["region"])
    if signer.signed_headers(signer.headers_to_sign(request)) != found["headers"]:
        return None
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    return found["key"] if hmac.compare_digest(expected, found["signature"]) else None


class SigV4Gate:
    """An IAM-authorized API's front door on loopback: a request whose SigV4 signature holds goes on to the local
    API as its signer's tenant; any other is answered 403, as API Gateway answers it. ``signed`` counts those let
    through, ``refused`` the others."""

    def __init__(self, api: LocalApi) -> None:
        self.signed = 0
        self.refused = 0
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = f"http://{self.headers['Host']}{self.path}"
                key = signer_of(self.command, url, dict(self.headers.items()), body)
                if key is None:
                    gate.refused += 1
                    status, data = 403, json.dumps({"message": "The request signature we calculated does not match"})
                else:
                    gate.signed += 1
                    answer = urllib3.request(
                        self.command,
                        api.url + self.path,
                        body=body or None,
                        headers={"Authorization": f"Bearer {PRINCIPALS[key]}", "Content-Type": "application/json"},
                        retries=False,
                    )
                    status, data = answer.status, answer.data.decode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data.encode())))
                self.end_headers()
                self.wfile.write(data.encode())

            do_GET = do_POST = do_PATCH = do_DELETE = _any

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SigV4Gate:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def gate(api: LocalApi) -> Iterator[SigV4Gate]:
    with SigV4Gate(api) as front:
        yield front


def test_a_console_on_a_deployed_api_signs_each_request_with_the_callers_credentials(
    gate: SigV4Gate, stores: DynamoStores, tasks: TaskFactory, now: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a deployed API (its URL in PUNCTUAL_API_URL) that lets in acme's IAM user, and that user's credentials
    monkeypatch.setenv("PUNCTUAL_API_URL", gate.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDACME")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRETS["AKIDACME"])
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    tasks.create(now + 600_000, "acme/a", now_ms=now)
    tasks.create(now + 600_000, "acme/b", now_ms=now)
    tasks.create(now + 600_000, "beta/c", now_ms=now)
    # When `punctual console --api --aws` builds its source, and it lists, cancels and reschedules (a body signed)
    source = source_of(build_parser().parse_args(["console", "--api", "--aws"]))
    assert isinstance(source, TenantSource)
    listed = source.tasks(TaskFilter(), now)
    source.cancel("a")
    source.reschedule("b", now + 660_000)
    # Then every request went through signed and checked, as acme: its tasks alone, its changes made
    assert [t.task_id for t in listed.tasks] == ["a", "b"]
    assert read_task(stores, "acme/a").status is TaskStatus.CANCELLED
    assert read_task(stores, "acme/b").due_ms == now + 660_000
    assert (gate.signed, gate.refused) == (3, 0)


def test_a_request_signed_with_another_secret_is_refused(gate: SigV4Gate) -> None:
    # Given a client holding acme's key id with a wrong secret
    forger = ApiClient(gate.url, region="eu-west-1", credentials=Credentials("AKIDACME", "not-the-secret"))
    # When it asks for a task  Then the gate refuses it, and nothing went through
    with pytest.raises(ApiError) as refused:
        forger.get("a")
    assert refused.value.status == 403
    assert (gate.signed, gate.refused) == (0, 1)
