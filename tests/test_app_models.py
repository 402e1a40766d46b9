"""The model selector: official models load through the same path a user takes (a weights folder
named by LANTERN_WEIGHTS_DIR, else the Hub, offline in tests), and text-to-image ones take a prompt."""
from pathlib import Path

import gradio as gr
import pytest

from app.backend import imagenet
from app.backend.request import CompareRequest
from app.backend.runtime import Runtime
from app.page import handlers
from app.page.outputs import ComparisonOutputs
from engine.core.config import InvalidInput
from engine.loading.hub import WEIGHTS_DIR_VARIABLE
from tests.official_files import WORDS

T2I = "lantern_t2i_XL_256"
METHODS = ["vanilla", "eagle2", "lantern"]


@pytest.fixture
def weights_dir(lantern_t2i_dir) -> Path:
    return lantern_t2i_dir


def test_an_official_model_offline_without_files_says_what_to_download(monkeypatch):
    monkeypatch.delenv(WEIGHTS_DIR_VARIABLE, raising=False)
    *unchanged, status, latent = handlers.choose_model(Runtime(), "c2i_B_256", "smiley", 64, METHODS)
    assert all(update == gr.skip() for update in [*unchanged, latent])  # the other controls keep working
    assert "c2i_B_256.pt" in status and WEIGHTS_DIR_VARIABLE in status


def test_without_a_network_an_official_model_is_refused_at_once(monkeypatch):
    """HF_HUB_OFFLINE unset, and a Hub that refuses connections (a closed local port stands for a
    machine without network): the refusal comes from the probe, not after the client's retries."""
    import huggingface_hub
    from huggingface_hub import constants

    from engine.loading import hub

    monkeypatch.delenv(WEIGHTS_DIR_VARIABLE, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(hub, "_last_probe", None)
    # "At once": after the failed probe the Hub client may read its cache only, never download.
    real_download, cache_only = huggingface_hub.hf_hub_download, []

    def download(*args, **kwargs):
        cache_only.append(kwargs.get("local_files_only"))
        return real_download(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    with pytest.raises(gr.Error) as refused:
        next(handlers.stream_comparison(Runtime(), CompareRequest(model="c2i_B_256", class_name="207")))
    assert cache_only and all(flag is True for flag in cache_only)
    message = str(refused.value)
    assert ".pt" in message and WEIGHTS_DIR_VARIABLE in message and "unreachable" in message
    assert hub._last_probe is not None and hub._last_probe[2] is False


def test_an_unknown_model_is_named():
    *_, status, _ = handlers.choose_model(Runtime(), "dalle", "smiley", 64, METHODS)
    assert "'dalle'" in status and "allowed: embedded" in status


def test_a_text_model_shows_the_prompt_box_and_compares_from_a_prompt(weights_dir, monkeypatch):
    monkeypatch.setenv(WEIGHTS_DIR_VARIABLE, str(weights_dir))
    runtime = Runtime()
    classes, prompt_box, k_slider, *rest = handlers.choose_model(runtime, T2I, "cat", 64, METHODS)
    methods, status, latent = rest[:3], rest[3], rest[4]
    assert classes["visible"] is False and prompt_box["visible"] is True
    assert k_slider["maximum"] == handlers.K_SLIDER_MAX  # 16,384 codes
    assert methods == METHODS  # LANTERN's published drafter makes every default method runnable
    assert T2I in status and "eagle" in status
    assert len(latent.data[0].x) == 16384

    with pytest.raises(gr.Error, match="prompt"):
        next(handlers.stream_comparison(runtime, CompareRequest(model=T2I, methods=tuple(METHODS))))
    prompt = " ".join(WORDS[3:7])
    request = CompareRequest(model=T2I, prompt=prompt, temperature=0.0, k=8, methods=tuple(METHODS))
    final = list(handlers.stream_comparison(runtime, request))[-1]
    state = ComparisonOutputs.unflatten(final).run_state
    assert state.model.class_names == (prompt,)
    vanilla, eagle2, _ = state.lanes
    assert all(lane.done for lane in state.lanes)
    # This drafter's weights are random, so none of its drafts pass (measured: 0) and each of EAGLE-2's
    # tokens is the target's greedy choice: vanilla's picture, through the app's text-model path.
    # Greedy losslessness with drafts accepted: tests/test_speculative.py and tests/test_shipped.py.
    assert eagle2.tokens.tolist() == vanilla.tokens.tolist()


def test_a_slow_download_does_not_hold_up_users_of_another_model(tiny_model):
    import threading

    downloading, release, loaded = threading.Event(), threading.Event(), []

    def loader(name):
        loaded.append(name)
        if name != "embedded":
            downloading.set()
            release.wait(30)  # a large official model still downloading
        return tiny_model

    runtime = Runtime(loader=loader)
    slow = threading.Thread(target=runtime.model, args=("c2i_XL_384",))
    slow.start()
    assert downloading.wait(10)
    assert runtime.model("embedded") is tiny_model
    # It came while the other download was still held: that loader is still waiting, not finished.
    assert slow.is_alive() and not release.is_set() and loaded == ["c2i_XL_384", "embedded"]
    release.set()
    slow.join(10)
    assert runtime.model("c2i_XL_384") is tiny_model
    assert loaded == ["c2i_XL_384", "embedded"]  # each model loaded once, then kept


def test_official_class_models_take_an_imagenet_index_before_loading(tiny_model):
    loaded = []
    runtime = Runtime(loader=lambda name: loaded.append(name) or tiny_model)
    runtime.check_condition(CompareRequest(model="c2i_B_256", class_name="207"))
    for refused, named in [("1000", "class id 1000 is out of range; allowed: 0 to 999"),
                           ("dragon", "unknown class 'dragon'; allowed: a class index 0 to 999")]:
        with pytest.raises(InvalidInput, match=named):
            runtime.check_condition(CompareRequest(model="c2i_B_256", class_name=refused))
    assert loaded == []


@pytest.mark.skipif(not imagenet.LABELS, reason="no list of ImageNet names is installed")
def test_official_class_models_take_an_imagenet_name_or_a_menu_entry():
    assert imagenet.choices(1000)[207] == ("207 · Golden Retriever", "207")
    for given in ["Golden Retriever", "golden retriever", " 207 · Golden Retriever", "tabby cat"]:
        assert imagenet.class_index(given, 1000) in ("207", "281")
    assert "golden retriever" in imagenet.help_text(imagenet_classes=True)


def test_the_class_help_follows_the_selected_model():
    assert "ImageNet class index (0-999)" in imagenet.help_text(imagenet_classes=True)
    embedded = imagenet.help_text(imagenet_classes=False)
    assert embedded.startswith("one of this model's classes")
    runtime = Runtime()
    classes, *_ = handlers.choose_model(runtime, "embedded", "smiley", 64, METHODS)
    assert classes["info"] == embedded and classes["value"] == "smiley"
