"""The engine of LANTERN Explorer: image autoregressive models, decoded plainly or speculatively.

What a program needs, importable from `engine` itself:

    import engine

    model = engine.load_model("embedded")  # or an official LlamaGen model by name
    sampling = engine.SamplingConfig(temperature=1.0, seed=0)
    options = engine.MethodOptions(delta=0.2, k=256)
    image = engine.generate(model, "lantern_static", sampling, "heart", options)
    print(image.mean_accepted_length, engine.tokens_to_image(model, image.tokens).size)

`stream` yields a step's trace after every target pass; `METHODS` lists every decoding method with
the options it reads; `speedup`, `pass_split` and `undrafted_speedup` are the benchmark's measures of
speed, `inside_vanilla` its test of quality (against a frontier series' `reference_of`); `rejudge`
walks a stored step again under another rule.
"""
from engine.core.config import InvalidInput, SamplingConfig, TreeConfig
from engine.core.trace import PassInputs, StepTrace, Verdict, mean_accepted_length
from engine.evaluation.quality import QUALITY_MEASURES, fastest_inside_vanilla, inside_vanilla, reference_of
from engine.evaluation.speed import BASELINE, median_speedup, pass_split, speedup, undrafted_speedup
from engine.generation import Generation, generate, stream, tokens_to_image
from engine.loading.image_model import ImageModel
from engine.loading.load import EMBEDDED, LoadedModel, load_model
from engine.loop.rejudge import rejudge
from engine.methods import METHODS, OPTION_RANGES, Method, MethodOptions, bound_rule, for_mode, get_method

__all__ = [
    "BASELINE", "EMBEDDED", "METHODS", "OPTION_RANGES", "QUALITY_MEASURES",
    "Generation", "ImageModel", "InvalidInput", "LoadedModel", "Method", "MethodOptions", "PassInputs",
    "SamplingConfig", "StepTrace", "TreeConfig", "Verdict",
    "bound_rule", "fastest_inside_vanilla", "for_mode", "generate", "get_method", "inside_vanilla", "load_model",
    "mean_accepted_length", "median_speedup", "pass_split", "reference_of", "rejudge", "speedup", "stream",
    "tokens_to_image", "undrafted_speedup",
]
