"""Signs outgoing webhooks the Standard Webhooks way (https://www.standardwebhooks.com).

A receiver checks that a webhook came from us, unaltered and recently: the executor sends ``webhook-id`` (the
task's idempotency key, stable across retries), ``webhook-timestamp`` and ``webhook-signature``, an HMAC-SHA256 of
``{id}.{timestamp}.{body}`` per secret of the endpoint. Several secrets sign at once so that a secret can be rotated
without a gap: the receiver accepts any signature it can check. The HMAC is the ``standardwebhooks`` package's, so
any Standard Webhooks library verifies what we send.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import time
from collections.abc import Mapping, Sequence
from secrets import token_bytes

from standardwebhooks.webhooks import WebhookVerificationError, hmac_data

from punctual.errors import SigningSecretError

__all__ = [
    "SECRET_PREFIX",
    "WebhookVerificationError",
    "generate_signing_secret",
    "parse_signing_secrets",
    "signature_headers",
    "verify_webhook",
]

SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
MAX_SECRETS = 4
SIGNATURE_VERSION = "v1"
MAX_TIMESTAMP_DIGITS = 20  # a webhook-timestamp longer than this is refused unread

_SEPARATORS = re.compile(r"[\s,]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_MSG_ID = re.compile(r"[\x21-\x7e]+")  # visible ASCII: safe in a header, and never split by a receiver


def _decode_secret(secret: str, position: int) -> bytes:
    """The key bytes of one ``whsec_`` secret; ``position`` (1-based) names it in the error instead of its text."""
    if not isinstance(secret, str):
        raise SigningSecretError(position, f"must be a string, not {type(secret).__name__}")
    if not secret.startswith(SECRET_PREFIX):
        raise SigningSecretError(position, f"must start with {SECRET_PREFIX!r}")
    encoded = secret[len(SECRET_PREFIX) :]
    if _BASE64.fullmatch(encoded) is None or len(encoded.rstrip("=")) % 4 == 1:
        raise SigningSecretError(position, f"must be {SECRET_PREFIX!r} followed by standard base64")
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        raise SigningSecretError(position, f"must be {SECRET_PREFIX!r} followed by standard base64") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise SigningSecretError(
            position, f"must encode {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {len(key)}"
        )
    return key


def _decode_secrets(secrets: str | Sequence[str]) -> list[bytes]:
    """The keys of a secret list (or of a string in :func:`parse_signing_secrets`' syntax), checked."""
    values = parse_signing_secrets(secrets) if isinstance(secrets, str) else list(secrets)
    if not 1 <= len(values) <= MAX_SECRETS:
        raise SigningSecretError(None, f"expected 1 to {MAX_SECRETS}, got {len(values)}")
    return [_decode_secret(secret, i) for i, secret in enumerate(values, start=1)]


def parse_signing_secrets(value: str) -> list[str]:
    """The signing secrets written in ``value``: one, or several for a rotation.

    Parameters
    ----------
    value : str
        One secret, or several separated by whitespace and/or commas (``"whsec_NEW whsec_OLD"``). Each is
        ``whsec_`` followed by the standard base64 (padding optional) of 24 to 64 random bytes.

    Returns
    -------
    list[str]
        The secrets, in the order written, each once: all of them sign, and a receiver accepts any.

    Raises
    ------
    SigningSecretError
        If there are no secrets, more than four, or one is malformed. The message never holds a secret's text.
    """
    if not isinstance(value, str):
        raise SigningSecretError(None, f"must be a string, not {type(value).__name__}")
    secrets = list(dict.fromkeys(token for token in _SEPARATORS.split(value) if token))
    if not 1 <= len(secrets) <= MAX_SECRETS:
        raise SigningSecretError(None, f"expected 1 to {MAX_SECRETS}, got {len(secrets)}")
    for position, secret in enumerate(secrets, start=1):
        _decode_secret(secret, position)
    return secrets


def generate_signing_secret() -> str:
    """A new signing secret: ``whsec_`` and the base64 of 32 bytes from :func:`secrets.token_bytes`.

    Returns
    -------
    str
        A secret that :func:`parse_signing_secrets` accepts.
    """
    return SECRET_PREFIX + base64.b64encode(token_bytes(32)).decode("ascii")


def _sign(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    """The Standard Webhooks HMAC of ``{id}.{timestamp}.{body}``, over the body's exact bytes."""
    return hmac_data(key, f"{msg_id}.{timestamp}.".encode() + body)


def signature_headers(secrets: Sequence[str], msg_id: str, timestamp_s: int, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers that sign one webhook.

    Parameters
    ----------
    secrets : Sequence[str]
        The endpoint's signing secrets (1 to 4; a string is read as :func:`parse_signing_secrets` reads it). Each
        adds one ``v1`` signature, in the order given.
    msg_id : str
        The ``webhook-id``: the task's idempotency key, the same on every retry of one occurrence, so a receiver
        can drop duplicates. Visible ASCII, no spaces.
    timestamp_s : int
        The ``webhook-timestamp``: when this attempt is sent, in whole seconds since the epoch.
    body : bytes
        The exact bytes sent as the request body.

    Returns
    -------
    dict[str, str]
        ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` (``"v1,<b64> v1,<b64>"``).

    Raises
    ------
    SigningSecretError
        If a secret is malformed, or there are none or more than four.
    ValueError
        If ``msg_id`` is empty or not visible ASCII, or ``timestamp_s`` is not a non-negative integer.
    """
    if not isinstance(msg_id, str) or _MSG_ID.fullmatch(msg_id) is None:
        raise ValueError("msg_id must be a non-empty string of visible ASCII characters")
    if isinstance(timestamp_s, bool) or not isinstance(timestamp_s, int) or timestamp_s < 0:
        raise ValueError("timestamp_s must be a non-negative integer (seconds since the epoch)")
    keys = _decode_secrets(secrets)
    timestamp = str(timestamp_s)
    signatures = " ".join(
        f"{SIGNATURE_VERSION},{base64.b64encode(_sign(key, msg_id, timestamp, bytes(body))).decode('ascii')}"
        for key in keys
    )
    return {"webhook-id": msg_id, "webhook-timestamp": timestamp, "webhook-signature": signatures}


def _passed_signatures(header: str) -> list[bytes]:
    """The ``v1`` signatures of a ``webhook-signature`` header; other versions and malformed entries are skipped."""
    passed = []
    for entry in header.split():
        version, _, encoded = entry.partition(",")
        if version != SIGNATURE_VERSION or not encoded:
            continue
        try:
            passed.append(base64.b64decode(encoded, validate=True))
        except binascii.Error:
            continue
    return passed


def verify_webhook(
    secrets: str | Sequence[str],
    body: bytes,
    headers: Mapping[str, str],
    *,
    now_s: float | None = None,
    tolerance_s: int = 300,
) -> None:
    """Check a received webhook: the receiver's side of :func:`signature_headers`.

    Parameters
    ----------
    secrets : str | Sequence[str]
        The secrets the receiver knows (a string in :func:`parse_signing_secrets`' syntax, or a sequence).
    body : bytes
        The request body exactly as received.
    headers : Mapping[str, str]
        The request headers; names are matched case-insensitively.
    now_s : float, optional
        The receiver's time in seconds since the epoch; the wall clock when None.
    tolerance_s : int
        How far (either way) the ``webhook-timestamp`` may be from ``now_s``; an older webhook is refused as a
        possible replay.

    Raises
    ------
    WebhookVerificationError
        If a header is missing or malformed, the timestamp is outside the tolerance, or no signature matches any
        of the receiver's secrets.
    SigningSecretError
        If one of the receiver's own secrets is malformed.

    Examples
    --------
    >>> secret = generate_signing_secret()
    >>> body = b'{"hello": "world"}'
    >>> headers = signature_headers([secret], "task-1:0", 1_700_000_000, body)
    >>> verify_webhook(secret, body, headers, now_s=1_700_000_030)
    """
    keys = _decode_secrets(secrets)
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signature = lowered.get("webhook-signature")
    if not (msg_id and timestamp and signature):
        raise WebhookVerificationError("Missing required headers")
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > MAX_TIMESTAMP_DIGITS:
        raise WebhookVerificationError("Invalid Signature Headers")
    now = time.time() if now_s is None else now_s
    if int(timestamp) < now - tolerance_s:
        raise WebhookVerificationError("Message timestamp too old")
    if int(timestamp) > now + tolerance_s:
        raise WebhookVerificationError("Message timestamp too new")
    passed = _passed_signatures(signature)
    for key in keys:
        expected = _sign(key, msg_id, timestamp, bytes(body))
        if any(hmac.compare_digest(expected, candidate) for candidate in passed):
            return
    raise WebhookVerificationError("No matching signature found")
