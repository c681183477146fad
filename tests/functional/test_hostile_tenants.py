"""A hostile tenant against another, on moto: tenant ``acme`` tries to read, change, fire into, forge, or borrow the
secrets, targets and quotas of tenant ``beta`` through every route of the API, through the client, and through
items written as its direct-table role may write them (keys starting ``acme/``). Each attempt is refused with
the documented error, and nothing of beta's is stored, sent, changed or cancelled.

The API runs once for the module (a loopback :class:`LocalApi` whose resolver builds each request's client from
the current test's table). Requests go through its own request path (:meth:`LocalApi.handle`: the bearer token,
the request line's target unquoted as on the wire, the proxy event, the resolver) without a socket, whose round
trip costs many times what the request does; one test sends the id attacks over the wire as well. Tasks are fired
by the real poller and executor, with AWS clients that record every call (hostile_tools.py) and a loopback
receiver per tenant (hostile_server.py).
"""

from __future__ import annotations

import base64
import io
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import boto3
import pytest
import urllib3
from hostile_server import HostileServer
from hostile_tools import (
    ACME_QUOTAS,
    AWS_KINDS,
    BETA_QUOTAS,
    PRINCIPALS,
    SECRET_VALUES,
    STOLEN,
    FakeAws,
    action_env,
    arns,
    aws_action,
    forge,
    poll_and_fire,
    put,
    snapshot,
    tenant_settings,
)
from moto import mock_aws

from punctual.api import build_app
from punctual.api.views import encode_token
from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.domain.clock import SystemClock
from punctual.domain.keys import from_ms, index_key, shard_of
from punctual.domain.model import occurrence_id
from punctual.errors import InvalidRequestError, InvalidScheduleError, InvalidTaskError, QuotaExceededError
from punctual.runtime.client import Client
from punctual.runtime.wiring import poller_on
from punctual.scheduling.client import Client as TaskClient
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.ports import ClientPort
from punctual.targets import ActionEnv
from punctual_tools.local.api_server import LocalApi
from punctual_tools.template import ensure_table
from support import FIXED_NOW_MS, FakeClock, RecordingInvoker

TOKENS = {"token-acme": "acme", "token-beta": "beta"}
PROBLEM_KEYS = {"type", "title", "status", "detail", "field", "errors", "quota"}
LATER = FIXED_NOW_MS + 600_000  # when the API tests' tasks are due (their clock is fixed at FIXED_NOW_MS)


# -- moto and the API, once for the module ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def aws() -> Iterator[Any]:
    """moto for the whole module (starting it is most of what a moto test costs), and a DynamoDB client in it."""
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def table(aws: Any) -> Iterator[str]:
    """A fresh Tasks table (from template.yaml) for each test, dropped after it."""
    name = f"hostile-{uuid.uuid4().hex[:12]}"
    assert ensure_table(aws, name) is True
    yield name
    aws.delete_table(TableName=name)


@pytest.fixture
def dynamodb(aws: Any, table: str) -> Any:
    """This module's own: the module's moto client, on the test's fresh table (see ``settings``)."""
    return aws


@pytest.fixture
def settings(settings: Settings, table: str) -> Settings:
    """The functional tier's settings, on the test's fresh table."""
    return settings.model_copy(update={"table_name": table})


class _Current:
    """Where the module's API takes each request's client from: the running test's table and settings."""

    factory: Callable[[], Client] | None = None

    def client(self) -> Client:
        assert self.factory is not None, "no test is using the API"
        return self.factory()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LocalApi, _Current]]:
    current = _Current()
    with LocalApi(
        lambda: build_app(current.client, TenantMap.parse(json.dumps({"principals": PRINCIPALS}))), TOKENS
    ) as api:
        yield api, current


class Answer(NamedTuple):
    status: int
    content_type: str
    body: Any


@dataclass
class Api:
    local: LocalApi
    wire: bool = False  # over a socket to the running server (else through its request path in this thread)

    def call(
        self, method: str, path: str, body: Any = None, tenant: str = "acme", headers: dict[str, str] | None = None
    ) -> Answer:
        """One request as ``tenant`` (its bearer token); ``path`` is the request line's target as written
        (percent-encoding kept)."""
        data = None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", "Authorization": f"Bearer token-{tenant}", **(headers or {})}
        if self.wire:
            response = urllib3.request(
                method, self.local.url + path, body=data, headers=sent, retries=False, redirect=False, timeout=60.0
            )  # (urllib3's own read timeout is 3 s: the local API on a busy machine may take longer)
            return Answer(response.status, response.headers.get("Content-Type", ""), json.loads(response.data or b"{}"))
        sent["Content-Length"] = str(len(data or b""))
        answer = self.local.handle(method, path, sent, io.BytesIO(data or b""))
        return Answer(answer.status, answer.headers.get("Content-Type", ""), json.loads(answer.body or b"{}"))

    def ok(self, method: str, path: str, body: Any = None, tenant: str = "acme") -> Any:
        answer = self.call(method, path, body, tenant)
        assert answer.status in (200, 201), (method, path, answer)
        return answer.body


@dataclass
class Receivers:
    """Each tenant's loopback receiver (running for the module), and what each got during the current test."""

    acme: HostileServer
    beta: HostileServer
    before: dict[str, int] = field(default_factory=dict)  # requests each had when the test began

    def url(self, tenant: str, path: str = "/ok") -> str:
        server: HostileServer = getattr(self, tenant)
        return server.url(path)

    def requests(self, tenant: str) -> list[Any]:
        server: HostileServer = getattr(self, tenant)
        return server.requests()[self.before.get(tenant, 0) :]

    def seen(self) -> dict[str, list[str]]:
        return {tenant: [r.path for r in self.requests(tenant)] for tenant in ("acme", "beta")}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[HostileServer, HostileServer]]:
    with HostileServer() as acme, HostileServer() as beta:
        yield acme, beta


@pytest.fixture
def receivers(servers: tuple[HostileServer, HostileServer]) -> Receivers:
    acme, beta = servers
    return Receivers(acme, beta, {"acme": len(acme.requests()), "beta": len(beta.requests())})


@pytest.fixture
def tsettings(settings: Settings, receivers: Receivers) -> Settings:
    return tenant_settings(settings, receivers.acme.port, receivers.beta.port)


@pytest.fixture
def api(server: tuple[LocalApi, _Current], dynamodb: Any, tsettings: Settings, clock: FakeClock) -> Iterator[Api]:
    local, current = server
    current.factory = lambda: Client(tsettings, dynamodb=dynamodb, clock=clock)
    yield Api(local)
    current.factory = None


@pytest.fixture
def bystander_port(server: tuple[LocalApi, _Current]) -> int:
    """A port of 127.0.0.1 that listens but is in no tenant's targets: the API's own."""
    return int(server[0].url.rsplit(":", 1)[1])


# -- beta's world, and proof that it is untouched ----------------------------------------------------------------
BETA_SECRET_HEADERS = {"Authorization": "env:PUNCTUAL_SECRET_TENANT_BETA__TOKEN"}


@dataclass
class Beta:
    """Beta's tasks, schedule and occurrence as made through the API, and its items as stored then."""

    dynamodb: Any
    settings: Settings
    receivers: Receivers
    api: Api
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    listing: list[str] = field(default_factory=list)

    def assert_untouched(self) -> None:
        """Beta's items are what they were, its listing and schedules are its own, and its receiver got nothing."""
        assert snapshot(self.dynamodb, self.settings, "beta/") == self.items
        assert sorted(t["task_id"] for t in self.api.ok("GET", "/v1/tasks", tenant="beta")["tasks"]) == self.listing
        assert [s["schedule_id"] for s in self.api.ok("GET", "/v1/schedules", tenant="beta")["schedules"]] == [
            "reports"
        ]
        assert self.receivers.requests("beta") == []


@pytest.fixture(scope="module")
def beta_made() -> dict[str, dict[str, Any]]:
    """Beta's items as the API made them in the module's first test (each later test is given a copy)."""
    return {}


@pytest.fixture
def beta(
    api: Api, dynamodb: Any, tsettings: Settings, receivers: Receivers, beta_made: dict[str, dict[str, Any]]
) -> Beta:
    """Beta's world: made through the API once for the module, and written as made into each test's table."""
    if beta_made:
        put(dynamodb, tsettings, *beta_made.values())
    else:
        make_beta(api, receivers)
        beta_made.update(snapshot(dynamodb, tsettings, "beta/"))
    world = Beta(dynamodb, tsettings, receivers, api)
    world.items = snapshot(dynamodb, tsettings, "beta/")
    world.listing = sorted(t["task_id"] for t in api.ok("GET", "/v1/tasks", tenant="beta")["tasks"])
    assert world.listing == ["inv-1", "inv-2", "inv-3", "reports@20300601T120220.000Z"]
    assert api.ok("GET", "/v1/tasks/inv-1", tenant="beta")["task_id"] == "inv-1"  # the ids attacked below exist
    return world


def make_beta(api: Api, receivers: Receivers) -> None:
    """Beta's tasks (a signed webhook with a secret header, an SQS message, an event) and its schedule."""
    due = from_ms(LATER).isoformat()
    hook = {
        "kind": "http",
        "url": receivers.url("beta"),
        "secret_headers": BETA_SECRET_HEADERS,
        "signing_secret": "env:PUNCTUAL_SECRET_TENANT_BETA__HOOK",
    }
    api.ok("POST", "/v1/tasks", {"task_id": "inv-1", "due_at": due, "action": hook, "payload": {"n": 1}}, "beta")
    api.ok(
        "POST",
        "/v1/tasks",
        {"task_id": "inv-2", "due_at": due, "action": aws_action("sqs", arns("beta")["sqs"])},
        "beta",
    )
    api.ok(
        "POST",
        "/v1/tasks",
        {
            "task_id": "inv-3",
            "due_at": due,
            "action": aws_action("eventbridge", arns("beta")["eventbridge"], "punctual.beta"),
        },
        "beta",
    )
    # A schedule with one occurrence made (due 2 min after now: outside a poll's window, inside what is made ahead)
    api.ok(
        "POST",
        "/v1/schedules",
        {
            "schedule_id": "reports",
            "expression": "rate(1 hour)",
            "action": hook,
            "start_at": from_ms(FIXED_NOW_MS + 120_000).isoformat(),
        },
        "beta",
    )


def assert_refused(answer: Answer, status: int, field: str | None = None, kind: str = "invalid") -> None:
    """``answer`` is the problem ``status`` of type ``kind``, naming ``field`` (or ``action.<kind>.<field>``, the
    model's own spelling of an action's field), and holding nothing but the problem."""
    assert answer.status == status, answer
    assert answer.content_type == "application/problem+json", answer
    assert answer.body["type"] == f"/problems/{kind}", answer
    assert set(answer.body) <= PROBLEM_KEYS, answer
    if field is not None:
        head, _, leaf = field.rpartition(".")
        assert answer.body["field"] == field or (
            head == "action"
            and answer.body["field"].startswith("action.")
            and answer.body["field"].endswith("." + leaf)
        ), answer


# -- the fire side -----------------------------------------------------------------------------------------------
@dataclass
class Firing:
    """Items written as acme's direct-table role writes them, fired by the real poller and executor."""

    dynamodb: Any
    settings: Settings
    receivers: Receivers
    aws: FakeAws
    env: ActionEnv
    store: DynamoStores
    client: Client  # the tenant-less client forged items are built with

    def now(self) -> int:
        return int(SystemClock().wall_ms())

    def forge(self, key: str, action: dict[str, Any], **attributes: Any) -> str:
        now = self.now()
        put(self.dynamodb, self.settings, forge(self.client, key, action, now - 5, now, **attributes))
        return key

    def control(self) -> str:
        """Acme's own task to its own receiver (``/control``): proof that the round fired what it may."""
        return self.forge(
            "acme/control",
            http_action(self.receivers.url("acme", "/control"), "env:PUNCTUAL_SECRET_TENANT_ACME__TOKEN"),
        )

    def fire(self, rounds: int = 1, done: Callable[[], bool] | None = None) -> tuple[list[Any], list[Any]]:
        return poll_and_fire(self.store, self.settings, self.env, rounds, done)

    def raw(self, key: str) -> dict[str, Any]:
        item: dict[str, Any] = self.dynamodb.get_item(
            TableName=self.settings.table_name, Key={"task_id": {"S": key}}, ConsistentRead=True
        )["Item"]
        return item

    def status(self, key: str) -> str:
        return str(self.raw(key)["status"]["S"])

    def detail(self, key: str) -> str:
        return str(self.raw(key).get("detail", {}).get("S", ""))

    def assert_only_the_control_was_sent(self) -> None:
        """The control reached acme's receiver, once, with acme's own secret; nothing else went anywhere."""
        assert self.status("acme/control") == "SUCCEEDED", self.detail("acme/control")
        assert self.receivers.seen() == {"acme": ["/control"], "beta": []}
        (sent,) = self.receivers.requests("acme")
        assert sent.headers["authorization"] == SECRET_VALUES["PUNCTUAL_SECRET_TENANT_ACME__TOKEN"]
        assert self.aws.calls == []


@pytest.fixture
def firing(dynamodb: Any, tsettings: Settings, receivers: Receivers, tmp_path: Path) -> Iterator[Firing]:
    aws = FakeAws()
    env = action_env(tsettings, aws, tmp_path / "secrets")
    store = DynamoStores.from_settings(dynamodb, tsettings)
    yield Firing(dynamodb, tsettings, receivers, aws, env, store, Client(tsettings, dynamodb=dynamodb))
    env.close()


def assert_failed_unsent(firing: Firing, key: str, reason: str) -> None:
    """``key`` was recorded FAILED for ``reason``, and its detail holds no secret's value."""
    assert firing.status(key) == "FAILED", (key, firing.raw(key))
    detail = firing.detail(key)
    assert reason in detail, (key, detail)
    assert not any(stolen in detail for stolen in STOLEN), detail


# == 1. secrets ==================================================================================================
STOLEN_REFS = {
    "beta-env": "env:PUNCTUAL_SECRET_TENANT_BETA__TOKEN",
    "beta-file": "file:tenants/beta/token",
    "beta-file-dotdot": "file:tenants/acme/../beta/token",
    "beta-ssm": "ssm:/punctual/tenants/beta/token",
    "beta-ssm-arn": "ssm:arn:aws:ssm:us-east-1:123456789012:parameter/punctual/tenants/beta/token",
    "beta-ssm-dotdot": "ssm:/punctual/tenants/acme/../beta/token",
    "beta-secretsmanager": "secretsmanager:punctual/tenants/beta/token",
    "beta-secretsmanager-key": "secretsmanager:punctual/tenants/beta/token#key",
    "beta-secretsmanager-arn": "secretsmanager:arn:aws:secretsmanager:us-east-1:123456789012:secret:"
    "punctual/tenants/beta/token",
    "beta-secretsmanager-dotdot": "secretsmanager:punctual/tenants/acme/../beta/token",
    "acme-x-env": "env:PUNCTUAL_SECRET_TENANT_ACME_X__TOKEN",  # tenant acme-x's: a name that extends acme's
    "acme-x-ssm": "ssm:/punctual/tenants/acme-x/token",
    "operator-env": "env:PUNCTUAL_SECRET_OPS",
    "operator-file": "file:token",
    "operator-ssm": "ssm:/punctual/ops/token",
    "operator-secretsmanager": "secretsmanager:punctual/ops",
    "process-env": "env:AWS_SECRET_ACCESS_KEY",
}
OWN_REFS = [
    "env:PUNCTUAL_SECRET_TENANT_ACME__TOKEN",
    "file:tenants/acme/token",
    "ssm:/punctual/tenants/acme/token",
    "secretsmanager:punctual/tenants/acme/token#key",
]


def http_action(url: str, ref: str | None = None, secret_field: str = "secret_headers") -> dict[str, Any]:
    action: dict[str, Any] = {"kind": "http", "url": url}
    if ref is not None:
        action[secret_field] = {"Authorization": ref} if secret_field == "secret_headers" else ref
    return action


def attempts_with_action(api: Api, action: dict[str, Any]) -> dict[str, Answer]:
    """``action`` given by acme to each route that takes one: a task, a schedule, a change of its own schedule."""
    return {
        "POST /v1/tasks": api.call("POST", "/v1/tasks", {"due_at": from_ms(LATER).isoformat(), "action": action}),
        "POST /v1/schedules": api.call(
            "POST",
            "/v1/schedules",
            {
                "schedule_id": "stolen",
                "expression": "rate(1 hour)",
                "action": action,
                "start_at": from_ms(LATER).isoformat(),
            },
        ),
        "PATCH /v1/schedules/own": api.call("PATCH", "/v1/schedules/own", {"action": action}),
    }


@pytest.fixture
def acme_own(api: Api, beta: Beta, receivers: Receivers) -> dict[str, dict[str, Any]]:
    """Acme's own schedule (which the attacks try to change), and acme's items as stored then."""
    api.ok(
        "POST",
        "/v1/schedules",
        {
            "schedule_id": "own",
            "expression": "rate(1 hour)",
            "action": http_action(receivers.url("acme")),
            "start_at": from_ms(LATER).isoformat(),
        },
    )
    return snapshot(beta.dynamodb, beta.settings, "acme/")


def test_a_tenant_may_use_its_own_secrets_targets_and_event_source(
    api: Api, beta: Beta, receivers: Receivers, acme_own: dict[str, Any]
) -> None:
    # Given acme's own secrets, receiver, ARNs and event sources (what the refusals below must not refuse)
    own = [http_action(receivers.url("acme"), ref, f) for ref in OWN_REFS for f in ("secret_headers", "signing_secret")]
    own += [aws_action(kind, arns("acme")[kind]) for kind in AWS_KINDS]
    own.append(aws_action("eventbridge", arns("acme")["eventbridge"], "punctual.acme.orders"))
    for action in own:
        # When acme schedules a task with each  Then it is stored (and cancelled: acme's quota holds 8 at once)
        answer = api.call("POST", "/v1/tasks", {"due_at": from_ms(LATER).isoformat(), "action": action})
        assert answer.status == 201, (action, answer)
        api.ok("POST", f"/v1/tasks/{answer.body['task_id']}/cancel")
    # And beta's world is as it was
    beta.assert_untouched()


@pytest.mark.parametrize("ref", list(STOLEN_REFS.values()), ids=list(STOLEN_REFS))
def test_another_tenants_secret_is_refused_when_scheduled(
    api: Api, beta: Beta, receivers: Receivers, acme_own: dict[str, Any], ref: str
) -> None:
    for secret_field in ("secret_headers", "signing_secret"):
        # Given acme's webhook to its own receiver, naming as a header's or as its signing secret a secret of
        # beta's, of the operator's or of the process
        action = http_action(receivers.url("acme"), ref, secret_field)
        # When acme gives it to each route that takes an action
        answers = attempts_with_action(api, action)
        # Then each is a 422 naming that field
        for answer in answers.values():
            assert_refused(answer, 422, f"action.{secret_field}")
    # And nothing was stored or changed, acme's or beta's
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == acme_own
    beta.assert_untouched()


FORGED_SECRETS = {  # secrets acme's forged items name, by whose they are
    "beta-env": ["env:PUNCTUAL_SECRET_TENANT_BETA__TOKEN", "env:PUNCTUAL_SECRET_TENANT_BETA__HOOK"],
    "beta-file": ["file:tenants/beta/token"],
    "beta-ssm": [
        "ssm:/punctual/tenants/beta/token",
        "ssm:arn:aws:ssm:us-east-1:123456789012:parameter/punctual/tenants/beta/token",
    ],
    "beta-secretsmanager": [
        "secretsmanager:punctual/tenants/beta/token",
        "secretsmanager:punctual/tenants/beta/token#key",
    ],
    "acme-x": ["env:PUNCTUAL_SECRET_TENANT_ACME_X__TOKEN", "ssm:/punctual/tenants/acme-x/token"],
    "operator": ["env:PUNCTUAL_SECRET_OPS", "file:token", "ssm:/punctual/ops/token", "secretsmanager:punctual/ops"],
}


@pytest.mark.parametrize("whose", list(FORGED_SECRETS))
def test_a_forged_item_naming_another_tenants_secret_fails_when_fired_and_sends_nothing(
    firing: Firing, whose: str
) -> None:
    # Given items written under acme's keys that send acme's own receiver someone else's secrets, as a header
    # and as the signing secret, and acme's control task
    keys = [
        firing.forge(
            f"acme/steal-{secret_field}-{i}",
            http_action(firing.receivers.url("acme", f"/steal-{i}"), ref, secret_field),
        )
        for i, ref in enumerate(FORGED_SECRETS[whose])
        for secret_field in ("secret_headers", "signing_secret")
    ]
    firing.control()
    # When the poller and an executor run
    firing.fire()
    # Then each forged item is FAILED for the secret's reference, and no request, no secret fetch was made for it
    for key in keys:
        assert_failed_unsent(firing, key, "secret reference")
    firing.assert_only_the_control_was_sent()


def test_a_link_in_its_own_folder_to_another_tenants_file_fails_when_fired_and_sends_nothing(firing: Firing) -> None:
    # Given acme's tasks naming, inside acme's own folder, its links to beta's file and to beta's folder (names
    # its rules allow: the links are followed only when the task fires), as a header and as the signing secret
    refs = ["file:tenants/acme/beta-token", "file:tenants/acme/beta/token"]
    keys = [
        firing.forge(
            f"acme/link-{secret_field}-{i}",
            http_action(firing.receivers.url("acme", f"/link-{i}"), ref, secret_field),
        )
        for i, ref in enumerate(refs)
        for secret_field in ("secret_headers", "signing_secret")
    ]
    firing.control()
    # When the poller and an executor run
    firing.fire()
    # Then each is FAILED, the file being outside acme's folder once its links are resolved; nothing was sent
    for key in keys:
        assert_failed_unsent(firing, key, "outside the tenant's folder")
    firing.assert_only_the_control_was_sent()


def test_a_forged_item_whose_action_the_model_refuses_is_failed_unfired(firing: Firing) -> None:
    # Given items under acme's keys whose action JSON was edited to hold what no model accepts: a secret path
    # climbing out of acme's namespace, and AWS's own credentials
    refs = ["file:tenants/acme/../beta/token", "ssm:/punctual/tenants/acme/../beta/token", "env:AWS_SECRET_ACCESS_KEY"]
    keys = [
        firing.forge(f"acme/edited-{i}", http_action(firing.receivers.url("acme", f"/edited-{i}"), ref))
        for i, ref in enumerate(refs)
    ]
    firing.control()
    # When they are due and fired
    firing.fire()
    # Then each is FAILED as undecodable; only the control was sent
    for key in keys:
        assert_failed_unsent(firing, key, "undecodable item")
    firing.assert_only_the_control_was_sent()


# == 2. targets ==================================================================================================
def target_cases(acme_port: int, beta_port: int, bystander: int) -> dict[str, tuple[dict[str, Any], str]]:
    """Each hostile target: the action, and the field its refusal names."""
    urls = {
        "beta-port": f"http://127.0.0.1:{beta_port}/ok",
        "beta-port-https": f"https://127.0.0.1:{beta_port}/ok",
        "bystander-port": f"http://127.0.0.1:{bystander}/v1/tasks",
        "port-80": "http://127.0.0.1/",
        "dynamodb-local-port": "http://127.0.0.1:8000/",
        "other-loopback": f"http://127.0.0.2:{acme_port}/ok",
        "localhost": f"http://localhost:{acme_port}/ok",
        "short-form": f"http://127.1:{beta_port}/ok",
        "decimal": f"http://2130706433:{beta_port}/ok",
        "hex": f"http://0x7f000001:{beta_port}/ok",
        "v6-mapped": f"http://[::ffff:127.0.0.1]:{beta_port}/ok",
        "v6-loopback": f"http://[::1]:{acme_port}/ok",
        "credentials-to-beta": f"http://127.0.0.1:{acme_port}@127.0.0.1:{beta_port}/ok",
        "metadata": "http://169.254.169.254/latest/meta-data/",
    }
    cases: dict[str, tuple[dict[str, Any], str]] = {k: (http_action(v), "action.url") for k, v in urls.items()}
    fields = {
        "lambda": "action.function_arn",
        "sqs": "action.queue_arn",
        "sns": "action.topic_arn",
        "eventbridge": "action.event_bus_arn",
    }
    for kind in AWS_KINDS:
        cases[f"{kind}-beta"] = (aws_action(kind, arns("beta")[kind]), fields[kind])
        cases[f"{kind}-operator"] = (aws_action(kind, arns("ops")[kind]), fields[kind])
    cases["lambda-beta-qualified"] = (aws_action("lambda", arns("beta")["lambda"] + ":$LATEST"), fields["lambda"])
    cases["lambda-acme-qualified"] = (aws_action("lambda", arns("acme")["lambda"] + ":prod"), fields["lambda"])
    cases["sqs-acme-name-other-account"] = (
        aws_action("sqs", arns("acme")["sqs"].replace("123456789012", "999999999999")),
        fields["sqs"],
    )
    return cases


TARGET_CASE_IDS = list(target_cases(1, 2, 3))


@pytest.mark.parametrize("case", TARGET_CASE_IDS)
def test_another_tenants_or_a_private_target_is_refused_when_scheduled(
    api: Api, beta: Beta, receivers: Receivers, acme_own: dict[str, Any], bystander_port: int, case: str
) -> None:
    # Given an action aimed at beta's receiver or ARNs, the operator's ARNs, or a loopback port not acme's
    action, field_name = target_cases(receivers.acme.port, receivers.beta.port, bystander_port)[case]
    # When acme gives it to each route that takes an action
    answers = attempts_with_action(api, action)
    # Then each is a 422 naming the target's field
    for answer in answers.values():
        assert_refused(answer, 422, field_name)
    # And nothing was stored or changed; no receiver was called
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == acme_own
    beta.assert_untouched()
    assert receivers.seen() == {"acme": [], "beta": []}


@pytest.mark.parametrize(
    "source",
    [
        "punctual",
        "punctual.beta",
        "punctual.beta.orders",
        "punctual.acmex",
        "punctual.acme-x",
        "punctual-acme",
        "punctual.acme_",
        "acme",
        "punctual.",
        "beta.punctual.acme",
    ],
)
def test_an_event_source_not_the_tenants_own_is_refused(
    api: Api, beta: Beta, acme_own: dict[str, Any], source: str
) -> None:
    # Given an event on acme's own bus whose source speaks as the operator, as beta, or as a name next to acme's
    action = aws_action("eventbridge", arns("acme")["eventbridge"], source)
    # When acme gives it to each route that takes an action
    answers = attempts_with_action(api, action)
    # Then each is a 422 naming the source (nothing stored)
    for answer in answers.values():
        assert_refused(answer, 422, "action.source")
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == acme_own
    beta.assert_untouched()


FORGED_TARGETS = {  # the forged items of each round, by what they aim at
    "webhooks": ["http-beta", "http-bystander", "http-beta-spelled"],
    "beta-arns": [f"{k}-beta" for k in AWS_KINDS],
    "operator-arns": [f"{k}-operator" for k in AWS_KINDS],
    "event-sources": ["eventbridge-source-beta", "eventbridge-source-operator"],
}


def forged_target(case: str, receivers: Receivers, bystander: int) -> dict[str, Any]:
    if case == "http-beta":
        return http_action(receivers.url("beta", "/stolen"))
    if case == "http-bystander":
        return http_action(f"http://127.0.0.1:{bystander}/v1/tasks")
    if case == "http-beta-spelled":
        return http_action(f"http://[::ffff:127.0.0.1]:{receivers.beta.port}/stolen")
    if case.startswith("eventbridge-source-"):
        return aws_action(
            "eventbridge", arns("acme")["eventbridge"], "punctual.beta" if case.endswith("beta") else "punctual"
        )
    kind, owner = case.split("-")
    return aws_action(kind, arns("beta" if owner == "beta" else "ops")[kind])


@pytest.mark.parametrize("group", list(FORGED_TARGETS))
def test_a_forged_item_aimed_at_another_tenants_target_fails_when_fired_and_sends_nothing(
    firing: Firing, bystander_port: int, group: str
) -> None:
    # Given items under acme's keys whose actions aim at beta's receiver or ARNs, the operator's ARNs, a loopback
    # port not acme's, or an event source not acme's; and acme's control task
    keys = [
        firing.forge(f"acme/aimed-{case}", forged_target(case, firing.receivers, bystander_port))
        for case in FORGED_TARGETS[group]
    ]
    firing.control()
    # When the poller and an executor run
    firing.fire()
    # Then each is FAILED, target refused, and nothing was sent: no request, no AWS call
    for key in keys:
        assert_failed_unsent(firing, key, "target refused")
    firing.assert_only_the_control_was_sent()


@pytest.mark.parametrize("route", ["reschedule", "run-now"])
def test_the_api_checks_a_forged_items_action_again_before_moving_it(
    api: Api, beta: Beta, clock: FakeClock, receivers: Receivers, route: str
) -> None:
    # Given an item written under acme's key that sends beta's secret to beta's receiver
    client = Client(beta.settings, dynamodb=beta.dynamodb, clock=clock)
    put(
        beta.dynamodb,
        beta.settings,
        forge(
            client,
            "acme/moved",
            http_action(receivers.url("beta"), BETA_SECRET_HEADERS["Authorization"]),
            LATER,
            FIXED_NOW_MS,
        ),
    )
    before = snapshot(beta.dynamodb, beta.settings, "acme/")
    # When acme asks the API to move it (due now, or another time)
    body = {"due_at": from_ms(LATER + 60_000).isoformat()} if route == "reschedule" else None
    answer = api.call("POST", f"/v1/tasks/moved/{route}", body)
    # Then the API checks its action as a new task's: 422 naming the target, and the item is unchanged
    assert_refused(answer, 422, "action.url")
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == before
    beta.assert_untouched()


# == 3. a forged schedule item ===================================================================================
def forge_schedule(beta: Beta, tenant_attribute: str | None, due_ms: int | None = None) -> dict[str, Any]:
    """Beta's schedule item copied under ``acme/#schedule#evil`` (its definition still names ``beta/reports``), its
    ``tenant`` attribute ``tenant_attribute`` (None: none), in the due index at ``due_ms`` if given."""
    item = dict(beta.items["beta/#schedule#reports"])
    item["task_id"] = {"S": "acme/#schedule#evil"}
    item.pop("tenant")
    if tenant_attribute is not None:
        item["tenant"] = {"S": tenant_attribute}
    if due_ms is not None:
        item["due_ms"] = {"N": str(due_ms)}
        item["due_bucket"] = {"S": index_key(due_ms, shard_of("acme/#schedule#evil", beta.settings.shard_count))}
    assert json.loads(item["definition"]["S"])["schedule_id"] == "beta/reports"
    put(beta.dynamodb, beta.settings, item)
    return item


SCHEDULE_CALLS = {
    "get": ("GET", "/v1/schedules/evil", None),
    "patch": ("PATCH", "/v1/schedules/evil", {"expression": "rate(2 hours)"}),
    "patch-action": ("PATCH", "/v1/schedules/evil", {"action": {"kind": "log"}}),
    "delete": ("DELETE", "/v1/schedules/evil", None),
    "pause": ("POST", "/v1/schedules/evil/pause", None),
    "resume": ("POST", "/v1/schedules/evil/resume", None),
    "run-now": ("POST", "/v1/schedules/evil/run-now", None),
    "history": ("GET", "/v1/schedules/evil/history", None),
    "create-over": (
        "POST",
        "/v1/schedules",
        {"schedule_id": "evil", "expression": "rate(1 hour)", "action": {"kind": "log"}},
    ),
}
TENANT_ATTRIBUTES = {"acme": "acme", "beta": "beta", "none": None}


@pytest.mark.parametrize("attribute", list(TENANT_ATTRIBUTES))
def test_a_forged_schedule_naming_another_tenants_schedule_is_never_acted_on_through_the_api(
    api: Api, beta: Beta, attribute: str
) -> None:
    # Given a schedule item under acme's key whose definition names beta's schedule (IAM denies this write; the
    # product must not act on it if it exists)
    forged = forge_schedule(beta, TENANT_ATTRIBUTES[attribute])
    # When acme calls every schedule route on it
    answers = {name: api.call(*call) for name, call in SCHEDULE_CALLS.items()}
    # Then each is a 409: the item is unreadable as what its key says, refused as it is (never a 5xx), and no
    # answer holds anything of beta's
    for name, answer in answers.items():
        assert_refused(answer, 409, kind="state")
        assert "reports" not in json.dumps(answer.body), (name, answer)
    # And the forged item is as written, acme lists no schedule, and beta's schedule and occurrence are unchanged
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == {"acme/#schedule#evil": forged}
    assert api.ok("GET", "/v1/schedules")["schedules"] == []
    assert api.ok("GET", "/v1/schedules/reports/history", tenant="beta")["occurrences"][0]["task_id"] == (
        "reports@20300601T120220.000Z"
    )
    beta.assert_untouched()


@pytest.mark.parametrize("attribute", list(TENANT_ATTRIBUTES))
def test_the_poller_quarantines_a_forged_schedule_naming_another_tenants_schedule(beta: Beta, attribute: str) -> None:
    # Given the forged schedule item, due in the index now
    forge_schedule(beta, TENANT_ATTRIBUTES[attribute], due_ms=FIXED_NOW_MS)
    store = DynamoStores.from_settings(beta.dynamodb, beta.settings)
    invoker = RecordingInvoker()
    # When the poller meets it
    report = poller_on(store, invoker, beta.settings).poll(FIXED_NOW_MS)
    # Then it is counted undecodable and taken out of the due index, with the reason kept
    assert report.undecodable == 1
    assert report.occurrences_created == 0
    quarantined = beta.dynamodb.get_item(
        TableName=beta.settings.table_name, Key={"task_id": {"S": "acme/#schedule#evil"}}
    )["Item"]
    assert "due_bucket" not in quarantined
    assert "quarantined_ms" in quarantined
    assert "schedule_id is not the schedule its key names" in quarantined["detail"]["S"]
    # And no occurrence was made, acme's or beta's; nothing was dispatched; beta is unchanged
    assert set(snapshot(beta.dynamodb, beta.settings, "acme/")) == {"acme/#schedule#evil"}
    assert invoker.events == []
    beta.assert_untouched()
    # And the next poll does not meet it again
    assert poller_on(store, RecordingInvoker(), beta.settings).poll(FIXED_NOW_MS + 1_000).undecodable == 0


def test_a_forged_schedule_of_its_own_aimed_at_another_tenant_makes_occurrences_that_fail_when_fired(
    firing: Firing,
) -> None:
    # Given a schedule item of acme's own (its definition names it), written directly, whose action sends beta's
    # secret to beta's receiver, due in the index now
    now = firing.now()
    definition = {
        "action": http_action(firing.receivers.url("beta", "/stolen"), BETA_SECRET_HEADERS["Authorization"]),
        "downtime_policy": "skip",
        "end_at": None,
        "expression": "rate(1 hour)",
        "max_occurrences": None,
        "misfire_grace_ms": 60000,
        "misfire_policy": "skip",
        "payload": None,
        "retry": None,
        "schedule_id": "acme/evil",
        "start_at": from_ms(now).isoformat(),
        "timezone": "UTC",
    }
    key = "acme/#schedule#evil"
    put(
        firing.dynamodb,
        firing.settings,
        {
            "task_id": {"S": key},
            "state": {"S": "ACTIVE"},
            "version": {"N": "1"},
            "definition": {"S": json.dumps(definition)},
            "created_count": {"N": "0"},
            "skipped_count": {"N": "0"},
            "created_ms": {"N": str(now)},
            "updated_ms": {"N": str(now)},
            "next_due_ms": {"N": str(now)},
            "tenant": {"S": "acme"},
            "due_ms": {"N": str(now)},
            "due_bucket": {"S": index_key(now, shard_of(key, firing.settings.shard_count))},
        },
    )
    firing.control()
    # When the poller extends it and an executor fires what it made
    polls, _ = firing.fire()
    # Then its occurrence was made under acme's key and FAILED, target refused: nothing reached beta
    assert polls[0].occurrences_created >= 1
    occurrence = occurrence_id("acme/evil", now)
    assert_failed_unsent(firing, occurrence, "target refused")
    firing.assert_only_the_control_was_sent()


# == 4. forged tenant attributes ==================================================================================
def forge_junk(beta: Beta, count: int, action: dict[str, Any] | None = None) -> list[str]:
    """``count`` items ``acme/junk-NNN`` (PENDING, in the due index) whose tenant attribute says beta."""
    client = Client(beta.settings, dynamodb=beta.dynamodb, clock=FakeClock(wall_ms=FIXED_NOW_MS))
    keys = [f"acme/junk-{i:03d}" for i in range(count)]
    put(
        beta.dynamodb,
        beta.settings,
        *(
            forge(client, key, action or {"kind": "log"}, LATER + i, FIXED_NOW_MS, tenant={"S": "beta"})
            for i, key in enumerate(keys)
        ),
    )
    return keys


def pages(api: Api, tenant: str, limit: int, query: str = "") -> tuple[list[str], list[str]]:
    """Every page of ``tenant``'s listing, ``limit`` a page: the ids in order, and the page tokens given."""
    seen: list[str] = []
    tokens: list[str] = []
    token = None
    for _ in range(200):
        answer = api.ok(
            "GET", f"/v1/tasks?limit={limit}{query}" + (f"&next_token={token}" if token else ""), tenant=tenant
        )
        seen.extend(t["task_id"] for t in answer["tasks"])
        token = answer.get("next_token")
        if not token:
            return seen, tokens
        tokens.append(token)
    raise AssertionError("the pages never ended")


@pytest.mark.parametrize("limit", [1, 3, 1000])
def test_forged_tenant_attributes_never_enter_another_tenants_listing(api: Api, beta: Beta, limit: int) -> None:
    # Given 100 items under acme's keys that say they are beta's (tenant="beta")
    forge_junk(beta, 100)
    # When beta lists its tasks page by page, following each next_token to the end
    seen, tokens = pages(api, "beta", limit)
    # Then it sees exactly its own tasks, each once, and every page token names one of its own
    assert seen == beta.listing
    assert all(base64.urlsafe_b64decode(t + "=" * (-len(t) % 4)).decode().startswith("beta/") for t in tokens)
    assert len(tokens) <= len(beta.items) // limit  # the 100 forged items add no page: beta's items alone
    # And filtered by status, the same
    assert pages(api, "beta", limit, "&status=PENDING")[0] == beta.listing
    # And acme's listing holds none of them either (they are in no tenant's index under acme's key)
    assert pages(api, "acme", limit)[0] == []
    beta.assert_untouched()


@pytest.mark.parametrize(
    "task_id", ["beta/inv-1", "beta/", "beta", "acme", "acme0/x", "acmex/x", "#schedule#x", "executor#x", "/beta/inv-1"]
)
def test_a_page_token_naming_another_tenants_position_is_refused(api: Api, beta: Beta, task_id: str) -> None:
    # Given a page token acme made itself, naming a position outside its own keys
    token = encode_token(task_id)
    # When acme lists from it  Then the token is refused, naming it, and nothing is listed
    assert_refused(api.call("GET", f"/v1/tasks?next_token={token}"), 422, "next_token")
    beta.assert_untouched()


def test_a_page_token_climbing_out_of_the_tenants_keys_lists_only_its_own(api: Api, beta: Beta) -> None:
    # Given acme's own task, and a token that starts with acme's prefix but climbs towards beta's
    api.ok("POST", "/v1/tasks", {"task_id": "a-1", "due_at": from_ms(LATER).isoformat(), "action": {"kind": "log"}})
    for task_id in ["acme/../beta/inv-1", "acme/", "acme/\uffff"]:
        # When acme lists from it  Then only acme's tasks can come, never beta's
        answer = api.ok("GET", f"/v1/tasks?next_token={encode_token(task_id)}")
        assert {t["task_id"] for t in answer["tasks"]} <= {"a-1"}, task_id
    beta.assert_untouched()


KINDS = ["log", "http", *AWS_KINDS]


def own_action(kind: str, receivers: Receivers) -> dict[str, Any]:
    """An action of ``kind`` that acme may fire (its own receiver, its own ARN and event source)."""
    if kind == "log":
        return {"kind": "log", "message": "forged"}
    if kind == "http":
        return http_action(receivers.url("acme", "/forged"), "env:PUNCTUAL_SECRET_TENANT_ACME__TOKEN")
    return aws_action(kind, arns("acme")[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_forged_tenant_attributes_are_failed_not_fired(firing: Firing, kind: str) -> None:
    # Given items under acme's keys, with actions acme may fire, whose tenant attribute says beta (or zeta); and
    # acme's control task
    keys = [
        firing.forge(f"acme/junk-{tenant}", own_action(kind, firing.receivers), tenant={"S": tenant})
        for tenant in ("beta", "zeta")
    ]
    firing.control()
    # When the poller and an executor run
    firing.fire()
    # Then each is recorded FAILED as unreadable (out of the due index, never started), and nothing of them was
    # sent: no request, no AWS call
    for key in keys:
        assert_failed_unsent(firing, key, "is not its key's tenant")
        assert "due_bucket" not in firing.raw(key)
        assert "fired_ms" not in firing.raw(key)
    firing.assert_only_the_control_was_sent()


def test_forged_tenant_attributes_do_not_use_up_another_tenants_quota(api: Api, beta: Beta) -> None:
    # Given beta holding 4 active tasks of its quota of 10, and 100 active items under acme's keys that say beta
    forge_junk(beta, 100)
    room = BETA_QUOTAS["active_tasks"] - len(beta.listing)
    # When beta schedules up to its quota
    answers = [
        api.call(
            "POST",
            "/v1/tasks",
            {"task_id": f"more-{i}", "due_at": from_ms(LATER).isoformat(), "action": {"kind": "log"}},
            tenant="beta",
        )
        for i in range(room + 1)
    ]
    # Then it has all of its room (the forged items are not counted), and only past it the quota answers
    assert [a.status for a in answers] == [201] * room + [429]
    assert_refused(answers[-1], 429, kind="quota")
    assert answers[-1].body["quota"] == "active_tasks"


# == 5. a forged occurrence ======================================================================================
@pytest.mark.parametrize("shape", ["plain", "own-schedule-name", "victims-schedule-name", "victims-name-spelled"])
def test_a_forged_occurrence_naming_another_tenants_schedule_is_not_fired(firing: Firing, shape: str) -> None:
    # Given an item under acme's key, with an action acme may fire, that says it is an occurrence of beta's
    # schedule (schedule_id "beta/reports"), and acme's control task
    now = firing.now()
    key = {
        "plain": "acme/x",
        "own-schedule-name": occurrence_id("acme/evil", now - 5),
        "victims-schedule-name": occurrence_id("acme/reports", now - 5),
        "victims-name-spelled": occurrence_id("acme/beta.reports", now - 5),
    }[shape]
    firing.forge(
        key, own_action("http", firing.receivers), schedule_id={"S": "beta/reports"}, schedule_version={"N": "1"}
    )
    firing.control()
    # When the poller and an executor run
    firing.fire()
    # Then it is FAILED as unreadable, never started
    assert_failed_unsent(firing, key, "is not the schedule its key names")
    assert "fired_ms" not in firing.raw(key)
    firing.assert_only_the_control_was_sent()


def test_a_forged_occurrence_stays_out_of_another_tenants_history_and_changes(
    api: Api, beta: Beta, clock: FakeClock
) -> None:
    # Given items under acme's keys that name beta's schedule, one shaped as its next occurrence would be
    client = Client(beta.settings, dynamodb=beta.dynamodb, clock=clock)
    forged = [
        forge(
            client,
            key,
            {"kind": "log"},
            LATER,
            FIXED_NOW_MS,
            schedule_id={"S": "beta/reports"},
            schedule_version={"N": "1"},
        )
        for key in ("acme/x", occurrence_id("acme/reports", FIXED_NOW_MS + 120_000))
    ]
    put(beta.dynamodb, beta.settings, *forged)
    acme_items = snapshot(beta.dynamodb, beta.settings, "acme/")
    # When beta reads its schedule's history  Then only its own occurrence is there
    history = api.ok("GET", "/v1/schedules/reports/history", tenant="beta")["occurrences"]
    assert [t["task_id"] for t in history] == ["reports@20300601T120220.000Z"]
    # And when beta changes, pauses and deletes its schedule, acme's items are not touched by its clean-ups
    api.ok("PATCH", "/v1/schedules/reports", {"expression": "rate(2 hours)"}, tenant="beta")
    api.ok("POST", "/v1/schedules/reports/pause", tenant="beta")
    api.ok("DELETE", "/v1/schedules/reports", tenant="beta")
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == acme_items


# == 6. quotas ==================================================================================================
def _tasks(api: Api, count: int, prefix: str = "t") -> list[Any]:
    return [
        api.ok(
            "POST",
            "/v1/tasks",
            {"task_id": f"{prefix}-{i}", "due_at": from_ms(LATER).isoformat(), "action": {"kind": "log"}},
        )
        for i in range(count)
    ]


def _schedule(api: Api, name: str, expression: str, **fields: Any) -> Any:
    return api.ok(
        "POST",
        "/v1/schedules",
        {
            "schedule_id": name,
            "expression": expression,
            "action": {"kind": "log"},
            "start_at": from_ms(FIXED_NOW_MS + 86_400_000).isoformat(),
            **fields,
        },
    )


def _new_schedule(api: Api, expression: str = "rate(1 hour)", **fields: Any) -> Answer:
    return api.call(
        "POST",
        "/v1/schedules",
        {"schedule_id": "one-more", "expression": expression, "action": {"kind": "log"}, **fields},
    )


QUOTA_CASES: dict[str, tuple[str, Callable[[Api], object], Callable[[Api], Answer]]] = {
    # name: (quota, what acme holds first, the call past the quota)
    "task-past-active-tasks": (
        "active_tasks",
        lambda api: _tasks(api, 8),
        lambda api: api.call("POST", "/v1/tasks", {"due_at": from_ms(LATER).isoformat(), "action": {"kind": "log"}}),
    ),
    "schedule-occurrences-past-active-tasks": (
        "active_tasks",
        lambda api: _tasks(api, 7),
        lambda api: _new_schedule(api, "rate(1 minute)", start_at=from_ms(FIXED_NOW_MS + 10_000).isoformat()),
    ),
    "run-now-past-active-tasks": (
        "active_tasks",
        lambda api: (_schedule(api, "s", "rate(1 hour)"), _tasks(api, 8)),
        lambda api: api.call("POST", "/v1/schedules/s/run-now"),
    ),
    "schedule-past-schedules": (
        "schedules",
        lambda api: (_schedule(api, "a", "rate(1 hour)"), _schedule(api, "b", "rate(1 hour)")),
        _new_schedule,
    ),
    "paused-schedules-count": (
        "schedules",
        lambda api: (
            _schedule(api, "a", "rate(1 hour)"),
            _schedule(api, "b", "rate(1 hour)"),
            api.ok("POST", "/v1/schedules/a/pause"),
        ),
        _new_schedule,
    ),
    "schedule-past-rate": ("schedule_rate_per_s", lambda api: None, lambda api: _new_schedule(api, "rate(10 seconds)")),
    "schedules-adding-up-past-rate": (
        "schedule_rate_per_s",
        lambda api: _schedule(api, "a", "rate(30 seconds)"),
        lambda api: _new_schedule(api, "rate(40 seconds)"),
    ),
    "patch-past-rate": (
        "schedule_rate_per_s",
        lambda api: _schedule(api, "a", "rate(1 hour)"),
        lambda api: api.call("PATCH", "/v1/schedules/a", {"expression": "rate(1 second)"}),
    ),
    "resume-past-rate": (
        "schedule_rate_per_s",
        lambda api: (
            _schedule(api, "a", "rate(30 seconds)"),
            api.ok("POST", "/v1/schedules/a/pause"),
            _schedule(api, "b", "rate(30 seconds)"),
        ),
        lambda api: api.call("POST", "/v1/schedules/a/resume"),
    ),
    "task-past-retry-attempts": (
        "retry_attempts",
        lambda api: None,
        lambda api: api.call(
            "POST",
            "/v1/tasks",
            {"due_at": from_ms(LATER).isoformat(), "action": {"kind": "log"}, "retry": {"max_attempts": 4}},
        ),
    ),
    "schedule-past-retry-attempts": (
        "retry_attempts",
        lambda api: None,
        lambda api: _new_schedule(api, retry={"max_attempts": 100}),
    ),
    "patch-past-retry-attempts": (
        "retry_attempts",
        lambda api: _schedule(api, "a", "rate(1 hour)"),
        lambda api: api.call("PATCH", "/v1/schedules/a", {"retry": {"max_attempts": 4}}),
    ),
}


@pytest.mark.parametrize("case", list(QUOTA_CASES))
def test_each_quota_is_refused_with_a_429_naming_it_and_nothing_is_stored(api: Api, beta: Beta, case: str) -> None:
    quota, hold, past = QUOTA_CASES[case]
    # Given acme holding what its quotas allow (beta, with more room, holding its own)
    assert ACME_QUOTAS[quota] < BETA_QUOTAS[quota]
    hold(api)
    before = snapshot(beta.dynamodb, beta.settings, "acme/")
    # When acme makes one call past a quota
    answer = past(api)
    # Then it is a 429 quota problem naming that quota, and nothing was stored or changed
    assert_refused(answer, 429, kind="quota")
    assert answer.body["quota"] == quota, answer
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == before
    beta.assert_untouched()
    # And beta's room is its own: it may still schedule (acme's use of its quota does not count against beta's)
    assert (
        api.call(
            "POST",
            "/v1/tasks",
            {
                "due_at": from_ms(LATER).isoformat(),
                "action": {"kind": "log"},
                "retry": {"max_attempts": BETA_QUOTAS["retry_attempts"]},
            },
            tenant="beta",
        ).status
        == 201
    )


def test_a_redrive_past_active_tasks_is_a_429_naming_it_and_the_task_stays_failed(
    api: Api, dynamodb: Any, tsettings: Settings
) -> None:
    # Given acme's FAILED task (as its executor recorded it), then acme holding its quota of active tasks
    api.ok("POST", "/v1/tasks", {"task_id": "failed", "due_at": from_ms(LATER).isoformat(), "action": {"kind": "log"}})
    dynamodb.update_item(
        TableName=tsettings.table_name,
        Key={"task_id": {"S": "acme/failed"}},
        UpdateExpression="SET #st = :failed, finished_ms = :now REMOVE due_bucket",
        ExpressionAttributeNames={"#st": "status"},
        ExpressionAttributeValues={":failed": {"S": "FAILED"}, ":now": {"N": str(FIXED_NOW_MS)}},
    )
    _tasks(api, int(ACME_QUOTAS["active_tasks"]))
    before = snapshot(dynamodb, tsettings, "acme/")
    # When acme redrives it
    answer = api.call("POST", "/v1/tasks/failed/redrive")
    # Then it is a 429 quota problem naming active_tasks, and nothing changed: the task is still FAILED
    assert_refused(answer, 429, kind="quota")
    assert answer.body["quota"] == "active_tasks", answer
    assert snapshot(dynamodb, tsettings, "acme/") == before
    # And once a task is cancelled, the redrive goes through
    api.ok("POST", "/v1/tasks/t-0/cancel")
    assert api.ok("POST", "/v1/tasks/failed/redrive")["status"] == "PENDING"


@pytest.mark.parametrize(
    ("key", "asked", "tried"),
    [("acme/bomb", 100, ACME_QUOTAS["retry_attempts"]), ("bomb", 4, 4)],
    ids=["acme-100", "operator-4"],
)
def test_a_forged_item_is_tried_at_most_its_tenants_retry_attempts(
    firing: Firing, key: str, asked: int, tried: int
) -> None:
    # Given an item whose retry policy asks for ``asked`` attempts 10 ms apart, at a receiver that always fails:
    # under acme's key (a quota of 3), or the operator's (no quota)
    policy = {"max_attempts": asked, "backoff_ms": 10, "max_backoff_ms": 10}
    firing.forge(
        key,
        {**http_action(firing.receivers.url("acme", "/status/500")), "retry_transient": False},
        retry={"S": json.dumps(policy)},
    )
    # When the poller and an executor run until it is finished
    firing.fire(rounds=tried + 3, done=lambda: firing.status(key) not in ("PENDING", "ARMED"))
    # Then it was tried ``tried`` times (the tenant's quota, not what the item asks), and is FAILED saying so
    assert firing.receivers.seen()["acme"] == ["/status/500"] * tried
    assert firing.status(key) == "FAILED"
    assert f"attempt {tried} of {tried} failed, no retry left" in firing.detail(key)


# == 7. ids =====================================================================================================
TASK_ROUTES = {
    "get-task": ("GET", "/v1/tasks/{id}", None),
    "cancel": ("POST", "/v1/tasks/{id}/cancel", None),
    "reschedule": ("POST", "/v1/tasks/{id}/reschedule", {"due_at": from_ms(LATER + 1_000).isoformat()}),
    "run-now": ("POST", "/v1/tasks/{id}/run-now", None),
    "redrive": ("POST", "/v1/tasks/{id}/redrive", None),
}
SCHEDULE_ROUTES = {
    "get-schedule": ("GET", "/v1/schedules/{id}", None),
    "patch-schedule": ("PATCH", "/v1/schedules/{id}", {"expression": "rate(2 hours)"}),
    "delete-schedule": ("DELETE", "/v1/schedules/{id}", None),
    "pause": ("POST", "/v1/schedules/{id}/pause", None),
    "resume": ("POST", "/v1/schedules/{id}/resume", None),
    "run-schedule-now": ("POST", "/v1/schedules/{id}/run-now", None),
    "history": ("GET", "/v1/schedules/{id}/history", None),
}
# Ways of naming beta's item ``{name}`` from acme's side (as written on the request line)
ID_SPELLINGS = [
    "{name}",
    "beta%2F{name}",
    "beta%252F{name}",
    "..%2Fbeta%2F{name}",
    "%2E%2E%2Fbeta%2F{name}",
    "acme%2F..%2Fbeta%2F{name}",
    "x%2F..%2F..%2Fbeta%2F{name}",
    "beta%5C{name}",
    "beta%E2%88%95{name}",
    "beta%EF%BC%8F{name}",
    "beta%00{name}",
    "beta:{name}",
    "beta.{name}",
    "%62eta%2F{name}",
    "beta%2F{name}%3Ftenant=beta",
    "{name}?tenant=beta",
    "{name}%23",
    "BETA%2F{name}",
]


def assert_unreachable(api: Api, route: str) -> None:
    """Every spelling of beta's ids on ``route``, as acme, is a 404 or 422 problem holding nothing of beta's."""
    method, path, body = {**TASK_ROUTES, **SCHEDULE_ROUTES}[route]
    names = ["inv-1", "reports@20300601T120220.000Z"] if route in TASK_ROUTES else ["reports"]
    for name in names:
        for spelling in ID_SPELLINGS:
            answer = api.call(method, path.format(id=spelling.format(name=name)), body)
            assert answer.status in (404, 422), (spelling, answer)
            assert answer.content_type == "application/problem+json", (spelling, answer)
            assert set(answer.body) <= PROBLEM_KEYS, (spelling, answer)


@pytest.mark.parametrize("route", [*TASK_ROUTES, *SCHEDULE_ROUTES])
def test_no_route_reaches_another_tenants_item_by_its_id(api: Api, beta: Beta, route: str) -> None:
    # Given beta's tasks, occurrence and schedule
    # When acme calls the route with each of their ids, spelled to climb out of its namespace
    # Then each is not found or invalid, a problem holding nothing of beta's
    assert_unreachable(api, route)
    # And nothing of beta's changed
    beta.assert_untouched()


@pytest.mark.parametrize("route", ["reschedule", "history"])
def test_ids_sent_over_the_wire_are_refused_alike(api: Api, beta: Beta, route: str) -> None:
    # Given beta's world  When acme sends the same ids to the running server over a socket
    # Then each is refused alike (the HTTP client and server change nothing of what the path names)
    assert_unreachable(Api(api.local, wire=True), route)
    beta.assert_untouched()


BODY_CASES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "task-id-with-tenant": ("POST", "/v1/tasks", {"task_id": "beta/inv-9", "action": {"kind": "log"}}, "task_id"),
    "task-id-climbing": ("POST", "/v1/tasks", {"task_id": "../beta/inv-9", "action": {"kind": "log"}}, "task_id"),
    "task-id-of-beta-occurrence": (
        "POST",
        "/v1/tasks",
        {"task_id": "beta/reports@20300601T120220.000Z", "action": {"kind": "log"}},
        "task_id",
    ),
    "task-tenant-field": ("POST", "/v1/tasks", {"tenant": "beta", "action": {"kind": "log"}}, "tenant"),
    "schedule-id-with-tenant": (
        "POST",
        "/v1/schedules",
        {"schedule_id": "beta/reports", "expression": "rate(1 hour)", "action": {"kind": "log"}},
        "schedule_id",
    ),
    "schedule-tenant-field": (
        "POST",
        "/v1/schedules",
        {"schedule_id": "x", "expression": "rate(1 hour)", "tenant": "beta", "action": {"kind": "log"}},
        "tenant",
    ),
    "patch-schedule-id": ("PATCH", "/v1/schedules/own", {"schedule_id": "beta/reports"}, "schedule_id"),
    "reschedule-task-id": (
        "POST",
        "/v1/tasks/own-1/reschedule",
        {"due_at": "{due}", "task_id": "beta/inv-1"},
        "task_id",
    ),
}


@pytest.mark.parametrize("case", list(BODY_CASES))
def test_a_body_naming_another_tenants_id_is_refused(api: Api, beta: Beta, acme_own: dict[str, Any], case: str) -> None:
    # Given acme's own task
    api.ok("POST", "/v1/tasks", {"task_id": "own-1", "due_at": from_ms(LATER).isoformat(), "action": {"kind": "log"}})
    before = snapshot(beta.dynamodb, beta.settings, "acme/")
    method, path, body, field_name = BODY_CASES[case]
    due = from_ms(LATER).isoformat()
    body = {k: due if v == "{due}" else v for k, v in body.items()}
    if path == "/v1/tasks":
        body["due_at"] = due
    # When acme names one of beta's ids (or beta itself) in a body  Then it is a 422 naming that field
    assert_refused(api.call(method, path, body), 422, field_name)
    # And nothing was stored or changed
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == before
    beta.assert_untouched()


@pytest.mark.parametrize(
    "path",
    [
        "/v1/tasks?tenant=beta",
        "/v1/tasks?tenant=beta&limit=1000",
        "/v1/schedules?tenant=beta",
        "/v1/tasks",
        "/v1/schedules",
    ],
)
def test_a_query_or_header_naming_another_tenant_lists_only_the_callers_own(api: Api, beta: Beta, path: str) -> None:
    # Given acme's task and schedule
    api.ok("POST", "/v1/tasks", {"task_id": "mine", "due_at": from_ms(LATER).isoformat(), "action": {"kind": "log"}})
    _schedule(api, "mine", "rate(1 hour)")
    # When acme lists, naming beta in the query or in headers
    answer = api.call("GET", path, headers={"X-Tenant": "beta", "Tenant": "beta", "X-Punctual-Tenant": "beta"})
    # Then it gets its own, never beta's
    assert answer.status == 200, answer
    listed = answer.body.get("tasks", answer.body.get("schedules"))
    assert [t.get("task_id", t.get("schedule_id")) for t in listed] == ["mine"]
    beta.assert_untouched()


# == the client, where the API has no route ======================================================================
def test_schedule_many_refuses_each_spec_reaching_into_another_tenant(
    dynamodb: Any, tsettings: Settings, clock: FakeClock, receivers: Receivers, bystander_port: int
) -> None:
    # Given a client writing acme's keys (as acme's direct-table role does), and specs of acme's tasks reaching
    # for beta's secrets, targets and event source, past acme's retry quota, and two good ones
    client = Client(tsettings, dynamodb=dynamodb, clock=clock)
    due = from_ms(LATER)
    bad = {
        "acme/secret": (
            http_action(receivers.url("acme"), "env:PUNCTUAL_SECRET_TENANT_BETA__TOKEN"),
            None,
            "action.secret_headers",
        ),
        "acme/signing": (
            http_action(receivers.url("acme"), "ssm:/punctual/tenants/beta/hook", "signing_secret"),
            None,
            "action.signing_secret",
        ),
        "acme/url": (http_action(receivers.url("beta")), None, "action.url"),
        "acme/bystander": (http_action(f"http://127.0.0.1:{bystander_port}/"), None, "action.url"),
        **{
            f"acme/{kind}": (aws_action(kind, arns("beta")[kind]), None, f"action.{field}")
            for kind, field in (
                ("lambda", "function_arn"),
                ("sqs", "queue_arn"),
                ("sns", "topic_arn"),
                ("eventbridge", "event_bus_arn"),
            )
        },
        "acme/source": (aws_action("eventbridge", arns("acme")["eventbridge"], "punctual.beta"), None, "action.source"),
        "acme/retry": ({"kind": "log"}, {"max_attempts": 100}, "retry.max_attempts"),
    }
    specs = [
        {"task_id": key, "due_at": due, "action": action, "retry": retry} for key, (action, retry, _) in bad.items()
    ]
    specs += [
        {"task_id": "acme/good-1", "due_at": due, "action": http_action(receivers.url("acme"))},
        {"task_id": "acme/good-2", "due_at": due, "action": aws_action("sqs", arns("acme")["sqs"])},
    ]
    # When they are scheduled at once
    results = client.schedule_many(specs, threads=4)
    # Then each bad one is invalid, naming its field, and only the good ones are stored
    assert [(r.outcome, r.field) for r in results] == [("invalid", f) for _, _, f in bad.values()] + [
        ("created", None),
        ("created", None),
    ]
    assert sorted(snapshot(dynamodb, tsettings, "acme/")) == ["acme/good-1", "acme/good-2"]
    assert snapshot(dynamodb, tsettings, "beta/") == {}


def test_schedule_many_keeps_a_tenant_within_its_active_task_quota(
    dynamodb: Any, tsettings: Settings, clock: FakeClock
) -> None:
    # Given a client writing acme's keys, and 12 good tasks where acme's quota is 8 active
    client = Client(tsettings, dynamodb=dynamodb, clock=clock)
    specs = [{"task_id": f"acme/q-{i:02d}", "due_at": from_ms(LATER), "action": {"kind": "log"}} for i in range(12)]
    # When they are scheduled one after another
    results = client.schedule_many(specs, threads=1)
    # Then 8 are created and the others refused, nothing of them stored
    assert [r.outcome for r in results] == ["created"] * 8 + ["invalid"] * 4
    assert all("active_tasks" in (r.error or "") for r in results[8:])
    assert len(snapshot(dynamodb, tsettings, "acme/")) == 8


class SlowCounting:
    """The store, whose count of a tenant's active tasks answers 200 ms after it was taken, as a query to DynamoDB
    over a slow network does (moto answers in microseconds, which hides how threads interleave around it)."""

    def __init__(self, store: ClientPort) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def count_active(self, tenant: str) -> int:
        counted = int(self._store.count_active(tenant))
        time.sleep(0.2)
        return counted


def test_schedule_many_on_many_threads_keeps_a_tenant_within_its_active_task_quota(
    dynamodb: Any, tsettings: Settings, clock: FakeClock
) -> None:
    # Given a client writing acme's keys, whose store counts as slowly as DynamoDB does, and 12 good tasks where
    # acme's quota is 8 active
    stores = DynamoStores.from_settings(dynamodb, tsettings)
    client = TaskClient(tsettings, SlowCounting(stores.client), stores.schedules, clock=clock)
    specs = [{"task_id": f"acme/q-{i:02d}", "due_at": from_ms(LATER), "action": {"kind": "log"}} for i in range(12)]
    # When they are scheduled on 16 threads (the default)
    results = client.schedule_many(specs, threads=16)
    # Then no more than 8 are created, and no more than 8 are stored
    assert [r.outcome for r in results].count("created") <= ACME_QUOTAS["active_tasks"]
    assert len(snapshot(dynamodb, tsettings, "acme/")) <= ACME_QUOTAS["active_tasks"]


CLIENT_CALLS: dict[str, tuple[Callable[[Client, Receivers], Any], type[InvalidRequestError], str | None]] = {
    "schedule-beta-secret": (
        lambda c, r: c.schedule(
            from_ms(LATER), http_action(r.url("acme"), "secretsmanager:punctual/tenants/beta/token"), task_id="acme/x"
        ),
        InvalidTaskError,
        "action.secret_headers",
    ),
    "schedule-beta-url": (
        lambda c, r: c.schedule(from_ms(LATER), http_action(r.url("beta")), task_id="acme/x"),
        InvalidTaskError,
        "action.url",
    ),
    "create-schedule-beta-arn": (
        lambda c, r: c.create_schedule("acme/x", "rate(1 hour)", aws_action("sns", arns("beta")["sns"])),
        InvalidScheduleError,
        "action.topic_arn",
    ),
    "update-schedule-beta-secret": (
        lambda c, r: c.update_schedule(
            "acme/own", action=http_action(r.url("acme"), "file:tenants/beta/token", "signing_secret")
        ),
        InvalidScheduleError,
        "action.signing_secret",
    ),
    "update-schedule-source": (
        lambda c, r: c.update_schedule(
            "acme/own", action=aws_action("eventbridge", arns("acme")["eventbridge"], "punctual")
        ),
        InvalidScheduleError,
        "action.source",
    ),
    "create-schedule-past-rate": (
        lambda c, r: c.create_schedule("acme/x", "rate(1 second)", {"kind": "log"}),
        QuotaExceededError,
        "expression",
    ),
    "update-schedule-past-retry": (
        lambda c, r: c.update_schedule("acme/own", retry={"max_attempts": 4}),
        QuotaExceededError,
        "retry.max_attempts",
    ),
}


@pytest.mark.parametrize("call", list(CLIENT_CALLS))
def test_the_client_refuses_what_reaches_into_another_tenant(
    dynamodb: Any, tsettings: Settings, clock: FakeClock, receivers: Receivers, call: str
) -> None:
    # Given a client writing acme's keys, and acme's own schedule
    client = Client(tsettings, dynamodb=dynamodb, clock=clock)
    client.create_schedule("acme/own", "rate(1 hour)", {"kind": "log"}, start_at=from_ms(LATER))
    before = snapshot(dynamodb, tsettings, "")
    attempt, error, field_name = CLIENT_CALLS[call]
    # When it is asked for what acme's rules refuse  Then it raises, naming the field, and stores nothing
    with pytest.raises(error) as raised:
        attempt(client, receivers)
    assert raised.value.field == field_name
    assert snapshot(dynamodb, tsettings, "") == before


# == unreadable items under the caller's own key ================================================================
@pytest.mark.parametrize("forged", ["tenant-beta", "schedule-of-beta"])
@pytest.mark.parametrize("route", list(TASK_ROUTES))
def test_a_forged_task_item_naming_another_tenant_is_a_409_through_the_api(
    api: Api, beta: Beta, clock: FakeClock, route: str, forged: str
) -> None:
    # Given an item under acme's key that says beta is its tenant, or that it is an occurrence of beta's schedule
    client = Client(beta.settings, dynamodb=beta.dynamodb, clock=clock)
    attributes = (
        {"tenant": {"S": "beta"}}
        if forged == "tenant-beta"
        else {"schedule_id": {"S": "beta/reports"}, "schedule_version": {"N": "1"}}
    )
    put(beta.dynamodb, beta.settings, forge(client, "acme/junk", {"kind": "log"}, LATER, FIXED_NOW_MS, **attributes))
    before = snapshot(beta.dynamodb, beta.settings, "acme/")
    method, path, body = TASK_ROUTES[route]
    # When acme calls a task route on it
    answer = api.call(method, path.format(id="junk"), body)
    # Then it is a 409 (unreadable as what its key says: refused as it is), and nothing changed, acme's or beta's
    assert_refused(answer, 409, kind="state")
    assert snapshot(beta.dynamodb, beta.settings, "acme/") == before
    beta.assert_untouched()
