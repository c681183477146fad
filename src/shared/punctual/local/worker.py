"""A local stand-in for one Lambda execution environment of the executor.

Run as ``python -m punctual.local.worker HANDLER_FILE RESULT_FD``: it imports the handler module once (a
cold start), then serves invocations one at a time, like Lambda: one JSON request per line on stdin, one
JSON response per line on ``RESULT_FD``. stdout and stderr (the handler's logs and metrics) go wherever the
parent sent them. SIGTERM asks the executor to stop: unfired tasks are released back to PENDING.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from types import ModuleType
from typing import Any


class LocalContext:
    """The parts of Lambda's context object that the handlers and Powertools read."""

    def __init__(self, function_name: str, timeout_s: float) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        self.memory_limit_in_mb = 1024
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("punctual_local_handler", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load handler module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve(handler_path: str, result_fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the runtime, which stops us with SIGTERM
    module = load_handler_module(handler_path)
    stopping = threading.Event()

    def on_term(signum: int, frame: Any) -> None:
        stopping.set()
        stop = getattr(getattr(module, "executor", None), "request_stop", None)
        if stop is not None:
            threading.Thread(target=stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    function_name = os.environ.get("PUNCTUAL_EXECUTOR_FUNCTION", "punctual-executor")
    timeout_s = float(os.environ.get("PUNCTUAL_LOCAL_TIMEOUT_S", "900"))
    with os.fdopen(result_fd, "w", buffering=1) as results:
        results.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
        for line in sys.stdin:
            if not line.strip():
                continue
            payload = json.loads(line)
            try:
                body = module.handler(payload, LocalContext(function_name, timeout_s))
                response = {"ok": True, "result": body}
            except Exception as exc:  # noqa: BLE001 - reported to the invoker, which retries like Lambda
                traceback.print_exc()
                response = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            results.write(json.dumps(response, default=str) + "\n")
            if stopping.is_set():
                return


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
