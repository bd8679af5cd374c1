"""The chat controls vLLM users expect — template controls, a request's own template,
documents, reasoning effort, include_reasoning — over real HTTP. The FakeRunner here
records each prompt it is given, so a test reads what the template rendered."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from atom.http.app import create_app
from atom.model.catalog import ModelSpec
from atom.model.fake_runner import FakeRunner
from atom.model.runner import Runtime, Sampled, StepPlan
from atom.vocabulary.config import Settings
from tests.conftest import replying, serving, wait_ready

MODEL = "SmolLM2-135M-Instruct"
TURN = [{"role": "user", "content": "hi"}]
TEMPLATE = (
    "{% for d in documents or [] %}[doc:{{ d.title }}]{% endfor %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "[effort:{{ reasoning_effort | default('none') }}]"
)


class Recording(FakeRunner):
    """Keeps every prompt it starts, as token ids."""

    prompts: list[tuple[int, ...]] = []  # one list per test: reset in `app`

    def step(self, plan: StepPlan) -> Mapping[str, tuple[Sampled, ...]]:
        self.prompts.extend(c.token_ids for c in plan.chunks if c.start_pos == 0)
        return super().step(plan)


def app(tokenizer: Any, reply: str = "ok", **settings: Any) -> Any:
    Recording.prompts = []

    def load(s: Settings, spec: ModelSpec) -> Runtime:
        runner = Recording(eos_token_id=tokenizer.eos_token_id, script=replying(tokenizer, reply))
        return Runtime(runner=runner, tokenizer=tokenizer, max_model_len=2048)

    # No prefix cache: every prompt then starts at position 0, whole.
    settings = {"model": (MODEL,), "enable_prefix_caching": False, **settings}
    return create_app(Settings(**settings), load=load)


async def post_all(served: Any, *bodies: dict[str, Any]) -> list[httpx.Response]:
    async with serving(served) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(served)
        return [await http.post("/v1/chat/completions", json=b) for b in bodies]


async def test_the_generation_prompt_can_be_left_out_or_the_last_message_continued(
    tokenizer: Any,
) -> None:
    prefill = [*TURN, {"role": "assistant", "content": "The answer is"}]
    plain, no_prompt, continued = await post_all(
        app(tokenizer),
        {"messages": TURN},
        {"messages": TURN, "add_generation_prompt": False},
        {"messages": prefill, "add_generation_prompt": False, "continue_final_message": True},
    )
    assert plain.status_code == no_prompt.status_code == continued.status_code == 200
    texts = [tokenizer.decode(p) for p in Recording.prompts]
    assert texts[0].endswith("<|im_start|>assistant\n")
    assert texts[1].endswith("hi<|im_end|>\n")
    assert texts[2].endswith("<|im_start|>assistant\nThe answer is")  # not closed


async def test_bad_template_controls_are_400s_naming_the_field(tokenizer: Any) -> None:
    answers = await post_all(
        app(tokenizer),
        {"messages": TURN, "continue_final_message": True},
        {"messages": TURN, "continue_final_message": True, "add_generation_prompt": False},
        {"messages": TURN, "chat_template": TEMPLATE},
        {"messages": TURN, "reasoning_effort": "extreme"},
    )
    assert [a.status_code for a in answers] == [400, 400, 400, 400]
    params = [a.json()["error"]["param"] for a in answers]
    assert params[:3] == ["continue_final_message", "continue_final_message", "chat_template"]
    assert "reasoning_effort" in str(params[3])
    assert "--trust-request-chat-template" in answers[2].json()["error"]["message"]
    assert Recording.prompts == []  # nothing reached the engine


async def test_a_trusted_request_template_gets_the_documents_and_the_reasoning_effort(
    tokenizer: Any,
) -> None:
    documents = [{"title": "Paris", "text": "..."}, {"title": "Rome", "text": "..."}]
    (answer,) = await post_all(
        app(tokenizer, trust_request_chat_template=True),
        {
            "messages": TURN,
            "chat_template": TEMPLATE,
            "documents": documents,
            "reasoning_effort": "low",
        },
    )
    assert answer.status_code == 200
    assert tokenizer.decode(Recording.prompts[0]) == "[doc:Paris][doc:Rome]<user>hi[effort:low]"


async def test_include_reasoning_false_leaves_the_reasoning_out_of_the_answer(
    tokenizer: Any,
) -> None:
    served = app(tokenizer, reply="<think>let me see</think>Paris", reasoning_parser="qwen3")
    kept, dropped = await post_all(
        served, {"messages": TURN}, {"messages": TURN, "include_reasoning": False}
    )
    assert kept.json()["choices"][0]["message"]["reasoning_content"] == "let me see"
    message = dropped.json()["choices"][0]["message"]
    assert message["content"] == "Paris" and "reasoning_content" not in message
    details = dropped.json()["usage"]["completion_tokens_details"]
    assert details == kept.json()["usage"]["completion_tokens_details"]  # still counted


async def test_reasoning_tokens_count_the_same_however_tokens_are_gathered(
    tokenizer: Any,
) -> None:
    """A token counts as reasoning when the text before it ends inside the reasoning,
    whether it reached the pipeline alone or with others (--stream-interval gathers
    five; a request that falls behind the model gathers any number)."""
    reply = "<think>let me see</think>Paris"
    counted = []
    for interval in (1, 5):
        served = app(tokenizer, reply=reply, reasoning_parser="qwen3", stream_interval=interval)
        [answer] = await post_all(served, {"messages": TURN, "stream": True,
                                           "stream_options": {"include_usage": True}})  # fmt: skip
        usage = [json.loads(line[6:]) for line in answer.text.splitlines() if '"usage":{' in line]
        counted.append(usage[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"])
    think = tokenizer.encode("<think>let me see</think>", add_special_tokens=False)
    assert counted[0] == counted[1] and 0 < counted[0] <= len(think)


async def test_return_token_ids_gives_the_prompt_and_every_sampled_token(tokenizer: Any) -> None:
    served = app(tokenizer, reply="Paris, France")
    reply_ids = [*tokenizer.encode("Paris, France", add_special_tokens=False)]
    async with serving(served) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(served)
        body = await http.post(
            "/v1/chat/completions", json={"messages": TURN, "return_token_ids": True}
        )
        async with http.stream(
            "POST",
            "/v1/chat/completions",
            json={"messages": TURN, "return_token_ids": True, "stream": True},
        ) as r:
            chunks = [json.loads(line[6:]) async for line in r.aiter_lines() if line[6:7] == "{"]
        completion = await http.post(
            "/v1/completions",
            json={"prompt": ["a b", "c"], "return_token_ids": True, "max_tokens": 2},
        )
        plain = await http.post("/v1/chat/completions", json={"messages": TURN})
    doc = body.json()
    assert doc["prompt_token_ids"] == list(Recording.prompts[0])
    assert doc["choices"][0]["token_ids"] == [*reply_ids, tokenizer.eos_token_id]
    assert chunks[0]["choices"][0]["prompt_token_ids"] == doc["prompt_token_ids"]
    streamed = [i for c in chunks for i in c["choices"][0].get("token_ids", [])]
    assert streamed == doc["choices"][0]["token_ids"]
    choices = completion.json()["choices"]
    assert [c["prompt_token_ids"] for c in choices] == [
        tokenizer.encode("a b"),
        tokenizer.encode("c"),
    ]
    assert all(c["token_ids"] == reply_ids[:2] for c in choices)
    assert "token_ids" not in plain.text  # only when asked: the answer is as before


async def test_render_gives_what_a_request_would_run_and_generates_nothing(
    tokenizer: Any,
) -> None:
    served = app(tokenizer)
    ask = {"messages": TURN, "max_tokens": 7, "temperature": 0.5, "stop": ["x"]}
    async with serving(served) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(served)
        chat = await http.post("/v1/chat/completions/render", json=ask)
        completion = await http.post("/v1/completions/render", json={"prompt": ["a b", "c"]})
        bad = await http.post("/v1/chat/completions/render", json={"messages": []})
        await http.post("/v1/chat/completions", json=ask)  # the same body, generated
    rendered = chat.json()
    assert rendered["token_ids"] == list(Recording.prompts[0])  # exactly what would run
    assert len(Recording.prompts) == 1  # the renders ran nothing
    assert rendered["prompt"] == tokenizer.decode(Recording.prompts[0])
    assert rendered["request_id"].startswith("chatcmpl-")
    params = rendered["sampling_params"]
    assert (params["max_tokens"], params["temperature"], params["stop"]) == (7, 0.5, ["x"])
    assert [r["token_ids"] for r in completion.json()] == [
        tokenizer.encode("a b"),
        tokenizer.encode("c"),
    ]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"


async def test_priority_needs_the_priority_policy(tokenizer: Any) -> None:
    (refused,) = await post_all(app(tokenizer), {"messages": TURN, "priority": 3})
    (taken,) = await post_all(
        app(tokenizer, scheduling_policy="priority"), {"messages": TURN, "priority": 3}
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "priority"
    assert "--scheduling-policy priority" in refused.json()["error"]["message"]
    assert taken.status_code == 200
