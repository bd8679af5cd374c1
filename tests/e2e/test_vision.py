"""Image input served for real: a tiny LLaVA folder made here, served by a real
hypercorn process, asked through the official client with data URLs, an allowed local
file and an allowed web address; images refused by the media policy get a 400 naming
the part, and the server keeps serving."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from atom.log.codec import read_log
from atom.vocabulary.events import RequestAccepted, RequestReceived
from tests.e2e.conftest import Server, running_server
from tests.vision_models import data_url, encoded, picture, tiny_llava

pytestmark = pytest.mark.slow

NAME = "tiny-llava"
FETCH_TIMEOUT_S = 8
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of images: served over HTTP and allowed for file:// URLs."""
    folder = tmp_path_factory.mktemp("media")
    (folder / "one.png").write_bytes(encoded(picture(1)))
    (folder / "two.webp").write_bytes(encoded(picture(2), "WEBP"))
    (folder / "huge.png").write_bytes(encoded(picture(3, size=(300, 300))))
    (folder / "not-an-image.png").write_bytes(b"these bytes are no picture")
    os.mkfifo(folder / "fifo.png")  # nobody writes it: opening it to read would block
    return folder


@pytest.fixture(scope="module")
def web(media: Path) -> Iterator[str]:
    """The media folder over HTTP on a loopback port."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(media), **kwargs)

        def do_GET(self) -> None:
            if self.path != "/drip.png":
                return super().do_GET()
            self.send_response(200)  # a byte every half second: 500 s for the whole image
            self.send_header("content-length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass  # the server gave up on it

        def log_message(self, *args: Any) -> None:
            pass

    http.server.ThreadingHTTPServer.request_queue_size = 128  # 60 fetches at once
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, media: Path) -> Iterator[Server]:
    folder = tiny_llava(tmp_path_factory.mktemp("model") / "llava")
    log = tmp_path_factory.mktemp("log") / "requests.jsonl"
    with running_server(
        log,
        ATOM_MODEL=str(folder),
        ATOM_SERVED_MODEL_NAME=NAME,
        ATOM_ALLOWED_LOCAL_MEDIA_PATH=str(media),
        ATOM_ALLOWED_MEDIA_DOMAINS="127.0.0.1",
        ATOM_MEDIA_FETCH_TIMEOUT=str(FETCH_TIMEOUT_S),
        ATOM_LIMIT_MM_PER_PROMPT='{"image": 2}',
        ATOM_MAX_IMAGE_PIXELS=str(200 * 200),
        ATOM_ENABLE_ADMIN_ROUTES="true",
    ) as running:
        yield running


def message(*urls: str, text: str = "What is in the picture?") -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def ask(server: Server, *urls: str, **more: Any) -> Any:
    return server.client().chat.completions.create(
        model=NAME, messages=message(*urls), temperature=0, max_tokens=8, **more
    )


def refusal(server: Server, messages: list[dict[str, Any]]) -> dict[str, Any]:
    r = httpx.post(server.url + CHAT, json={"model": NAME, "messages": messages}, timeout=60)
    assert r.status_code == 400, r.text
    return r.json()["error"]  # type: ignore[no-any-return]


def test_an_image_answers_through_the_official_client(server: Server) -> None:
    one = ask(server, data_url(picture(1)))
    other = ask(server, data_url(picture(2)))
    assert one.model == NAME and one.choices[0].message.content
    assert one.choices[0].message.content != other.choices[0].message.content
    count = httpx.post(
        f"{server.url}/tokenize", json={"model": NAME, "messages": message(data_url(picture(1)))}
    ).json()["count"]
    assert one.usage.prompt_tokens == count  # the image's 16 tokens counted
    text_only = httpx.post(
        f"{server.url}/tokenize", json={"model": NAME, "messages": message()}
    ).json()["count"]
    assert count == text_only + 16  # the image: its 16 tokens


def test_the_same_picture_from_a_file_and_the_web_answers_alike(
    server: Server, media: Path, web: str
) -> None:
    by_data = ask(server, data_url(picture(1))).choices[0].message.content
    by_file = ask(server, f"file://{media / 'one.png'}").choices[0].message.content
    by_web = ask(server, f"{web}/one.png").choices[0].message.content
    assert by_data == by_file == by_web


def test_a_repeated_image_is_read_from_the_prefix_cache(server: Server) -> None:
    url = data_url(picture(5))
    ask(server, url)
    again = ask(server, url)
    assert again.usage.prompt_tokens_details.cached_tokens >= 16


def test_two_images_stream(server: Server) -> None:
    stream = ask(server, data_url(picture(1)), data_url(picture(2), "WEBP"), stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text


def test_the_log_records_each_image_without_its_bytes(server: Server) -> None:
    png = data_url(picture(4))
    ask(server, png, data_url(picture(4), "WEBP"))  # WebP is lossless here
    events = [e.event for e in read_log(server.log_path)]
    received = [e for e in events if isinstance(e, RequestReceived)][-1]
    assert png[40:100] not in json.dumps(received.body)  # no image bytes
    assert "omitted" in received.body["messages"][0]["content"][0]["image_url"]["url"]
    last = [e for e in events if isinstance(e, RequestAccepted)][-1]
    assert [(i.width, i.height, i.num_tokens) for i in last.images] == [(40, 30, 16)] * 2
    assert last.images[0].sha256 == last.images[1].sha256  # the same pixels, any format
    assert last.images[1].offset > last.images[0].offset


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("file:///etc/passwd", "outside --allowed-local-media-path"),
        ("http://localhost:9/x.png", "not allowed"),
        ("data:image/png;base64,AAAA", "not an image"),
        ("data:text/plain;base64,aGk=", "not an image type"),
        ("ftp://example.com/x.png", "data:, file: or http(s)"),
    ],
)
def test_refused_media_name_the_part(server: Server, url: str, says: str) -> None:
    error = refusal(server, message(url))
    assert error["param"] == "messages.0.content.0"
    assert says in error["message"]


def test_refusals_of_files_and_web_addresses(server: Server, media: Path, web: str) -> None:
    cases = {
        f"file://{media / 'huge.png'}": "more than --max-image-pixels",
        f"file://{media / 'not-an-image.png'}": "not an image",
        f"file://{media / 'missing.png'}": "cannot read",
        f"{web}/missing.png": "HTTP 404",
        f"file://{media / 'fifo.png'}": "not a regular file",  # at once, not blocked
    }
    for url, says in cases.items():
        error = refusal(server, message(url))
        assert says in error["message"], (url, error)


def test_slow_image_servers_hold_no_thread_and_meet_one_deadline(server: Server, web: str) -> None:
    """Issue 46: a server sending a byte every few seconds held a worker thread per
    request for minutes (the timeout was per read), and 42 such requests kept plain
    chats waiting. Now 60 of them (more than Trio's 40 threads) wait in Trio, a text
    chat answers meanwhile, and each gets a 400 at the one deadline."""
    began = time.monotonic()
    with ThreadPoolExecutor(60) as pool:
        slow = [pool.submit(refusal, server, message(f"{web}/drip.png")) for _ in range(60)]
        time.sleep(1)  # the fetches are under way
        text = httpx.post(
            server.url + CHAT,
            json={"model": NAME, "messages": message(), "max_tokens": 2},
            timeout=FETCH_TIMEOUT_S,
        )
        assert text.status_code == 200, text.text
        early = [f.result() for f in slow if f.done()]
        assert not early, early[:2]  # answered while they all still wait
        errors = [f.result() for f in slow]
    assert all("--media-fetch-timeout" in e["message"] for e in errors), errors[0]
    assert time.monotonic() - began < 4 * FETCH_TIMEOUT_S  # not the drip's 500 s


def test_too_many_images_name_the_first_over_the_limit(server: Server) -> None:
    url = data_url(picture(1))
    error = refusal(server, message(url, url, url))
    assert error["param"] == "messages.0.content.2"
    assert "--limit-mm-per-prompt" in error["message"]


def test_the_server_keeps_serving_after_refusals(server: Server) -> None:
    for url in ("data:image/png;base64,AAAA", "file:///etc/passwd"):
        refusal(server, message(url))
    assert ask(server, data_url(picture(1))).choices[0].finish_reason == "length"
    health = httpx.get(f"{server.url}/health")
    assert health.status_code == 200, health.text


def test_anthropic_image_blocks_and_responses_input_images_read_the_same_image(
    server: Server,
) -> None:
    """Messages' base64 image block and the Responses API's input_image go the chat way:
    the same picture and question give the same greedy answer as chat's image_url."""
    import anthropic

    png = encoded(picture(1))
    question = "What is in the picture?"
    by_chat = ask(server, data_url(picture(1))).choices[0].message.content
    source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png).decode()}
    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    by_messages = claude.messages.create(
        model=NAME,
        max_tokens=8,
        extra_body={"temperature": 0},  # this SDK has no temperature argument any more
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": source},
                    {"type": "text", "text": question},
                ],
            }
        ],
    )
    by_responses = server.client().responses.create(
        model=NAME,
        max_output_tokens=8,
        temperature=0,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": data_url(picture(1))},
                    {"type": "input_text", "text": question},
                ],
            }
        ],
    )
    assert by_messages.content[0].text == by_chat  # type: ignore[union-attr]
    assert by_responses.output_text == by_chat


def test_other_apis_refusals_name_their_own_fields(server: Server) -> None:
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    body = {
        "model": NAME,
        "max_tokens": 8,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, bad]}],
    }
    r = httpx.post(f"{server.url}/v1/messages", json=body, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("messages.0.content.1:")
    item = {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}
    r = httpx.post(f"{server.url}/v1/responses", json={"model": NAME, "input": [item]}, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "input.0.content.0"


def test_image_tokens_count_against_the_context(server: Server) -> None:
    """The context is 512 tokens (the tiny model's): a prompt's 16 image tokens leave
    512 - prompt room for the answer, and one token more is refused."""
    url = data_url(picture(1))
    count = httpx.post(
        f"{server.url}/tokenize", json={"model": NAME, "messages": message(url)}
    ).json()["count"]
    body = {"model": NAME, "messages": message(url), "max_tokens": 512 - count + 1}
    r = httpx.post(server.url + CHAT, json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert str(count) in r.json()["error"]["message"]
    body["max_tokens"] = 512 - count
    assert httpx.post(server.url + CHAT, json=body, timeout=60).status_code == 200


def test_weights_are_never_dropped_for_good(server: Server) -> None:
    """A vision model reloads no weights: new weights and a level-2 sleep (which would
    need them read again) are refused; level 1 sleeps and wakes."""
    update = httpx.post(
        f"{server.url}/update_weights_from_disk", json={"model_path": "/tmp"}, timeout=60
    )
    assert update.status_code == 400 and "cannot load new weights" in update.text
    deep = httpx.post(f"{server.url}/sleep", params={"level": "2"}, timeout=60)
    assert deep.status_code == 400 and "use level 1" in deep.text
    assert httpx.post(f"{server.url}/sleep", params={"level": "1"}, timeout=60).status_code == 200
    assert httpx.post(f"{server.url}/wake_up", timeout=60).status_code == 200
    assert ask(server, data_url(picture(1))).choices[0].message.content
