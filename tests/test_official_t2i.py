"""Text-to-image LlamaGen through the user's path: a weights folder laid out as on the Hub (LANTERN's
Hugging Face Llama target and drafter, VQ-16, a FLAN-T5-style encoder), tiny random weights, the
same loader and command line a user runs, and no network."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.core.config import SamplingConfig
from engine.generation import generate
from engine.loading.load import load_model
from engine.loading.t2i import TextImageModel
from tests.official_files import WORDS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def weights_dir(lantern_t2i_dir) -> Path:
    return lantern_t2i_dir


def test_text_encoder_keeps_the_real_tokens_and_ignores_padding(weights_dir):
    model = load_model("lantern_t2i_XL_256", weights_dir)
    assert isinstance(model, TextImageModel)
    features = model.encoder.encode("A  Blue car zebra")  # cleaned to "a blue car zebra" + </s>
    assert features.shape == (5, 24)
    t5 = model.encoder._model
    ids = torch.tensor([[WORDS.index("a"), WORDS.index("blue"), WORDS.index("car"), 2, 1]])
    with torch.no_grad():
        unpadded = t5(input_ids=ids).last_hidden_state[0]
    torch.testing.assert_close(features, unpadded, rtol=1e-5, atol=1e-5)


def test_a_prompt_is_encoded_once_and_its_binding_is_unchanged(weights_dir, monkeypatch):
    model = load_model("lantern_t2i_XL_256", weights_dir)
    calls = []
    encode = model.encoder.encode
    monkeypatch.setattr(model.encoder, "encode", lambda prompt: calls.append(prompt) or encode(prompt))
    first, again = model.bind("a photo of cat"), model.bind("a photo of cat")
    model.bind("a blue car")
    assert calls == ["a photo of cat", "a blue car"]
    torch.testing.assert_close(again.target.cls_embedding.table, first.target.cls_embedding.table)
    torch.testing.assert_close(first.target.cls_embedding.table[0],
                               model.target.cls_embedding(encode("a photo of cat")[None])[0])


def test_lantern_t2i_runs_every_method_and_lossless_ones_match_vanilla(weights_dir):
    model = load_model("lantern_t2i_XL_256", weights_dir)
    assert set(model.drafters) == {"eagle"}
    bound = model.bind("an astronaut riding a horse")
    greedy = SamplingConfig(temperature=0.0, cfg_scale=4.0)
    vanilla = generate(bound, "vanilla", greedy, 0).tokens
    for method in ("eagle2", "sjd"):
        assert generate(bound, method, greedy, 0).tokens.tolist() == vanilla.tolist(), method
    other = generate(model.bind("a blue car"), "vanilla", greedy, 0).tokens
    assert other.tolist() != vanilla.tolist()  # the prompt reaches the model
    assert bound.decode_images(torch.from_numpy(vanilla)[None]).shape == (1, 64, 64, 3)


def _cli(args: list[str], env_extra: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **env_extra}
    return subprocess.run([sys.executable, "-m", "engine", "generate", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_command_line_generates_from_a_prompt(weights_dir, tmp_path):
    run = _cli(["--model", "lantern_t2i_XL_256", "--weights-dir", str(weights_dir), "--prompt", "a photo of a cat",
                "--temperature", "0", "--cfg", "4.0", "--tokens-out", str(tmp_path / "t.npy"),
                "--out", str(tmp_path / "i.png"), "--device", "cpu"], {})
    assert run.returncode == 0, run.stderr
    model = load_model("lantern_t2i_XL_256", weights_dir).bind("a photo of a cat")
    expected = generate(model, "vanilla", SamplingConfig(temperature=0.0, cfg_scale=4.0), 0).tokens
    assert np.load(tmp_path / "t.npy").tolist() == expected.tolist()
    assert (tmp_path / "i.png").stat().st_size > 0
    missing = _cli(["--model", "lantern_t2i_XL_256", "--weights-dir", str(weights_dir)], {})
    assert missing.returncode == 2 and "--prompt" in missing.stderr


class _CountingEndpoint:
    """A local server standing in for the Hub that only counts the connections made to it."""

    def __init__(self):
        import socket
        import threading

        self.connections = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:  # the accept timeout: look at the stop flag again
                continue
            self.connections += 1
            connection.close()

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self._server.close()


def test_offline_without_weights_fails_at_once_saying_what_to_download(tmp_path):
    # "At once" means without trying the network: the Hub's endpoint is a local server that counts
    # connections, and offline the command must make none (a download would, and retry for long).
    endpoint = _CountingEndpoint()
    try:
        run = _cli(["--model", "c2i_B_256"], {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": endpoint.url})
    finally:
        endpoint.close()
    assert endpoint.connections == 0
    assert run.returncode == 2
    for url in ("https://huggingface.co/FoundationVision/LlamaGen/resolve/main/c2i_B_256.pt",
                "https://huggingface.co/FoundationVision/LlamaGen/resolve/main/vq_ds16_c2i.pt"):
        assert url in run.stderr
    assert "--weights-dir" in run.stderr


def test_weights_dir_lacking_a_file_names_it_and_where_it_goes(tmp_path):
    run = _cli(["--model", "c2i_L_256", "--weights-dir", str(tmp_path)], {})
    assert run.returncode == 2
    assert f"put it at {tmp_path / 'c2i_L_256.pt'}" in run.stderr
    assert f"put it at {tmp_path / 'vq_ds16_c2i.pt'}" in run.stderr
