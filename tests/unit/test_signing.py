"""Webhook signing (Standard Webhooks): what the executor sends verifies with the reference implementation and with
``verify_webhook``; anything altered, stale or signed with another secret does not; rotation; secret checks."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import standardwebhooks.webhooks
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from punctual.errors import SigningSecretError
from punctual.targets.signing import (
    SECRET_PREFIX,
    WebhookVerificationError,
    generate_signing_secret,
    parse_signing_secrets,
    signature_headers,
    verify_webhook,
)

NOW_S = 1_700_000_000


@contextlib.contextmanager
def reference_clock_at(moment: datetime) -> Iterator[None]:
    """The reference implementation reads datetime.now(): give it ``moment`` (its module's name only;
    freezegun walks every loaded module, which breaks on some of a full test session's)."""

    class Fixed(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return moment if tz is None else moment.astimezone(tz)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(standardwebhooks.webhooks, "datetime", Fixed)
        yield


BODY = b'{"task_id": "t1", "payload": {"n": 1}}'
MSG_ID = "t1:0"


def secret_of(byte: int, size: int = 32) -> str:
    """A fixed, valid secret (readable in a failure, unlike a random one)."""
    return SECRET_PREFIX + base64.b64encode(bytes([byte]) * size).decode()


SECRET = secret_of(1)
NEW, OLD = secret_of(2), secret_of(3)


def signed(secrets: list[str], msg_id: str = MSG_ID, timestamp_s: int = NOW_S, body: bytes = BODY) -> dict[str, str]:
    return signature_headers(secrets, msg_id, timestamp_s, body)


# -- signing, and verifying with the reference implementation and with verify_webhook ---------------------------
def test_headers_carry_the_id_the_timestamp_and_one_v1_signature_per_secret() -> None:
    # Given two secrets
    # When a webhook is signed
    headers = signed([NEW, OLD])
    # Then the id and timestamp are as given and there are two v1 signatures, in the order of the secrets
    assert headers["webhook-id"] == MSG_ID
    assert headers["webhook-timestamp"] == str(NOW_S)
    signatures = headers["webhook-signature"].split(" ")
    assert [s.split(",")[0] for s in signatures] == ["v1", "v1"]
    assert signatures[0] == signed([NEW])["webhook-signature"]
    assert signatures[1] == signed([OLD])["webhook-signature"]


def test_the_signature_is_the_reference_implementations() -> None:
    # Given the reference implementation's own signature of the same message
    reference = Webhook(SECRET).sign(MSG_ID, datetime.fromtimestamp(NOW_S, UTC), BODY.decode())
    # When we sign it
    headers = signed([SECRET])
    # Then the signatures are equal
    assert headers["webhook-signature"] == reference


def test_a_signed_webhook_verifies_with_the_reference_implementation() -> None:
    # Given a signed webhook
    headers = signed([SECRET])
    # When the reference implementation verifies it at the time it was sent (its clock is the wall clock)
    with reference_clock_at(datetime.fromtimestamp(NOW_S + 10, UTC)):
        parsed = Webhook(SECRET).verify(BODY, headers)
    # Then it passes and returns the parsed body
    assert parsed == {"task_id": "t1", "payload": {"n": 1}}


def test_a_signed_webhook_verifies_with_verify_webhook() -> None:
    # Given a signed webhook
    headers = signed([SECRET])
    # When / Then verify_webhook accepts it, with the secret alone or as a one-item list
    verify_webhook(SECRET, BODY, headers, now_s=NOW_S)
    verify_webhook([SECRET], BODY, headers, now_s=NOW_S)


def test_header_names_are_case_insensitive() -> None:
    # Given the headers as an HTTP stack might capitalise them
    headers = {name.title(): value for name, value in signed([SECRET]).items()}
    assert "Webhook-Signature" in headers
    # When / Then verification still passes
    verify_webhook(SECRET, BODY, headers, now_s=NOW_S)


@pytest.mark.parametrize("tamper", ["body", "id", "timestamp"])
def test_a_tampered_webhook_fails(tamper: str) -> None:
    # Given a signed webhook of which one part is altered on the way
    headers = signed([SECRET])
    body = BODY
    if tamper == "body":
        body = BODY.replace(b'"n": 1', b'"n": 2')
    elif tamper == "id":
        headers["webhook-id"] = "t1:1"
    else:
        headers["webhook-timestamp"] = str(NOW_S + 1)
    # When / Then both verify_webhook and the reference implementation refuse it
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        verify_webhook(SECRET, body, headers, now_s=NOW_S)
    with reference_clock_at(datetime.fromtimestamp(NOW_S, UTC)), pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(body, headers)


def test_a_wrong_secret_fails() -> None:
    # Given a webhook signed with one secret
    headers = signed([SECRET])
    # When / Then a receiver with another secret refuses it
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        verify_webhook(secret_of(9), BODY, headers, now_s=NOW_S)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_fails(missing: str) -> None:
    # Given a signed webhook without one of its headers
    headers = signed([SECRET])
    del headers[missing]
    # When / Then it is refused
    with pytest.raises(WebhookVerificationError, match="Missing required headers"):
        verify_webhook(SECRET, BODY, headers, now_s=NOW_S)


@pytest.mark.parametrize("timestamp", ["", "abc", "1.5e9", "-1", "1" * 30])
def test_a_malformed_timestamp_fails(timestamp: str) -> None:
    # Given a webhook whose timestamp header is not whole seconds
    headers = signed([SECRET]) | {"webhook-timestamp": timestamp}
    # When / Then it is refused
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, BODY, headers, now_s=NOW_S)


def test_malformed_signature_entries_are_skipped_not_fatal() -> None:
    # Given a signature header with junk and an unknown version before the real signature
    headers = signed([SECRET])
    headers["webhook-signature"] = "junk v2,abc v1,!!! " + headers["webhook-signature"]
    # When / Then the real signature is still found
    verify_webhook(SECRET, BODY, headers, now_s=NOW_S)


# -- rotation -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "receiver", [[OLD], [NEW], [NEW, OLD], [secret_of(9), OLD]], ids=["old", "new", "both", "other+old"]
)
def test_rotation_signed_with_new_and_old_verifies_at_any_receiver_knowing_either(receiver: list[str]) -> None:
    # Given a webhook signed during a rotation with [new, old]
    headers = signed([NEW, OLD])
    # When a receiver that knows either (or both) verifies it
    # Then it passes, with verify_webhook and with the reference implementation for each secret the receiver knows
    verify_webhook(receiver, BODY, headers, now_s=NOW_S)
    with reference_clock_at(datetime.fromtimestamp(NOW_S, UTC)):
        for secret in receiver:
            if secret in (NEW, OLD):
                Webhook(secret).verify(BODY, headers)


def test_rotation_a_receiver_knowing_neither_fails() -> None:
    # Given a webhook signed with [new, old]
    headers = signed([NEW, OLD])
    # When / Then a receiver knowing two other secrets refuses it
    with pytest.raises(WebhookVerificationError):
        verify_webhook([secret_of(8), secret_of(9)], BODY, headers, now_s=NOW_S)


def test_a_rotation_string_signs_with_every_secret_in_it() -> None:
    # Given the secret value an endpoint stores during a rotation
    secrets = parse_signing_secrets(f"{NEW}, {OLD}")
    # When a webhook is signed with it
    headers = signed(secrets)
    # Then both secrets were used, in order
    assert secrets == [NEW, OLD]
    assert headers == signed([NEW, OLD])


# -- timestamp tolerance (with an injected now) ---------------------------------------------------------------
@pytest.mark.parametrize("offset_s", [-300, 0, 300])
def test_a_timestamp_at_the_tolerance_edge_passes(offset_s: int) -> None:
    # Given a webhook sent at NOW_S
    headers = signed([SECRET])
    # When the receiver's clock is exactly the tolerance (or less) away
    # Then it passes
    verify_webhook(SECRET, BODY, headers, now_s=NOW_S - offset_s)


@pytest.mark.parametrize(
    ("now_s", "reason"),
    [(NOW_S + 301, "too old"), (NOW_S + 300.001, "too old"), (NOW_S - 301, "too new"), (NOW_S - 300.001, "too new")],
)
def test_a_timestamp_outside_the_tolerance_fails(now_s: float, reason: str) -> None:
    # Given a webhook sent at NOW_S
    headers = signed([SECRET])
    # When the receiver's clock is just past the tolerance either way
    # Then it is refused
    with pytest.raises(WebhookVerificationError, match=reason):
        verify_webhook(SECRET, BODY, headers, now_s=now_s)


def test_the_tolerance_is_a_parameter() -> None:
    # Given a webhook 60 s old
    headers = signed([SECRET])
    # When / Then a receiver allowing 30 s refuses it and one allowing 60 s accepts it
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify_webhook(SECRET, BODY, headers, now_s=NOW_S + 60, tolerance_s=30)
    verify_webhook(SECRET, BODY, headers, now_s=NOW_S + 60, tolerance_s=60)


# -- secrets --------------------------------------------------------------------------------------------------
def test_generated_secrets_are_valid_distinct_and_32_bytes() -> None:
    # Given / When two secrets are generated
    first, second = generate_signing_secret(), generate_signing_secret()
    # Then each parses, holds 32 bytes, and they differ
    assert parse_signing_secrets(first) == [first]
    assert len(base64.b64decode(first.removeprefix(SECRET_PREFIX))) == 32
    assert first != second


@pytest.mark.parametrize("value", [f"{NEW} {OLD}", f"{NEW},{OLD}", f" {NEW} ,\n\t{OLD} ", f"{NEW}, {OLD}, {NEW}"])
def test_parse_accepts_whitespace_or_commas_between_secrets(value: str) -> None:
    # Given / When / Then each spelling gives the two secrets in order, each once
    assert parse_signing_secrets(value) == [NEW, OLD]


@pytest.mark.parametrize("size", [24, 64])
def test_parse_accepts_24_to_64_bytes(size: int) -> None:
    secret = secret_of(5, size)
    assert parse_signing_secrets(secret) == [secret]


def test_parse_accepts_unpadded_base64_as_the_reference_does() -> None:
    # Given a 32-byte secret written without its "=" padding
    secret = secret_of(5).rstrip("=")
    # When / Then it is accepted, and signs as the padded one does
    assert parse_signing_secrets(secret) == [secret]
    assert signed([secret]) == signed([secret_of(5)])


BAD_SECRETS = {
    "no prefix": base64.b64encode(b"\x07" * 32).decode(),
    "wrong prefix": "whsex_" + base64.b64encode(b"\x07" * 32).decode(),
    "not base64": SECRET_PREFIX + "not*base64!" + "A" * 33,
    "urlsafe base64": SECRET_PREFIX + base64.urlsafe_b64encode(b"\xfb\xff" * 16).decode(),
    "too short": secret_of(7, 23),
    "too long": secret_of(7, 65),
    "prefix only": SECRET_PREFIX,
}


@pytest.mark.parametrize("value", list(BAD_SECRETS.values()), ids=list(BAD_SECRETS))
def test_bad_secrets_are_refused_without_echoing_them(value: str) -> None:
    # Given a malformed secret
    # When it is parsed, or used to sign
    # Then it is refused, and the message does not hold its text (nor its part after the prefix)
    for attempt in (
        lambda: parse_signing_secrets(value),
        lambda: signed([value]),
        lambda: verify_webhook([value], BODY, signed([SECRET]), now_s=NOW_S),
    ):
        with pytest.raises(SigningSecretError) as raised:
            attempt()
        message = str(raised.value)
        if value != SECRET_PREFIX:  # the prefix alone is no secret
            assert value not in message
            assert value.removeprefix(SECRET_PREFIX) not in message
        error = raised.value  # nor is the text carried by a chained error (binascii's)
        assert error.__cause__ is None
        assert error.__context__ is None or error.__suppress_context__


def test_a_bad_secret_among_good_ones_is_named_by_position() -> None:
    # Given a rotation string whose second secret is too short
    short = secret_of(7, 16)
    # When / Then the error says which one, not what it is
    with pytest.raises(SigningSecretError, match="#2") as raised:
        parse_signing_secrets(f"{NEW} {short}")
    assert short.removeprefix(SECRET_PREFIX) not in str(raised.value)


@pytest.mark.parametrize(
    "value", ["", "   ", " , ,", " ".join(secret_of(i) for i in range(5))], ids=["empty", "blank", "separators", "five"]
)
def test_no_secret_or_more_than_four_is_refused(value: str) -> None:
    with pytest.raises(SigningSecretError, match="expected 1 to 4"):
        parse_signing_secrets(value)


def test_signing_with_no_secret_or_five_is_refused() -> None:
    with pytest.raises(SigningSecretError, match="expected 1 to 4"):
        signed([])
    with pytest.raises(SigningSecretError, match="expected 1 to 4"):
        signed([secret_of(i) for i in range(5)])


def test_four_secrets_are_the_most() -> None:
    secrets = [secret_of(i) for i in range(4)]
    assert parse_signing_secrets(" ".join(secrets)) == secrets
    assert len(signed(secrets)["webhook-signature"].split(" ")) == 4


@pytest.mark.parametrize("msg_id", ["", "has space", "line\nbreak", "naïve"])
def test_an_id_that_is_not_visible_ascii_is_refused(msg_id: str) -> None:
    with pytest.raises(ValueError, match="msg_id"):
        signed([SECRET], msg_id=msg_id)


@pytest.mark.parametrize("timestamp_s", [-1, True, 1.5])
def test_a_timestamp_that_is_not_whole_non_negative_seconds_is_refused(timestamp_s: object) -> None:
    with pytest.raises(ValueError, match="timestamp_s"):
        signature_headers([SECRET], MSG_ID, timestamp_s, BODY)  # type: ignore[arg-type]


# -- properties -----------------------------------------------------------------------------------------------
ids = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=80)
timestamps = st.integers(min_value=0, max_value=10**11)  # up to the year 5138: datetime stops at 9999
keys = st.binary(min_size=24, max_size=64).map(lambda key: SECRET_PREFIX + base64.b64encode(key).decode())


@given(
    secrets=st.lists(keys, min_size=1, max_size=4),
    body=st.binary(max_size=512),
    msg_id=ids,
    timestamp_s=timestamps,
    skew_s=st.integers(min_value=-300, max_value=300),
)
def test_sign_then_verify_round_trips(
    secrets: list[str], body: bytes, msg_id: str, timestamp_s: int, skew_s: int
) -> None:
    # Given any body (not only UTF-8), id, timestamp and secrets
    # When the webhook is signed
    headers = signature_headers(secrets, msg_id, timestamp_s, body)
    # Then a receiver within the tolerance that knows any one of the secrets verifies it
    for secret in secrets:
        verify_webhook(secret, body, headers, now_s=timestamp_s + skew_s)


@given(secret=keys, body=st.text(max_size=256), msg_id=ids, timestamp_s=timestamps)
def test_the_signature_equals_the_reference_for_any_text_body(
    secret: str, body: str, msg_id: str, timestamp_s: int
) -> None:
    # Given any UTF-8 body (the only kind the reference implementation signs)
    # When we sign it and the reference signs it
    ours = signature_headers([secret], msg_id, timestamp_s, body.encode())["webhook-signature"]
    theirs = Webhook(secret).sign(msg_id, datetime.fromtimestamp(timestamp_s, UTC), body)
    # Then the signatures are the same
    assert ours == theirs


@given(body=st.binary(min_size=1, max_size=256), flip=st.integers(min_value=0))
def test_flipping_any_body_bit_breaks_the_signature(body: bytes, flip: int) -> None:
    # Given a signed body
    headers = signature_headers([SECRET], MSG_ID, NOW_S, body)
    # When one bit of it changes
    index, bit = divmod(flip % (len(body) * 8), 8)
    tampered = bytearray(body)
    tampered[index] ^= 1 << bit
    # Then it no longer verifies
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, bytes(tampered), headers, now_s=NOW_S)
