"""A Jupyter kernel started by jupyter_client, for the tests of %%ranks in a kernel."""

from __future__ import annotations

import ast
import queue
import time

from tests.helpers.paths import ROOT


class Kernel:
    """A kernel started by jupyter_client, and a way to run a cell and collect what it shows."""

    def __init__(self) -> None:
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT))

    def execute(self, code: str, timeout: float = 120, on_stream=None) -> dict:
        """Run ``code``; {status, stdout, stderr, streams (each message's text), error (ename, traceback)}."""
        msg_id = self.kc.execute(code)
        out = {"stdout": "", "stderr": "", "streams": [], "error": None}
        end = time.monotonic() + timeout
        while True:
            assert time.monotonic() < end, f"no answer within {timeout} s; so far {out}"
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out[content["name"]] += content["text"]
                out["streams"].append(content["text"])
                if on_stream:
                    on_stream(out)
            elif kind == "error":
                out["error"] = (content["ename"], "\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                break
        while True:
            reply = self.kc.get_shell_msg(timeout=10)
            if reply["parent_header"].get("msg_id") == msg_id:
                out["status"] = reply["content"]["status"]
                return out

    def pids(self) -> list[int]:
        text = self.execute("from nvtutorial.teach import ranks as _r; print(_r.status().get('pids'))")["stdout"]
        return ast.literal_eval(text.strip()) or []

    def close(self) -> None:
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=True)
