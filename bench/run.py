"""Side-by-side serving benchmark: `python -m bench.run [--peer llama-server] [--floor]`.

Starts ATOM with its defaults (and with each `--quantization` asked for) and the
peers on the very same GGUF file, on loopback ports, one after the other, runs the
same streaming load against each, and prints one JSON document with every number.
Peers: `llama-server`, llama.cpp's own server, built once from the sources in the
llama-cpp-python sdist (bench/llama_server.py, 10-20 minutes the first time);
`llamacpp`, llama-cpp-python's server, which needs the bench-only extra
`pip install 'llama-cpp-python[server]'` in the python given by --peer-python.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from atom.model.loader import default_model_path
from atom.scaling.commands import serve_command
from atom.vocabulary.config import Settings
from bench.load import Target, long_prompts, run_level, shared_prefix

MODEL = "SmolLM2-135M-Instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(
    command: list[str], ready_url: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    log_path = os.environ.get("BENCH_SERVER_LOG")
    log = open(log_path, "a") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{command[0]} exited during start-up"
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def resident_mb(pid: int) -> float:
    """Resident memory of a process and its children (MB), from /proc."""
    total, pids = 0, [pid]
    while pids:
        current = pids.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        line = next((x for x in status.splitlines() if x.startswith("VmRSS:")), "VmRSS: 0 kB")
        total += int(line.split()[1])
        pids += [int(c) for c in children]
    return round(total / 1024, 1)


def atom_server(port: int, args: argparse.Namespace, extra_env: dict[str, str]) -> Any:
    env = {"ATOM_LOG_LEVEL": "warning", **dict(kv.split("=", 1) for kv in args.atom_env)}
    if args.model:
        env |= {"ATOM_MODEL": args.model, "ATOM_SERVED_MODEL_NAME": MODEL}
    env.update(extra_env)
    command = serve_command(f"127.0.0.1:{port}", Settings.from_env(env))
    return server(command, f"http://127.0.0.1:{port}/health", env)


def llamacpp_server(port: int, args: argparse.Namespace, extra_env: dict[str, str]) -> Any:
    command = [
        args.peer_python,
        "-m",
        "llama_cpp.server",
        "--model",
        args.model or str(default_model_path()),
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--interrupt_requests",
        "False",
        "--model_alias",
        MODEL,
    ]
    return server(command, f"http://127.0.0.1:{port}/v1/models")


def llama_server(port: int, args: argparse.Namespace, extra_env: dict[str, str]) -> Any:
    """llama.cpp's own server (built once, bench/llama_server.py) on the same GGUF: 32
    slots sharing one KV pool of 64k tokens (a 1,000-word prompt fits any slot),
    continuous batching, 2 threads."""
    from bench import llama_server as build

    model = args.model or str(default_model_path())
    command = [str(build.binary()), "--model", model, "--host", "127.0.0.1"]
    command += ["--port", str(port), "--alias", MODEL, "-np", "32", "-cb", "-t", "2"]
    command += ["-c", "65536", "--kv-unified", "--no-webui"]
    return server(command, f"http://127.0.0.1:{port}/health")


async def scenarios(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"levels": []}
    # Warm-up, not measured: no server is timed on its very first requests (lazy set-up).
    await run_level(target, concurrency=1, num_requests=2, prompt_words=20, max_tokens=32, salt=0)
    for i, c in enumerate(args.concurrency):
        num = max(c * args.rounds, 8)  # c=1: enough tokens to average out a noisy VM
        level = await run_level(
            target,
            concurrency=c,
            num_requests=num,
            prompt_words=args.prompt_words,
            max_tokens=args.output_tokens,
            salt=i + 1,
        )
        print(target.name, json.dumps(level), file=sys.stderr)
        out["levels"].append(level)
    if args.shared_prefix_words:
        out["shared_prefix"] = await shared_prefix(
            target, prefix_words=args.shared_prefix_words, num_later=4
        )
    out["long_prompts"] = [
        await long_prompts(target, words=words, count=3) for words in args.long_prompt_words
    ]
    if args.structured:  # c=8 with and without a JSON-schema constraint (issue #6)
        out["structured_c8"] = await structured(target, args)
    if args.churn:  # short outputs at c=16: new prompts arrive all the time
        out["churn_c16"] = await run_level(
            target,
            concurrency=16,
            num_requests=64,
            prompt_words=args.prompt_words,
            max_tokens=32,
            salt=99,
        )
    return out


# At least 40 strings: the constraint stays active for the whole 128-token output.
LIST_SCHEMA = {"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 40}


async def structured(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    constraint = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "list", "schema": LIST_SCHEMA},
        }
    }
    constrained = Target(
        name=target.name, url=target.url, model=target.model, extra={**target.extra, **constraint}
    )
    runs = {}
    for t in (target, constrained):  # warm-up: the first grammar builds llguidance's token table
        await run_level(t, concurrency=1, num_requests=1, prompt_words=8, max_tokens=4, salt=76)
    for name, t in (("plain", target), ("json_schema", constrained)):
        runs[name] = await run_level(
            t,
            concurrency=8,
            num_requests=32,
            prompt_words=args.prompt_words,
            max_tokens=args.output_tokens,
            salt=77,
        )
    ratio = runs["json_schema"]["output_tok_s"] / runs["plain"]["output_tok_s"]
    return {**runs, "ratio": round(ratio, 3)}


def transformers_floor(prompt_words: int, output_tokens: int) -> dict[str, Any]:
    """transformers' own generate(), batch 1, on the same weights: the floor."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from atom.model.loader import local_folder
    from atom.vocabulary.config import Settings
    from bench.load import prompt_text

    folder = local_folder(default_model_path(), Settings().cache_dir)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    msgs = [{"role": "user", "content": prompt_text(prompt_words, 7)}]
    ids = torch.tensor(
        [tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=False)]
    )
    model.generate(ids, max_new_tokens=4)
    started = time.perf_counter()
    model.generate(ids, max_new_tokens=output_tokens, min_new_tokens=output_tokens, do_sample=False)
    return {"output_tok_s": round(output_tokens / (time.perf_counter() - started), 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    p.add_argument("--rounds", type=int, default=2, help="requests per worker at each level")
    p.add_argument(
        "--prompt-words", type=int, default=110, help="~128 prompt tokens with the template"
    )
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--shared-prefix-words", type=int, default=1000)
    p.add_argument(
        "--long-prompt-words",
        type=int,
        nargs="*",
        default=[],
        help="TTFT of prompts this long, one at a time (1750 words: ~2,000 tokens)",
    )
    p.add_argument("--churn", action="store_true", help="ITL under constant arrivals at c=16")
    p.add_argument("--structured", action="store_true", help="c=8 with/without a JSON schema")
    p.add_argument(
        "--peer",
        choices=["llama-server", "llamacpp"],
        action="append",
        default=[],
        help="llama-server: llama.cpp's own server (built once, cached); llamacpp: "
        "llama-cpp-python's (serves one request at a time)",
    )
    p.add_argument("--peer-python", default=".venv-bench/bin/python")
    p.add_argument("--floor", action="store_true", help="also time transformers' generate")
    p.add_argument(
        "--quantization",
        choices=["int8", "int4", "off"],
        action="append",
        default=[],
        help="also run ATOM with --quantization Q (repeatable)",
    )
    p.add_argument("--int8", dest="quantization", action="append_const", const="int8")
    p.add_argument("--int4", dest="quantization", action="append_const", const="int4")
    p.add_argument("--atom-env", nargs="*", default=[], help="ATOM_X=value settings for ATOM")
    p.add_argument("--model", help="a GGUF both servers serve (default: the default model)")
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    report: dict[str, Any] = {"machine": machine(), "args": vars(args), "results": {}}
    ignore_eos = {"ignore_eos": True}
    runs: list[tuple[str, Any, dict[str, Any], dict[str, str]]] = [
        ("atom", atom_server, ignore_eos, {})
    ]
    for method in dict.fromkeys(args.quantization):
        runs.append((f"atom-{method}", atom_server, ignore_eos, {"ATOM_QUANTIZATION": method}))
    min_tokens = {"min_tokens": args.output_tokens}  # llama-cpp-python ignores ignore_eos
    if "llama-server" in args.peer:
        runs.append(("llama-server", llama_server, ignore_eos | min_tokens, {}))
    if "llamacpp" in args.peer:
        runs.append(("llama-cpp-python", llamacpp_server, min_tokens, {}))
    for name, start, extra, env in runs:
        port = free_port()
        with start(port, args, env) as proc:
            target = Target(name=name, url=f"http://127.0.0.1:{port}", model=MODEL, extra=extra)
            report["results"][name] = trio.run(scenarios, target, args)
            report["results"][name]["resident_mb"] = resident_mb(proc.pid)
    if args.floor:
        report["results"]["transformers-generate"] = transformers_floor(
            args.prompt_words, args.output_tokens
        )
    publish(report, args.out)


def publish(report: Any, out: str | None, **dumps: Any) -> None:
    """Print a bench's JSON report, and write it to `out` too when given."""
    text = json.dumps(report, **{"indent": 1, **dumps})
    print(text)
    if out:
        Path(out).write_text(text + "\n")


def machine() -> dict[str, Any]:
    import torch

    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), which every reported figure names."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")), "")


if __name__ == "__main__":
    main()
