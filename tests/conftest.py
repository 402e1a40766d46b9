import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

from engine.drafters.eagle_net import EagleNet  # noqa: E402
from engine.loading.image_model import ImageModel  # noqa: E402
from engine.model.gpt import GPT, GPTConfig  # noqa: E402
from engine.model.tokenizer import VQConfig, VQModel  # noqa: E402

TINY_GPT = GPTConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, num_classes=3, cls_token_num=1,
                     grid_size=4)
TINY_VQ = VQConfig(codebook_size=64, codebook_embed_dim=8, ch=32, ch_mult=(1, 2), z_channels=32,
                   num_res_blocks=1)


def tiny_gpt(seed: int = 0, config: GPTConfig = TINY_GPT) -> GPT:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    # Random init gives near-uniform logits; sharpen the head so that distributions have structure.
    with torch.no_grad():
        model.output.weight.mul_(4.0)
    return model


@pytest.fixture(scope="session")
def lantern_t2i_dir(tmp_path_factory):
    """LANTERN's text-to-image files (tiny random weights) in a user's weights folder; read-only."""
    from tests.official_files import write_lantern_t2i_folder

    return write_lantern_t2i_folder(tmp_path_factory.mktemp("lantern_t2i"))


@pytest.fixture
def tiny_model() -> ImageModel:
    torch.manual_seed(0)
    return ImageModel(tiny_gpt(), VQModel(TINY_VQ).eval(), ("red", "green", "blue"), name="tiny")


@pytest.fixture
def tiny_eagle(tiny_model) -> ImageModel:
    """The tiny model with an untrained EAGLE drafter, enough for the drafter methods to run."""
    torch.manual_seed(1)
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    return tiny_model


@pytest.fixture(scope="session")
def trained_eagle_net() -> EagleNet:
    """An EAGLE net trained on tiny_gpt()'s greedy images, whose drafts the tiny target accepts
    (tests/accepting.py); shared, so never train or change it in a test."""
    from tests.accepting import trained_eagle

    with torch.random.fork_rng():  # leave the global seed state as the tests before left it
        return trained_eagle(tiny_gpt())


@pytest.fixture
def tiny_accepting(tiny_model, trained_eagle_net) -> ImageModel:
    """The tiny model with drafters whose drafts it accepts: the trained EAGLE net, and for SpS a
    noisy copy of the target (tests/accepting.py)."""
    from tests.accepting import noisy_copy

    tiny_model.drafters["eagle"] = trained_eagle_net
    tiny_model.drafters["sps"] = noisy_copy(tiny_model.target)
    return tiny_model


@pytest.fixture(scope="session")
def jacobi_gpt() -> GPT:
    """A tiny target whose guesses survive wrong tokens before them, so that SJD's drafts are
    accepted (tests/accepting.py); shared, so never train or change it in a test."""
    from tests.accepting import jacobi_target

    with torch.random.fork_rng():
        return jacobi_target(tiny_gpt())


@pytest.fixture
def jacobi_model(jacobi_gpt) -> ImageModel:
    torch.manual_seed(0)
    return ImageModel(jacobi_gpt, VQModel(TINY_VQ).eval(), ("red", "green", "blue"), name="tiny-jacobi")


def free_port() -> int:
    """A port no one listens on now, so that test servers leave 7860 to a running explorer."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
