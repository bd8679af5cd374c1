"""How one 30-second window of audio is decoded, token by token: Whisper's prompt, the
tokens it may not say, and its timestamp rules, as OpenAI's whisper (`decoding.py`)
defines them and faster-whisper (CTranslate2) and transformers follow them.

A `WindowDecode` is fed the logits after its last feed and answers the next feed (the
rest of the prompt after `<|startoftranscript|>`, whose logits give the chance that the
window holds no speech and, when not given, its language; or the token it chose), or
None when the window is done. The batching is the caller's (atom/model/whisper/slots.py).

Then OpenAI's transcribe rules (faster-whisper's too) judge the result (`finish`):
a window decoded at temperature 0 whose text repeats itself (compression ratio over
2.4) or whose tokens are unlikely (mean log-probability under -1) is decoded again one
temperature step higher, up to 1.0, keeping the last try; a window that likely holds no
speech (over 0.6) and whose tokens are unlikely is silence: it says nothing.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase

WINDOW_SECONDS = 30.0
SECONDS_PER_TIMESTAMP = 0.02
MAX_INITIAL_TIMESTAMP = 50  # the first timestamp is at most 1.0 s
# OpenAI's transcribe thresholds (its defaults, faster-whisper's too)
TEMPERATURE_STEP = 0.2  # a request at temperature 0 retries a failed window this much higher
MAX_COMPRESSION_RATIO = 2.4
MIN_AVG_LOGPROB = -1.0
NO_SPEECH_THRESHOLD = 0.6


@dataclass(frozen=True, slots=True, kw_only=True)
class WhisperTokens:
    """A Whisper model's special tokens and the tokens it never says."""

    start_of_transcript: int
    end_of_text: int
    start_of_previous: int
    no_timestamps: int
    no_speech: int  # <|nospeech|> (<|nocaptions|> in older vocabularies)
    timestamp_begin: int  # <|0.00|>; every id from it on is a timestamp
    tasks: dict[str, int]  # "transcribe", "translate"
    languages: dict[str, int]  # "en" → <|en|>
    suppress: tuple[int, ...]
    suppress_at_begin: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowTask:
    """What a request asks of each of its windows."""

    task: str = "transcribe"
    language: str | None = None  # None: detected from the window
    timestamps: bool = False
    temperature: float = 0.0
    seed: int | None = None  # a temperature above 0 samples from it (None: a fresh seed)
    previous: tuple[int, ...] = ()  # the prompt's text tokens (earlier speech, spellings)
    words: bool = False  # each word's time is found when the window ends (alignment.py)


@dataclass(frozen=True, slots=True)
class WordTime:
    """A word of a window (its text as decoded, a leading space kept), its start and end
    in seconds from the window's start, and its tokens (atom/model/whisper/alignment.py)."""

    word: str
    start: float
    end: float
    tokens: tuple[int, ...]


@dataclass(slots=True)
class WindowDecode:
    tokens: WhisperTokens
    task: WindowTask
    max_tokens: int  # the window's whole context, prompt included
    seconds: float = WINDOW_SECONDS  # the audio the window holds (its words' frames)
    generator: torch.Generator | None = field(init=False, default=None)  # made on first sample
    language: str | None = field(init=False)  # the task's, or detected at the first step
    temperature: float = field(init=False)  # this try's: the task's, or a fallback's
    no_speech_prob: float = field(init=False, default=0.0)  # read at the first step
    compression_ratio: float = field(init=False, default=0.0)  # of the text, at `finish`
    generated: list[int] = field(init=False, default_factory=list)
    sum_logprob: float = field(init=False, default=0.0)  # of the tokens chosen, end included
    fed: int = field(init=False, default=0)  # tokens fed so far, prompt included
    prompted: bool = field(init=False, default=False)  # the tokens after the start are fed
    words: list[WordTime] = field(init=False, default_factory=list)  # found at its end

    def __post_init__(self) -> None:
        self.language = self.task.language
        self.temperature = self.task.temperature

    def first_feed(self) -> list[int]:
        """The prompt up to `<|startoftranscript|>` (the rest follows its logits)."""
        # the earlier text a window carries: under half its context (OpenAI's 223 of 448)
        previous = self.task.previous[-(self.max_tokens // 2 - 1) :]
        head = [self.tokens.start_of_previous, *previous] if previous else []
        feed = [*head, self.tokens.start_of_transcript]
        self.fed = len(feed)
        self.prompted = False
        return feed

    def take(self, logits: torch.Tensor) -> list[int] | None:
        """The next feed after `logits` [vocab] (those after the last fed token), or None
        when the window is done."""
        if not self.prompted:  # the logits after <|startoftranscript|>
            self.prompted = True
            probs = torch.softmax(logits.float(), dim=-1)
            self.no_speech_prob = float(probs[self.tokens.no_speech])
            if self.language is None:  # detected: the likeliest language
                codes = list(self.tokens.languages)
                ids = torch.tensor([self.tokens.languages[c] for c in codes], device=logits.device)
                self.language = codes[int(logits[ids].argmax())]
            feed = self._after_start()
            self.fed += len(feed)
            return feed
        filtered = self._filtered(logits.float().clone())
        token = self._choose(filtered)
        self.sum_logprob += float(torch.log_softmax(filtered, dim=-1)[token])
        if token == self.tokens.end_of_text:
            return None
        self.generated.append(token)
        if self.fed >= self.max_tokens:  # the window's context is full: it ends here
            return None
        self.fed += 1
        return [token]

    def start_sequence(self) -> list[int]:
        """`<|startoftranscript|>`, the language and the task (once the language is known)."""
        return [self.tokens.start_of_transcript, *self._after_start()[:2]]

    def _after_start(self) -> list[int]:
        assert self.language is not None
        feed = [self.tokens.languages[self.language], self.tokens.tasks[self.task.task]]
        return feed if self.task.timestamps else [*feed, self.tokens.no_timestamps]

    @property
    def avg_logprob(self) -> float:
        """The chosen tokens' mean log-probability, the end of text counted (OpenAI's)."""
        return self.sum_logprob / (len(self.generated) + 1)

    @property
    def is_silent(self) -> bool:
        """The window likely holds no speech and its tokens are unlikely: it says nothing."""
        return self.no_speech_prob > NO_SPEECH_THRESHOLD and self.avg_logprob < MIN_AVG_LOGPROB

    def finish(self, text: str) -> bool:
        """Judge the ended window by its text (timestamps left out); True when it fails
        OpenAI's thresholds at a temperature below 1.0 of a request at temperature 0 and
        is to be decoded again one step higher: it is reset for that, its language kept
        and its slot's cross-attention with it (the caller feeds `first_feed` again)."""
        self.compression_ratio = compression_ratio(text)
        repeats = self.compression_ratio > MAX_COMPRESSION_RATIO
        failed = repeats or self.avg_logprob < MIN_AVG_LOGPROB
        if self.task.temperature > 0 or self.temperature >= 1.0 or self.is_silent or not failed:
            return False
        self.temperature = round(self.temperature + TEMPERATURE_STEP, 1)
        self.generated.clear()
        self.sum_logprob = 0.0
        return True

    def _filtered(self, logits: torch.Tensor) -> torch.Tensor:
        """`logits` with what may not come next at -inf, in place."""
        logits[list(self.tokens.suppress)] = -torch.inf
        if not self.generated:
            logits[list(self.tokens.suppress_at_begin)] = -torch.inf
        if self.task.timestamps:
            apply_timestamp_rules(logits, self.generated, self.tokens)
        return logits

    def _choose(self, logits: torch.Tensor) -> int:
        if self.temperature <= 0:
            return int(logits.argmax())
        if self.generator is None:
            self.generator = torch.Generator(device=logits.device)
            if self.task.seed is None:
                self.generator.seed()
            else:
                self.generator.manual_seed(self.task.seed)
        probs = torch.softmax(logits / self.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))


def compression_ratio(text: str) -> float:
    """How much zlib shrinks the text: a high ratio is a window that repeats itself."""
    raw = text.encode()
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def apply_timestamp_rules(
    logits: torch.Tensor, generated: list[int], tokens: WhisperTokens
) -> None:
    """Whisper's timestamp rules, in place: timestamps come in pairs and never go back,
    the first token is a timestamp of at most 1 s, and a timestamp is forced where the
    timestamps together are likelier than any one text token."""
    begin, end = tokens.timestamp_begin, tokens.end_of_text
    logits[tokens.no_timestamps] = -torch.inf
    last = len(generated) >= 1 and generated[-1] >= begin
    penultimate = len(generated) < 2 or generated[-2] >= begin
    if last:
        if penultimate:
            logits[begin:] = -torch.inf  # a pair is closed: text comes next
        else:
            logits[:end] = -torch.inf  # a pair is open: a timestamp or the end
    stamps = [t for t in generated if t >= begin]
    if stamps:  # never back, and a segment is never empty
        floor = stamps[-1] if last and not penultimate else stamps[-1] + 1
        logits[begin:floor] = -torch.inf
    if not generated:
        logits[:begin] = -torch.inf
        logits[begin + MAX_INITIAL_TIMESTAMP + 1 :] = -torch.inf
    logprobs = torch.log_softmax(logits, dim=-1)
    if torch.logsumexp(logprobs[begin:], dim=-1) > logprobs[:begin].max():
        logits[:begin] = -torch.inf


@dataclass(frozen=True, slots=True)
class Segment:
    start: float  # seconds from the window's start
    end: float
    tokens: tuple[int, ...]  # the text tokens


def segments_of(generated: list[int], tokens: WhisperTokens, seconds: float) -> list[Segment]:
    """A window's timestamped tokens cut into segments: each opens with a timestamp and
    closes with one; text after the last closed pair runs to the window's end."""
    begin = tokens.timestamp_begin
    out: list[Segment] = []
    start: float | None = None
    text: list[int] = []
    for token in generated:
        if token < begin:
            text.append(token)
            continue
        at = (token - begin) * SECONDS_PER_TIMESTAMP
        if start is None:
            start = at
        else:
            if text:
                out.append(Segment(start, at, tuple(text)))
            start, text = None, []
    if text:
        out.append(Segment(start if start is not None else 0.0, seconds, tuple(text)))
    return out


def whisper_tokens(
    tokenizer: PreTrainedTokenizerBase, generation: GenerationConfig
) -> WhisperTokens:
    """The special tokens of a Whisper folder: its tokenizer's, its generation config's
    languages, tasks and the tokens it suppresses."""

    def token(text: str) -> int:
        value = tokenizer.convert_tokens_to_ids(text)
        assert isinstance(value, int), text
        return value

    whisper = generation.to_dict()  # Whisper's own keys, which GenerationConfig does not type
    return WhisperTokens(
        start_of_transcript=token("<|startoftranscript|>"),
        end_of_text=token("<|endoftext|>"),
        start_of_previous=token("<|startofprev|>"),
        no_timestamps=whisper["no_timestamps_token_id"],
        no_speech=whisper["no_timestamps_token_id"] - 1,  # as transformers finds it
        timestamp_begin=whisper["no_timestamps_token_id"] + 1,
        tasks=dict(whisper["task_to_id"]),
        languages={name.strip("<|>"): i for name, i in whisper["lang_to_id"].items()},
        suppress=tuple(generation.suppress_tokens or ()),
        suppress_at_begin=tuple(generation.begin_suppress_tokens or ()),
    )
