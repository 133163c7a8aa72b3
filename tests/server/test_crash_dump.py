"""A native crash of ``twin serve`` leaves every thread's Python stack in its log (issue 39: the
SIGSEGVs in protobuf's upb were diagnosed from such dumps)."""

from __future__ import annotations

import signal

from tests.server.conftest import ServerProcess


def test_a_segfault_dumps_the_python_stacks_of_every_thread_to_the_log(tmp_path):
    srv = ServerProcess(tmp_path)
    srv.wait_log(lambda r: r.get("msg") == "serving")  # a fault mid-import dumps the importer's frames only
    srv.proc.send_signal(signal.SIGSEGV)  # what a fault in a C extension raises
    assert srv.proc.wait(30) == -signal.SIGSEGV
    text = _stderr_after_exit(srv)
    assert "Fatal Python error: Segmentation fault" in text
    assert "Current thread" in text and 'File "' in text and "grpc_app.py" in text


def _stderr_after_exit(srv: ServerProcess) -> str:
    """The server's stderr once its reader thread has seen the end of it."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "Current thread" not in srv.text():
        time.sleep(0.05)
    return srv.text()
