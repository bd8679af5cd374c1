"""The web page's speech input in a real headless Chromium against the default server
(Whisper base beside the chat model): an audio file, and the microphone (Chromium's
fake capture device playing a spoken WAV file), each transcribed into the prompt box."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.audio.media import NEEDS_SPEECH, spoken_wav
from tests.e2e.browser import chromium, wait_for
from tests.e2e.conftest import Server

pytestmark = [pytest.mark.slow, NEEDS_SPEECH]

SAID = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("speech") / "fox.wav"
    path.write_bytes(spoken_wav(SAID))
    return path


@pytest.fixture(scope="module")
def browser(speech: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """Chromium whose microphone plays `speech`, allowed without asking."""
    microphone = (
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={speech}",
    )
    with chromium(tmp_path_factory.mktemp("downloads"), *microphone) as driver:
        yield driver


def prompt_after(driver: webdriver.Chrome, before: str) -> str:
    """The prompt box's text once a transcription changed it."""
    prompt = driver.find_element(By.ID, "prompt")
    return wait_for(
        lambda: prompt.get_attribute("value") != before and prompt.get_attribute("value"), 60
    )


def test_an_audio_file_and_the_microphone_fill_the_prompt(
    browser: webdriver.Chrome, server: Server, speech: Path
) -> None:
    browser.get(f"{server.url}/")
    wait_for(lambda: browser.find_element(By.ID, "speech").is_displayed())
    asked = browser.execute_script(
        "return performance.getEntriesByType('resource').map((e) => e.name)"
    )
    assert sum(name.endswith("/v1/models") for name in asked) == 1  # the chat view's and ours
    prompt = browser.find_element(By.ID, "prompt")
    prompt.send_keys("Transcribe:")
    browser.find_element(By.ID, "audio-file").send_keys(str(speech))
    text = prompt_after(browser, "Transcribe:")
    assert text.lower().startswith("transcribe: the quick") and "lazy dog" in text.lower(), text
    prompt.clear()
    record = browser.find_element(By.ID, "record")
    record.click()
    wait_for(lambda: record.text == "Stop recording")
    time.sleep(3.5)  # the fake microphone plays the sentence (2.8 s)
    record.click()
    heard = prompt_after(browser, "")
    assert "fox" in heard.lower() or "lazy dog" in heard.lower(), heard
    assert record.text == "Record"
