"""kiln.Logger: where kiln's log messages go (kiln_log_set)."""
from __future__ import annotations

import sys
import threading

from . import _kiln


class Logger:
    """Severity levels as in tensorrt.Logger; messages at or above
    ``min_severity``'s importance are passed to ``log`` (override it)."""

    INTERNAL_ERROR = 0
    ERROR = 0
    WARNING = 1
    INFO = 2
    VERBOSE = 3

    _current = None
    _lock = threading.Lock()

    def __init__(self, min_severity: int = WARNING):
        self.min_severity = min_severity
        Logger._install(self)

    def log(self, severity: int, msg: str) -> None:
        name = {0: "ERROR", 1: "WARNING", 2: "INFO", 3: "VERBOSE"}.get(severity, "?")
        print(f"[kiln] {name}: {msg}", file=sys.stderr)

    @classmethod
    def _install(cls, logger: "Logger") -> None:
        # kiln has one process-wide logger: the newest Logger wins.
        with cls._lock:
            cls._current = logger
            _kiln.set_logger(lambda level, msg: logger.log(level, msg), int(logger.min_severity))
