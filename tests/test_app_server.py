"""The launched app on the shipped embedded model, driven through its API with gradio_client."""
import threading
import time

import pytest
import torch
from PIL import Image

from app.backend.request import DEFAULT_METHODS
from app.backend.runtime import Runtime, usable_methods
from engine.loading.embedded import ASSETS, TARGET_FILE, TOKENIZER_FILE
from tests.conftest import free_port

torch.set_num_threads(1)
pytestmark = pytest.mark.skipif(not (ASSETS / TARGET_FILE).exists() or not (ASSETS / TOKENIZER_FILE).exists(),
                                reason="the embedded model is not in assets/")
STATISTICS = 15  # index of the JSON statistics among the API's outputs (3 images, 3 maps, 3 counters, ...)


def make_runtime() -> Runtime:
    return Runtime()


@pytest.fixture(scope="module")
def server():
    from app.page.ui import build_demo, launch_options

    runtime = make_runtime()
    runtime.start(warm=False)
    demo = build_demo(runtime)
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, server_port=free_port(), **launch_options())
    yield url, runtime
    demo.close()


def method_args(runtime: Runtime) -> dict:
    """The default methods where this model has their drafters, else runnable stand-ins."""
    methods = usable_methods(runtime.model(), list(DEFAULT_METHODS))
    return {f"method_{i + 1}": name for i, name in enumerate(methods) if name != DEFAULT_METHODS[i]}


def check_result(result, methods: int = 3) -> dict:
    for path in result[:3]:
        with Image.open(path) as image:
            assert image.size == (256, 256)
    statistics = result[STATISTICS]
    assert len(statistics["methods"]) == methods
    for row in statistics["methods"]:
        assert row["done"] and row["tokens"] == 256
    return statistics


def test_default_compare_streams_then_returns_three_images_and_statistics(server):
    from gradio_client import Client

    url, runtime = server
    job = Client(url, verbose=False).submit(api_name="/compare", **method_args(runtime))
    result = job.result(timeout=240)
    statistics = check_result(result)
    assert len(job.outputs()) >= 3, "images should stream while decoding, not only arrive at the end"
    rows = statistics["methods"]
    assert [row["method"] for row in rows][0] == "vanilla" and rows[0]["speedup_vs_vanilla"] == 1.0
    # Every pass after the prefill yields its accepted drafts and one token: MAL is 255 tokens over
    # those passes, and exactly 1 for vanilla.
    assert rows[0]["mean_accepted_length"] == 1.0 and rows[0]["target_passes"] == 256
    for row in rows:
        assert row["mean_accepted_length"] == pytest.approx(255 / (row["target_passes"] - 1), abs=1e-3)
    assert statistics["request"]["class_name"] == "smiley"


@pytest.mark.parametrize("arguments, named", [
    ({"delta": 1.5}, "delta 1.5 is out of range; allowed: 0 to 1"),
    ({"temperature": -1}, "temperature -1 is out of range; allowed: 0 (greedy) to 2"),
    ({"k": 5000}, "k 5000 is out of range; allowed: 1 to 2048"),  # the slider's top, K_SLIDER_MAX
    ({"seed": -3}, "seed -3 is out of range; allowed: 0 or more"),
    ({"class_name": "dragon"}, "unknown class 'dragon'; allowed: a class index or one of smiley, heart"),
    ({"method_2": "warp"}, "unknown method 'warp'; allowed: vanilla"),
    ({"tree_total": 500}, "tree total tokens 500 is out of range; allowed: 2 to 64"),
    ({"seed": 2**64}, f"seed {2**64} is out of range"),
    ({"lantern_lambda": 0.5}, "lambda 0.5 is out of range; allowed: 1 to 100"),
    ({"gsd_window": 5000}, "GSD window 5000 is out of range"),
    ({"static_tree": "0 7.7"}, "'7.7'"), ({"gsd_distance": 12}, "GSD distance 12 is out of range; allowed: 0 to 10"),
    ({"tree_score": "luck"}, "unknown tree score 'luck'; allowed: rule, draft"),
    ({"lantern_variant": "fast"}, "unknown LANTERN variant 'fast'; allowed: official, paper"),
    ({"tree_min_score": 1.5}, "tree min score 1.5 is out of range; allowed: 0 to 0.95"),
])
def test_invalid_values_get_an_error_naming_them(server, arguments, named):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    url, _ = server
    with pytest.raises(AppError) as err:
        Client(url, verbose=False).predict(api_name="/compare", **arguments)
    assert named in str(err.value)


def test_the_new_methods_and_their_settings_through_the_api(server):
    from gradio_client import Client

    url, runtime = server
    wanted = ["lantern_pp", "sjd_coupled", "gsd"]
    methods = usable_methods(runtime.model(), wanted)
    arguments = {"method_1": methods[0], "method_2": methods[1], "method_3": methods[2], "lantern_lambda": 4.0,
                 "static_tree": "0 1 0.0", "sjd_init": "left", "gsd_window": 2, "gsd_p_gap": 0.2}
    statistics = check_result(Client(url, verbose=False).predict(api_name="/compare", **arguments))
    assert [row["method"] for row in statistics["methods"]] == methods
    assert {key: statistics["request"][key] for key in arguments if not key.startswith("method")} == \
        {key: value for key, value in arguments.items() if not key.startswith("method")}


def test_four_concurrent_clients_all_complete_and_the_app_stays_up(server):
    from gradio_client import Client

    url, runtime = server
    arguments = method_args(runtime)
    results, errors = {}, []

    def one_client(seed: int) -> None:
        try:
            results[seed] = Client(url, verbose=False).predict(api_name="/compare", seed=seed, **arguments)
        except Exception as err:  # collected and reported below, with the seed that failed
            errors.append((seed, repr(err)))

    threads = [threading.Thread(target=one_client, args=(seed,)) for seed in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors
    assert sorted(results) == [1, 2, 3, 4]
    seeds = {check_result(result)["request"]["seed"] for result in results.values()}
    assert seeds == {1, 2, 3, 4}


def test_comparisons_wait_their_turn_in_one_queue(server, monkeypatch):
    """Two clients at once: the server runs their comparisons one after the other, never together
    (one "decode" slot); each handler records when it started and ended, on the server's side."""
    import gradio as gr
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from app.page import handlers
    from app.page.ui import QUEUE_SIZE, build_demo

    url, runtime = server
    spans, lock = [], threading.Lock()

    def recorded(runtime, request):
        started = time.monotonic()
        time.sleep(0.5)  # long enough that a second slot would overlap the first
        with lock:
            spans.append((started, time.monotonic()))
        raise gr.Error("recorded")
        yield  # a generator, as the real handler is

    monkeypatch.setattr(handlers, "stream_comparison", recorded)
    errors = []

    def one_client(seed):
        try:
            Client(url, verbose=False).predict(api_name="/compare", seed=seed)
        except AppError as err:
            errors.append(str(err))

    threads = [threading.Thread(target=one_client, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(spans) == 2 and all("recorded" in e for e in errors) and len(errors) == 2
    first, second = sorted(spans)
    assert second[0] >= first[1]  # the second began only after the first had ended
    # What makes it so: compare alone holds the "decode" slot, one at a time, and at most QUEUE_SIZE
    # comparisons wait for it.
    demo = build_demo(runtime)
    assert [(f.api_name, f.concurrency_limit) for f in demo.fns.values() if f.concurrency_id == "decode"] == \
        [("compare", 1)]
    assert demo._queue.max_size == QUEUE_SIZE


def test_hub_log_lines_are_printed_once(capfd):
    import logging

    from app.page.main import setup_logging

    setup_logging()
    assert logging.getLogger("huggingface_hub").handlers == []
    root = logging.getLogger()
    handler = logging.StreamHandler()
    root.addHandler(handler)
    try:
        logging.getLogger("huggingface_hub.file_download").warning("retrying a download")
    finally:
        root.removeHandler(handler)
    assert capfd.readouterr().err.count("retrying a download") == 1
