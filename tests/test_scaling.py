"""The launcher's decisions, without starting anything: how replicas share the
machine, their settings, and the router's command line (tests/e2e/test_scaling.py
starts them for real)."""

from __future__ import annotations

import importlib.util

import pytest

from atom.scaling.commands import (
    replica_env,
    replica_log,
    replica_settings,
    require_router,
    router_command,
)
from atom.scaling.placement import Replica, cpu_list, place_on_cpus, place_on_gpus
from atom.vocabulary.config import Settings


def test_cores_are_shared_in_node_order_and_the_first_shares_take_the_remainder() -> None:
    nodes = ((0, 1, 2, 3), (4, 5, 6))
    assert [r.cpus for r in place_on_cpus(2, nodes)] == [(0, 1, 2, 3), (4, 5, 6)]
    assert [r.cpus for r in place_on_cpus(3, nodes)] == [(0, 1, 2), (3, 4), (5, 6)]
    assert [r.rank for r in place_on_cpus(3, nodes)] == [0, 1, 2]


def test_more_replicas_than_cores_or_gpus_is_an_error_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=r"--data-parallel-size \(ATOM_DATA_PARALLEL_SIZE\)"):
        place_on_cpus(3, ((0, 1),))
    with pytest.raises(ValueError, match="3 replicas need a GPU each; 2 visible"):
        place_on_gpus(3, ("0", "1"))


def test_each_replica_gets_one_of_the_visible_gpus_and_no_pinning() -> None:
    placed = place_on_gpus(2, ("4", "6"))
    assert [(r.gpu, r.cpus) for r in placed] == [("4", ()), ("6", ())]
    assert replica_env(Settings(), placed[1])["CUDA_VISIBLE_DEVICES"] == "6"


def test_the_kernels_cpulist_format() -> None:
    assert cpu_list("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert cpu_list("") == ()


def test_a_replica_takes_its_cores_as_threads_and_its_own_request_log() -> None:
    settings = Settings(data_parallel_size=2, request_log="/logs/requests.jsonl")
    replica = Replica(rank=1, cpus=(2, 3, 4))
    mine = replica_settings(settings, replica)
    assert (mine.data_parallel_size, mine.data_parallel_rank, mine.num_threads) == (1, 1, 3)
    assert mine.request_log == "/logs/requests.dp1.jsonl"
    assert replica_settings(Settings(num_threads=1), replica).num_threads == 1  # as asked
    assert replica_env(settings, replica)["ATOM_REQUEST_LOG"] == "/logs/requests.dp1.jsonl"
    assert replica_log("events", 0) == "events.dp0"


def test_the_router_command_names_the_replicas_the_policy_and_its_own_metrics_port() -> None:
    settings = Settings(data_parallel_size=2, router_policy="round_robin")
    workers = ["http://127.0.0.1:7001", "http://127.0.0.1:7002"]
    command = router_command("0.0.0.0", 8000, workers, settings, metrics_port=7100)
    assert command[command.index("--worker-urls") + 1 :][:2] == workers
    assert command[command.index("--policy") + 1] == "round_robin"
    assert command[command.index("--port") + 1] == "8000"
    assert command[command.index("--prometheus-port") + 1] == "7100"
    assert command[command.index("--log-level") + 1] == "warn"


def test_tls_is_the_routers_and_the_replicas_speak_plain_http_on_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ATOM_SSL_CERTFILE", "c.pem")  # what the launcher was started with
    settings = Settings(data_parallel_size=2, ssl_certfile="c.pem", ssl_keyfile="k.pem")
    command = router_command("0.0.0.0", 443, ["http://127.0.0.1:7001"], settings, 7100)
    assert command[command.index("--tls-cert-path") + 1] == "c.pem"
    assert command[command.index("--tls-key-path") + 1] == "k.pem"
    env = replica_env(settings, Replica(rank=0, cpus=(0,)))
    assert "ATOM_SSL_CERTFILE" not in env and "ATOM_SSL_KEYFILE" not in env
    with pytest.raises(ValueError, match="checks no client certificates"):
        Settings(data_parallel_size=2, ssl_ca_certs="ca.pem")


def test_an_unknown_router_policy_names_the_setting() -> None:
    with pytest.raises(ValueError, match="ATOM_ROUTER_POLICY"):
        Settings(router_policy="least_busy")


def test_a_missing_router_is_named_before_any_replica_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="needs sglang-router in front"):
        require_router()
