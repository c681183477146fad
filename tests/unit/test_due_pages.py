"""Pages of the due index (:mod:`punctual.domain.due_pages`): whatever the entries and the page size, the pages
together list every entry once, in page order, each page at most its size and at most an hour of minutes; a cursor
round-trips as text, and text that is no cursor is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.domain.due_pages import BUCKETS_PER_PAGE, BucketReader, DuePosition, Entry, walk_due_page
from punctual.domain.keys import BUCKET_MS, bucket_start
from punctual.errors import InvalidRequestError

START = bucket_start(1_800_000_000_000)


def reader(listed: dict[int, list[Entry]], walked: list[int]) -> BucketReader:
    """A bucket reader over ``listed`` (bucket -> entries) that notes each bucket it reads in ``walked``."""

    def read(bucket: int, position: DuePosition | None, needed: int) -> tuple[list[Entry], int]:
        walked.append(bucket)
        after = sorted(e for e in listed.get(bucket, []) if position is None or position.precedes(e))
        return after[:needed], len(after[:needed])

    return read


entries = st.lists(
    st.tuples(st.integers(0, 150), st.integers(0, 59_999), st.sampled_from(["a", "b", "c", "d"])),
    unique_by=lambda e: (e[0], e[2]),  # an id is listed once (in one minute)
    max_size=40,
)


@given(entries, st.integers(1, 7))
def test_the_pages_list_every_entry_once_in_order(raw: list[tuple[int, int, str]], limit: int) -> None:
    # Given entries over 150 minutes (several due at one instant), each id once
    listed: dict[int, list[Entry]] = {}
    for minute, offset, name in raw:
        bucket = START + minute * BUCKET_MS
        listed.setdefault(bucket, []).append((bucket + offset, f"{name}-{minute}"))
    last = START + 150 * BUCKET_MS
    # When every page is read
    seen: list[Entry] = []
    after: str | None = None
    for _ in range(1_000):
        walked: list[int] = []
        page, after, read = walk_due_page(START, last, after, limit, reader(listed, walked))
        # Then each page holds its size at most, walks an hour of minutes at most, and counts what it read
        assert len(page) <= limit
        assert len(walked) <= BUCKETS_PER_PAGE
        assert read >= len(page)
        seen.extend(page)
        if after is None:
            break
    # And together they list every entry once, by minute then due then id
    assert seen == [e for bucket in sorted(listed) for e in sorted(listed[bucket])]


def test_a_cursor_round_trips_as_text() -> None:
    for position in (DuePosition(START), DuePosition(START, START + 5, "acme/t-1")):
        assert DuePosition.parse(position.text()) == position


@pytest.mark.parametrize("text", ["", "soon", "12345", f"{START}/x/t", f"{START}/5/", f"{START}/5"])
def test_text_that_is_no_cursor_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequestError):
        DuePosition.parse(text)


def test_a_page_holds_at_least_one_task() -> None:
    with pytest.raises(InvalidRequestError):
        walk_due_page(START, START, None, 0, reader({}, []))
