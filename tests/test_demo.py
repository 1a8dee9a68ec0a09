"""The shipped H200 demo installs into an empty data folder and reads as a real result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.analysis.diff import confounders
from core.analysis.runs import load_run
from core.experiments.design import list_experiments
from core.interop.export import html_report, select
from core.portal.demo import install_demo
from core.run_folder import RunFolder
from core.settings import DEMO_DIR, Settings
from core.store import Catalog
from core.views.landing import landing_answer
from core.views.report import format_experiment

REPO = Path(__file__).resolve().parent.parent


SGLANG_EXP = "exp-20261201-041412-6b50"  # the 2x2 grid, 3 trials
SEED_PAIR = ("20261201-000311-8d8413", "20261201-000511-eb5799")  # before, after
KV_AUTO_EXP = "exp-20261202-001049-5252"  # the same A/B, trials: auto
KV_EXP = "exp-20261201-204553-b919"  # mem 0.85 vs 0.92 under KV pressure (BENCHMARKS 5.3)
VERSION_EXP = "exp-20261202-033636-ec50"  # SGLang 0.5.14 vs 0.5.17, graphs on (5.5)
# graphs on / off / fp8 KV with the answers step: 8B shape, normal-init weights (issue 36)
ANSWERS_EXP = "exp-20261205-123358-fc13"
# the seed team's change as they made it, Qwen3-30B-A3B shape, dummy weights (issue 37)
TEAM_EXP = "exp-20261206-025848-b394"
# the version A/B again on the Llama-3.1-8B shape, 3 trials, an H100 (issue 37)
SHAPE_VERSION_EXP = "exp-20261206-204321-81e2"
# vLLM 0.26.0's first measured runs, one trial each, an H100 (issue 38)
VLLM_GRAPHS_EXP = "exp-20261206-205528-0196"
ENGINE_EXPS = ("exp-20261206-210005-a43f", "exp-20261206-210345-34a9")
# 2026-12-07, an H100: the engine A/B with 3 trials, and vLLM's graphs A/B whose third trial
# never ran (the lent machine went back: 2 runs ship interrupted, bench/gpu/import_results.py)
ENGINES_3_EXP = "exp-20261207-085325-8d78"
VLLM_GRAPHS_2_EXP = "exp-20261207-090413-70aa"
# the same vLLM graphs A/B again, all 3 trials, on a fresh H100 (its first run compiled cold)
VLLM_GRAPHS_3_EXP = "exp-20261207-134230-a99f"
# the team's two knobs as a 2x2 on the MoE shape, c=64 + a kv_fill point, an H100 (issue 37)
MOE_2X2_EXP = "exp-20261207-152747-3c27"
MOE_POOLS = {0.85: 107_080, 0.92: 167_155}  # the H100's KV tokens per memory fraction
KV_POOLS = {0.85: 478_752, 0.92: 518_662}  # KV tokens SGLang allocated per arm


def test_demo_installs_once_and_is_indexed(settings: Settings) -> None:
    copied = install_demo(settings)
    # 6 transformers-serve runs + the SGLang 2x2 x 3 trials + the seed pair + the KV A/B
    # + the same KV A/B with trials: auto (4 trials) + the version A/B (2 releases x 3 trials)
    # + the answers experiment (graphs on / off / fp8 KV x 3 trials) + the team change on
    # the MoE shape (2 arms x 2 trials) + the version A/B on the 8B shape (2 x 3) + vLLM's
    # graphs A/B and two engine A/Bs (2 runs each) + the engine A/B (2 x 3) and vLLM's
    # graphs A/B (2 x 3 planned, 4 ran) of 2026-12-07, that graphs A/B again (2 x 3), and
    # the MoE shape's 2x2 (4 arms x 3 trials)
    assert len([c for c in copied if not c.startswith("exp-")]) == (
        6 + 12 + 2 + 6 + 8 + 6 + 9 + 4 + 6 + 2 + 2 + 2 + 6 + 6 + 6 + 12
    )
    assert install_demo(settings) == []  # once only, never overwrites
    cat = Catalog(settings.catalog_path, settings.runs_dir)
    cat.sync()
    rows = cat.list_runs()
    states = sorted(r["state"] for r in rows)
    assert (states.count("succeeded"), states.count("failed"), states.count("cancelled")) == (
        38 + 9 + 4 + 6 + 6 + 10 + 6 + 12,  # + the answers experiment, the team change, the H100's
        1,
        1,
    )
    assert states.count("interrupted") == 2  # vLLM graphs' third trial, never run
    # None: left to the engine's default (the engine A/Bs set no cuda_graphs)
    assert {r["cuda_graphs"] for r in rows} == {True, False, None}
    assert {r["engine"] for r in rows} == {"transformers", "sglang", "vllm"}
    texts = {r.experiment_id: format_experiment(settings, r) for r in list_experiments(settings)}
    assert len(texts) == 15
    # the real H200 results: graphs on is far faster at every concurrency
    named = (SGLANG_EXP, KV_EXP, KV_AUTO_EXP, VERSION_EXP, ANSWERS_EXP, TEAM_EXP)
    named += (SHAPE_VERSION_EXP, VLLM_GRAPHS_EXP, *ENGINE_EXPS, ENGINES_3_EXP, VLLM_GRAPHS_2_EXP)
    named += (VLLM_GRAPHS_3_EXP, MOE_2X2_EXP)
    tf = next(t for e, t in texts.items() if e not in named)
    assert "runs: succeeded=6" in tf and "confounders: none." in tf
    assert "(95% CI +" in tf
    sg = texts[SGLANG_EXP]
    assert "runs: succeeded=12" in sg
    assert (
        "graphs=on mem=0.85 vs graphs=off mem=0.85: +959.2% output throughput at concurrency 1 "
        "(95% CI +"
    ) in sg
    # the factorial splits the seed's two-knob change into its parts
    assert (
        "Of the +244.4% output throughput at concurrency 64 (cuda_graphs on + "
        "mem_fraction_static 0.92 vs cuda_graphs off + mem_fraction_static 0.85"
    ) in sg
    assert "cuda_graphs off→on +226.7% (95% CI +" in sg
    # the workload never filled the KV cache (issue 21): the memory fraction is no noise,
    # it was not tested, and the verdict leads with that
    assert (
        "mem_fraction_static 0.85→0.92 +9.1% (95% CI -26.1…+61.1%, not tested by this workload)"
    ) in sg
    assert "mem_fraction_static 0.85→0.92: output throughput at c=64 +9.1%" in sg.splitlines()[1]
    assert "On the log scale the parts add up: +1.184 +0.088 -0.035 = +1.237" in sg
    assert (
        "KV pool graphs=on mem=0.92 +8.3%, graphs=off mem=0.92 +8.3%, graphs=on mem=0.85 +0.0%"
        in sg
    )
    assert "confounders: none." in sg
    # the memory-fraction A/B under KV pressure: one 0.85 run failed its verify step and
    # one was never run (device time), so the verdict has no interval; paired by trial,
    # only the one trial both arms completed counts (+6 %, where the unpaired means said +12 %)
    kv = texts[KV_EXP]
    assert "runs: cancelled=1, failed=1, succeeded=4" in kv
    assert (
        "+6.3% output throughput at concurrency 640 (interval unknown: fewer than 3 trials)" in kv
    )
    assert "KV pool +8.3%; confounders: none." in kv
    # the team's change on a realistic MoE shape: the graphs did it; at 64 x 512 tokens the
    # 670 K-token pool never filled, so the memory fraction was not tested (its 2 queued
    # requests waited for the scheduler), and the two trials give no interval
    team = texts[TEAM_EXP]
    assert (
        "Model shape qwen3-30b-a3b: dummy weights: speed only, answers meaningless; "
        "MoE routing simulated uniformly." in team
    )
    assert "+358.5% output throughput at concurrency 64 (interval unknown" in team
    assert "mem_fraction_static 0.85→0.92: the difference is cuda_graphs or noise" in team
    assert "not tested by this workload" in team and "Regressions" not in team


def test_moe_2x2_demo_pressured_the_smaller_pool_and_splits_the_change(
    settings: Settings,
) -> None:
    """The seed's question on the Qwen3-30B-A3B shape: every run routed uniformly, its KV
    point was sized from the given pool to 1.2x (1.19x the 0.85 arms' own pool), and the
    verdict splits the change: the graphs at c=64, the memory fraction under KV pressure."""
    install_demo(settings)
    runs = 0
    for folder in sorted(settings.runs_dir.iterdir()):
        spec = RunFolder(folder).read("spec.json")
        if f"exp:{MOE_2X2_EXP}" not in spec["tags"]:
            continue
        runs += 1
        run = RunFolder(folder)
        mfs = spec["server"]["mem_fraction_static"]
        assert run.read("facts.json")["kv_cache_tokens"] == MOE_POOLS[mfs]
        assert run.read("launch.json")["env"] == {"SGLANG_SIMULATE_UNIFORM_EXPERTS": "1"}
        fill = run.read("points/001/summary.json")["kv_fill"]
        assert (
            fill["pool_whose"] == "given in plan.kv_pool" and fill["computed"]["concurrency"] == 235
        )
        assert fill["own_pool_tokens"] == MOE_POOLS[mfs]
        assert (fill["fill_of_own_pool"] > 1) is (mfs == 0.85)  # only the smaller pool overflows
    assert runs == 12
    record = next(r for r in list_experiments(settings) if r.experiment_id == MOE_2X2_EXP)
    text = format_experiment(settings, record)
    assert "runs: succeeded=12" in text
    assert (
        "mem_fraction_static 0.85→0.92: output throughput at c=235 +61.8% (95.9% CI +27.6…+105.3%)"
        in text
    )
    assert "tested: the KV cache was a limit (peak 98.95% of 107 K tokens" in text
    assert (
        "graphs=on mem=0.85 vs graphs=off mem=0.85: +182.6% output throughput at concurrency 64"
        in text
    )
    assert "Regressions" not in text


def test_kv_pressure_demo_filled_both_pools(settings: Settings) -> None:
    """The workload the 2x2 lacked: every measured run filled its arm's KV pool, queued and
    retracted requests (the server's own /metrics and log), with decode all in graphs."""
    install_demo(settings)
    measured = 0
    for folder in sorted(settings.runs_dir.iterdir()):
        spec = RunFolder(folder).read("spec.json")
        if f"exp:{KV_EXP}" not in spec["tags"] or not (folder / "facts.json").exists():
            continue
        measured += 1
        mfs = spec["server"]["mem_fraction_static"]
        facts = RunFolder(folder).read("facts.json")
        assert facts["kv_cache_tokens"] == KV_POOLS[mfs]
        assert not any("/tmp/" in str(v) for v in (spec["server"]["model"], facts["model_path"]))
        samples = pq.read_table(folder / "samples.parquet").to_pandas()
        m = samples[(samples["source"] == "metrics") & (samples["point"] == 0)]
        peak = m[m["name"] == "sglang:num_used_tokens"]["value"].max()
        assert peak > 0.99 * KV_POOLS[mfs]
        assert m[m["name"] == "sglang:num_queue_reqs"]["value"].max() > 100
        log = (folder / "server.log").read_text()
        assert log.count("KV cache pool is full. Retract requests.") > 50
        graphs = m[m["name"] == "sglang:cuda_graph_passes_total"]
        assert not graphs["labels"].str.contains("mode=decode_none").any()
        records = pq.read_table(folder / "points" / "000" / "records.parquet")
        assert records.num_rows == 960
    assert measured == 5


def test_sglang_demo_runs_carry_what_the_live_server_said(settings: Settings) -> None:
    install_demo(settings)
    for run_id, graphs in zip(SEED_PAIR, (False, True), strict=True):
        folder = RunFolder(settings.runs_dir / run_id)
        facts = folder.read("facts.json")
        assert facts["engine_version"] == "0.5.17"
        assert facts["kv_cache_tokens"] > 5_000_000
        assert facts["weight_mem_gb"] > 0 and facts["kv_cache_gb"] > 100
        assert facts["avail_mem_gb_after_load"] > 100
        assert facts["cuda_graph_enabled"] is graphs
        assert (facts["cuda_graph_batch_sizes"] is not None) is graphs
        assert facts["server_info_raw"]["version"] == "0.5.17"
        assert facts["gpus"][0]["name"] == "NVIDIA H200"
        assert folder.read("probe.json")["passed"] is True
        records = pq.read_table(folder.path / "points" / "002" / "records.parquet")
        assert records.num_rows == 512
        samples = pq.read_table(folder.path / "samples.parquet").to_pandas()
        assert (samples["source"] == "nvml").any() and (samples["source"] == "metrics").any()
    # The seed's one-restart change: two plain runs that differ in two knobs are flagged.
    views = [load_run(RunFolder(settings.runs_dir / r)) for r in SEED_PAIR]
    assert confounders(views) == ["server.cuda_graphs", "server.mem_fraction_static"]


def test_version_demo_is_an_ab_of_two_installations_with_the_version_explained(
    settings: Settings,
) -> None:
    """The H200 upgrade question (BENCHMARKS 5.5): each arm ran its own SGLang release, the
    verdict names the version change as the knob, and the c=16 regression has an interval."""
    install_demo(settings)
    versions = {}
    for folder in sorted(settings.runs_dir.iterdir()):
        spec = RunFolder(folder).read("spec.json")
        if f"exp:{VERSION_EXP}" not in spec["tags"]:
            continue
        facts = RunFolder(folder).read("facts.json")
        install = spec["server"]["engine_install"]
        assert facts["engine_version"] == install.removeprefix("sglang-")
        assert facts["server_info_raw"]["version"] == facts["engine_version"]
        assert facts["cuda_graph_enabled"] is True
        launch = (folder / "server.log").read_text().splitlines()[0]
        assert f"<device>/py/{install} -m sglang.launch_server" in launch
        versions[install] = versions.get(install, 0) + 1
    assert versions == {"sglang-0.5.14": 3, "sglang-0.5.17": 3}
    record = next(r for r in list_experiments(settings) if r.experiment_id == VERSION_EXP)
    text = format_experiment(settings, record)
    assert "runs: succeeded=6" in text and "confounders: none" in text
    assert "engine version 0.5.14→0.5.17 (installation sglang-0.5.14→sglang-0.5.17)" in text
    # c=16 is no headline point: its -30.7 % is exploratory, and Benjamini–Hochberg over
    # the card's exploratory cells does not confirm it, so no Regressions paragraph claims it
    (c16,) = [line for line in text.splitlines() if line.startswith("c=16") and "0.5.17" in line]
    assert "-30.7%" in c16 and "inconclusive" not in c16  # its interval excludes zero alone
    assert "worse alone, not confirmed over the exploratory cells (Benjamini–Hochberg" in c16
    assert "trials would confirm it at this noise" in c16
    assert "Regressions" not in text and "Holm over 3 comparisons" in text


def test_experiment_page_shows_the_demo_verdict(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert DEMO_DIR.is_dir()
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    for record in list_experiments(settings):
        at.query_params["experiment"] = record.experiment_id
        at.switch_page("pages/experiment.py").run()
        assert not at.exception, at.exception
        text = " ".join(m.value for m in at.markdown)
        labels = [e.label for e in at.expander]
        if record.experiment_id == SGLANG_EXP:
            assert (
                "graphs=on mem=0.85 vs graphs=off mem=0.85: +959.2% output throughput at "
                "concurrency 1 (95% CI +"
            ) in text
            assert "Of the +244.4% output throughput at concurrency 64" in text
            # The page's attribution sentence agrees with the verdict: the workload never
            # reached the KV cache, so the memory fraction is not tested, not "within noise".
            attribution = text[text.index("Of the +244.4%") :]
            assert "mem_fraction_static 0.85→0.92" in attribution or "mfs" in attribution
            assert "not tested by this workload" in attribution
            assert any("Runs (12/12 ended: 12 succeeded)" in label for label in labels), labels
        elif record.experiment_id == KV_EXP:
            assert "+6.3% output throughput at concurrency 640" in text
        elif record.experiment_id == KV_AUTO_EXP:
            # trials: auto on the H200: the stop rule's adjusted interval and why it stopped
            assert "output throughput at c=640 -0.7% (95.9% CI -7.6…+6.8%)" in text
            assert "tested: the KV cache was a limit" in text
            assert "undecided after 4 trials" in text
        elif record.experiment_id == VERSION_EXP:
            assert "engine version 0.5.14→0.5.17" in text
            assert "Holm over 3 comparisons" in text and "Regressions" not in text
        elif record.experiment_id == ANSWERS_EXP:
            # fp8 KV flips near ties of random weights: numerics changed, not broken;
            # graphs off decodes the very same tokens as graphs on
            assert "fp8 kv: answers differ from graphs on (numerics changed, not broken)" in text
            assert "graphs off: same answers as graphs on: 16/16 prompts identical" in text
            assert "broken" not in text.replace("not broken", "")
        elif record.experiment_id == TEAM_EXP:
            assert "+358.5% output throughput at concurrency 64" in text
            assert "not tested by this workload" in text
            # the bold lead is the whole title, though the title holds ": " itself
            assert "**Team change on the Qwen3-30B-A3B shape: graphs off+mem 0.85" in text
            warnings = " ".join(w.value for w in at.warning)
            assert "dummy weights: speed only, answers meaningless; MoE routing simulated" in (
                warnings
            )
            infos = " ".join(i.value for i in at.info)
            assert "2 trials per arm, fewer than the 3 an interval needs" in infos
            assert "One run per arm" not in infos
        elif record.experiment_id == SHAPE_VERSION_EXP:
            assert (
                "-5.1% output throughput at concurrency 64 (95% CI -8.7…-1.5%), worse alone, "
                "not confirmed over the family (Holm over 3 comparisons)"
            ) in text
            # no Regressions, and no all-clear either: the summary names the worse alone
            assert "Regressions" not in text and not at.success
            infos = " ".join(i.value for i in at.info)
            assert "No confirmed regression; worse alone" in infos
            assert "output throughput at c=64: -5.1%" in infos
        elif record.experiment_id == VLLM_GRAPHS_EXP:
            assert "+52.7% output throughput at concurrency 64 (interval unknown" in text
            # vLLM logs no per-batch graph flag: said, not guessed
            assert "unknown: the server did not say which decode passes ran in graphs" in text
            infos = " ".join(i.value for i in at.info)
            assert "One run per arm: no interval" in infos
        elif record.experiment_id == ENGINES_3_EXP:
            assert (
                "-0.3% output throughput at concurrency 1 (95% CI -1.2…+0.5%), equivalent "
                "within ±5%, +5.4% output throughput at concurrency 64 (95% CI +0.7…+10.4%), "
                "better alone"
            ) in text
            assert "The same setting in each engine" in text
        elif record.experiment_id == VLLM_GRAPHS_2_EXP:
            assert "+48.1% output throughput at concurrency 64 (interval unknown" in text
            assert "Regressions" not in text and not at.success
            assert any("4 succeeded, 2 interrupted" in label for label in labels), labels
        elif record.experiment_id == VLLM_GRAPHS_3_EXP:
            # 3 trials: intervals at both points; c=1 confirmed, c=64 (graphs off spread
            # 2.8-3.7 K tok/s) better alone, not confirmed under Holm
            assert (
                "+132.0% output throughput at concurrency 1 (95% CI +87.1…+187.6%), "
                "+98.3% output throughput at concurrency 64 (95% CI +32.2…+197.3%), better "
                "alone, not confirmed over the family (Holm over 3 comparisons)"
            ) in text
            assert "Regressions" not in text
        elif record.experiment_id == MOE_2X2_EXP:
            # the memory fraction under KV pressure, the graphs at the seed's c=64; the
            # split adds up on the page as in the CLI, and the shape's caveat is shown
            assert "output throughput at c=235 +61.8% (95.9% CI +27.6…+105.3%)" in text
            assert "Of the +86.7% output throughput at concurrency 235" in text
            assert "Regressions" not in text
            warnings = " ".join(w.value for w in at.warning)
            assert "dummy weights: speed only, answers meaningless" in warnings
            assert any("Runs (12/12 ended: 12 succeeded)" in label for label in labels), labels
            # stopped at its 20-minute limit, undecided: said plainly, never in green
            infos = " ".join(i.value for i in at.info)
            assert "Trials auto: undecided after 3 trials (20 min, the limit is 20 min)" in infos
            assert not [s.value for s in at.success if "Trials auto" in s.value]
        elif record.experiment_id in ENGINE_EXPS:
            assert "output throughput at concurrency 64 (interval unknown" in text
            assert "confounders: none" in text
            # the engine is the knob: the flags that mean the same thing, side by side
            assert "The same setting in each engine" in text
            tables = " ".join(t.value.to_string() for t in at.table)
            assert "--mem-fraction-static" in tables and "--gpu-memory-utilization" in tables
        else:
            assert "output throughput at concurrency 1 (95% CI +" in text
            assert any("Runs (6/6 ended: 6 succeeded)" in label for label in labels), labels


def test_card_verdict_table_and_attribution_give_one_interval_per_contrast(
    settings: Settings,
) -> None:
    """The 2×2 demo re-read: for "arm vs baseline" the summary card, the experiment table
    (verdict, CLI, exports) and the attribution's OLS with trial blocks show the same
    paired interval (the CUDA-graph effect at c=64 is +227 % [+220, +234], not the
    unpaired [+181, +279] that ignored the trials)."""
    from core.analysis.attribution import experiment_attribution
    from core.analysis.card import experiment_story
    from core.analysis.stats import arm_stats
    from core.analysis.trials import experiment_runs

    install_demo(settings)
    record = next(r for r in list_experiments(settings) if r.experiment_id == SGLANG_EXP)
    runs = experiment_runs(settings, record)
    story = experiment_story(settings, record, runs)
    table = arm_stats(runs, story.baseline)
    attr = experiment_attribution(settings, record)
    assert attr is not None
    contrasts = {  # the attribution term that is exactly this arm vs the baseline
        "graphs=on mem=0.85": "cuda_graphs off→on",
        "graphs=off mem=0.92": "mem_fraction_static 0.85→0.92",
        "graphs=on mem=0.92": "total",
    }
    for conc in (1, 64):
        for arm, term in contrasts.items():
            effects = attr.effects[attr.effects["term"] == term]
            card = next(
                r
                for r in story.card
                if r.metric == "output_throughput" and r.concurrency == conc and r.arm == arm
            )
            row = table.query(
                f"metric == 'output_throughput' and concurrency == {conc} and arm == '{arm}'"
            ).iloc[0]
            eff = effects.query(f"metric == 'output_throughput' and concurrency == {conc}").iloc[0]
            want = (card.change, card.low, card.high)
            assert (row["rel"], row["rel_low"], row["rel_high"]) == pytest.approx(want)
            assert (eff["rel"], eff["rel_low"], eff["rel_high"]) == pytest.approx(want)
    graphs_64 = table.query(
        "metric == 'output_throughput' and concurrency == 64 and arm == 'graphs=on mem=0.85'"
    ).iloc[0]
    assert round(graphs_64["rel_low"] * 100) == 220 and round(graphs_64["rel_high"] * 100) == 234


def test_no_shipped_demo_output_says_within_noise_or_noise_floor(settings: Settings) -> None:
    """Issue 35 items 3-4: a difference reads in core.analysis.words' four words only and
    the host's noise is shown as noise, never as a floor: ``experiment --show`` of every
    shipped experiment, its HTML report and the landing page's sentences."""
    install_demo(settings)
    env = {**os.environ, "SERVELAB_DATA_DIR": str(settings.data_dir)}
    texts: dict[str, str] = {}
    for record in list_experiments(settings):
        exp_id = record.experiment_id
        out = subprocess.run(
            [sys.executable, "-m", "core", "experiment", "--show", exp_id],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        texts[f"{exp_id} --show"] = out.stdout
        texts[f"{exp_id} report"] = html_report(select(settings, [exp_id]))
    answer = landing_answer(settings)
    assert answer is not None
    texts["landing"] = " ".join(answer.sentences)
    for where, text in texts.items():
        lower = text.lower()
        assert "within noise" not in lower and "noise floor" not in lower, where
    # the host's noise is there, as noise (core.analysis.power.noise_text); the team change
    # (2 trials of a shape no earlier experiment on its host measured) has none to quote,
    # and says why it gives no interval instead
    shows = {w: t for w, t in texts.items() if w.endswith("--show")}
    few = (TEAM_EXP, VLLM_GRAPHS_EXP, *ENGINE_EXPS, VLLM_GRAPHS_2_EXP)  # fewer than 3 trials
    assert all("run-to-run noise ±" in t for w, t in shows.items() if w.split()[0] not in few)
    for exp_id in few:
        assert "interval unknown: fewer than 3 trials" in shows[f"{exp_id} --show"]
