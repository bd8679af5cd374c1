from __future__ import annotations

import pytest

from atom.text.stop import StopMatcher

CASES = [
    # (stop strings, text, expected output, stopped)
    ((), "hello world", "hello world", False),
    (("world",), "hello world and more", "hello ", True),
    (("\n\n",), "line one\nline two\n\nrest", "line one\nline two", True),
    (("abc", "b"), "xxabc", "xxa", True),
    (("bc", "xa"), "xxabc", "x", True),
    (("ab",), "xxa", "xxa", False),
    (("END", "ENDING"), "the ENDING", "the ", True),
    (("🙂",), "smile 🙂 here", "smile ", True),
    (("aab",), "aaab", "a", True),
]


def run_split(stop: tuple[str, ...], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stop)
    out = []
    for piece in pieces:
        result = matcher.push(piece)
        out.append(result.text)
        if result.is_stopped:
            return "".join(out), True
    return "".join(out) + matcher.flush(), False


@pytest.mark.parametrize(("stop", "text", "expected", "stopped"), CASES)
def test_whole_text(stop: tuple[str, ...], text: str, expected: str, stopped: bool) -> None:
    assert run_split(stop, [text]) == (expected, stopped)


@pytest.mark.parametrize(("stop", "text", "expected", "stopped"), CASES)
def test_every_split_and_char_by_char(
    stop: tuple[str, ...], text: str, expected: str, stopped: bool
) -> None:
    for cut in range(len(text) + 1):
        assert run_split(stop, [text[:cut], text[cut:]]) == (expected, stopped)
    assert run_split(stop, list(text)) == (expected, stopped)


def test_partial_match_is_held_back_until_resolved() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.push("go ST").text == "go "
    assert matcher.push("OP").is_stopped
    matcher = StopMatcher(["STOP"])
    assert matcher.push("go ST").text == "go "
    assert matcher.push("AY").text == "STAY"
