"""Check a staged site folder (pip install --target) before it travels to the lent machine:
a requirement of a package in it that a package in the folder (or the machine's image) meets
at the wrong version is an error; a requirement met by neither is listed (the image has more
than this module knows, so it is a warning).

    python -m bench.gpu.check_site .gpu/vllm-site --root vllm

Why: the first vLLM 0.26.0 start on the device (2026-12-06) failed three times in a row.
Two of the three this finds in a second here: xgrammar 0.2.9 needs apache-tvm-ffi>=0.1.11
while vLLM pins 0.1.10 (an error either way round: xgrammar 0.2.7 fits both), and vLLM pins
flashinfer-python==0.6.14, which the list had left out as "imported lazily" (absent). The
third no metadata states: vLLM's OpenAI server imports ``NamespaceTool``, which openai 2.6.1
lacks although vLLM asks only for openai>=2.0.0; only ``device.sh check-vllm`` on the machine
finds such a one. Importing on the CPU host showed none of them: those imports happen on the
GPU serve path.

``--root`` limits the walk to what that package needs, transitively (the site may carry
more). Markers are evaluated for the machine (python 3.12, Linux x86-64); extras are not
followed. Exit 1 when there is an error."""

from __future__ import annotations

import argparse
import re
import sys
from importlib.metadata import Distribution, PathDistribution
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

# What the lent machine's image already has (../shared/reference/gpu-validation.md): the
# versions seen there (device.sh check-vllm printed torch and transformers); None where only
# the name is known, so only a package's presence is checked.
IMAGE: dict[str, str | None] = {
    "torch": "2.11.0",
    "transformers": "5.17.0",
    **dict.fromkeys(
        "tokenizers httpx numpy pandas pyarrow nvidia-ml-py psutil rich tqdm typer pytest".split()
    ),
}
# Families the image's torch brings (their versions follow torch's own pins).
IMAGE_PREFIXES = ("nvidia-", "triton", "torch")
MACHINE: dict[str, str] = {
    **{key: str(value) for key, value in default_environment().items()},
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def site_dists(site: Path) -> dict[str, Distribution]:
    return {
        _norm(d.metadata["Name"]): d
        for d in (PathDistribution(p) for p in site.glob("*.dist-info"))
        if d.metadata["Name"]
    }


def _requirements(dist: Distribution) -> list[Requirement]:
    out = []
    for text in dist.requires or ():
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({**MACHINE, "extra": ""}):
            out.append(req)
    return out


def problems(site: Path, root: str | None = None) -> tuple[list[str], list[str]]:
    """(errors: a requirement met at the wrong version, absent: met by neither the folder
    nor the image as this module knows it), one line each."""
    dists = site_dists(site)
    todo = [_norm(root)] if root else sorted(dists)
    seen: set[str] = set()
    found: list[str] = []
    absent: list[str] = []
    while todo:
        name = todo.pop()
        if name in seen or name not in dists:
            continue
        seen.add(name)
        for req in _requirements(dists[name]):
            want = _norm(req.name)
            have: str | None
            if want in dists:
                have = dists[want].version
                todo.append(want)
            elif want in IMAGE:
                if (have := IMAGE[want]) is None:
                    continue  # there, at a version not recorded here
            elif want.startswith(IMAGE_PREFIXES):
                continue
            else:
                absent.append(f"{name} needs {req}")
                continue
            if (
                have
                and req.specifier
                and not req.specifier.contains(Version(have), prereleases=True)
            ):
                found.append(f"{name} needs {req}: {want} {have} is there")
    return found, absent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path)
    parser.add_argument("--root", help="only what this package needs, transitively")
    args = parser.parse_args(argv)
    found, absent = problems(args.site, args.root)
    for line in absent:
        print("absent (the image may have it):", line)
    for line in found:
        print("ERROR:", line)
    print(f"{len(found)} error(s), {len(absent)} absent, in {args.site}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
