"""How a generated cost block is compared with a fresh run: each number within a tolerance, wider on the lines
whose figures follow a measurement of the machine († log bytes, ‡ the INIT's CPU time), and the words exact."""

from __future__ import annotations

from punctual_tools.cost import blocks_match


def test_numbers_may_move_by_three_percent_on_a_plain_line() -> None:
    assert blocks_match("| writes | $3.12 |", "| writes | $3.20 |") == []
    assert blocks_match("| writes | $3.12 |", "| writes | $3.30 |") != []


def test_a_line_measured_on_the_machine_may_move_more() -> None:
    # † (log bytes): 15 %
    assert blocks_match("| logs † | $1.00 |", "| logs † | $1.12 |") == []
    assert blocks_match("| logs † | $1.00 |", "| logs † | $1.30 |") != []
    # a CPU time measured where the block was made: any figure, the same words
    assert blocks_match("INIT ‡ took 0.70 s", "INIT ‡ took 1.60 s") == []
    assert blocks_match("INIT ‡ took 0.70 s", "INIT ‡ needed 0.70 s") != []
    assert blocks_match("INIT ‡ took 0.70 s", "INIT ‡ took 1.60 s", rel_timing=0.5) != []


def test_words_and_line_counts_must_match_exactly() -> None:
    assert blocks_match("costs more in every row", "costs more in most rows") != []
    assert blocks_match("a\nb", "a") == ["2 lines vs 1 lines"]
