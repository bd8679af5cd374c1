"""Images a request points at (and the bytes of its videos and audio clips): `data:`
URLs, local files and web addresses, each within the server's media policy; images
decoded to RGB here. Runs in the request's planning thread (off
the event loop). Every refusal is a 400 naming the request field that held the image.

- `data:image/png|jpeg|webp|gif;base64,...`: always accepted (a GIF gives its first frame);
- `file://` paths only under `--allowed-local-media-path`, regular files only (a FIFO
  or a device there is refused, never waited on);
- `http(s)://` only from a host `--allowed-media-domains` lists (`*`: any). The thread
  does not fetch them: it asks for them (`FetchFirst`) and reads them from `FETCHED`,
  which the request's Trio task fills (atom/http/fetch.py: one `--media-fetch-timeout`
  deadline, at most `--max-media-bytes`, no redirects followed).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import io
import os
import stat
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from atom.vocabulary.choices import MediaLimits, VideoSampling
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest

FORMATS = {"PNG", "JPEG", "WEBP", "GIF"}
MEDIA_TYPES = {"image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif"}
WEB_SCHEMES = ("http", "https")


@dataclass(frozen=True, slots=True, kw_only=True)
class WebMedia:
    url: str
    param: str  # the request field that holds it
    kind: str = "image"  # or "video", "audio": how errors name it


class FetchFirst(Exception):
    """Planning needs these web images (or videos, audio clips): fetch them in Trio and
    plan again."""

    def __init__(self, images: tuple[WebMedia, ...]) -> None:
        super().__init__(f"{len(images)} web media files to fetch")
        self.images = images


# The web images fetched for the planning running in this context: url → bytes.
FETCHED: ContextVar[Mapping[str, bytes]] = ContextVar(
    "atom_fetched_images", default=MappingProxyType({})
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaPolicy:
    """Where images may come from and how large they may be (from Settings)."""

    local_root: Path | None = None  # --allowed-local-media-path
    domains: tuple[str, ...] = ()  # --allowed-media-domains; "*" allows every host
    fetch_timeout_s: float = 5.0
    max_bytes: int = 20 << 20
    max_pixels: int = 4096 * 4096
    limits: MediaLimits = field(default_factory=MediaLimits)  # --limit-mm-per-prompt
    video: VideoSampling = field(default_factory=VideoSampling)  # --media-io-kwargs
    max_audio_seconds: float = 3600.0  # --max-audio-seconds

    @classmethod
    @functools.cache
    def of(cls, settings: Settings) -> MediaPolicy:
        """Read once per Settings (checked at start-up: ValueError on a bad limit)."""
        root = settings.allowed_local_media_path
        return cls(
            local_root=Path(root).resolve() if root else None,
            domains=settings.allowed_media_domains,
            fetch_timeout_s=settings.media_fetch_timeout,
            max_bytes=settings.max_media_bytes,
            max_pixels=settings.max_image_pixels,
            limits=settings.media_limits,
            video=settings.video,
            max_audio_seconds=settings.max_audio_seconds,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedImage:
    image: Any  # a PIL image in RGB
    sha256: str  # of the size and the RGB pixels: the same picture in any format hashes alike
    kind: ClassVar[str] = "image"

    @property
    def size(self) -> tuple[int, int]:
        width, height = self.image.size
        return int(width), int(height)

    @property
    def content(self) -> Any:
        """What the model's processor takes: the image."""
        return self.image


def load_image(url: str, param: str, policy: MediaPolicy) -> LoadedImage:
    """The image `url` names, decoded; InvalidRequest naming `param` when the policy
    refuses it, it cannot be read, or it is no image of an accepted format."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "data":
        raw = _from_data_url(url, param, policy)
    elif scheme == "file":
        raw = file_bytes(url, param, policy)
    elif scheme in WEB_SCHEMES:
        raw = web_bytes(url, param, policy)
    else:
        raise InvalidRequest(
            f"{param}: an image URL must be a data:, file: or http(s): URL", param=param
        )
    return decode(raw, param, policy)


def _from_data_url(url: str, param: str, policy: MediaPolicy) -> bytes:
    media_type = url[5:].partition(",")[0].split(";")[0].strip().lower()
    if media_type not in MEDIA_TYPES:
        raise InvalidRequest(
            f"{param}: media type {media_type or '(none)'!r} is not an image type ATOM "
            "decodes (image/png, image/jpeg, image/webp, image/gif)",
            param=param,
        )
    return data_url_bytes(url, param, policy)


def media_bytes(url: str, param: str, policy: MediaPolicy, kind: str) -> bytes:
    """The bytes of a video or audio clip (`kind`) a `data:video|audio/...`, `file:` or
    web URL names, within the policy; InvalidRequest naming `param` otherwise."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "data":
        media_type = url[5:].partition(",")[0].split(";")[0].strip().lower()
        if not media_type.startswith(f"{kind}/"):
            raise InvalidRequest(
                f"{param}: media type {media_type or '(none)'!r} is not {kind}",
                param=param,
            )
        return data_url_bytes(url, param, policy)
    if scheme == "file":
        return file_bytes(url, param, policy)
    if scheme in WEB_SCHEMES:
        return web_bytes(url, param, policy, kind)
    raise InvalidRequest(
        f"{param}: a {kind} URL must be a data:, file: or http(s): URL", param=param
    )


def data_url_bytes(url: str, param: str, policy: MediaPolicy) -> bytes:
    """A base64 `data:` URL's bytes, at most --max-media-bytes; InvalidRequest naming
    `param` otherwise."""
    head, sep, data = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise InvalidRequest(
            f"{param}: a data URL must be base64 (data:...;base64,...)", param=param
        )
    if len(data) * 3 // 4 > policy.max_bytes:
        raise InvalidRequest(f"{param}: the file is over {policy.max_bytes} bytes", param=param)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{param}: the data URL is not valid base64", param=param) from None


def file_bytes(url: str, param: str, policy: MediaPolicy) -> bytes:
    """A `file:` URL's bytes, under --allowed-local-media-path only, a regular file of at
    most --max-media-bytes; InvalidRequest naming `param` otherwise."""
    if policy.local_root is None:
        raise InvalidRequest(
            f"{param}: file URLs need the server started with --allowed-local-media-path",
            param=param,
        )
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidRequest(f"{param}: a file URL must name a local path", param=param)
    path = Path(unquote(parts.path)).resolve()
    if not path.is_relative_to(policy.local_root):
        raise InvalidRequest(f"{param}: {path} is outside --allowed-local-media-path", param=param)
    try:
        raw = _read_regular(path, policy.max_bytes + 1)
    except OSError as exc:
        raise InvalidRequest(f"{param}: cannot read {path}: {exc.strerror}", param=param) from None
    if raw is None:
        raise InvalidRequest(f"{param}: {path} is not a regular file", param=param)
    if len(raw) > policy.max_bytes:
        raise InvalidRequest(f"{param}: the file is over {policy.max_bytes} bytes", param=param)
    return raw


def _read_regular(path: Path, limit: int) -> bytes | None:
    """At most `limit` bytes of the file at `path`; None when it is no regular file.
    Opened without blocking, so a FIFO with no writer is refused, not waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(limit)


def web_media_to_fetch(
    urls: Sequence[tuple[str, str, str]], policy: MediaPolicy
) -> tuple[WebMedia, ...]:
    """The web media among `(url, param, kind)` that the policy allows and this planning
    has not been given yet (InvalidRequest for one it refuses)."""
    missing = []
    for url, param, kind in urls:
        if urlsplit(url).scheme.lower() in WEB_SCHEMES:
            _check_host(url, param, policy)
            if url not in FETCHED.get():
                missing.append(WebMedia(url=url, param=param, kind=kind))
    return tuple(missing)


def web_bytes(url: str, param: str, policy: MediaPolicy, kind: str = "image") -> bytes:
    """A web URL's bytes, fetched in Trio before planning (FetchFirst asks for them)."""
    missing = web_media_to_fetch([(url, param, kind)], policy)
    if missing:
        raise FetchFirst(missing)
    return FETCHED.get()[url]


def _check_host(url: str, param: str, policy: MediaPolicy) -> None:
    host = (urlsplit(url).hostname or "").lower()
    if "*" not in policy.domains and host not in policy.domains:
        raise InvalidRequest(
            f"{param}: fetching media from {host or 'this URL'} is not allowed "
            "(--allowed-media-domains)",
            param=param,
        )


def decode(raw: bytes, param: str, policy: MediaPolicy) -> LoadedImage:
    """Bytes to an RGB image; its size is checked from the header before any pixel is
    decoded (a small file can claim billions of pixels)."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(raw))
    except Exception:  # PIL raises several types for bytes that are no image
        raise InvalidRequest(
            f"{param}: the bytes are not an image ATOM decodes", param=param
        ) from None
    if image.format not in FORMATS:
        raise InvalidRequest(
            f"{param}: {image.format} images are not accepted (PNG, JPEG, WebP, GIF)", param=param
        )
    width, height = image.size
    if width * height > policy.max_pixels:
        raise InvalidRequest(
            f"{param}: the image has {width}x{height} pixels, more than --max-image-pixels "
            f"({policy.max_pixels})",
            param=param,
        )
    try:
        image.seek(0)  # a GIF's first frame
        rgb = image.convert("RGB")
    except Exception:
        raise InvalidRequest(f"{param}: the image could not be decoded", param=param) from None
    digest = hashlib.sha256(f"{width}x{height}:".encode())
    digest.update(rgb.tobytes())
    return LoadedImage(image=rgb, sha256=digest.hexdigest())
