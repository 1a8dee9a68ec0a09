"""FAKE vLLM 0.26.0 for tests: the server is tests/fakes/fake_vllm_server.py."""

__version__ = "0.26.0"
