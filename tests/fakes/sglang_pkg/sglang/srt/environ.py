"""FAKE: the environment variables real SGLang's srt/environ.py declares that ServeLab may set.
ServeLab reads this file as text (core/engines/sglang.py detect) to know whether a release
reads SGLANG_SIMULATE_UNIFORM_EXPERTS; the fake 0.5.14 (sglang_0514_pkg) has no such file."""

SGLANG_SIMULATE_UNIFORM_EXPERTS = False
