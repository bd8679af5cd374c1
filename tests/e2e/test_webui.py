"""The web page in a real headless Chromium against a real server on the default model.

Screenshots go to a temporary folder; with UPDATE_SCREENSHOTS=1 they replace the ones
in docs/images (docs/webui.md shows them)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from tests.e2e.browser import chromium, wait_for
from tests.e2e.conftest import Server, server_process

pytestmark = pytest.mark.slow

DOCS_IMAGES = Path(__file__).parent.parent.parent / "docs" / "images"
LONG_ANSWER = "Tell me a very long story about a dragon who learns to bake bread."


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads: Path) -> Iterator[webdriver.Chrome]:
    with chromium(downloads) as driver:
        yield driver


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return DOCS_IMAGES if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path_factory.mktemp("shots")


@pytest.fixture
def page(browser: webdriver.Chrome, server: Server) -> webdriver.Chrome:
    """The page, fresh: no conversations kept from an earlier test, the models listed."""
    open_page(browser, server.url, clear=True)
    return browser


def open_page(driver: webdriver.Chrome, url: str, *, clear: bool = False) -> None:
    driver.get(f"{url}/")
    if clear:
        driver.execute_script("localStorage.clear()")
        driver.get(f"{url}/")
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#model option"))


def send(driver: webdriver.Chrome, text: str) -> None:
    driver.find_element(By.ID, "prompt").send_keys(text, Keys.ENTER)


def set_setting(driver: webdriver.Chrome, name: str, value: str) -> None:
    script = "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
    driver.execute_script(script + "e.dispatchEvent(new Event('change'))", name, value)


def messages(driver: webdriver.Chrome) -> list[WebElement]:
    return driver.find_elements(By.CSS_SELECTOR, "#messages > .message")


def answer_text(driver: webdriver.Chrome) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, "#messages > .message.assistant .markdown")
    return found[-1].text if found else ""


def running(server: Server) -> int:
    text = httpx.get(f"{server.url}/metrics").text
    pattern = rf'atom:num_requests_running{{model_name="{server.model}"}} (\d+)'
    match = re.search(pattern, text)
    assert match, text[:500]
    return int(match.group(1))


def test_a_message_streams_its_answer_with_its_numbers_and_survives_a_reload(
    page: webdriver.Chrome, server: Server, shots: Path
) -> None:
    set_setting(page, "max_tokens", "120")
    send(page, "Write a Python function that adds two numbers.")
    # While it streams: Stop is offered and part of the answer is already on the page.
    wait_for(lambda: page.find_element(By.ID, "stop").is_displayed() and answer_text(page))
    stats = wait_for(lambda: page.find_elements(By.CSS_SELECTOR, ".message.assistant .stats"))
    assert page.find_element(By.ID, "send").is_displayed()
    assert re.fullmatch(r"\d+ tokens · TTFT \d+\.\d\d s( · \d+\.\d tokens/s)?", stats[0].text)
    answer = answer_text(page)
    assert answer.strip()
    page.save_screenshot(str(shots / "webui-chat.png"))

    page.refresh()  # the conversation is kept in the browser
    wait_for(lambda: len(messages(page)) == 2)
    question = messages(page)[0].find_element(By.CSS_SELECTOR, ".text").text
    assert question == "Write a Python function that adds two numbers."
    assert answer_text(page) == answer
    title = page.find_element(By.CSS_SELECTOR, "#conversations li.active span").text
    assert title == "Write a Python function that adds two numbers."[:40]


def test_stop_ends_the_stream_and_the_server_frees_the_request(
    page: webdriver.Chrome, server: Server
) -> None:
    set_setting(page, "max_tokens", "4000")
    send(page, LONG_ANSWER)
    wait_for(lambda: len(answer_text(page)) > 20)
    assert running(server) == 1
    page.find_element(By.ID, "stop").click()
    stopped_at = time.monotonic()
    wait_for(lambda: running(server) == 0, timeout=1.0)
    assert time.monotonic() - stopped_at < 1.0
    note = wait_for(lambda: page.find_element(By.CSS_SELECTOR, ".message.assistant .note").text)
    wait_for(lambda: "freed" in page.find_element(By.CSS_SELECTOR, ".message .note").text)
    assert note.startswith("Stopped")
    kept = answer_text(page)
    assert kept and page.find_element(By.ID, "send").is_displayed()

    # Escape stops too; regenerate asks again for the same question.
    page.find_element(By.CSS_SELECTOR, "[data-action=regenerate]").click()
    wait_for(lambda: len(messages(page)) == 2 and len(answer_text(page)) > 20)
    page.find_element(By.ID, "prompt").send_keys(Keys.ESCAPE)
    wait_for(lambda: running(server) == 0, timeout=1.0)
    wait_for(lambda: "freed" in page.find_element(By.CSS_SELECTOR, ".message .note").text)
    assert [m.get_attribute("class") for m in messages(page)] == [
        "message user",
        "message assistant",
    ]


def test_edit_and_resend_replaces_the_question_and_export_saves_it(
    page: webdriver.Chrome, server: Server, downloads: Path
) -> None:
    set_setting(page, "max_tokens", "8")
    send(page, "What is the capital of France?")
    wait_for(lambda: page.find_elements(By.CSS_SELECTOR, ".message.assistant .stats"))
    messages(page)[0].find_element(By.CSS_SELECTOR, "[data-action=edit]").click()
    prompt = page.find_element(By.ID, "prompt")
    assert prompt.get_attribute("value") == "What is the capital of France?" and not messages(page)
    prompt.send_keys(Keys.CONTROL, "a")
    send(page, "What is the capital of Italy?")
    wait_for(lambda: page.find_elements(By.CSS_SELECTOR, ".message.assistant .stats"))
    kept = json.loads(page.execute_script("return localStorage.getItem('atom.conversations')"))
    (conversation,) = kept
    assert [m["role"] for m in conversation["messages"]] == ["user", "assistant"]
    assert conversation["messages"][0]["content"] == "What is the capital of Italy?"
    assert conversation["settings"]["max_tokens"] == 8
    assert conversation["messages"][1]["stats"]["tokens"] <= 8
    page.find_element(By.ID, "export-chats").click()
    export = downloads / "atom-conversations.json"
    wait_for(lambda: export.exists() and export.stat().st_size > 0)
    assert json.loads(export.read_text())["conversations"] == kept


HOSTILE = """# A heading

Some **bold** text and a list:

- one
- two

```python
print("hello")
```

<script>window.__atomInjected = "script"</script>
<img src="x" onerror="window.__atomInjected = 'onerror'">
<a href="javascript:window.__atomInjected = 'link'" id="bad-link">a link</a>
"""


def test_markdown_and_code_render_and_model_output_cannot_run_script(
    page: webdriver.Chrome, tmp_path: Path
) -> None:
    export = {
        "atom_conversations": 1,
        "conversations": [
            {
                "id": "imported-1",
                "title": "Imported",
                "settings": {},
                "messages": [
                    {"role": "user", "content": "<script>window.__atomInjected = 'user'</script>"},
                    {"role": "assistant", "content": HOSTILE},
                ],
            }
        ],
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    importer = page.find_element(By.ID, "import-chats")
    page.execute_script("arguments[0].hidden = false", importer)
    importer.send_keys(str(path))
    wait_for(lambda: len(messages(page)) == 2)
    assistant = messages(page)[1]
    assert assistant.find_element(By.CSS_SELECTOR, "h1").text == "A heading"
    assert assistant.find_element(By.CSS_SELECTOR, "strong").text == "bold"
    assert len(assistant.find_elements(By.CSS_SELECTOR, "li")) == 2
    code = assistant.find_element(By.CSS_SELECTOR, "pre code")
    assert "hljs" in (code.get_attribute("class") or "")
    assert 'print("hello")' in code.text
    assert assistant.find_element(By.CSS_SELECTOR, "pre button.copy").text == "Copy"
    # Nothing of the hostile part survives: no script, no handler, no javascript: link.
    assert not page.find_elements(By.CSS_SELECTOR, "#messages script")
    assert not page.find_elements(By.CSS_SELECTOR, "#messages [onerror]")
    links = page.find_elements(By.CSS_SELECTOR, "#messages a")
    assert all(not (a.get_attribute("href") or "").startswith("javascript:") for a in links)
    for link in links:
        link.click()
    assert messages(page)[0].find_element(By.CSS_SELECTOR, ".text").text.startswith("<script>")
    time.sleep(0.5)  # an image's onerror would have fired by now
    assert page.execute_script("return window.__atomInjected") is None


def test_engine_view_shows_a_running_request_while_one_streams(
    page: webdriver.Chrome, server: Server, shots: Path
) -> None:
    page.find_element(By.ID, "tab-engine").click()
    body = {
        "messages": [{"role": "user", "content": LONG_ANSWER}],
        "max_tokens": 1500,
        "ignore_eos": True,  # running for the whole check, whatever the model writes
        "stream": True,
    }
    done = threading.Event()

    def stream() -> None:
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as r:
            for _ in r.iter_lines():
                if done.is_set():
                    break

    worker = threading.Thread(target=stream)
    worker.start()
    try:
        selector = f'section[data-model="{server.model}"] [data-series="running"] .value'
        wait_for(lambda: page.find_element(By.CSS_SELECTOR, selector).text == "1", timeout=10)
        tps = f'section[data-model="{server.model}"] [data-series="tps"] .value'
        wait_for(lambda: float(page.find_element(By.CSS_SELECTOR, tps).text) > 0, timeout=10)
        page.save_screenshot(str(shots / "webui-engine.png"))
    finally:
        done.set()
        worker.join()
    wait_for(lambda: page.find_element(By.CSS_SELECTOR, selector).text == "0", timeout=10)


def test_request_view_shows_a_finished_requests_events_and_bytes(
    page: webdriver.Chrome, server: Server, shots: Path
) -> None:
    long_prompt = "Summarize this. " + "The quick brown fox jumps over the lazy dog. " * 240
    body = {"messages": [{"role": "user", "content": long_prompt}], "max_tokens": 5}
    headers = {"x-request-id": "webui-request-view"}
    sent = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=120)
    assert sent.status_code == 200, sent.text
    page.find_element(By.ID, "tab-requests").click()
    listed = 'li[data-id="chatcmpl-webui-request-view"]'  # the endpoint's prefix, then the id
    item = wait_for(lambda: page.find_element(By.CSS_SELECTOR, listed))
    assert "completed" in item.text
    item.click()
    rows = wait_for(lambda: page.find_elements(By.CSS_SELECTOR, ".timeline li"))
    types = [row.get_attribute("data-type") for row in rows]
    assert types[0] == "request_received" and "request_completed" in types
    assert {"request_accepted", "request_scheduled", "tokens_sampled"} <= set(types)
    assert "prompt_chunk_computed" in types  # ~2,400 prompt tokens: more than one step's budget
    blocks = page.find_elements(By.CSS_SELECTOR, ".request-detail pre")
    assert json.loads(blocks[0].get_attribute("textContent"))["max_tokens"] == 5
    # the bytes the client got, rebuilt from the events
    assert json.loads(blocks[1].get_attribute("textContent")) == sent.json()
    page.save_screenshot(str(shots / "webui-requests.png"))


def test_a_server_with_keys_asks_for_one_and_errors_show_as_messages(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    with server_process(tmp_path / "log.jsonl", ATOM_API_KEY="sesame") as (proc, url):
        browser.get(f"{url}/")
        browser.execute_script("localStorage.clear()")
        browser.get(f"{url}/")
        notice = wait_for(lambda: browser.find_element(By.ID, "notice").text)
        assert "401" in notice and "API key" in notice
        assert browser.find_element(By.ID, "key-form").is_displayed()
        browser.find_element(By.ID, "key-input").send_keys("sesame", Keys.ENTER)
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#model option"))
        set_setting(browser, "max_tokens", "100000")  # beyond the context: a 400
        send(browser, "Hello")
        error = wait_for(lambda: browser.find_element(By.CSS_SELECTOR, ".message.error").text)
        assert error.startswith("Error 400:") and "context length" in error
        set_setting(browser, "max_tokens", "4000")
        send(browser, LONG_ANSWER)
        wait_for(lambda: len(answer_text(browser)) > 20)
        proc.kill()  # the connection drops mid-answer
        errors = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".message.error")[1:])
    assert "connection to the server was lost" in errors[0].text
    assert browser.find_element(By.ID, "send").is_displayed()
