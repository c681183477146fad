"""The README's ten-line example runs as written, on moto: a signed webhook and a cron schedule are stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from punctual import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    """The first Python block of the README's "Ten lines" section."""
    section = README.read_text().split("## Ten lines", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


def test_the_readmes_example_schedules_a_signed_webhook_and_a_cron_schedule(dynamodb: Any, settings: Settings) -> None:
    # Given the README's example, pointed at the moto table instead of DynamoDB Local
    code = _example().replace('Settings(endpoint_url="http://127.0.0.1:8765")', "settings")
    assert "settings)" in code
    namespace: dict[str, Any] = {"settings": settings}
    # When it runs
    exec(code, namespace)  # noqa: S102 - the README's own code, as a reader would paste it
    client = namespace["client"]
    # Then the webhook is pending with its signing secret, and the schedule is stored in Paris time
    task = client.get("publish-v-123")
    assert task is not None
    assert task.status.value == "PENDING"
    assert task.action.signing_secret == "env:PUNCTUAL_SECRET_HOOK"
    schedule = client.get_schedule("report")
    assert schedule is not None
    assert schedule.timezone == "Europe/Paris"
