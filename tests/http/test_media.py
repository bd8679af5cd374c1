"""Images read within the media policy (atom/http/media.py), without a server: each
accepted format decodes to the same pixels, and each refusal is a 400 naming the field."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from atom.http.media import MediaPolicy, load_image
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.images import without_image_bytes
from tests.vision_models import data_url, encoded, picture

POLICY = MediaPolicy()


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "GIF"])
def test_lossless_formats_decode_to_the_same_image(fmt: str) -> None:
    """PNG, lossless WebP and a GIF (palette: the picture's colors are few) hash alike."""
    image = picture(3, fmt=fmt)
    png = load_image(data_url(image.convert("RGB")), "p", POLICY)
    other = load_image(data_url(image, fmt), "p", POLICY)
    assert other.size == (40, 30)
    assert other.sha256 == png.sha256


def test_a_jpeg_decodes_and_a_gif_gives_its_first_frame() -> None:
    jpeg = load_image(data_url(picture(1), "JPEG"), "p", POLICY)
    assert jpeg.size == (40, 30) and jpeg.image.mode == "RGB"
    frames = [picture(1, fmt="GIF"), picture(2, fmt="GIF")]
    import io

    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
    url = "data:image/gif;base64," + base64.b64encode(buffer.getvalue()).decode()
    first = load_image(data_url(frames[0].convert("RGB")), "p", POLICY)
    assert load_image(url, "p", POLICY).sha256 == first.sha256


def refused(url: str, policy: MediaPolicy = POLICY) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        load_image(url, "messages.0.content.1", policy)
    assert caught.value.param == "messages.0.content.1"
    assert caught.value.message.startswith("messages.0.content.1: ")
    return caught.value


def test_refusals_name_the_field(tmp_path: Path) -> None:
    (tmp_path / "one.png").write_bytes(encoded(picture(1)))
    assert "--allowed-local-media-path" in refused(f"file://{tmp_path}/one.png").message
    allowed = MediaPolicy(local_root=tmp_path.resolve())
    assert load_image(f"file://{tmp_path}/one.png", "p", allowed).size == (40, 30)
    assert "outside" in refused(f"file://{tmp_path}/../x.png", allowed).message
    assert "not allowed" in refused("https://example.com/a.png").message
    assert "base64" in refused("data:image/png,rawbytes").message
    assert "not valid base64" in refused("data:image/png;base64,!!!!").message
    small = MediaPolicy(max_bytes=100, max_pixels=40 * 30 - 1)
    assert "over 100 bytes" in refused(data_url(picture(1)), small).message
    few_pixels = MediaPolicy(max_pixels=40 * 30 - 1)
    assert "--max-image-pixels" in refused(data_url(picture(1)), few_pixels).message
    bmp = "data:image/png;base64," + base64.b64encode(encoded(picture(1), "BMP")).decode()
    assert "BMP images are not accepted" in refused(bmp).message


def test_the_media_limits_read_vllms_json() -> None:
    defaults = Settings().media_limits
    assert (defaults.image, defaults.video, defaults.audio) == (8, 1, 4)
    limits = MediaPolicy.of(Settings(limit_mm_per_prompt='{"image": 3, "audio": 2}')).limits
    assert (limits.image, limits.video, limits.audio) == (3, 1, 2)  # video kept its default
    for bad in (
        '["image"]',
        '{"image": "two"}',
        '{"speech": 1}',
        '{"image": true}',
        '{"video": -1}',
    ):
        with pytest.raises(ValueError, match="limit-mm-per-prompt"):
            Settings(limit_mm_per_prompt=bad)


def test_the_logged_body_keeps_no_image_bytes() -> None:
    url = data_url(picture(1))
    body = {"messages": [{"content": [{"image_url": {"url": url}}, {"text": "data:no"}]}]}
    kept = without_image_bytes(body)["messages"][0]["content"]
    assert kept[0]["image_url"]["url"].startswith("data:image/png;base64,(omitted: ")
    assert str(len(url)) in kept[0]["image_url"]["url"]
    assert url[30:90] not in str(kept)
    assert kept[1]["text"] == "data:no"  # text that is no data URL stays


def test_an_image_the_processor_refuses_is_a_400_naming_its_part(tmp_path: Path) -> None:
    """Qwen2-VL's processor refuses an aspect ratio over 200: the second image's part is
    named, as for any refused image."""
    from types import SimpleNamespace

    import torch

    from atom.http.images import ImageSource, image_prompt
    from atom.model.vision.loading import read_model, vision_forward
    from atom.text.prompt import IMAGE_PART, TemplateControls
    from tests.vision_models import tiny_qwen2_vl

    vlm, processor = read_model(tiny_qwen2_vl(tmp_path / "qwen"), torch.float32)
    _, parts = vision_forward(vlm, processor, "auto", kernels=None)
    core = SimpleNamespace(images=parts.prompter, tokenizer=parts.prompter.tokenizer)
    urls = [data_url(picture(1)), data_url(picture(2, size=(300, 1)))]
    sources = [ImageSource(url=u, param=f"messages.0.content.{i}") for i, u in enumerate(urls)]
    messages = [{"role": "user", "content": [IMAGE_PART, IMAGE_PART]}]
    with pytest.raises(InvalidRequest) as caught:
        image_prompt(
            core, POLICY, messages, sources,  # type: ignore[arg-type]
            tools=None, template_kwargs={}, controls=TemplateControls(),
        )  # fmt: skip
    assert caught.value.param == "messages.0.content.1"
    assert "aspect ratio" in caught.value.message


def test_a_planning_thread_never_fetches_a_web_image_itself() -> None:
    """It asks for it (atom/http/fetch.py fetches in Trio and plans again with it)."""
    from types import MappingProxyType

    from atom.http.media import FETCHED, FetchFirst, WebMedia

    url = "http://127.0.0.1:9/one.png"
    allowed = MediaPolicy(domains=("127.0.0.1",))
    with pytest.raises(FetchFirst) as caught:
        load_image(url, "p", allowed)
    assert caught.value.images == (WebMedia(url=url, param="p"),)
    token = FETCHED.set(MappingProxyType({url: encoded(picture(1))}))
    try:
        assert load_image(url, "p", allowed).size == (40, 30)
    finally:
        FETCHED.reset(token)
