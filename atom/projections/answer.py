"""One choice's answer as an ordered list of blocks, folded from its events.

The renderers of APIs whose answers are lists of typed parts (Anthropic's content
blocks, the Responses API's output items) read the same fold: reasoning text is a
`thinking` block, text a `text` block, each tool call a `tool_use` block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from atom.vocabulary.events import (
    ChoiceFinished,
    Event,
    ReasoningDelta,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
)


@dataclass(slots=True)
class Block:
    """`thinking`, `text` or `tool_use` (with its call's id and name; arguments as text)."""

    kind: str
    parts: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""

    @property
    def text(self) -> str:
        return "".join(self.parts)


def is_content(event: Event) -> bool:
    """Whether the event adds to the answer (an empty text delta does not)."""
    if isinstance(event, TextDelta | ReasoningDelta):
        return bool(event.text)
    return isinstance(event, ToolCallStarted | ToolArgumentsDelta)


class Answer:
    """The blocks so far and how the choice ended. A new block starts when the kind of
    content changes, and with every tool call."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.finished: ChoiceFinished | None = None

    @property
    def has_calls(self) -> bool:
        return any(b.kind == "tool_use" for b in self.blocks)

    def record(self, event: Event) -> None:
        """Fold any event of the choice: content extends the blocks, ChoiceFinished ends it."""
        if is_content(event):
            self.add(event)
        elif isinstance(event, ChoiceFinished):
            self.finished = event

    def add(self, event: Event) -> tuple[Block | None, Block | None]:
        """Record a content event; returns (the block it closed, the block it opened)."""
        if isinstance(event, ToolCallStarted):
            return self._open(Block("tool_use", id=event.id, name=event.name))
        if isinstance(event, ToolArgumentsDelta):
            self.blocks[-1].parts.append(event.text)
            return None, None
        assert isinstance(event, TextDelta | ReasoningDelta)
        kind = "text" if isinstance(event, TextDelta) else "thinking"
        closed: Block | None = None
        opened: Block | None = None
        if not self.blocks or self.blocks[-1].kind != kind:
            closed, opened = self._open(Block(kind))
        self.blocks[-1].parts.append(event.text)
        return closed, opened

    def _open(self, block: Block) -> tuple[Block | None, Block]:
        closed = self.blocks[-1] if self.blocks else None
        self.blocks.append(block)
        return closed, block


def arguments_object(arguments: str) -> dict[str, Any]:
    """A call's arguments (JSON text) as the object APIs that send them parsed want
    (Anthropic's `input`, Ollama's `arguments`); other JSON is kept under "arguments"
    rather than lost."""
    try:
        value = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}
