"""The command lines `atom serve` runs: hypercorn serving the app (one process, or one
replica of several), and sglang-router in front of the replicas."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from atom.scaling.placement import Replica
from atom.vocabulary.choices import LogLevel
from atom.vocabulary.config import Settings, naming

APP = "atom.http:app"
BACKLOG_HEADROOM = 64  # connections for /health, /metrics and requests refused with a 429
ROUTER_HEALTH_INTERVAL_S = 1  # how often the router asks each replica's /health
ROUTER_MODULE = "sglang_router"
# The router logs every request at its info level: ATOM's info is its warn.
ROUTER_LOG_LEVELS = {LogLevel.DEBUG: "debug", LogLevel.INFO: "warn", LogLevel.WARNING: "warn"}


def serve_command(bind: str, settings: Settings, app: str = APP) -> list[str]:
    """The hypercorn command line that serves `app` on `bind` (`HOST:PORT`, or `fd://N`
    for a socket the launcher bound). `-w 0` serves in this process, so a fatal engine
    error becomes the exit status (hypercorn reports 0 when its worker process dies).
    The listen backlog holds every connection the server promises to take (running +
    queued), so a burst is answered, not reset."""
    backlog = settings.max_num_seqs + settings.max_queued_requests + BACKLOG_HEADROOM
    tls: list[str] = []
    if settings.ssl_certfile:
        tls += ["--certfile", settings.ssl_certfile]
    if settings.ssl_keyfile:
        tls += ["--keyfile", settings.ssl_keyfile]
    if settings.ssl_ca_certs:
        tls += ["--ca-certs", settings.ssl_ca_certs, "--verify-mode", "CERT_REQUIRED"]
    return [
        *(sys.executable, "-m", "hypercorn", "-k", "trio", "-w", "0"),
        *("-b", bind, "--backlog", str(backlog), *tls, app),
    ]


def replica_settings(settings: Settings, replica: Replica) -> Settings:
    """A replica serves one process's worth: its cores as its threads (unless
    --num-threads says otherwise), its rank (KV events on their own ports) and its own
    request log beside the named one. It
    speaks plain HTTP on loopback; TLS, when asked for, is the router's."""
    threads = settings.num_threads or len(replica.cpus) or None
    log = settings.request_log and replica_log(settings.request_log, replica.rank)
    return dataclasses.replace(
        settings,
        data_parallel_size=1,
        data_parallel_rank=replica.rank,
        num_threads=threads,
        request_log=log,
        ssl_certfile=None,
        ssl_keyfile=None,
    )


def replica_log(path: str, rank: int) -> str:
    """`logs/requests.jsonl` → `logs/requests.dp0.jsonl`: one writer a file."""
    named = Path(path)
    return str(named.with_name(f"{named.stem}.dp{rank}{named.suffix}"))


def replica_env(settings: Settings, replica: Replica) -> dict[str, str]:
    """The launcher's environment with its `ATOM_*` variables replaced by the replica's
    settings (a setting the replica leaves unset is not inherited)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("ATOM_")}
    env = {**inherited, **replica_settings(settings, replica).to_env()}
    if replica.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = replica.gpu
    return env


def router_command(
    host: str, port: int, workers: Sequence[str], settings: Settings, metrics_port: int
) -> list[str]:
    """sglang-router on the public address, health-checking every replica each second
    (a dead one is out of the rotation in a few). Its Prometheus metrics go to a port of
    their own on loopback (its default, 29000, is taken once two servers run)."""
    log_level = ROUTER_LOG_LEVELS.get(settings.log_level, "error")
    tls: list[str] = []
    if settings.ssl_certfile:
        tls += ["--tls-cert-path", settings.ssl_certfile]
    if settings.ssl_keyfile:
        tls += ["--tls-key-path", settings.ssl_keyfile]
    return [
        *(sys.executable, "-m", ROUTER_MODULE, "launch", "--host", host, "--port", str(port)),
        *("--worker-urls", *workers, "--policy", str(settings.router_policy)),
        *("--health-check-endpoint", "/health"),
        *("--health-check-interval-secs", str(ROUTER_HEALTH_INTERVAL_S)),
        *("--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)),
        *("--log-level", log_level, *tls),
    ]


def require_router() -> None:
    """Checked before any replica starts (a model load can take minutes)."""
    with naming("data_parallel_size"):
        if importlib.util.find_spec(ROUTER_MODULE) is None:
            raise ValueError(
                "more than one replica needs sglang-router in front: "
                "pip install 'atom[router]' (or sglang-router)"
            )
