"""Build and launch the explorer: the model loads, and a first comparison runs, in the background."""
from __future__ import annotations

import logging
import os


def setup_logging() -> None:
    """One timestamped line per event. huggingface_hub gives its logger a handler of its own and
    also passes records on to the root's, which would print each of its lines twice."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    import huggingface_hub  # noqa: F401 (its logger's handler is added on import)

    hub_logger = logging.getLogger("huggingface_hub")
    for handler in list(hub_logger.handlers):
        hub_logger.removeHandler(handler)
    hub_logger.propagate = True


def main() -> None:
    import torch

    from app.backend.runtime import Runtime
    from app.page.ui import build_demo, launch_options

    # Decoding steps are small: one thread per decode avoids OpenMP threads spinning against the
    # server thread that renders previews (measured here as the larger cost on a 2-core machine).
    torch.set_num_threads(int(os.environ.get("EXPLORER_THREADS", "1")))

    setup_logging()
    runtime = Runtime()
    runtime.start(warm=True)
    demo = build_demo(runtime)
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), prevent_thread_lock=True,
                quiet=True, **launch_options())
    logging.getLogger("app").info("ready at %s", demo.local_url)
    demo.block_thread()
