"""The output shapes that structured output forces for `tool_choice`: a JSON list of
`{"name", "parameters"}` calls ("required"), or one function's arguments (a named
function). Both stream like the parsers: arguments as they arrive."""

from __future__ import annotations

from dataclasses import dataclass

from atom.text.tools.base import PartialCall, Scan, strict
from atom.text.tools.json_calls import scan_call_list


@dataclass(frozen=True, slots=True)
class CallList:
    def scan(self, text: str, *, is_final: bool) -> Scan:
        calls, _ = scan_call_list(text, 0, is_final=is_final, separator=",")
        if not calls and is_final:
            return Scan(content=text)  # cut off before any call: nothing is lost
        return strict(Scan(content="", calls=tuple(calls)), text, is_final=is_final)


@dataclass(frozen=True, slots=True)
class NamedCall:
    name: str

    def scan(self, text: str, *, is_final: bool) -> Scan:
        call = PartialCall(name=self.name, arguments=text, is_complete=is_final)
        return strict(Scan(content="", calls=(call,)), text, is_final=is_final)
