"""Stand-ins for tests and the demo: a scripted OpenAI-compatible model server (scripted_model.py), run as
`python -m eval_pipeline.testing.scripted_model`."""

__all__: list[str] = []
