"""`atom serve` (vLLM-style flags over hypercorn) and `atom replay LOG`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import trio

from atom.log.codec import read_log
from atom.log.replay import project, reparse
from atom.log.rerun import Rerun, recorded_requests, summarize
from atom.scaling.commands import serve_command
from atom.vocabulary.config import (
    HELP,
    Settings,
    is_switch,
    naming,
    parse_list,
    setting_fields,
)
from atom.vocabulary.events import Envelope


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return _replay(args)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="atom")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model over the OpenAI HTTP API")
    serve.add_argument("model_path", nargs="?", help="same as --model")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    defaults = Settings()
    for f in setting_fields():
        default = getattr(defaults, f.name)
        value = json.dumps(list(default)) if isinstance(default, tuple) else default
        shown = "" if default is None else f"; default: {value}"
        # A true/false setting's flag alone means true, as vLLM's do.
        switch: dict[str, Any] = {"nargs": "?", "const": "true"} if is_switch(f) else {}
        serve.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            default=None,
            action="append" if isinstance(default, tuple) else "store",
            help=f"{HELP[f.name]} (env ATOM_{f.name.upper()}{shown})".replace("%", "%%"),
            **switch,
        )
    _replay_arguments(commands.add_parser("replay", help="rebuild the responses in a log"))
    return parser


def _replay_arguments(replay: argparse.ArgumentParser) -> None:
    replay.add_argument("log")
    replay.add_argument("--request-id", help="only this request")
    replay.add_argument("--json", action="store_true", help="one JSON object per response")
    replay.add_argument("--tool-call-parser", help="re-parse the recorded tokens with this parser")
    replay.add_argument("--reasoning-parser", help="re-parse the recorded tokens with this parser")
    replay.add_argument("--model", help="model whose tokenizer re-parsing uses (default: embedded)")
    rerun = replay.add_argument_group("re-run against a live server")
    rerun.add_argument("--rerun", metavar="URL", help="re-send the requests to URL and compare")
    rerun.add_argument("--concurrency", type=int, default=8, help="requests at once (default: 8)")
    rerun.add_argument(
        "--speed",
        choices=("recorded", "max"),
        default="recorded",
        help="send at the recorded arrival times, or as fast as --concurrency allows",
    )
    rerun.add_argument(
        "--min-agreement",
        type=float,
        default=1.0,
        help="exit 1 when fewer requests agree than this share (default: 1.0)",
    )
    rerun.add_argument("--api-key", help="the server's API key (Authorization: Bearer)")


def _serve(args: argparse.Namespace) -> int:
    """A setting that cannot be served is one line naming it, and exit status 2."""
    try:
        settings = settings_of(args)
        if settings.data_parallel_size > 1:
            from atom.scaling.supervisor import serve

            return serve(args.host, args.port, settings)
    except ValueError as error:
        print(f"atom serve: {error}", file=sys.stderr)
        return 2
    env = {**os.environ, **settings.to_env()}
    os.execvpe(sys.executable, serve_command(f"{args.host}:{args.port}", settings), env)


def settings_of(args: argparse.Namespace) -> Settings:
    """The ATOM_* variables, overridden by the flags of `atom serve` (read exactly as
    their variables are)."""
    values = {f.name: getattr(args, f.name) for f in setting_fields()}
    values["model"] = values["model"] or args.model_path
    for name, value in values.items():
        if isinstance(value, list):  # a repeatable flag: each may be a JSON or comma list
            with naming(name):
                values[name] = json.dumps([v for raw in value for v in parse_list(raw)])
    flags = {f"ATOM_{k.upper()}": v for k, v in values.items() if v is not None}
    return Settings.from_env({**os.environ, **flags})


MAX_REPORTED = 10  # skipped lines named one by one; the rest are counted


def _replay(args: argparse.Namespace) -> int:
    """A log that cannot be opened, or holds no record at all (a folder, a binary file, one
    line nested a million deep), is a one-line error and exit status 2."""
    if not os.path.isfile(args.log):
        print(f"atom replay: {args.log}: no such file (a request log is a file)", file=sys.stderr)
        return 2
    skipped: list[int] = []

    def report_torn(number: int, reason: str) -> None:
        skipped.append(number)
        if len(skipped) <= MAX_REPORTED:
            print(f"atom replay: {args.log}:{number}: skipped a line ({reason})", file=sys.stderr)

    read = [0]

    def counted() -> Iterator[Envelope]:
        for envelope in read_log(args.log, on_torn=report_torn):
            read[0] += 1
            yield envelope

    try:
        status = _replayed(args, counted())
    except OSError as exc:
        print(f"atom replay: {args.log}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if read[0] == 0 and skipped:
        print(f"atom replay: {args.log}: no record in {len(skipped)} lines", file=sys.stderr)
        return 2
    return status


def _replayed(args: argparse.Namespace, envelopes: Iterable[Envelope]) -> int:
    if args.rerun:
        return _rerun(args, envelopes)
    if args.tool_call_parser or args.reasoning_parser:
        from atom.model.loader import load_tokenizer

        tokenizer = load_tokenizer(args.model, cache_dir=Settings().cache_dir)
        envelopes = reparse(
            envelopes,
            tokenizer,
            tool_call_parser=args.tool_call_parser,
            reasoning_parser=args.reasoning_parser,
        )
    for response in project(envelopes):
        if args.request_id and response.request_id != args.request_id:
            continue
        body = response.body.decode()
        if args.json:
            record = {
                "request_id": response.request_id,
                "status": response.status,
                "content_type": response.content_type,
                "is_complete": response.is_complete,
                "weights": response.weights,
                "body": body,
            }
            print(json.dumps(record, ensure_ascii=False))
        else:
            print(f"### {response.request_id} {response.status} {response.content_type}")
            print(body)
    return 0


def _rerun(args: argparse.Namespace, envelopes: Iterable[Envelope]) -> int:
    """Print one JSON line per request that did not agree, then a summary; 1 below
    --min-agreement."""
    recorded = recorded_requests(envelopes)
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    rerun = Rerun(
        url=args.rerun,
        concurrency=args.concurrency,
        as_recorded=args.speed == "recorded",
        headers=headers,
    )
    unreachable: list[BaseException] = []
    verdicts = []
    try:
        verdicts = trio.run(rerun.run, recorded)
    except* httpx.TransportError as group:
        unreachable.extend(group.exceptions)
    if unreachable:
        reason = f"{type(unreachable[0]).__name__}: {unreachable[0]}"
        print(f"atom replay: cannot reach {args.rerun} ({reason})"[:300], file=sys.stderr)
        return 2
    for verdict in verdicts:
        if not verdict.agreed:
            print(json.dumps(dataclasses.asdict(verdict), ensure_ascii=False))
    summary = summarize(verdicts)
    print(json.dumps(summary))
    return 0 if summary["agreement"] >= args.min_agreement else 1


if __name__ == "__main__":
    raise SystemExit(main())
