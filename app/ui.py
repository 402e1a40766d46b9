"""The page: pick a class and a seed, generate an image with the embedded model."""
from __future__ import annotations

import functools

import gradio as gr

from engine.config import InvalidInput, SamplingConfig
from engine.dataset import CLASS_NAMES


@functools.lru_cache(maxsize=1)
def _model():
    from engine.models import load_embedded

    return load_embedded()


def generate_image(class_name: str, seed: int, temperature: float, cfg_scale: float,
                   progress=gr.Progress()):
    from engine.generate import stream, tokens_to_image

    try:
        sampling = SamplingConfig(temperature=float(temperature), cfg_scale=float(cfg_scale),
                                  seed=int(seed))
        model = _model()
        total = model.target.cfg.num_image_tokens
        last = None
        for trace in stream(model, "vanilla", sampling, class_name):
            last = trace
            progress(len(trace.tokens_so_far) / total, desc="decoding tokens")
    except InvalidInput as err:
        raise gr.Error(str(err)) from err
    return tokens_to_image(model, last.tokens_so_far).resize((256, 256), 0)


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="LANTERN Explorer") as demo:
        gr.Markdown("# LANTERN Explorer\nGenerate an image with the embedded visual AR model.")
        with gr.Row():
            with gr.Column():
                class_name = gr.Dropdown(list(CLASS_NAMES), value=CLASS_NAMES[3], label="Class")
                seed = gr.Number(value=0, precision=0, label="Seed")
                temperature = gr.Slider(0.0, 2.0, value=1.0, step=0.05, label="Temperature (0 = greedy)")
                cfg_scale = gr.Slider(1.0, 8.0, value=4.0, step=0.25, label="CFG scale")
                run = gr.Button("Generate", variant="primary")
            image = gr.Image(label="Image", type="pil")
        run.click(generate_image, [class_name, seed, temperature, cfg_scale], image,
                  api_name="generate")
    return demo
