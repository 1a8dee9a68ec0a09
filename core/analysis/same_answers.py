"""Same answers? Every arm's outputs against the baseline's (the answers step's
``answers.json``, core/run/answers_step.py), so a configuration that changes outputs silently
while every request returns HTTP 200 is named before its speed is read.

Per prompt: greedy tokens matched up to the first divergence, and there whether the arm's
token is inside the baseline's top-k; per run: the teacher-forced |Δ logprob| (both runs
scored the same reference tokens), NaN/inf, empty and degenerate output, the known-answer
count. Three outcomes per arm:

``same``     every greedy token equal (or as equal as the baseline's own A/A) and the
             teacher-forced |Δ| inside the thresholds;
``differs``  numerics changed (fp8 KV cache, quantization): not wrong, and by how much;
``broken``   NaN/inf logprobs, empty or degenerate answers, tokens far outside the baseline's
             top-k, or the known-answer count halved.

The thresholds come from the baseline's own A/A (its later trials against its first) where
there is one, else the defaults measured on an H200 (issue 36; docs/METRICS.md "Same
answers"). Dummy weights (``--load-format dummy``) give near-uniform logits: the check says it
means nothing there rather than an outcome.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from core.analysis.stats import RunOfArm
from core.numbers import number_text, token_span_text

__all__ = [
    "BROKEN_FORCED_MEDIAN",
    "BROKEN_OUTSIDE_SHARE",
    "CONFIDENT_SPREAD_NATS",
    "DEFAULT_MAX",
    "DEFAULT_MEDIAN",
    "AnswersVerdict",
    "PairDiff",
    "PromptDiff",
    "Thresholds",
    "answers_lines",
    "answers_of_runs",
    "compare_pair",
    "correct_words",
    "far_outside",
    "judge_arm",
    "measured_pairs",
    "speed_caveat",
    "thresholds_from",
]

Outcome = Literal["same", "differs", "broken", "unchecked"]
ANSWERS_FILE = "answers.json"  # core.run.answers_step.ANSWERS_FILE (analysis never imports run)

# Defaults where no A/A is at hand: issue 36's H200 figures (SGLang 0.5.17, SmolLM2 shape,
# normal-init random weights): A/A median 0.0001, max 0.016; fp8 KV cache median 0.016.
# The median threshold sits 20x above that A/A and 8x below fp8; the max 6x above the A/A.
DEFAULT_MEDIAN = 0.002
DEFAULT_MAX = 0.1
# From an A/A: this many times its worst median / max, never below the floors (an A/A of a
# deterministic server reads exactly 0).
AA_MEDIAN_FACTOR, AA_MAX_FACTOR = 5.0, 5.0
FLOOR_MEDIAN, FLOOR_MAX = 0.0005, 0.01
# Broken: the arm's greedy token outside the baseline's top-k at the first divergence in
# more than this share of prompts, or the baseline's tokens this much less likely
# (teacher-forced median |Δ| in nats: e-fold) in a typical position.
BROKEN_OUTSIDE_SHARE = 0.25
# "Far" outside: the baseline's own top-k spans at least this many nats at the divergence
# (e^2: its top token over 7x as likely as its k-th), so the arm's token is that much less
# likely than the baseline's choice; below it, the top-k is a near tie (see far_outside).
CONFIDENT_SPREAD_NATS = 2.0
BROKEN_FORCED_MEDIAN = 1.0
_MIN_REPEAT_TOKENS = 4  # an answer of one token repeated at least this often is degenerate


def _num(value: Any) -> float:
    """A stored logprob: a number, or the strings run folders write for NaN and infinities."""
    if isinstance(value, bool):
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return math.nan


@dataclass(frozen=True)
class PromptDiff:
    """One prompt, arm against baseline."""

    index: int
    base_tokens: tuple[str, ...]
    arm_tokens: tuple[str, ...]
    diverged_at: int | None  # the first differing token; None: identical
    in_top_k: bool | None  # the arm's token there among the baseline's top-k (None: unknown)
    # the baseline's top-1 minus its k-th logprob there (nats): how sure the baseline was
    base_top_spread: float | None = None
    forced_abs: tuple[float, ...] = ()  # teacher-forced |Δ logprob| per token
    problems: tuple[str, ...] = ()  # "NaN logprob", "empty", "error: ..."
    base_correct: bool | None = None
    arm_correct: bool | None = None


@dataclass(frozen=True)
class PairDiff:
    """One arm run against one baseline run."""

    base_run: str
    arm_run: str
    prompts: tuple[PromptDiff, ...]
    forced_median: float | None
    forced_max: float | None
    forced_kind: str  # "teacher-forced", "decoded (common prefix)" or ""
    correct: int | None
    asked: int | None
    degenerate: str | None
    # why the arm's teacher forcing gave nothing (its first error), so a verdict read on
    # decoded tokens says it was not by choice
    forced_failed: str | None = None

    @property
    def identical(self) -> int:
        return sum(1 for p in self.prompts if p.diverged_at is None and not p.problems)


@dataclass(frozen=True)
class Thresholds:
    median: float
    max: float
    source: str  # "A/A of N baseline runs" or "defaults (issue 36, H200)"
    aa_median: float | None = None
    aa_max: float | None = None
    aa_identical_share: float | None = None


@dataclass(frozen=True)
class AnswersVerdict:
    arm: str
    baseline: str
    outcome: Outcome
    sentence: str
    reasons: tuple[str, ...] = ()
    pairs: tuple[PairDiff, ...] = ()
    thresholds: Thresholds | None = None
    correct: int | None = None
    asked: int | None = None
    base_correct: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["pairs"] = [
            {k: v for k, v in asdict(p).items() if k != "prompts"} | {"identical": p.identical}
            for p in self.pairs
        ]
        return out


def _tokens(row: Mapping[str, Any]) -> list[Any]:
    """A prompt's greedy tokens as compared: ids where the server gave them all, else text."""
    ids = row.get("token_ids") or []
    if ids and all(isinstance(i, int) for i in ids):
        return list(ids)
    return list(row.get("tokens") or [])


def _first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _in_top(base_row: Mapping[str, Any], at: int, token: Any) -> bool | None:
    tops = base_row.get("top")
    if not isinstance(tops, list) or at >= len(tops) or not isinstance(tops[at], list):
        return None
    keys = [t[0] for t in tops[at] if isinstance(t, list) and t]
    if not keys:
        return None
    return token in keys or str(token) in [str(k) for k in keys]


def _top_spread(base_row: Mapping[str, Any], at: int) -> float | None:
    """The baseline's top-1 minus its k-th logprob at ``at`` (nats); None when unknown."""
    tops = base_row.get("top")
    if not isinstance(tops, list) or at >= len(tops) or not isinstance(tops[at], list):
        return None
    values = [_num(t[1]) for t in tops[at] if isinstance(t, list) and len(t) > 1]
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) - min(finite) if len(finite) > 1 else None


def far_outside(d: PromptDiff) -> bool:
    """The arm's token outside the baseline's top-k where the baseline was sure: its top-k
    spans at least CONFIDENT_SPREAD_NATS, so the arm's token is at least that much less
    likely than the baseline's. In a flat distribution (random weights: top-5 within 0.1-1.3
    nats of each other over 128K tokens, measured on the device) a flip outside the top-k is
    a near tie that changed numerics, not a broken model."""
    if d.in_top_k is not False:
        return False
    return d.base_top_spread is None or d.base_top_spread >= CONFIDENT_SPREAD_NATS


def _problems(row: Mapping[str, Any], forced: Mapping[str, Any] | None) -> tuple[str, ...]:
    found = []
    if row.get("error"):
        found.append(f"error: {row['error']}")
    elif not _tokens(row) or not str(row.get("text") or "").strip():
        found.append("empty answer")
    values = [_num(v) for v in row.get("logprobs") or []]
    values += [_num(v) for v in (forced or {}).get("logprobs") or []]
    if any(math.isnan(v) for v in values):
        found.append("NaN logprob")
    elif any(math.isinf(v) for v in values):
        found.append("infinite logprob")
    return tuple(found)


def _repeated(row: Mapping[str, Any]) -> bool:
    toks = _tokens(row)
    return len(toks) >= _MIN_REPEAT_TOKENS and len(set(toks)) == 1


def _degenerate(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a run's answers are degenerate as a whole: all the same, or mostly one token
    repeated; None when they are not."""
    texts = [str(r.get("text") or "") for r in rows if not r.get("error")]
    if len(texts) >= 4 and len(set(texts)) == 1:
        return f"every prompt got the same answer ({texts[0][:40]!r})"
    repeated = sum(1 for r in rows if _repeated(r))
    if rows and repeated * 2 > len(rows):
        return f"{repeated}/{len(rows)} answers are one token repeated"
    return None


def _forced_abs(
    arm: Mapping[str, Any], others: Sequence[tuple[Mapping[str, Any] | None, str | None]]
) -> dict[int, tuple[float, ...]]:
    """Per prompt, |Δ logprob| of one reference's tokens as the arm and another run scored
    them: the reference itself (it scored its own tokens), or a run that scored the same
    reference; empty when no run at hand scored what the arm scored."""
    ref_of_arm = (arm.get("reference") or {}).get("run_id")
    if ref_of_arm is None or not arm.get("forced"):
        return {}
    for data, run_id in others:
        if data is None or not data.get("forced"):
            continue
        ref = data.get("reference") or {}
        if (run_id == ref_of_arm and ref.get("self")) or ref.get("run_id") == ref_of_arm:
            return _forced_pairs(arm["forced"], data["forced"])
    return {}


def _forced_pairs(
    arm_rows: Sequence[Mapping[str, Any]], other_rows: Sequence[Mapping[str, Any]]
) -> dict[int, tuple[float, ...]]:
    own = {r.get("index"): r for r in other_rows if not r.get("error")}
    out = {}
    for row in arm_rows:
        base = own.get(row.get("index"))
        if base is None or row.get("error"):
            continue
        a = [_num(v) for v in row.get("logprobs") or []]
        b = [_num(v) for v in base.get("logprobs") or []]
        if len(a) == len(b) and a:
            out[int(row["index"])] = tuple(abs(x - y) for x, y in zip(a, b, strict=True))
    return out


def _decoded_abs(
    base_row: Mapping[str, Any], arm_row: Mapping[str, Any], upto: int | None
) -> tuple[float, ...]:
    a = [_num(v) for v in base_row.get("logprobs") or []]
    b = [_num(v) for v in arm_row.get("logprobs") or []]
    n = min(len(a), len(b)) if upto is None else min(upto, len(a), len(b))
    return tuple(abs(x - y) for x, y in zip(a[:n], b[:n], strict=True))


def _spread(values: Sequence[float]) -> tuple[float | None, float | None]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None, None
    return statistics.median(finite), max(finite)


def _prompt_diff(
    base_row: Mapping[str, Any],
    arm_row: Mapping[str, Any],
    forced: Mapping[str, Any] | None,
    forced_abs: tuple[float, ...],
) -> PromptDiff:
    base_toks, arm_toks = _tokens(base_row), _tokens(arm_row)
    at = _first_divergence(base_toks, arm_toks)
    in_top = _in_top(base_row, at, arm_toks[at]) if at is not None and at < len(arm_toks) else None
    spread = _top_spread(base_row, at) if at is not None else None
    return PromptDiff(
        index=int(arm_row.get("index", 0)),
        base_tokens=tuple(map(str, base_row.get("tokens") or [])),
        arm_tokens=tuple(map(str, arm_row.get("tokens") or [])),
        diverged_at=at,
        in_top_k=in_top,
        base_top_spread=spread,
        forced_abs=forced_abs,
        problems=_problems(arm_row, forced),
        base_correct=base_row.get("correct"),
        arm_correct=arm_row.get("correct"),
    )


def compare_pair(
    base: Mapping[str, Any],
    base_id: str,
    arm: Mapping[str, Any],
    arm_id: str,
    reference: Mapping[str, Any] | None = None,
    reference_id: str | None = None,
) -> PairDiff:
    """One arm run's answers against one baseline run's, prompt by prompt; the
    teacher-forced |Δ| where the arm and the ``reference`` run (the experiment's first
    baseline run) or ``base`` scored the same tokens, else the decoded logprobs up to the
    first divergence."""
    forced = _forced_abs(arm, [(reference, reference_id), (base, base_id)])
    arm_forced = {r.get("index"): r for r in arm.get("forced") or []}
    base_rows = {r.get("index"): r for r in base.get("prompts") or []}
    prompts: list[PromptDiff] = []
    decoded: list[float] = []
    for row in arm.get("prompts") or []:
        base_row = base_rows.get(row.get("index"))
        if base_row is None:
            continue
        diff = _prompt_diff(
            base_row, row, arm_forced.get(row.get("index")), forced.get(row["index"], ())
        )
        prompts.append(diff)
        decoded.extend(_decoded_abs(base_row, row, diff.diverged_at))
    all_forced = [v for vals in forced.values() for v in vals]
    kind = "teacher-forced" if all_forced else ("decoded (common prefix)" if decoded else "")
    median, worst = _spread(all_forced if all_forced else decoded)
    return PairDiff(
        base_run=base_id,
        arm_run=arm_id,
        prompts=tuple(prompts),
        forced_median=median,
        forced_max=worst,
        forced_kind=kind,
        correct=arm.get("correct"),
        asked=arm.get("asked"),
        degenerate=_degenerate(arm.get("prompts") or []),
        forced_failed=None if all_forced else _forced_error(arm),
    )


def _forced_error(arm: Mapping[str, Any]) -> str | None:
    errors = [str(r["error"]) for r in arm.get("forced") or [] if r.get("error")]
    return errors[0] if errors else None


def thresholds_from(aa_pairs: Sequence[PairDiff]) -> Thresholds:
    """The same-answers thresholds: from the baseline's own A/A pairs where there are any
    with a |Δ| measure, else the defaults."""
    measured = [p for p in measured_pairs(aa_pairs) if p.forced_max is not None]
    if not measured:
        return Thresholds(DEFAULT_MEDIAN, DEFAULT_MAX, "defaults (issue 36, H200)")
    aa_median = max(p.forced_median or 0.0 for p in measured)
    aa_max = max(p.forced_max or 0.0 for p in measured)
    share = min(p.identical / len(p.prompts) for p in measured if p.prompts) if measured else None
    return Thresholds(
        median=max(AA_MEDIAN_FACTOR * aa_median, FLOOR_MEDIAN),
        max=max(AA_MAX_FACTOR * aa_max, FLOOR_MAX),
        source=f"the baseline's A/A ({len(measured)} pair{'s' * (len(measured) != 1)})",
        aa_median=aa_median,
        aa_max=aa_max,
        aa_identical_share=share,
    )


def _run_problems(data: Mapping[str, Any]) -> tuple[int, int]:
    """(prompts with NaN/inf, prompts without an answer) of one run's answers."""
    forced = {r.get("index"): r for r in data.get("forced") or []}
    bad = [_problems(r, forced.get(r.get("index"))) for r in data.get("prompts") or []]
    nonfinite = sum(1 for p in bad if any("logprob" in x for x in p))
    missing = sum(1 for p in bad if any(x.startswith(("error", "empty")) for x in p))
    return nonfinite, missing


def _broken_reasons(
    pairs: Sequence[PairDiff], base: Mapping[str, Any], base_degenerate: str | None
) -> list[str]:
    base_nonfinite, base_missing = _run_problems(base)
    reasons: list[str] = []
    for p in pairs:
        n = len(p.prompts)
        nonfinite = sum(1 for d in p.prompts if any("logprob" in x for x in d.problems))
        missing = sum(
            1 for d in p.prompts if any(x.startswith(("error", "empty")) for x in d.problems)
        )
        if nonfinite > base_nonfinite:
            reasons.append(f"NaN or infinite logprobs in {nonfinite}/{n} prompts")
        if missing > base_missing:
            reasons.append(f"no answer in {missing}/{n} prompts")
        if p.degenerate and not base_degenerate:
            reasons.append(f"degenerate: {p.degenerate}")
        outside = sum(1 for d in p.prompts if far_outside(d))
        if n and outside / n > BROKEN_OUTSIDE_SHARE:
            reasons.append(
                f"{outside}/{n} prompts diverge to a token far outside the baseline's top-k"
            )
        if p.forced_median is not None and p.forced_median > BROKEN_FORCED_MEDIAN:
            reasons.append(
                f"{p.forced_kind} |Δ logprob| median {number_text(p.forced_median)} nats"
            )
        base_ok = base.get("correct")
        if isinstance(base_ok, int) and base_ok >= 4 and (p.correct or 0) * 2 <= base_ok:
            reasons.append(f"{p.correct}/{p.asked} correct against the baseline's {base_ok}")
    return list(dict.fromkeys(reasons))


def measured_pairs(pairs: Sequence[PairDiff]) -> list[PairDiff]:
    """The pairs whose |Δ| is read: the teacher-forced ones where there are any (an arm that
    ran before the baseline in the first trial has only its decoded logprobs)."""
    forced = [p for p in pairs if p.forced_kind == "teacher-forced"]
    return forced or [p for p in pairs if p.forced_median is not None]


def _is_same(pairs: Sequence[PairDiff], thr: Thresholds) -> bool:
    for p in pairs:
        n = len(p.prompts)
        share = p.identical / n if n else 0.0
        if share < (thr.aa_identical_share if thr.aa_identical_share is not None else 1.0):
            return False
    for p in measured_pairs(pairs):
        if p.forced_median is not None and p.forced_median > thr.median:
            return False
        if p.forced_max is not None and p.forced_max > thr.max:
            return False
    return bool(pairs)


def _measure_words(pairs: Sequence[PairDiff], thr: Thresholds) -> str:
    measured = measured_pairs(pairs)
    if not measured:
        return "no logprobs to compare (greedy text only)"
    median = max(p.forced_median or 0.0 for p in measured)
    worst = max(p.forced_max or 0.0 for p in measured)
    kind = measured[0].forced_kind
    text = f"{kind} |Δ logprob| median {number_text(median)}, max {number_text(worst)}"
    if thr.aa_median:
        text += (
            f" ({number_text(median / thr.aa_median)}× the A/A median {number_text(thr.aa_median)})"
        )
    elif thr.aa_median == 0.0:
        text += " (the A/A: exactly 0)"
    return text


def _divergence_words(pairs: Sequence[PairDiff]) -> str:
    worst = min(pairs, key=lambda p: p.identical)
    n = len(worst.prompts)
    at = [d.diverged_at for d in worst.prompts if d.diverged_at is not None]
    text = f"{worst.identical}/{n} prompts identical"
    if at:
        span = token_span_text(min(at), max(at))
        inside = sum(1 for d in worst.prompts if d.in_top_k)
        known = sum(1 for d in worst.prompts if d.in_top_k is not None)
        text += f", the others diverge at {span}"
        near = sum(1 for d in worst.prompts if d.in_top_k is False and not far_outside(d))
        if known:
            text += f" ({inside}/{known} inside the baseline's top-k"
            if near:
                text += (
                    f"; {near} outside it where its top-k spanned under "
                    f"{number_text(CONFIDENT_SPREAD_NATS)} nats, a near tie"
                )
            text += ")"
    return text


def correct_words(correct: int | None, asked: int | None, base_correct: int | None) -> str:
    """ "29/32 correct, same as baseline" (or the baseline's count); "" without questions."""
    if correct is None or not asked:
        return ""
    if base_correct is None:
        return f"{correct}/{asked} correct"
    if correct == base_correct:
        return f"{correct}/{asked} correct, same as baseline"
    return f"{correct}/{asked} correct (baseline {base_correct}/{asked})"


def judge_arm(
    arm: str,
    baseline: str,
    pairs: Sequence[PairDiff],
    thr: Thresholds,
    base: Mapping[str, Any],
) -> AnswersVerdict:
    """One arm's outcome over its runs' pairs, and the sentence that says it."""
    correct = pairs[-1].correct if pairs else None
    asked = pairs[-1].asked if pairs else None
    base_correct = base.get("correct")
    count = correct_words(correct, asked, base_correct)
    verdict = AnswersVerdict(
        arm,
        baseline,
        "same",
        "",
        pairs=tuple(pairs),
        thresholds=thr,
        correct=correct,
        asked=asked,
        base_correct=base_correct,
    )
    reasons = _broken_reasons(pairs, base, _degenerate(base.get("prompts") or []))
    if reasons:
        sentence = f"{arm}: answers broken against {baseline}: " + "; ".join(reasons)
        return replace(verdict, outcome="broken", sentence=sentence, reasons=tuple(reasons))
    tail = "; ".join(x for x in (_measure_words(pairs, thr), count) if x)
    if _is_same(pairs, thr):
        sentence = f"{arm}: same answers as {baseline}: {_divergence_words(pairs)}; {tail}"
        return replace(verdict, sentence=sentence)
    sentence = (
        f"{arm}: answers differ from {baseline} (numerics changed, not broken): "
        f"{_divergence_words(pairs)}; {tail}"
    )
    return replace(verdict, outcome="differs", sentence=sentence)


@dataclass(frozen=True)
class _Answered:
    arm: str
    trial: int
    run_id: str
    data: dict[str, Any]


def _answered(runs: Sequence[RunOfArm]) -> list[_Answered]:
    out = []
    for r in runs:
        folder = r.view.folder
        data = folder.read(ANSWERS_FILE) if folder is not None else None
        if isinstance(data, dict) and data.get("prompts"):
            out.append(_Answered(r.arm, r.trial, r.view.run_id, data))
    return sorted(out, key=lambda a: (a.trial, a.run_id))


def _unchecked(arm: str, baseline: str, why: str) -> AnswersVerdict:
    return AnswersVerdict(arm, baseline, "unchecked", f"{arm}: answers not checked: {why}")


DUMMY_WORDS = (
    "dummy weights (--load-format dummy) give near-uniform logits, so matching tokens "
    "and logprobs would mean nothing"
)


def answers_of_runs(runs: Sequence[RunOfArm], baseline: str) -> dict[str, AnswersVerdict]:
    """Each arm's answers verdict against ``baseline`` (its own entry: the A/A of its later
    runs against its first, judged by the default thresholds); {} where no run answered."""
    answered = _answered(runs)
    base_runs = [a for a in answered if a.arm == baseline]
    arms = list(dict.fromkeys(a.arm for a in answered))
    if not base_runs:
        return {a: _unchecked(a, baseline, "the baseline has no answers") for a in arms}
    ref = next((a for a in base_runs if (a.data.get("reference") or {}).get("self")), base_runs[0])
    if any(a.data.get("weights") == "dummy" for a in answered):
        return {a: _unchecked(a, baseline, DUMMY_WORDS) for a in arms}
    by_trial = {a.trial: a for a in base_runs}

    def pair(a: _Answered) -> PairDiff:
        base = by_trial.get(a.trial, ref) if a.arm != baseline else ref
        return compare_pair(base.data, base.run_id, a.data, a.run_id, ref.data, ref.run_id)

    aa = [pair(a) for a in base_runs if a is not ref and a.data.get("set") == ref.data.get("set")]
    thr = thresholds_from(aa)
    out: dict[str, AnswersVerdict] = {}
    if aa:
        defaults = thresholds_from([])
        out[baseline] = judge_arm(f"{baseline} (A/A)", baseline, aa, defaults, ref.data)
    for arm in arms:
        if arm == baseline:
            continue
        mine = [a for a in answered if a.arm == arm and a.data.get("set") == ref.data.get("set")]
        if not mine:
            out[arm] = _unchecked(arm, baseline, "its prompt set differs from the baseline's")
            continue
        out[arm] = judge_arm(arm, baseline, [pair(a) for a in mine], thr, ref.data)
    return out


def speed_caveat(verdict: AnswersVerdict | None, faster: bool) -> str | None:
    """What a broken arm's speed may say: "faster, but its answers are broken"; None for an
    arm whose answers are not broken (the speed verdict stands)."""
    if verdict is None or verdict.outcome != "broken":
        return None
    why = verdict.reasons[0] if verdict.reasons else "see the answers check"
    arm = verdict.arm
    if faster:
        return f"{arm}: faster, but its answers are broken ({why}): its speed is no win."
    return f"{arm}: its answers are broken ({why})."


def answers_lines(verdicts: Mapping[str, AnswersVerdict], faster: Collection[str]) -> list[str]:
    """The answers verdict beside the speed verdict: one "Answers:" paragraph (each arm's
    sentence), then for a broken arm what its speed may say (``speed_caveat``); [] when no
    run answered. ``faster``: the arms the card calls better in throughput."""
    if not verdicts:
        return []
    found = list(verdicts.values())
    if all(v.outcome == "unchecked" for v in found):
        return [found[0].sentence.split(": ", 1)[-1].capitalize() + "."]
    said = [v.sentence.rstrip(".") + "." for v in found if v.outcome != "unchecked"]
    caveats = [speed_caveat(v, v.arm in faster) for v in found]
    return ["Answers: " + " ".join(said), *[c for c in caveats if c], *_forcing_failed(found)]


def _forcing_failed(verdicts: Sequence[AnswersVerdict]) -> list[str]:
    """Once, where teacher forcing gave nothing and |Δ| was read on decoded tokens: why."""
    pairs = [p for v in verdicts for p in v.pairs]
    if any(p.forced_kind == "teacher-forced" for p in pairs):
        return []
    failed = next((p.forced_failed for p in pairs if p.forced_failed), None)
    if failed is None:
        return []
    return [
        f"Teacher forcing: no scores on these runs (the engine's answer: {failed}); |Δ logprob| "
        "is read on the decoded tokens up to each prompt's first divergence."
    ]
