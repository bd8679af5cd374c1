"""RequestActor: one generation request, from the Batcher's tokens to the bytes on the wire.

Its nursery runs a disconnect watcher (owns ASGI `receive`; cancels the actor when the
client goes away) beside the generation, which wakes once a step: it takes everything
the Batcher put in the Outbox since, feeds each choice's pipeline (detokenizer, stop
strings, parsers; atom/text/pipeline.py), publishes the events that come out, renders
them with the plan's renderer and hands the step's bytes to `respond` in one piece
(atom/http/asgi.py frames them as ASGI messages). Usage and latency are a fold of the
request's own envelopes (atom/projections/usage.py). Leaving early for any reason aborts
the request in the Batcher from `finally`.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog
import trio

from atom.actors.cores import EngineCore
from atom.actors.outbox import Outbox
from atom.projections.renderers import renderer_for
from atom.projections.usage import RequestUsage
from atom.projections.wire import Output
from atom.text.gathering import fed
from atom.text.pipeline import ChoicePipeline, pipeline_for
from atom.vocabulary.errors import AtomError, EngineFailed
from atom.vocabulary.events import (
    Abort,
    ClientDisconnected,
    Envelope,
    Event,
    KeepAliveSent,
    RequestAborted,
    RequestAccepted,
    RequestFailed,
    RequestReceived,
    Submit,
    TokensSampled,
)
from atom.vocabulary.plan import RequestPlan

ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationRequest:
    """A validated request: what was received (its plan inside), the plan itself, and
    what to ask of the Batcher (built from the plan)."""

    received: RequestReceived
    plan: RequestPlan
    submit: Submit


class RequestActor:
    def __init__(
        self,
        core: EngineCore,
        request: GenerationRequest,
        *,
        receive: ASGIReceive,
        respond: Callable[[Output], Awaitable[None]],
        written: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`respond` hands an Output to the server; `written` waits until the last one
        has been written (None: a `respond` that returns having written it)."""
        self._core = core
        self._request = request
        self._receive = receive
        self._respond = respond  # sends an Output as HTTP (atom/http/asgi.py)
        self._written = written
        self._renderer = renderer_for(request.received, request.plan.shape)
        self._outbox = Outbox()
        self._is_done = False  # the final bytes have been handed to the server
        self._has_client_left = False
        self._usage: RequestUsage | None = None  # from the RequestReceived on
        self._scope: trio.CancelScope | None = None
        self._cancelled_as: str | None = None  # why `cancel` ended the request
        self._last_sent = trio.current_time()  # when the last Output went out
        # Around the answer loop: the stall watchdog cancels it when a write waits on the
        # socket past --stream-stall-timeout (one scope a request, no timer a write).
        self._stall: trio.CancelScope | None = None
        self._sending_since: float | None = None  # when the write in progress began

    @property
    def request_id(self) -> str:
        return self._request.received.request_id

    async def run(self) -> None:
        """Serve the request to the end, the client's disconnect or an error."""
        with structlog.contextvars.bound_contextvars(request_id=self.request_id):
            self._usage = RequestUsage(self._core.bus.publish(self._request.received))
            failure: AtomError | None = None
            try:
                async with trio.open_nursery() as nursery:
                    self._scope = nursery.cancel_scope
                    if self._cancelled_as is not None:
                        nursery.cancel_scope.cancel()
                    nursery.start_soon(self._watch_disconnect, nursery.cancel_scope)
                    if self._pings_every_s < math.inf:
                        nursery.start_soon(self._keep_alive, self._pings_every_s)
                    if self._core.stream_stall_timeout_s:
                        nursery.start_soon(self._watch_stall, self._core.stream_stall_timeout_s)
                    await self._generate()
                    nursery.cancel_scope.cancel()  # the response is complete
            except* AtomError as group:
                failure = first_leaf(group)  # type: ignore[assignment]
            except* Exception as group:
                log.error("request_crashed", exc_info=first_leaf(group))
                failure = EngineFailed("internal error while serving the request")
            finally:
                if not self._is_done and failure is None:
                    # Cancelled from outside without the client leaving: `cancel`, or the
                    # server stops.
                    reason = self._cancelled_as or "server_shutdown"
                    if self._has_client_left:
                        reason = "client_disconnected"
                    self._release(reason)
                    self._core.bus.publish(
                        RequestAborted(request_id=self.request_id, reason=reason)
                    )
            if failure is not None:
                await self._fail(failure)

    def cancel(self, reason: str) -> None:
        """End the request from outside, logged with `reason` (a cancelled background
        response)."""
        self._cancelled_as = reason
        if self._scope is not None:
            self._scope.cancel()

    async def _generate(self) -> None:
        submit = self._request.submit
        if submit.params.grammar is not None and self._core.precompile is not None:
            # Compile in a worker thread now, so the Batcher's step only copies the matcher.
            await trio.to_thread.run_sync(self._core.precompile, submit.params.grammar)
        self._core.batcher.submit_nowait(submit, self._outbox)
        # Published before any checkpoint, so it precedes the Batcher's RequestScheduled.
        accepted = RequestAccepted(
            request_id=self.request_id,
            prompt_ids=submit.prompt_ids,
            more_prompt_ids=submit.more_prompt_ids,
            num_choices=submit.total_choices,
            images=tuple(image.ref for image in submit.images),
        )
        await self._emit(accepted)
        with trio.CancelScope() as stall:
            self._stall = stall
            await self._answer([self._pipeline(idx) for idx in range(submit.total_choices)])
        self._stall = None
        if stall.cancelled_caught:  # a write waited past --stream-stall-timeout
            log.warning("stream_stalled", timeout_s=self._core.stream_stall_timeout_s)
            self.cancel("stream_stalled")
            await trio.lowlevel.checkpoint()  # the actor's scope ends the request here
        assert self._usage is not None
        await self._emit(self._usage.completed(self._core.clock()))

    @property
    def _pings_every_s(self) -> float:
        """How long a stream stays quiet before a keep-alive; a background stream's
        output goes to its tap, which counts events: no pings."""
        shape = self._request.plan.shape
        pings = shape.stream and not shape.background
        return (self._core.sse_ping_interval_s if pings else 0.0) or math.inf

    async def _keep_alive(self, interval: float) -> None:
        """Wake the answer loop with nothing once the stream has been quiet `interval` s."""
        due = self._last_sent + interval
        while True:
            await trio.sleep_until(due)
            due = self._last_sent + interval
            if trio.current_time() >= due:
                self._outbox.poke()
                due = trio.current_time() + interval

    async def _watch_stall(self, timeout: float) -> None:
        """Cancel the answer loop's stall scope once a write has waited `timeout` s: it
        wakes every `timeout` s, or at the pending write's deadline, so a stall is caught
        on time without a timer moved around every write."""
        while True:
            since = self._sending_since
            if since is None:
                await trio.sleep(timeout)
                continue
            await trio.sleep_until(since + timeout)
            if self._sending_since == since and self._stall is not None:
                self._stall.cancel()

    async def _answer(self, choices: Sequence[ChoicePipeline]) -> None:
        """Wake once a step or more (or for a keep-alive): the tokens taken since the last
        send through the choices' pipelines in one feed, sent at once or, with
        --stream-interval, once enough gathered. Tokens wait while the last send is still
        being written, and go out together once it is: a client or a loop slower than the
        Batcher gets fewer, larger chunks, never a backlog of them. A write the client
        does not take in time ends it (the stall scope around it)."""
        assert self._usage is not None
        held: list[TokensSampled] = []  # taken since the last send
        num_sent = 0  # tokens sent before: the first ones go out at once, as vLLM's
        while not all(choice.is_finished for choice in choices):
            batch = await self._outbox.receive_batch()
            if not batch and self._outbox.is_closed:
                # A choice ended without finishing (the engine let the request go): the
                # request ends by that failure, never as complete.
                raise EngineFailed("internal error while serving the request")
            if batch:
                batch += await self._taken_once_written()
            for envelope in batch:
                self._usage.apply(envelope)
                assert isinstance(envelope.event, TokensSampled)
                held.append(envelope.event)
            num_held = sum(len(sampled.token_ids) for sampled in held)
            ends = any(sampled.finish_reason is not None for sampled in held)
            if batch and num_sent and num_held < self._core.stream_interval and not ends:
                continue
            events = fed(choices, held, self._stop_choice)
            if not batch:  # poked: the stream has been quiet for the keep-alive period
                events = events or [KeepAliveSent(request_id=self.request_id)]
            if events:
                await self._emit(*events)
            held, num_sent = [], num_sent + num_held

    async def _taken_once_written(self) -> list[Envelope]:
        """Wait (stall-watched) until the last send has been written; what the Batcher
        put in the Outbox meanwhile."""
        if self._written is None:
            return []
        self._sending_since = trio.current_time()
        try:
            await self._written()
        finally:
            self._sending_since = None
        return self._outbox.take_nowait()

    def _pipeline(self, idx: int) -> ChoicePipeline:
        request = self._request
        return pipeline_for(
            self.request_id, request.plan, request.submit.prompts, idx, self._core.tokenizer
        )

    async def _watch_disconnect(self, cancel_scope: trio.CancelScope) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if self._is_done:
            return  # the server sends http.disconnect after a complete response too
        self._has_client_left = True
        self._core.bus.publish(ClientDisconnected(request_id=self.request_id))
        self._release("client_disconnected")  # now: the Batcher drops it at its next step
        cancel_scope.cancel()

    def _stop_choice(self, choice_idx: int) -> None:
        self._core.batcher.abort_nowait(
            Abort(request_id=self.request_id, choice_idx=choice_idx, reason="stop_string")
        )

    def _release(self, reason: str) -> None:
        """Tell the Batcher to drop whatever it still holds of this request (once)."""
        if self._outbox.is_abandoned:
            return
        self._outbox.abandon()
        if not self._outbox.is_closed:
            self._core.batcher.abort_nowait(Abort(request_id=self.request_id, reason=reason))

    async def _fail(self, error: AtomError) -> None:
        self._release("failed")
        event = failed_event(self.request_id, error)
        with trio.move_on_after(5):  # a vanished client must not hold us
            await self._emit(event)

    async def _emit(self, *events: Event) -> None:
        """Publish the events, render them, and send what they render in one piece (a
        final Output apart: it may carry the whole body's length)."""
        outputs: list[Output] = []
        for event in events:
            envelope = self._core.bus.publish(event)
            if self._usage is not None:
                self._usage.apply(envelope)
            output = self._renderer.feed(event)
            if output is not None:
                outputs.append(output)
        for output in joined(outputs):
            await self._send(output)

    async def _send(self, output: Output) -> None:
        """Hand `output` to the server. A send waits while the socket's buffers are full:
        a client that stopped reading would hold the request (and what the Batcher keeps
        producing for it) for ever, so a send has --stream-stall-timeout to go out."""
        timeout = self._core.stream_stall_timeout_s or math.inf
        if output.is_final:
            self._is_done = True  # an http.disconnect from now on is the connection closing
        if self._stall is not None and not output.is_final:
            self._sending_since = trio.current_time()
            try:
                await self._respond(output)
            finally:  # (cancelled by the watchdog too: nothing is being written after)
                self._sending_since = None
        else:  # (a final one: the request has completed, a stall just ends it)
            with trio.move_on_after(timeout) as stall:
                await self._respond(output)
            if stall.cancelled_caught:
                log.warning("stream_stalled", timeout_s=timeout)
        self._last_sent = trio.current_time()


def joined(outputs: list[Output]) -> list[Output]:
    """Consecutive Outputs that are not final as one (their bytes in order), then the
    final one: what a step renders reaches the socket in one write."""
    if len(outputs) < 2:
        return outputs
    head = [o for o in outputs if not o.is_final]
    tail = [o for o in outputs if o.is_final]
    body = b"".join(o.body for o in head)
    return [replace(head[0], body=body), *tail] if head else tail


def failed_event(request_id: str, error: AtomError) -> RequestFailed:
    """The event of a request ended by `error`: its OpenAI error body's fields."""
    return RequestFailed(
        request_id=request_id,
        status=error.status,
        message=error.message,
        error_type=error.error_type,
        param=error.param,
        code=error.code,
        retry_after_s=error.retry_after_s,
    )


def first_leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf
