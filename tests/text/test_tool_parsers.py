"""Tool-call parsers: each family's real output format, parsed whole and streamed in
every possible split — the streamed content and argument fragments must concatenate
to exactly the non-streaming result."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atom.text.parsers import TOOL_PARSERS, tool_format
from atom.text.tools.base import (
    ArgumentsDelta,
    ContentDelta,
    ParsedTools,
    ToolCallStart,
    ToolDelta,
    ToolStream,
    parse,
)

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "metric": {"type": "boolean"}}}}}  # fmt: skip
SCHEMAS = {WEATHER["function"]["name"]: WEATHER["function"]["parameters"]}

# (parser, model output, expected content, expected [(name, arguments as JSON value)])
CASES: list[tuple[str, str, str, list[tuple[str, object]]]] = [
    ("hermes", 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Sure.", [("get_weather", {"city": "Paris"})]),
    ("hermes", '<tool_call>{"name": "a", "arguments": {"x": [1, {"y": "}"}]}}</tool_call>'
     '<tool_call>{"arguments": {}, "name": "b"}</tool_call> after', " after",
     [("a", {"x": [1, {"y": "}"}]}), ("b", {})]),
    ("hermes", "no calls here, <tool but not a call", "no calls here, <tool but not a call", []),
    ("hermes", "<tool_call>not json</tool_call> tail", "<tool_call>not json</tool_call> tail", []),
    ("qwen25", '<tool_call>{"name": "f", "arguments": {}}</tool_call>', "", [("f", {})]),
    ("llama3_json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
     '{"name": "g", "parameters": {"n": -1}}', "",
     [("get_weather", {"city": "Oslo"}), ("g", {"n": -1})]),
    ("llama3_json", '{"name": "f", "parameters": {"a": 1}}', "", [("f", {"a": 1})]),
    ("llama3_json", "Plain answer with {braces}.", "Plain answer with {braces}.", []),
    ("pythonic", '[get_weather(city="Paris", days=3), search(q=\'a, b\', n=-2.5, flag=True)]', "",
     [("get_weather", {"city": "Paris", "days": 3}),
      ("search", {"q": "a, b", "n": -2.5, "flag": True})]),
    ("llama4_pythonic", "<|python_start|>[f(x=None, y=[1, 2])]<|python_end|>", "",
     [("f", {"x": None, "y": [1, 2]})]),
    ("pythonic", "The answer is [1, 2].", "The answer is [1, 2].", []),
    # issue 46 item 17: content before the calls is kept, not lost or turned into calls
    ("llama3_json", 'Sure. <|python_tag|>{"name": "f", "parameters": {"a": 1}}', "Sure. ",
     [("f", {"a": 1})]),
    ("llama3_json", "Use <|python_tag|> then text", "Use <|python_tag|> then text", []),
    ("pythonic", 'Let me look. [get_weather(city="Oslo")]', "Let me look. ",
     [("get_weather", {"city": "Oslo"})]),
    ("pythonic", "Try [1, 2] and then [f(a=1)] <|python_end|>", "Try [1, 2] and then ",
     [("f", {"a": 1})]),
    ("pythonic", "Call [f(a=1)] later, not now.", "Call [f(a=1)] later, not now.", []),
    ("llama4_pythonic", "Checking.<|python_start|>[f(x=2)]<|python_end|>", "Checking.",
     [("f", {"x": 2})]),
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Rome"}}]', "",
     [("get_weather", {"city": "Rome"})]),
    ("mistral", 'Ok[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]f[ARGS]{}', "Ok",
     [("get_weather", {"city": "Rome"}), ("f", {})]),
    ("deepseek_v3", "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
     'get_weather\n```json\n{"city": "Lima"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function'
     '<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>', "Let me check.",
     [("get_weather", {"city": "Lima"}), ("f", {})]),
    ("kimi_k2", "Checking<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
     '<|tool_call_argument_begin|>{"city": "Kyiv"}<|tool_call_end|><|tool_call_begin|>'
     "functions.f:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
     "Checking", [("get_weather", {"city": "Kyiv"}), ("f", {})]),
    ("granite", 'x<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Bern"}}]', "x",
     [("get_weather", {"city": "Bern"})]),
    ("qwen3_coder", "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
     "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
     "</function>\n</tool_call>", "I'll look.\n",
     [("get_weather", {"city": "New York", "days": 3, "metric": True})]),
    ("openai", "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
     'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}', "",
     [("get_weather", {"city": "Oslo"})]),  # <|call|> is a stop token: it never reaches the text
    ("gpt_oss", "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}", "",
     [("f", {})]),  # the recipient before the channel
    ("openai", "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
     "<|message|>Paris.", "Paris.", []),
    ("openai", "<|channel|>commentary<|message|>Checking now.<|end|><|start|>assistant<|channel|>"
     'commentary to=functions.f<|message|>{"a": 1}', "Checking now.", [("f", {"a": 1})]),
]  # fmt: skip


def run_stream(name: str, pieces: list[str], *, deferred: bool = False) -> ParsedTools:
    stream = ToolStream(tool_format(name, SCHEMAS), id_seed="seed", is_deferred=deferred)
    deltas: list[ToolDelta] = []
    for piece in pieces:
        deltas += stream.feed(piece)
    deltas += stream.flush()
    content, calls = "", {}  # type: ignore[var-annotated]
    for d in deltas:
        if isinstance(d, ContentDelta):
            content += d.text
        elif isinstance(d, ToolCallStart):
            assert d.index not in calls  # a call starts once, with its name
            calls[d.index] = [d.id, d.name, ""]
        elif isinstance(d, ArgumentsDelta):
            calls[d.index][2] += d.text
    from atom.text.tools.base import ToolCall

    return ParsedTools(
        content=content,
        calls=tuple(ToolCall(id=i, name=n, arguments=a) for i, n, a in calls.values()),
    )


@pytest.mark.parametrize(("name", "text", "content", "calls"), CASES)
def test_whole_text(name: str, text: str, content: str, calls: list[tuple[str, object]]) -> None:
    parsed = parse(tool_format(name, SCHEMAS), text, id_seed="seed")
    assert parsed.content == content
    assert [c.name for c in parsed.calls] == [n for n, _ in calls]
    for call, (_, args) in zip(parsed.calls, calls, strict=True):
        if args is not None:
            assert json.loads(call.arguments) == args
    assert len({c.id for c in parsed.calls}) == len(parsed.calls)


@pytest.mark.parametrize(("name", "text", "content", "calls"), CASES)
def test_streaming_agrees_at_every_split(name: str, text: str, content: str, calls: object) -> None:
    whole = parse(tool_format(name, SCHEMAS), text, id_seed="seed")
    splits = [[text[:cut], text[cut:]] for cut in range(len(text) + 1)] + [list(text)]
    splits += [  # three pieces
        [text[:a], text[a:b], text[b:]]
        for a in range(0, len(text), 7)
        for b in range(a, len(text), 11)
    ]
    for pieces in splits:
        assert run_stream(name, pieces, deferred=True) == whole, pieces  # a whole-body answer
        assert run_stream(name, pieces) == whole, pieces  # no call here is dropped at the end


def test_a_cut_off_call_is_content_whole_and_ends_as_announced_streamed() -> None:
    text = 'Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Par'
    whole = parse(tool_format("hermes", SCHEMAS), text, id_seed="seed")
    assert whole.calls == () and whole.content == text  # nothing lost, no broken call
    for cut in range(len(text) + 1):
        assert run_stream("hermes", [text[:cut], text[cut:]], deferred=True) == whole
        streamed = run_stream("hermes", [text[:cut], text[cut:]])
        assert streamed.content == "Sure."
        assert [(c.name, c.arguments) for c in streamed.calls] == [("get_weather", '{"city": "Par')]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("hermes", '<tool_call>{"name": "f", "arguments": {"a": [1}}</tool_call>'),  # mismatch
        ("hermes", '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>'),  # not an object
        ("granite", '<|tool_call|>[{"name": "f", "arguments": {"a": "b'),
        ("mistral", '[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "argu'),
        ("mistral", '[TOOL_CALLS]f[ARGS]{"a": [1}'),
        ("llama3_json", '{"name": "f", "parameters": {"a": '),
        ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
         '```json\n{"a": 1'),
        ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
         '<|tool_call_argument_begin|>{"a": tru'),
        ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPa"),
    ],
)  # fmt: skip
def test_a_whole_answer_never_holds_a_call_whose_arguments_are_no_json_object(
    name: str, text: str
) -> None:
    whole = parse(tool_format(name, SCHEMAS), text, id_seed="seed")
    assert whole.calls == () and whole.content == text


@pytest.mark.parametrize(
    ("name", "text", "content", "num_calls"),
    [
        ("hermes", '\n<tool_call>{"name": "f", "arguments": {}}</tool_call>\n\n'
         '<tool_call>{"name": "g", "arguments": {}}</tool_call>\n', "", 2),
        ("hermes", 'Ok.\n<tool_call>{"name": "f", "arguments": {}}</tool_call> \n', "Ok.\n", 1),
        ("hermes", "  \n", "  \n", 0),  # no call beside it: whitespace stays the answer
        ("mistral", ' \n[TOOL_CALLS]f[ARGS]{"a": 1}', "", 1),
        ("kimi_k2", "\n<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
         "<|tool_call_argument_begin|>{}<|tool_call_end|>", "", 1),
    ],
)  # fmt: skip
def test_whitespace_beside_calls_is_not_content(
    name: str, text: str, content: str, num_calls: int
) -> None:
    whole = parse(tool_format(name, SCHEMAS), text, id_seed="seed")
    assert whole.content == content and len(whole.calls) == num_calls
    for cut in range(len(text) + 1):
        assert run_stream(name, [text[:cut], text[cut:]]) == whole


@pytest.mark.parametrize(
    ("name", "text", "arguments"),
    [
        ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "a[TOOL_CALLS]b"}[TOOL_CALLS]f[ARGS]{}',
         [{"city": "a[TOOL_CALLS]b"}, {}]),
        ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n"
         '{"q": "x<｜tool▁call▁end｜>y"}\n```<｜tool▁call▁end｜>', [{"q": "x<｜tool▁call▁end｜>y"}]),
        ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
         '<|tool_call_argument_begin|>{"q": "<|tool_call_end|>"}<|tool_call_end|>',
         [{"q": "<|tool_call_end|>"}]),
    ],
)  # fmt: skip
def test_end_markers_inside_json_strings_are_text(
    name: str, text: str, arguments: list[object]
) -> None:
    whole = parse(tool_format(name, SCHEMAS), text, id_seed="seed")
    assert [json.loads(c.arguments) for c in whole.calls] == arguments
    for cut in range(len(text) + 1):
        assert run_stream(name, [text[:cut], text[cut:]]) == whole


@pytest.mark.parametrize(
    ("name", "text", "calls"),
    [
        ("mistral", '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Rome"}',
         [("get_weather", {"city": "Rome"})]),
        ("granite", 'Let me check.<tool_call>[{"name": "get_weather", "arguments": {"city": "Bern"}}]',
         [("get_weather", {"city": "Bern"})]),
        ("qwen3_coder", "<tool_call>\n<function=book>\n<parameter=note>\nnull\n</parameter>\n"
         "<parameter=seats>\n2\n</parameter>\n<parameter=big>\n1e999\n</parameter>\n"
         "<parameter=who>\nnull\n</parameter>\n</function>\n</tool_call>",
         [("book", {"note": None, "seats": 2, "big": "1e999", "who": "null"})]),
    ],
)  # fmt: skip
def test_format_variants(name: str, text: str, calls: list[tuple[str, object]]) -> None:
    schemas = {"book": {"type": "object", "properties": {
        "note": {"type": ["string", "null"]}, "seats": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "big": {"type": "number"}, "who": {"type": "string"}}}, **SCHEMAS}  # fmt: skip
    whole = parse(tool_format(name, schemas), text, id_seed="seed")
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == calls
    assert all("Infinity" not in c.arguments for c in whole.calls)


def test_arguments_stream_as_they_arrive() -> None:
    stream = ToolStream(tool_format("hermes"))
    stream.feed('<tool_call>{"name": "f", "arguments": {"city": "Par')
    assert stream.num_calls == 1


def test_unknown_parser_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="hermes"):
        tool_format("nope")


FRAGMENTS = [
    "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<|tool_call|>",
    "<|python_start|>", "<|python_end|>", "<function=f>", "<parameter=a>", "</parameter>",
    "</function>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>", "functions.f:0",
    '{"name": "f", "arguments": {"a": 1}}', '{"name": "f\\q", ', '"\\u12"', '"parameters": ',
    "[f(a=1)]", "[f(a={1, 2})]", "b'x'", "1j", "{", "}", "[", "]", '"', ",", ";", ":", "\\",
    " ", "\n", "x", "```json\n", "```", "<|channel|>", "<|message|>", "<|end|>", "<|start|>",
    "assistant", "analysis", "final", "commentary to=functions.f", "<|constrain|>json",
]  # fmt: skip


@settings(max_examples=300, deadline=None, derandomize=True)  # longer: bench/ or by hand
@given(
    name=st.sampled_from(sorted(TOOL_PARSERS)),
    pieces=st.lists(st.sampled_from(FRAGMENTS), max_size=14),
    cuts=st.lists(st.integers(min_value=1, max_value=7), max_size=40),
)
def test_no_parser_raises_on_any_text_and_streaming_agrees(
    name: str, pieces: list[str], cuts: list[int]
) -> None:
    text = "".join(pieces)
    whole = parse(tool_format(name, SCHEMAS), text, id_seed="seed")
    assert all(json.loads(c.arguments).__class__ is dict for c in whole.calls)  # the rule
    pos, chunks = 0, []
    for cut in cuts:
        chunks.append(text[pos : pos + cut])
        pos += cut
    chunks.append(text[pos:])
    assert run_stream(name, chunks, deferred=True) == whole
    streamed = run_stream(name, chunks)
    if len(streamed.calls) == len(whole.calls):  # no announced call was dropped at the end
        assert streamed == whole
    else:  # the stream kept a call it had announced and the whole answer dropped
        assert len(streamed.calls) > len(whole.calls)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("hermes", '<tool_call>{"name": "f\\q", "arguments": {}}</tool_call>'),
        ("hermes", '<tool_call>{"na\\u12me": "f", "arguments": {}}</tool_call>'),
        ("mistral", '[TOOL_CALLS] [{"name": "f\\q", "arguments": {}}]'),
        ("llama3_json", '{"name": "\\u12", "parameters": {}}'),
        ("granite", '<|tool_call|>[{"name": "f\\q", "arguments": {}}]'),
        ("pythonic", "[f(a={1, 2})]"),
        ("pythonic", "[f(a=b'x')]"),
        ("pythonic", "[f(a=1j)]"),
        ("pythonic", "[f(a={[1]: 2})]"),
    ],
)
def test_malformed_calls_stay_content(name: str, text: str) -> None:
    parsed = parse(tool_format(name, SCHEMAS), text, id_seed="seed")
    assert parsed.calls == () and parsed.content == text


def test_a_close_marker_inside_a_json_string_is_text_whole_and_streamed() -> None:
    call = '{"name": "get_weather", "arguments": {"city": "a</tool_call>b"}}'
    text = f"Sure.<tool_call>{call}</tool_call> Done. <tool_call>oops</tool_call> end"
    whole = parse(tool_format("hermes", SCHEMAS), text, id_seed="seed")
    assert [json.loads(c.arguments) for c in whole.calls] == [{"city": "a</tool_call>b"}]
    assert whole.content == "Sure. Done. <tool_call>oops</tool_call> end"
    stream = ToolStream(tool_format("hermes", SCHEMAS), id_seed="seed")
    deltas = [d for ch in text for d in stream.feed(ch)] + stream.flush()
    assert (
        "".join(d.text for d in deltas if isinstance(d, ArgumentsDelta)) == whole.calls[0].arguments
    )
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == whole.content
