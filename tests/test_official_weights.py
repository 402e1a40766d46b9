"""Official checkpoint formats: random weights written in each layout, loaded the way a user's run
loads them, and bad files rejected with messages that say what is wrong."""
import pytest
import torch

from engine.loading.layouts import eagle_to_engine
from engine.loading.official import MODELS, load_eagle_folder, load_hf_llama_gpt, load_llamagen_gpt
from engine.model.gpt import GPTConfig
from engine.model.weights import WeightsError
from tests.llamagen_reference import c2i_state, t2i_state, to_hf_llama, write_hf_folder

CFG = GPTConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, num_classes=3, cls_token_num=1, grid_size=4)


def test_presets_follow_llamagen():
    shapes = {name: (s.gpt_config().n_layer, s.gpt_config().n_head, s.gpt_config().dim, s.gpt_config().ffn_dim,
                     s.grid_size) for name, s in MODELS.items()}
    assert shapes["c2i_B_256"] == (12, 12, 768, 2048, 16)
    assert shapes["c2i_L_384"] == (24, 16, 1024, 2816, 24)
    assert shapes["c2i_XL_384"] == (36, 20, 1280, 3584, 24)
    assert shapes["c2i_XXL_384"] == (48, 24, 1536, 4096, 24)
    assert shapes["c2i_3B_384"] == (24, 32, 3200, 8704, 24)
    assert MODELS["c2i_3B_384"].gpt_config().head_dim == 100
    assert MODELS["t2i_XL_stage1_256"].gpt_config().cls_token_num == 120


@pytest.mark.parametrize("wrapped", [True, False], ids=["model-dict", "bare-fsdp"])
def test_c2i_checkpoint_loads_strictly_and_ignores_rope_buffers(tmp_path, wrapped):
    state = c2i_state(64, 2, 64, 3)
    saved = dict(state, freqs_cis=torch.zeros(17, 8, 2))
    path = tmp_path / "c2i.pt"
    torch.save({"model": saved, "steps": 10} if wrapped else saved, path)
    model = load_llamagen_gpt(path, CFG)
    assert model.cls_embedding.embedding_table.weight.shape == (4, 64)  # 3 classes + LlamaGen's null row
    loaded = model.state_dict()
    for key, value in state.items():
        assert torch.equal(loaded[key], value), key


def test_training_checkpoint_with_options_and_optimizer_loads(tmp_path):
    """LlamaGen's training scripts save {"model", "optimizer", "steps", "args": argparse.Namespace}."""
    import argparse

    state = c2i_state(64, 2, 64, 3)
    options = argparse.Namespace(gpt_model="GPT-B", image_size=256, lr=1e-4, ema=False, cloud_save_path=None)
    torch.save({"model": state, "optimizer": {"state": {}, "param_groups": [{"lr": 1e-4}]}, "steps": 5,
                "args": options}, tmp_path / "c2i.pt")
    loaded = load_llamagen_gpt(tmp_path / "c2i.pt", CFG).state_dict()
    assert torch.equal(loaded["output.weight"], state["output.weight"])


def test_missing_and_unexpected_keys_are_listed(tmp_path):
    state = c2i_state(64, 2, 64, 3)
    state["layers.1.attention.wq.weight"] = state.pop("layers.1.attention.wqkv.weight")
    torch.save({"model": state}, tmp_path / "c2i.pt")
    with pytest.raises(WeightsError, match=r"missing keys \[layers\.1\.attention\.wqkv\.weight\].*"
                                           r"unexpected keys \[layers\.1\.attention\.wq\.weight\]"):
        load_llamagen_gpt(tmp_path / "c2i.pt", CFG)


def test_wrong_preset_reports_shapes(tmp_path):
    torch.save({"model": c2i_state(64, 2, 64, 3)}, tmp_path / "c2i.pt")
    shapes = r"wrong shapes.*cls_embedding\.embedding_table\.weight \(4, 64\) != \(6, 64\)"
    with pytest.raises(WeightsError, match=shapes):
        load_llamagen_gpt(tmp_path / "c2i.pt", GPTConfig(**{**CFG.__dict__, "num_classes": 5}))


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "c2i.pt"
    torch.save({"model": c2i_state(64, 2, 64, 3)}, path)
    path.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(WeightsError, match="not a readable PyTorch checkpoint"):
        load_llamagen_gpt(path, CFG)


class Payload:
    """Any pickled object that is not plain tensors and containers."""


def test_code_in_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "c2i.pt"
    torch.save({"model": c2i_state(64, 2, 64, 3), "extra": Payload()}, path)
    with pytest.raises(WeightsError, match="not a readable PyTorch checkpoint"):
        load_llamagen_gpt(path, CFG)


def test_file_without_a_state_dict_is_a_clear_error(tmp_path):
    torch.save({"optimizer": {"lr": torch.tensor(1.0)}}, tmp_path / "c2i.pt")
    with pytest.raises(WeightsError, match="holds no state dict"):
        load_llamagen_gpt(tmp_path / "c2i.pt", CFG)


def _hf_config(n_layer=2, **extra):
    return {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": n_layer,
            "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 256, "vocab_size": 64,
            "rms_norm_eps": 1e-5, "caption_dim": 24, "cls_token_num": 6, "block_size": 16, "input_type": "t2i",
            **extra}


@pytest.mark.parametrize("shards", [1, 3])
def test_hf_llama_and_llamagen_layouts_give_the_same_logits(tmp_path, shards):
    state = t2i_state(64, 2, 64, caption_dim=24, tokens=6)
    torch.save({"model": state}, tmp_path / "t2i.pt")
    cfg = GPTConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, num_classes=0, cls_token_num=6, grid_size=4)
    llamagen = load_llamagen_gpt(tmp_path / "t2i.pt", cfg, text=True, caption_dim=24)
    write_hf_folder(tmp_path / "hf", to_hf_llama(state, 2), _hf_config(), shards=shards)
    hf = load_hf_llama_gpt(tmp_path / "hf")
    assert hf.cfg == llamagen.cfg
    captions = torch.randn(2, 6, 24)
    tokens = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        a = [m.logits(m(torch.cat([m.embed_condition(captions), m.embed_tokens(tokens)], 1), torch.arange(22),
                        mask=torch.ones(22, 22, dtype=torch.bool).tril())) for m in (llamagen, hf)]
    torch.testing.assert_close(a[0], a[1], rtol=0, atol=0)


def test_hf_folder_with_a_stray_tensor_is_rejected(tmp_path):
    tensors = to_hf_llama(t2i_state(64, 2, 64, caption_dim=24, tokens=6), 2)
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
    write_hf_folder(tmp_path / "hf", tensors, _hf_config())
    with pytest.raises(WeightsError, match=r"unexpected keys \[model\.layers\.0\.self_attn\.q_proj\.bias\]"):
        load_hf_llama_gpt(tmp_path / "hf")


def test_hf_folder_with_grouped_query_attention_is_rejected(tmp_path):
    write_hf_folder(tmp_path / "hf", {}, _hf_config(num_key_value_heads=2))
    with pytest.raises(WeightsError, match="grouped-query"):
        load_hf_llama_gpt(tmp_path / "hf")


def _lantern_drafter(seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return {"embed_tokens.weight": r(64, 64), "fc.weight": r(64, 128), "fc.bias": r(64),
            "layers.0.self_attn.q_proj.weight": r(64, 64), "layers.0.self_attn.k_proj.weight": r(64, 64),
            "layers.0.self_attn.v_proj.weight": r(64, 64), "layers.0.self_attn.o_proj.weight": r(64, 64),
            "layers.0.mlp.gate_proj.weight": r(256, 64), "layers.0.mlp.up_proj.weight": r(256, 64),
            "layers.0.mlp.down_proj.weight": r(64, 256), "layers.0.post_attention_layernorm.weight": r(64)}


def test_lantern_drafter_layout_maps_onto_eagle_net(tmp_path):
    target = load_llamagen_gpt(_saved(tmp_path), CFG)
    state = _lantern_drafter()
    config = {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256, "num_hidden_layers": 1,
              "rms_norm_eps": 1e-6, "vocab_size": 64}
    write_hf_folder(tmp_path / "drafter", state, config)
    net = load_eagle_folder(tmp_path / "drafter", target)
    layer = net.layer
    assert torch.equal(layer.attention.wqkv.weight, torch.cat([state[f"layers.0.self_attn.{n}_proj.weight"]
                                                               for n in "qkv"]))
    assert torch.equal(layer.feed_forward.w1.weight, state["layers.0.mlp.gate_proj.weight"])
    assert torch.equal(layer.feed_forward.w3.weight, state["layers.0.mlp.up_proj.weight"])
    assert torch.equal(layer.feed_forward.w2.weight, state["layers.0.mlp.down_proj.weight"])
    assert torch.equal(layer.ffn_norm.weight, state["layers.0.post_attention_layernorm.weight"])
    assert layer.ffn_norm.eps == 1e-6


def test_drafter_of_another_target_is_rejected():
    state = _lantern_drafter()
    state["embed_tokens.weight"] = torch.zeros(100, 64)
    with pytest.raises(WeightsError, match="belongs to another target"):
        eagle_to_engine(state, vocab_size=64, dim=64)


def _saved(tmp_path):
    path = tmp_path / "c2i.pt"
    torch.save({"model": c2i_state(64, 2, 64, 3)}, path)
    return path


def test_offline_folder_download_fails_at_once_with_instructions(monkeypatch):
    import socket

    from engine.loading.hub import resolve_folder

    # "At once" means no network attempt (a download would wait on retries): record every connection.
    connections = []
    monkeypatch.setattr(socket.socket, "connect", lambda sock, address: connections.append(address))
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: connections.append(address))
    with pytest.raises(WeightsError, match=r"download the files of https://huggingface.co/lantern-tests/absent "
                                           r"matching config.json into a folder DIR/absent, then set "
                                           r"LANTERN_WEIGHTS_DIR=DIR or pass --weights-dir"):
        resolve_folder("lantern-tests/absent", ["config.json"], ["config.json"], None)
    assert connections == []


def test_half_copied_folder_names_the_missing_file(tmp_path):
    from engine.loading.hub import resolve_folder

    (tmp_path / "llamagen_drafter").mkdir()
    with pytest.raises(WeightsError, match="llamagen_drafter lacks config.json"):
        resolve_folder("jadohu/llamagen_drafter", ["*.json"], ["config.json"], tmp_path)
