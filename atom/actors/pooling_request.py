"""A pooling request's life: its events around the Pooler's work, and its one answer.

Shorter than a generation request's actor: there is no stream and no parser, so the
route's own task waits for the Pooler; a client that leaves cancels that task, which
drops the inputs not yet run and logs the request as aborted.
"""

from __future__ import annotations

import trio

from atom.actors.cores import PoolingCore
from atom.actors.request import failed_event
from atom.projections.wire import Output
from atom.projections.wire_pooling import PoolingRenderer, encode_output
from atom.vocabulary.errors import AtomError
from atom.vocabulary.events import PoolingFinished, PoolingRequested, RequestAborted


async def run_pooling(core: PoolingCore, received: PoolingRequested) -> Output:
    """Publish `received`, pool its inputs, publish the outcome; the answer to send."""
    renderer = PoolingRenderer(received)
    core.bus.publish(received)
    try:
        outputs = await core.pooler.pool(received.inputs)
    except AtomError as error:
        event = failed_event(received.request_id, error)
        core.bus.publish(event)
        output = renderer.feed(event)
    except trio.Cancelled:
        core.bus.publish(
            RequestAborted(request_id=received.request_id, reason="client_disconnected")
        )
        raise
    else:
        encoded = tuple(encode_output(values) for values in outputs)
        finished = PoolingFinished(request_id=received.request_id, outputs=encoded)
        core.bus.publish(finished)
        output = renderer.feed(finished)
    assert output is not None  # both events end the response
    return output
