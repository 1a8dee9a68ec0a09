"""FAKE SGLang 0.5.23 for the ServeLab tests; see ``sglang._fake_server`` for what it does."""

__version__ = "0.5.23"
