import contextlib
import os
import socket
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))


import pytest  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def launched_app():
    """The app (``app.demo``) launched in-process on a free port; yields its URL (no trailing slash)."""
    import app
    from lantern_demo.ui import launch_kwargs

    port = _free_port()
    app.demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                    **launch_kwargs())
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.demo.close()


@pytest.fixture(scope="module")
def server():
    """The app launched in-process (``launched_app``); its URL."""
    with launched_app() as url:
        yield url
