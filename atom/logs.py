"""structlog set-up: JSON lines (or readable console lines) on stderr, with `request_id`
from the actor's context."""

from __future__ import annotations

import logging
import sys

import structlog

_format = "json"  # what configure_logging chose (atom/progress.py draws a bar for console)


def log_format() -> str:
    return _format


def configure_logging(level: str = "info", log_format: str = "json") -> None:
    """`log_format`: `json` (one object a line, for collectors) or `console`."""
    global _format
    _format = log_format
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
