"""Build and launch the explorer."""
from __future__ import annotations

import os


def main() -> None:
    from app.ui import build_demo

    demo = build_demo()
    demo.queue(default_concurrency_limit=1, max_size=32)
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
