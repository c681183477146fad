"""The ``http`` action against good and hostile loopback receivers (tests/functional/hostile_server.py): what a
fire does with redirects, slow drips, huge bodies, transient failures, secrets, signatures and a burst.

Loopback is reachable only because each test's rules allowlist 127.0.0.1, as the local runtime's do.
"""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_server import HostileServer
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from punctual.errors import ActionFailedError, InvalidRequestError, TransientActionError
from punctual.network.policy import TargetPolicy
from punctual.targets import ActionEnv, FireContext, HttpAction, TargetRules, prepare_actions
from punctual.targets.http import BODY_CAP, WARM_LEAD_S, WARM_MIN_S, HttpEngine, _engine
from punctual.targets.kinds import check_action, run_action, start_action
from punctual.targets.secrets import SecretResolver
from punctual.targets.wire import IDLE_S, WARM_AT_ONCE

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"o" * 32).decode()


@pytest.fixture
def server() -> Iterator[HostileServer]:
    with HostileServer() as running:
        yield running


@pytest.fixture
def env() -> Iterator[ActionEnv]:
    rules = TargetRules(urls=TargetPolicy.from_settings("127.0.0.1"))
    environ = {
        "PUNCTUAL_SECRET_TOKEN": "Bearer s3cr3t",
        "PUNCTUAL_SECRET_HOOK": f"{SECRET} {OLD_SECRET}",
        "PUNCTUAL_SECRET_BAD": "a\r\nX-Injected: 1",
    }
    made = ActionEnv(rules=rules, secrets=SecretResolver(rules=rules.secrets, environ=environ))
    yield made
    made.close()


def context(task_id: str = "t-1", grace_ms: float = 60_000, payload: Any = None) -> FireContext:
    now = time.time() * 1000
    return FireContext(task_id, 0, int(now), now, {"n": 1} if payload is None else payload, now + grace_ms)


def test_a_webhook_arrives_with_its_key_and_payload(server: HostileServer, env: ActionEnv) -> None:
    # Given a receiver  When a task fires at it
    run_action(HttpAction(url=server.url("/ok")), context("t-ok"), env)
    # Then one POST arrived with the idempotency key and the payload, and no tracing header was added
    (seen,) = server.requests("/ok")
    assert seen.headers["idempotency-key"] == "t-ok:0"
    assert seen.body == b'{"n":1}'
    assert not any(name.startswith("x-amzn-trace") for name in seen.headers)


def test_a_redirect_is_not_followed(server: HostileServer, env: ActionEnv) -> None:
    # Given a receiver that redirects to the metadata endpoint  When a task fires at it
    with pytest.raises(ActionFailedError, match="HTTP 302.*redirects are not followed"):
        run_action(HttpAction(url=server.url("/redirect")), context(), env)
    # Then the redirect was not followed (nothing else was requested) and the failure is not transient
    assert [r.path for r in server.requests()] == ["/redirect"]


def test_a_slow_drip_is_cut_at_the_attempts_deadline(server: HostileServer, env: ActionEnv) -> None:
    # Given a receiver that drips one byte every 0.25 s of a 10,000-byte answer (40 minutes)
    action = HttpAction(url=server.url("/drip"), timeout_s=1, retry_transient=False)
    started = time.monotonic()
    # When a task with a 1 s deadline fires at it  Then the attempt fails on its deadline, not per read
    with pytest.raises(TransientActionError, match="timed out after 1 s"):
        run_action(action, context(), env)
    assert time.monotonic() - started < 30  # the drip would take 2,500 s; generous for a slow machine


def test_a_huge_answer_is_read_only_up_to_the_cap(server: HostileServer, env: ActionEnv) -> None:
    # Given a receiver that answers 200 with a 300 MiB body
    # When a task fires at it  Then it succeeds without reading the body (the connection is dropped)
    run_action(HttpAction(url=server.url("/huge"), timeout_s=30), context(), env)
    time.sleep(0.5)
    assert server.state.huge_sent < 64 * 1024 * 1024  # the socket buffers hold a few MiB; 300 MiB were offered
    assert BODY_CAP == 64 * 1024


def test_a_transient_failure_is_tried_again_with_the_same_key(server: HostileServer, env: ActionEnv) -> None:
    # Given a receiver that answers 503 twice, then 200  When a task fires at it
    run_action(HttpAction(url=server.url("/flaky/2")), context("t-flaky"), env)
    # Then it succeeded on the third attempt, each with the same idempotency key
    assert [r.headers["idempotency-key"] for r in server.requests()] == ["t-flaky:0"] * 3


def test_the_transient_retry_can_be_turned_off(server: HostileServer, env: ActionEnv) -> None:
    with pytest.raises(TransientActionError, match="HTTP 503"):
        run_action(HttpAction(url=server.url("/flaky/1"), retry_transient=False), context(), env)
    assert len(server.requests()) == 1


def test_no_retry_past_the_grace(server: HostileServer, env: ActionEnv) -> None:
    # Given an occurrence whose grace ends now  When its first attempt gets a 503  Then no other attempt starts
    with pytest.raises(TransientActionError):
        run_action(HttpAction(url=server.url("/flaky/5")), context(grace_ms=0), env)
    assert len(server.requests()) == 1


def test_a_client_error_is_not_retried(server: HostileServer, env: ActionEnv) -> None:
    with pytest.raises(ActionFailedError, match="HTTP 404") as failure:
        run_action(HttpAction(url=server.url("/status/404")), context(), env)
    assert not isinstance(failure.value, TransientActionError)
    assert len(server.requests()) == 1


def test_a_closed_port_is_a_transient_failure_naming_only_scheme_and_host(env: ActionEnv) -> None:
    # Given a port nothing listens on, and a URL with a secret in its query
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # When a task fires at it  Then it fails as transient, and the message carries no path or query
    with pytest.raises(TransientActionError) as failure:
        run_action(HttpAction(url=f"http://127.0.0.1:{port}/hook?api_key=SECRET"), context(grace_ms=0), env)
    assert f"http://127.0.0.1:{port}" in str(failure.value)
    assert "SECRET" not in str(failure.value)
    assert "/hook" not in str(failure.value)


def test_connections_are_kept_alive_and_reused(server: HostileServer, env: ActionEnv) -> None:
    # When 20 tasks fire one after another at one receiver
    for i in range(20):
        run_action(HttpAction(url=server.url("/ok")), context(f"t-{i}"), env)
    # Then they went over one connection
    assert len({r.peer_port for r in server.requests()}) == 1


def test_a_burst_is_not_gated_by_a_pool_of_threads(server: HostileServer, env: ActionEnv) -> None:
    # Given a receiver that holds every request until released  When 300 tasks fire at once
    futures = [
        start_action(HttpAction(url=server.url("/hold"), timeout_s=60), context(f"b-{i}"), env) for i in range(300)
    ]
    deadline = time.monotonic() + 60
    while server.state.held < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    # Then all 300 are in flight at once (a pool of 32 blocking threads would hold 32)
    peak = server.state.peak_held
    server.release()
    for future in futures:
        assert future is not None
        future.result(timeout=60)
    assert peak == 300


def _wait_for(predicate: Any, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(predicate())


def _warm(env: ActionEnv, url: str, count: int, fire_in_s: float = 0.0) -> int:
    engine = _engine(env, env.rules)
    return int(env.fire_loop.submit(engine.warm(engine.target(url), count, fire_in_s)).result(timeout=60))


def test_a_burst_finds_its_connections_opened_before_it_is_due(server: HostileServer, env: ActionEnv) -> None:
    # Given 20 webhooks to one receiver due together, prepared as an executor prepares its batch (due in less
    # than the warm-up's lead, so the warm-up starts at once)
    action = HttpAction(url=server.url("/ok"))
    assert WARM_MIN_S < 0.5 < WARM_LEAD_S
    assert prepare_actions([(action, 0.5, "t")] * 20, env) == 1  # one run of fires to one host: one warm-up
    # When the warm-up has opened its connections (the server accepted them and the pool holds them: on a busy
    # machine the one can come well before the other), before anything is sent
    engine = _engine(env, env.rules)
    assert _wait_for(lambda: server.state.connections == 20)
    assert _wait_for(lambda: env.fire_loop.submit(engine.idle(str(action.url))).result(timeout=60) == 20)
    assert server.requests() == []
    # and the 20 fire together
    futures = [start_action(action, context(f"w-{i}"), env) for i in range(20)]
    for future in futures:
        assert future is not None
        future.result(timeout=60)
    # Then they arrived over those connections: none was opened at the fire
    assert len(server.requests("/ok")) == 20
    assert server.state.connections == 20


def test_fires_due_soon_or_refused_get_no_warm_up(server: HostileServer, env: ActionEnv) -> None:
    # Given webhooks due sooner than the warm-up's minimum, one to a target the rules refuse, and one due later
    soon = [(HttpAction(url=server.url("/ok")), WARM_MIN_S / 2, "t")] * 5
    refused = [(HttpAction(url="https://10.0.0.1/hook"), 5.0, "t")]
    later = [(HttpAction(url=server.url("/later")), 0.5, "t")]
    # When the batch is prepared  Then only the later one is warmed (the others connect, or report the
    # refusal, themselves), and the refused one did not keep it from being prepared
    assert prepare_actions(soon + refused + later, env) == 1
    assert _wait_for(lambda: server.state.connections == 1)


def test_a_warm_up_stops_opening_connections_once_its_fires_are_due(server: HostileServer, env: ActionEnv) -> None:
    # When 100 connections are asked for fires due now  Then one group is opened, and no more: past their
    # instant the fires connect for themselves
    assert _warm(env, server.url("/ok"), 100, fire_in_s=0.0) == WARM_AT_ONCE < 100


def test_a_warmed_connection_the_server_drops_unanswered_is_replaced_for_the_fire(env: ActionEnv) -> None:
    # Given a server that reads the first request of each connection and drops the connection without an answer,
    # except on its second connection, where it answers 200
    accepted: list[int] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                if len(accepted) == 2:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    try:
        # and one connection warmed ahead of a fire
        assert _warm(env, url, 1) == 1
        # When a task that does not retry fires  Then it succeeds: the warmed connection closed before any byte
        # of an answer counts as a stale kept-alive one, and the request goes once more on a new connection
        run_action(HttpAction(url=url, retry_transient=False), context("t-stale"), env)
        assert len(accepted) == 2
    finally:
        listener.close()


def test_a_warm_up_replaces_an_idle_connection_too_old_by_the_time_the_fires_are_due(
    server: HostileServer, env: ActionEnv
) -> None:
    # Given one kept-alive connection, idle now
    url = server.url("/ok")
    run_action(HttpAction(url=url), context("t-first"), env)
    assert server.state.connections == 1
    # When a warm-up is asked for fires due after the pool's idle limit would have retired it
    # Then it closes that connection now and opens a fresh one (the server counts it once its handler runs)
    assert _warm(env, url, 1, fire_in_s=IDLE_S + 1) == 1
    assert _wait_for(lambda: server.state.connections == 2)
    # And a warm-up for fires due now finds the fresh one enough, and the next fire uses it (a new connection
    # would have been counted before its request was answered)
    assert _warm(env, url, 1) == 0
    run_action(HttpAction(url=url), context("t-second"), env)
    assert server.state.connections == 2


def test_a_warm_up_opens_at_most_the_per_host_limit(server: HostileServer) -> None:
    env = ActionEnv(
        rules=TargetRules(urls=TargetPolicy.from_settings("127.0.0.1")), http_connections=6, http_connections_per_host=4
    )
    try:
        with HostileServer() as other:
            # When 20 fires due together to one host are warmed  Then 4 connections are opened, the host's limit
            assert _warm(env, server.url("/ok"), 20) == 4
            # And a second host gets only what is left of the overall limit (6)
            assert _warm(env, other.url("/ok"), 20) == 2
            assert _wait_for(lambda: (server.state.connections, other.state.connections) == (4, 2))
    finally:
        env.close()


def test_a_warm_up_toward_a_closed_port_opens_nothing_and_raises_nothing(env: ActionEnv) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert _warm(env, f"http://127.0.0.1:{port}/hook", 10) == 0


def test_a_signed_webhook_verifies_and_a_tampered_one_does_not(server: HostileServer, env: ActionEnv) -> None:
    # Given an endpoint whose signing secret is being rotated (new and old both valid)
    action = HttpAction(url=server.url("/ok"), signing_secret="env:PUNCTUAL_SECRET_HOOK")
    # When a task fires
    run_action(action, context("t-signed", payload={"order": 7}), env)
    (seen,) = server.requests()
    # Then the receiver verifies it with the reference library, with either secret; webhook-id is the key
    assert seen.headers["webhook-id"] == "t-signed:0"
    for secret in (SECRET, OLD_SECRET):
        assert Webhook(secret).verify(seen.body, seen.headers) == {"order": 7}
    # And a tampered body, or a wrong secret, does not verify
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(b'{"order":8}', seen.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + base64.b64encode(b"z" * 32).decode()).verify(seen.body, seen.headers)


def test_a_secret_header_is_resolved_at_fire_time(server: HostileServer, env: ActionEnv) -> None:
    action = HttpAction(url=server.url("/ok"), secret_headers={"Authorization": "env:PUNCTUAL_SECRET_TOKEN"})
    # The action (what the table holds) carries the reference only
    assert "s3cr3t" not in action.model_dump_json()
    run_action(action, context(), env)
    assert server.requests()[0].headers["authorization"] == "Bearer s3cr3t"


def test_each_header_is_sent_once_whatever_its_case_and_the_later_layer_wins(
    server: HostileServer, env: ActionEnv
) -> None:
    # Given a signed task whose headers name the defaults in lower case, and whose secret header names one of
    # its plain headers in another case
    action = HttpAction(
        url=server.url("/ok"),
        headers={"content-type": "application/cloudevents+json", "user-agent": "mine/1", "x-token": "plain"},
        secret_headers={"X-TOKEN": "env:PUNCTUAL_SECRET_TOKEN"},
        signing_secret="env:PUNCTUAL_SECRET_HOOK",
    )
    # When it fires
    run_action(action, context("t-case"), env)
    (seen,) = server.requests()
    # Then no header was sent twice, in any case
    names = Counter(name.lower() for name, _ in seen.header_lines)
    assert [name for name, count in names.items() if count > 1] == []
    # And the task's header replaced the default, its secret header its plain one, each under its own spelling
    sent = dict(seen.header_lines)
    assert sent["content-type"] == "application/cloudevents+json"
    assert sent["user-agent"] == "mine/1"
    assert sent["X-TOKEN"] == "Bearer s3cr3t"
    # And Punctual's own headers and the signature's went out as Punctual made them (the signature verifies)
    assert sent["Idempotency-Key"] == "t-case:0"
    assert sent["webhook-id"] == "t-case:0"
    assert Webhook(SECRET).verify(seen.body, seen.headers) == {"n": 1}


@pytest.mark.parametrize(
    "given",
    [
        {"headers": {"X-Trace": "1", "x-trace": "2"}},
        {"secret_headers": {"Authorization": "env:PUNCTUAL_SECRET_TOKEN", "AUTHORIZATION": "env:PUNCTUAL_SECRET_X"}},
    ],
    ids=["headers", "secret_headers"],
)
def test_a_header_given_twice_in_different_cases_is_refused_when_scheduled(
    env: ActionEnv, given: dict[str, Any]
) -> None:
    action = HttpAction(url="http://127.0.0.1:9/ok", **given)
    field = f"action.{next(iter(given))}"
    with pytest.raises(InvalidRequestError, match="given twice") as raised:
        check_action(action, env.rules)
    assert raised.value.field == field


def test_a_secret_value_that_is_not_a_header_value_is_refused(server: HostileServer, env: ActionEnv) -> None:
    action = HttpAction(url=server.url("/ok"), secret_headers={"Authorization": "env:PUNCTUAL_SECRET_BAD"})
    with pytest.raises(ActionFailedError, match="not a sendable header value"):
        run_action(action, context(), env)
    assert server.requests() == []


def test_a_missing_secret_fails_the_fire(server: HostileServer, env: ActionEnv) -> None:
    action = HttpAction(url=server.url("/ok"), secret_headers={"Authorization": "env:PUNCTUAL_SECRET_NONE"})
    with pytest.raises(ActionFailedError, match="PUNCTUAL_SECRET_NONE"):
        run_action(action, context(), env)


def test_a_name_resolving_to_a_private_address_is_refused_when_it_fires(
    server: HostileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given rules that allow 127.0.0.1 by address but a name that resolves to 10.0.0.1 (DNS rebinding)
    real = socket.getaddrinfo

    def fake(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", args[0] if args else 443))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    env = ActionEnv(rules=TargetRules(urls=TargetPolicy.from_settings("127.0.0.1")))
    try:
        # When a task fires at it  Then the fire fails, refused, before any connection
        with pytest.raises(ActionFailedError, match="refused"):
            run_action(HttpAction(url="https://rebind.example.com/hook"), context(), env)
    finally:
        env.close()


def test_a_target_refused_by_the_executors_rules_does_not_fire(server: HostileServer) -> None:
    # Given an executor whose rules do not allow loopback (a task scheduled under other rules)
    env = ActionEnv()
    try:
        with pytest.raises(ActionFailedError, match="target refused"):
            run_action(HttpAction(url=server.url("/ok")), context(), env)
    finally:
        env.close()
    assert server.requests() == []


def test_the_engine_is_one_per_process_and_tenant(env: ActionEnv) -> None:
    # Given the deployment's rules and two tenants'
    acme, beta = env.rules.for_tenant("acme"), env.rules.for_tenant("beta")
    # Then each has one engine for the process, and no two share one (nor its connections and addresses)
    assert isinstance(_engine(env, env.rules), HttpEngine)
    assert _engine(env, env.rules) is _engine(env, env.rules)
    assert _engine(env, acme) is _engine(env, env.rules.of("acme/x"))
    assert len({id(_engine(env, rules)) for rules in (env.rules, acme, beta)}) == 3


def _docs_receiver() -> str:
    """The receiver code docs/targets.md shows ("Signed webhooks")."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "targets.md").read_text()
    block = page.split("<!-- receiver-verification -->", 1)[1]
    return block.split("```python", 1)[1].split("```", 1)[0]


def test_the_docs_receiver_code_verifies_a_fire_and_refuses_a_tampered_one(
    server: HostileServer, env: ActionEnv
) -> None:
    # Given the receiver code the docs show, knowing only the old secret of a rotation
    namespace: dict[str, Any] = {}
    exec(_docs_receiver().replace('["whsec_..."]', repr([OLD_SECRET])), namespace)  # noqa: S102
    # When a webhook signed with both secrets arrives
    run_action(
        HttpAction(url=server.url("/ok"), signing_secret="env:PUNCTUAL_SECRET_HOOK"),
        context("t-readme", payload={"a": 1}),
        env,
    )
    (seen,) = server.requests()
    # Then it verifies, and a tampered body or headers do not
    assert namespace["verify"](seen.body, seen.headers) == {"a": 1}
    with pytest.raises(WebhookVerificationError):
        namespace["verify"](b'{"a":2}', seen.headers)
    with pytest.raises(WebhookVerificationError):
        namespace["verify"](seen.body, {**seen.headers, "webhook-id": "other:0"})
