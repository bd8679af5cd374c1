"""gpt-oss's harmony format, read from text (`openai`, alias `gpt_oss`, for both parsers).

The output is messages: an optional `<|start|>ROLE`, a header (`<|channel|>analysis`,
`commentary` or `final`; `to=functions.NAME` before or after the channel; an optional
`<|constrain|>json`), `<|message|>`, the body, and `<|end|>` (`<|call|>` and `<|return|>`
end the output: they are stop tokens and never reach the text). The first message
has no `<|start|>`: the prompt ended with `<|start|>assistant`. The markers are special
tokens, so a harmony parser makes the chat adapter keep special tokens in the text.

The reasoning format takes the analysis bodies as reasoning and passes every other
message on whole; the tool format turns a commentary message addressed to
`functions.NAME` into a call whose arguments are its body, and final (or
recipient-less commentary) bodies into content. A header still arriving waits; so
does a possible marker prefix at the end of a body: scans stay monotone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from atom.text.reasoning.base import ReasoningScan
from atom.text.scanning import held_back
from atom.text.tools.base import PartialCall, Scan, is_valid

MESSAGE, START, END = "<|message|>", "<|start|>", "<|end|>"
TERMINATORS = (END, "<|call|>", "<|return|>", START)
ANALYSIS_START = "<|channel|>analysis<|message|>"
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    channel: str
    recipient: str | None
    body: str
    raw: str  # the message's whole text, header and terminator included
    is_closed: bool


def messages(text: str, *, is_final: bool) -> tuple[list[Message], str]:
    """The messages of `text` so far, and text that is no message: in the final scan
    what follows the last one; otherwise "" (an unfinished header waits)."""
    found: list[Message] = []
    pos = 0
    while pos < len(text):
        m = text.find(MESSAGE, pos)
        if m < 0:
            return found, text[pos:] if is_final else ""
        header, body_start = text[pos:m], m + len(MESSAGE)
        ends = [(i, t) for t in TERMINATORS if (i := text.find(t, body_start)) >= 0]
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        if not ends:
            keep = 0 if is_final else held_back(text[body_start:], TERMINATORS)
            body = text[body_start : len(text) - keep]
            raw = text[pos : len(text) - keep]
            found.append(_message(channel, recipient, body, raw, is_closed=False))
            return found, ""
        end, terminator = min(ends)
        after = end if terminator == START else end + len(terminator)
        found.append(_message(channel, recipient, text[body_start:end], text[pos:after], True))
        pos = after
    return found, ""


def _message(
    channel: re.Match[str] | None,
    recipient: re.Match[str] | None,
    body: str,
    raw: str,
    is_closed: bool,
) -> Message:
    return Message(
        channel=channel.group(1) if channel else "",
        recipient=recipient.group(1) if recipient else None,
        body=body,
        raw=raw,
        is_closed=is_closed,
    )


@dataclass(frozen=True, slots=True)
class HarmonyReasoning:
    """Analysis bodies are reasoning; the content is every other message's body, as
    vLLM gives with `--reasoning-parser openai` alone. `feeds_tools`: the harmony tool
    format reads the content next, so those messages pass on whole (it reads the
    recipients and takes the headers off)."""

    feeds_tools: bool = False

    @property
    def start_marker(self) -> str:
        return ANALYSIS_START

    @property
    def end_marker(self) -> str:
        return END

    def scan(self, text: str, *, is_final: bool) -> ReasoningScan:
        found, rest = messages(text, is_final=is_final)
        reasoning = "".join(m.body for m in found if m.channel == "analysis")
        others = [m for m in found if m.channel != "analysis"]
        content = "".join(m.raw if self.feeds_tools else m.body for m in others) + rest
        return ReasoningScan(reasoning=reasoning, content=content)


@dataclass(frozen=True, slots=True)
class HarmonyTools:
    """`to=functions.NAME` commentary → a call (arguments: its body); final and other
    bodies → content; analysis is neither (the reasoning format's, when there is one).
    A call that is not valid in the final scan gives its body to the content."""

    def scan(self, text: str, *, is_final: bool) -> Scan:
        found, rest = messages(text, is_final=is_final)
        content: list[str] = []
        calls: list[PartialCall] = []
        for message in found:
            name = _function(message.recipient)
            if name is not None:
                call = PartialCall(
                    name=name, arguments=message.body, is_complete=message.is_closed or is_final
                )
                if is_valid(call) or not is_final:
                    calls.append(call)
                    continue
            if message.channel != "analysis":
                content.append(message.body)
        return Scan(content="".join(content) + rest, calls=tuple(calls))


def _function(recipient: str | None) -> str | None:
    if recipient is None or not recipient.startswith("functions."):
        return None
    return recipient.removeprefix("functions.") or None
