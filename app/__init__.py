"""LANTERN Explorer: the Gradio app over the engine's trace API. Nothing loads at import time."""
