"""``depthtraj analyze``: formats, --out, and one-line user errors (exit 2)."""

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from depthtraj.analysis.cli import run_analyze
from depthtraj.analysis.core.tables import SCHEMA
from depthtraj.cli import app


def _run(capsys, *stores, **kw):
    kw.setdefault("grids", ["quarter", "native"])
    kw.setdefault("bootstrap", 100)
    code = run_analyze(list(stores), **kw)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_is_the_only_stdout(capsys, small_store):
    code, out, err = _run(capsys, small_store, fmt="json", seed=1)
    assert code == 0
    doc = json.loads(out)  # stdout holds exactly one JSON document
    assert doc["schema"] == SCHEMA and doc["bootstrap"]["draws"] == 100
    grids = [(a["grid"], a["grid_depths"]) for a in doc["analyses"]]
    assert grids == [("quarter", [2, 4, 6]), ("native", [1, 2, 3, 4, 5, 6, 7])]
    a = doc["analyses"][0]
    assert a["store"] == small_store and a["endpoint"] == 8 and a["model"] == "synthetic"
    rows = a["tables"]["depth_area"]["rows"]
    assert {(r["task"], r["precision"]) for r in rows} == {(t, p) for t in ("arc_challenge", "mmlu") for p in ("bf16", "fp32")}
    r = rows[0]
    assert r["T"] == 8 and r["N"] == 32 and r["grid"] == "quarter"
    assert r["W_raw_lo"] <= r["W_raw"] <= r["W_raw_hi"] or r["W_raw_lo"] == r["W_raw_hi"]
    assert r["delta_tr"] == pytest.approx(r["W_q"] - r["W_raw"], abs=1e-8)  # pp
    ladder_rows = a["tables"]["margin_ladder"]["rows"]
    assert {x["depth"] for x in ladder_rows} == {2, 4, 6}
    assert all(0 <= x["unique"] <= 100 for x in ladder_rows)


def test_table_and_csv(capsys, small_store):
    code, out, err = _run(capsys, small_store, fmt="table", grids=["quarter"], bootstrap=50, full=True)
    assert code == 0 and "Quotient" in out and "A_pair" in out and "[" in out
    # without --full: one screen, each section's headline (issue 28: 1,812 lines for 42 questions)
    code, out, err = _run(capsys, small_store, fmt="table", grids=["quarter"], bootstrap=50)
    lines = out.splitlines()
    assert code == 0 and len(lines) < 30 and "W_q %" in out and "τ %" in out and "--full" in lines[-1]
    code, out, err = _run(capsys, small_store, fmt="csv", grids=["2,4"], bootstrap=0)
    assert code == 0
    # one tidy long-format CSV: every estimate a row, pandas reads it as it is
    import pandas as pd

    frame = pd.read_csv(io.StringIO(out))
    assert list(frame.columns) == ["table", "store", "model", "readout", "grid", "T", "cell", "precision", "keys",
                                   "quantity", "unit", "estimate", "lo", "hi"]
    assert list(dict.fromkeys(frame["table"])) == [
        "depth_area", "levels", "direction", "centers", "gains", "margin_ladder",
        "permutation", "tau", "rho", "accuracy", "transitions", "energy_shares", "energy",
        "weighting", "depth_prediction", "marginal", "scale", "vocabulary", "precision"]
    assert "skipped text_geometry" in err and "F1" in err  # a label store: one line, the reason
    wq = frame[(frame["table"] == "depth_area") & (frame["quantity"] == "W_q")]
    assert len(wq) == 4 and set(wq["grid"]) == {"2,4"} and wq["lo"].isna().all()  # no bootstrap: no bounds
    assert (wq["unit"] == "%").all() and wq["estimate"].between(0, 100).all()
    ladder = frame[(frame["table"] == "margin_ladder") & (frame["quantity"] == "m")]
    assert set(ladder["keys"]) == {"depth=2", "depth=4"}


def test_out_writes_every_table(capsys, small_store, tmp_path):
    out_dir = tmp_path / "res"
    code, out, _ = _run(capsys, small_store, small_store, fmt="json", out=out_dir, grids=["quarter"], endpoint=6)
    assert code == 0
    assert sorted(p.name for p in out_dir.iterdir() if p.suffix != ".png") == [
        "accuracy.csv", "analysis.json", "centers.csv", "depth_area.csv", "depth_prediction.csv", "direction.csv",
        "energy.csv", "energy_shares.csv", "gains.csv", "levels.csv",
        "margin_ladder.csv", "marginal.csv", "permutation.csv", "precision.csv", "rho.csv", "scale.csv",
        "tau.csv",
        "transitions.csv", "vocabulary.csv", "weighting.csv"]
    from PIL import Image

    labels = set()
    for png in out_dir.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        labels.add(Image.open(png).text["depthtraj:label"])
    # a label store: every label-store figure of the sections, no answer-text figure
    assert labels == {"pd:app:fig:label-increments", "pd:fig:ladder", "pd:fig:prediction", "pd:fig:mass"} | (
        {"pd:fig:precision"} if len(json.loads(out)["analyses"][0]["precision"]) > 1 else set())
    doc = json.loads((out_dir / "analysis.json").read_text())
    assert doc == json.loads(out)
    assert [a["grid_depths"] for a in doc["analyses"]] == [[1, 3, 4], [1, 3, 4]]  # T=6 quarter
    rows = list(csv.DictReader((out_dir / "depth_area.csv").open()))
    assert len(rows) == 8 and rows[0]["T"] == "6"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(grids=["everything"]), "grid 'everything' not understood"),
        (dict(grids=["3:12"]), "not below the endpoint T=8"),
        (dict(endpoint=11), "endpoint 11 is not a recorded depth"),
        (dict(fmt="xml"), "--format must be one of"),
        (dict(bootstrap=-1), "--bootstrap must be"),
        (dict(level=1.5), "--level must lie in (0, 1)"),
        (dict(by="colour"), "--by must be one of task, subject, K"),
        (dict(select=["task"]), "expected KEY=VALUE"),
        (dict(select=["colour=red"]), "--select colour: not a per-question coordinate"),
        (dict(select=["task=nope"]), "no question matches"),
        (dict(normalization="token"), "applies to answer-text stores"),
        (dict(normalization="median"), "--normalization must be one of"),
        (dict(scheduler_spec="fastest"), "--scheduler must be"),
        (dict(scale_check="0.5,-2"), "--scale-check: every scale α must be a positive number"),
        (dict(scale_check="two"), "--scale-check expects positive numbers"),
        (dict(sections="3,8"), "--sections must be a comma list of 3, 4, 5, 6, 7"),
        (dict(sections="energy"), "--sections must be a comma list"),
    ],
)
def test_user_errors_are_one_line(capsys, small_store, kwargs, message):
    code, out, err = _run(capsys, small_store, **kwargs)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("depthtraj: error: ") and message in err


def test_missing_or_not_a_store(capsys, tmp_path):
    code, out, err = _run(capsys, str(tmp_path / "nope.zarr"))
    assert code == 2 and err == f"depthtraj: error: {tmp_path / 'nope.zarr'}: no such file or directory\n"
    code, out, err = _run(capsys, str(tmp_path))
    assert code == 2 and "not a zarr v3 group" in err and err.count("\n") == 1


def test_registered_command(small_store):
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", small_store, "--grid", "quarter", "--bootstrap", "20", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["analyses"][0]["grid"] == "quarter"
    res = runner.invoke(app, ["analyze", small_store, "--grid", "1,x"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == ["depthtraj: error: grid '1,x' not understood; use quarter, native, a list like 8,16,24 or an inclusive range like 4:31"]


def test_selection_grouping_and_endpoints(capsys, small_store):
    code, out, err = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=0,
                          select=["task=mmlu"], by="K", endpoint=[6, 8], scheduler_spec="synchronous")
    assert code == 0, err
    doc = json.loads(out)
    assert [a["endpoint"] for a in doc["analyses"]] == [6, 8]
    a = doc["analyses"][0]
    assert a["selection"] == {"task": ["mmlu"]}
    rows = a["tables"]["depth_area"]["rows"]
    assert {r["K"] for r in rows} <= {"3", "4", "5"} and sum(r["N"] for r in rows if r["precision"] == "bf16") == 32
    assert a["skipped"]["text_geometry"].startswith("needs an answer-text store")


def test_gain_profiles_integrate_to_the_increments(capsys, small_store):
    # arxiv:eq:depth-gains: on the full integer grid, (1/T) Σ_d G_tr(d) = W_q - W_raw and
    # (1/T) Σ_d G_dp(d) = W_res - W_q, cell by cell.
    code, out, err = _run(capsys, small_store, fmt="json", grids=["native"], bootstrap=0)
    assert code == 0
    a = json.loads(out)["analyses"][0]
    T = a["endpoint"]
    for r in a["tables"]["depth_area"]["rows"]:
        g = [x for x in a["tables"]["gains"]["rows"] if (x["task"], x["precision"]) == (r["task"], r["precision"])]
        assert [x["depth"] for x in g] == list(range(1, T))
        assert sum(x["G_tr"] for x in g) / T == pytest.approx(r["delta_tr"], abs=1e-8)
        assert sum(x["G_dp"] for x in g) / T == pytest.approx(r["delta_dp"], abs=1e-8)
        assert all(x["F_raw"] <= x["F_q"] <= x["F_res"] + 1e-9 for x in g)  # nesting


def test_schedulers_give_the_same_document(capsys, small_store):
    # the pass is deterministic (bootstrap weights keyed by question id): any scheduler, same numbers
    distributed = pytest.importorskip("distributed")
    docs = []
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        for spec in ("threads", "processes", cluster.scheduler_address):
            code, out, err = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=40, scheduler_spec=spec,
                                  permutations=0)
            assert code == 0, err
            docs.append(json.loads(out)["analyses"])
    assert docs[0] == docs[1] == docs[2]
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code, out, err = _run(capsys, small_store, scheduler_spec="tcp://127.0.0.1:1")
    assert code == 2 and "cannot connect" in err and err.count("\n") == 1


def test_dynamics_and_correctness_tables(capsys, small_store):
    # r3:eq:correctness identities on the rendered rows, and the permutation table's difference
    code, out, err = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=60)
    assert code == 0, err
    t = json.loads(out)["analyses"][0]["tables"]
    for r in t["transitions"]["rows"]:
        n = r["N_WC"] + r["N_CW"] + r["N_WWp"] + r["N_CC"] + r["N_WW"]
        assert n == pytest.approx(32)  # five categories sum to N (each question weighs 1)
        assert r["acc_change"] == pytest.approx((r["N_WC"] - r["N_CW"]) / n * 100, abs=1e-8)
        assert r["disagreement"] == pytest.approx((r["N_WC"] + r["N_CW"] + r["N_WWp"]) / n * 100, abs=1e-8)
        assert r["acc_change_lo"] <= r["acc_change"] <= r["acc_change_hi"] or r["acc_change_lo"] == r["acc_change_hi"]
    for r in t["permutation"]["rows"]:
        assert r["pres_diff"] == pytest.approx(r["preserved"] - r["p_perm"], abs=1e-8)
    for r in t["tau"]["rows"]:
        assert 0 <= r["tau"] <= 100 and r["n_zero_span"] <= r["n_I"] <= r["n_pairs"]
        hist = [x["count"] for x in t["rho"]["rows"] if (x["task"], x["precision"]) == (r["task"], r["precision"])]
        assert len(hist) == 101 and sum(hist) == pytest.approx(r["n_I"])
        assert hist[0] >= r["n_zero_span"] - 1e-9  # ρ = 0 lies in the first bin
    acc = t["accuracy"]["rows"][0]
    assert acc["correct"] == pytest.approx(acc["A_T"] / 100 * 32)


def test_format_comparison_of_two_stores(capsys, small_store, tmp_path):
    # pd:tab:format: a store against a copy of itself differs by exactly zero, with degenerate
    # paired intervals, and agrees with itself everywhere; against a store of other scores on
    # the same questions the differences are the differences of the per-format rows.
    import shutil

    from depthtraj.testing import synthetic_store

    twin = tmp_path / "twin.zarr"
    shutil.copytree(small_store, twin)
    code, out, err = _run(capsys, small_store, str(twin), fmt="json", grids=["quarter"], bootstrap=80)
    assert code == 0, err
    comparisons = {t["name"]: t for t in json.loads(out)["comparisons"]}
    assert sorted(comparisons) == ["format", "format_conditioned"]
    table = comparisons["format"]
    # the endpoint-conditioned comparison of a store with its copy: the same subsets, ΔA = 0
    cond = comparisons["format_conditioned"]["rows"]
    per_store = [r for r in cond if r["dW_correct"] is not None]
    assert len(per_store) == 8 and all(r["d_accuracy"] == 0 for r in cond if r["d_accuracy"] is not None)
    for r in per_store:
        twin_row = next(x for x in per_store if x["store"] != r["store"] and (x["task"], x["precision"]) == (r["task"], r["precision"]))
        assert (r["n"], r["dW_correct"], r["dW_correct_lo"]) == (twin_row["n"], twin_row["dW_correct"], twin_row["dW_correct_lo"])
    diffs = [r for r in table["rows"] if r["d_epsilon"] is not None]
    assert len(diffs) == 4  # 2 tasks × 2 arms
    for r in diffs:
        assert r["d_epsilon"] == r["d_epsilon_lo"] == r["d_epsilon_hi"] == 0
        assert r["d_accuracy"] == 0 and r["agreement"] == pytest.approx(100)
    other = synthetic_store(tmp_path / "other.zarr", 64, endpoint=8, k_mix={3: 1, 4: 1, 5: 1}, arrangements=2,
                            precision=("bf16", "fp32"), chunk_size=16, seed=9)
    code, out, err = _run(capsys, small_store, other, fmt="json", grids=["quarter"], bootstrap=80)
    assert code == 0, err
    rows = json.loads(out)["comparisons"][0]["rows"]
    per = {(r["store"], r["task"], r["precision"]): r for r in rows if r.get("epsilon") is not None}
    for r in (r for r in rows if r.get("d_epsilon") is not None):
        a, b = per[(small_store, r["task"], r["precision"])], per[(other, r["task"], r["precision"])]
        assert r["d_epsilon"] == pytest.approx(b["epsilon"] - a["epsilon"], abs=1e-8)
        assert r["d_epsilon_lo"] <= r["d_epsilon"] <= r["d_epsilon_hi"]
        assert 0 <= r["agreement"] <= 100


def test_energy_tables_match_the_lazy_functions(capsys, small_store):
    # §5 tables from the pass = the lazy energy functions' cell values; shares sum to 100 %;
    # pd:eq:weight: D_pool - D_eq is the table's weight, draw by draw (so also its point value)
    from depthtraj.analysis.composition import energy
    from depthtraj.store import open_store

    code, out, err = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=50,
                          early="1:2", late="5:6", step=1)
    assert code == 0, err
    t = json.loads(out)["analyses"][0]["tables"]
    ds = open_store(small_store)
    want = energy.attenuation(ds, "1:2", "5:6", 1).compute()
    for r in t["energy"]["rows"]:
        w = want.sel(task=r["task"], precision=r["precision"])
        for k in ("D_pool_early", "D_pool_late", "D_eq_early", "D_eq_late", "delta_D_pool"):
            assert r[k] == pytest.approx(float(w[k]) * 100, abs=1e-9), k
        assert r["rho_Q"] == pytest.approx(float(w["rho_Q"]), rel=1e-9)
    for r in t["weighting"]["rows"]:
        assert r["weight_early"] == pytest.approx(r["D_pool_early"] - r["D_eq_early"], abs=1e-9)
    shares = energy.energy_shares(ds).compute()
    for r in t["energy_shares"]["rows"]:
        total = r["share_Q"] + r["share_E_M"] + r["share_E_kappa"] + r["share_E_cross"]
        assert total == pytest.approx(100.0, abs=1e-9)
    assert len(t["energy_shares"]["rows"]) == 2 * 2 * 7  # tasks × arms × adjacent intervals ≤ T
    assert "share_Q" in shares
    for r in t["precision"]["rows"]:
        if r["precision"] == "bf16":
            assert r["tau_minus_first"] == 0
    code, out, err = _run(capsys, small_store, early="1:2", late="7:9", step=1)
    assert code == 2 and "not recorded depths" in err and err.count("\n") == 1


def test_marginal_table_matches_the_lazy_function(capsys, small_store):
    # pd:app:tab:marginal: the pass's Ξ_obs equals marginal_covariance's; the permutation
    # estimate agrees with the exact reference within a few Monte-Carlo errors
    from depthtraj.analysis.composition.marginal import marginal_covariance
    from depthtraj.store import open_store

    code, out, err = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=50, permutations=400)
    assert code == 0, err
    rows = json.loads(out)["analyses"][0]["tables"]["marginal"]["rows"]
    want = marginal_covariance(open_store(small_store), None, 8, n_perm=0).compute()
    for r in rows:
        if r["window"] == "all":
            w = want.sel(task=r["task"], precision=r["precision"])
            assert r["xi_obs"] == pytest.approx(float(w["xi_obs"]) * 100, abs=1e-9)
            assert r["xi_marg"] == pytest.approx(float(w["xi_marg"]) * 100, abs=1e-9)
        assert r["xi_obs_lo"] <= r["xi_obs"] <= r["xi_obs_hi"]
        assert abs(r["xi_perm"] - r["xi_marg"]) <= 5 * r["xi_perm_se"] + 1e-9
    assert {r["window"] for r in rows} == {"all", "4:8"}


def test_section6_checks(capsys, small_store):
    # pd:app:scale: the residual tables equal the lazy function's cells; at α = 1 the LSE centre
    # residual is a share in [0, 1]; vocabulary invariance holds to rounding (logsumexp stored)
    from depthtraj.analysis.sensitivity.scale import centre_residual
    from depthtraj.store import open_store

    code, out, err = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=0)
    assert code == 0, err
    t = json.loads(out)["analyses"][0]["tables"]
    want = centre_residual(open_store(small_store), endpoint=8).compute()
    for r in t["scale"]["rows"]:
        w = want.sel(task=r["task"], precision=r["precision"])
        assert r["lse_residual"] == pytest.approx(float(w["lse_residual"].sel(alpha=r["alpha"])) * 100, abs=1e-9)
        assert 0 <= r["mean_residual"] <= 100
    for r in t["vocabulary"]["rows"]:
        assert r["max_contrast_gap"] <= r["max_tolerance"] and r["max_osc_gap"] <= r["max_tolerance"]
        assert r["max_log_mass"] <= 1e-6  # label store: candidate-set mass at most one


def test_scale_check_table(capsys, small_store):
    # r9:eq:scale-equivariance as a check users run from the CLI: every homogeneous statistic
    # recomputed on α s agrees with its value on s (exactly for powers of two), winners are
    # kept, and the non-homogeneous W_LSE is reported beside them
    code, out, err = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=0, scale_check="0.1,4")
    assert code == 0, err
    analyses = json.loads(out)["analyses"]
    rows = analyses[0]["tables"]["scale_check"]["rows"]
    assert [r["alpha"] for r in rows] == [0.1, 4.0]
    for r in rows:
        assert r["holds"] == "yes" and r["winners_kept"] == 100.0
        devs = [v for k, v in r.items() if k.startswith("dev_") and k != "dev_W_LSE"]
        assert devs and all(v <= 1e-9 for v in devs)
        if r["alpha"] == 4.0:
            assert all(v == 0.0 for v in devs)
    code, out, _ = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=0)
    assert "scale_check" not in json.loads(out)["analyses"][0]["tables"]  # opt-in: a pass per α


@pytest.mark.parametrize("sections", ["3", "4", "5", "6", "3,5", "4,6"])
def test_sections_give_their_tables_as_in_the_full_run(capsys, small_store, sections):
    # --sections keeps exactly the tables of those sections (the pass skips the rest), with the
    # same rows as the full run
    from depthtraj.analysis.cli import SECTIONS, parse_sections

    kw = dict(fmt="json", seed=2, bootstrap=50, scale_check=None)
    code, out, _ = _run(capsys, small_store, **kw)
    assert code == 0
    full = json.loads(out)["analyses"]
    code, out, _ = _run(capsys, small_store, sections=sections, **kw)
    assert code == 0
    part = json.loads(out)["analyses"]
    wanted = parse_sections(sections)
    assert len(part) == (2 if 3 in wanted else 1)
    for a, f in zip(part, full):
        assert a["grid"] == f["grid"]
        names = set(a["tables"]) | set(a.get("skipped", {}))
        of = {t: n for n, ts in SECTIONS.items() for t in ts}
        assert names and all(of.get(t, 0) in wanted for t in a["tables"]), (sections, sorted(names))
        expect = {t for t in f["tables"] if of.get(t) in wanted}
        assert set(a["tables"]) == expect
        for t in expect:  # estimates equal; interval bounds up to the float32 bootstrap products
            for ra, rf in zip(a["tables"][t]["rows"], f["tables"][t]["rows"], strict=True):
                assert ra.keys() == rf.keys(), t
                for k, v in ra.items():
                    if k.endswith(("_lo", "_hi")) and isinstance(v, float):  # BLAS order varies with the columns
                        assert v == pytest.approx(rf[k], rel=1e-4, abs=1e-4, nan_ok=True), (t, k)
                    else:
                        assert v == rf[k], (t, k)


def test_correctness_identities_hold_with_unknown_labels(capsys, small_store, tmp_path):
    # r3:eq:correctness inside every row of the transitions table when some labels are -1: the
    # disagreement was taken over all questions and the counts over the labelled ones (off by
    # up to 1.3 pp); now every per-depth column is over the labelled questions.
    import shutil

    import zarr

    store = str(tmp_path / "some-unknown.zarr")
    shutil.copytree(small_store, store)
    lab = zarr.open_array(f"{store}/label", mode="r+")
    lab[::3] = -1
    code, out, err = _run(capsys, store, fmt="json", grids=["quarter"], bootstrap=20, sections="4")
    assert code == 0, err
    t = json.loads(out)["analyses"][0]["tables"]
    n_lab = {}
    for r in t["transitions"]["rows"]:
        n = r["N_WC"] + r["N_CW"] + r["N_WWp"] + r["N_CC"] + r["N_WW"]
        n_lab.setdefault(r["task"], n)
        assert n == pytest.approx(n_lab[r["task"]]) and n < 32  # the labelled questions only
        assert r["acc_change"] == pytest.approx((r["N_WC"] - r["N_CW"]) / n * 100, abs=1e-8)
        assert r["disagreement"] == pytest.approx((r["N_WC"] + r["N_CW"] + r["N_WWp"]) / n * 100, abs=1e-8)


def test_section_7_is_on_request(capsys, small_store):
    """analyze leaves §7 (two nested passes) out unless --sections names it; the report and
    `depthtraj exits` compute it (tests/analysis/test_report.py, test_exits.py)."""
    code, out, _ = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=0)
    assert code == 0
    names = set(json.loads(out)["analyses"][0]["tables"])
    assert "depth_area" in names and not names & {"prefix_prediction", "exit_rules", "exit_curves"}
    code, out, _ = _run(capsys, small_store, fmt="json", grids=["quarter"], bootstrap=0, sections="3,7")
    assert code == 0
    names = set(json.loads(out)["analyses"][0]["tables"])
    assert {"depth_area", "prefix_prediction", "exit_rules", "exit_curves"} <= names


def test_tables_on_a_small_population_say_their_intervals_are_descriptive(tmp_path, capsys):
    """issue 28: `analyze --sections 7` on four questions printed an interval excluding zero with
    no caveat. Every table with intervals whose smallest cell has under 20 questions says so in
    its title (every output: JSON, the full tables, the one-screen summary); 24 per cell do not."""
    import warnings

    from depthtraj.analysis.core.tables import MIN_INTERVAL_N
    from depthtraj.testing import synthetic_store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small = str(synthetic_store(tmp_path / "small.zarr", 4, endpoint=8, seed=2, precision=("bf16",), probes=[4, 6]))
        big = str(synthetic_store(tmp_path / "big.zarr", 48, endpoint=8, seed=2, precision=("bf16",)))
    assert MIN_INTERVAL_N == 20
    assert run_analyze([small], sections="3,4,7", bootstrap=50, fmt="json") == 0
    doc = json.loads(capsys.readouterr().out)
    noted = {k for an in doc["analyses"] for k, t in an["tables"].items() if "Small population: 2 question(s)" in t["title"]}
    with_intervals = {k for an in doc["analyses"] for k, t in an["tables"].items()
                      if any(c["interval"] for c in t["columns"]) and any(r.get(f"{c['key']}_lo") is not None
                                                                        for r in t["rows"] for c in t["columns"] if c["interval"])}
    assert {"prefix_prediction", "exit_rules", "depth_area"} <= noted and noted == with_intervals, (noted, with_intervals)
    assert run_analyze([small], sections="7", bootstrap=50) == 0
    out = capsys.readouterr().out
    assert "small population (under 20 questions in a cell) in prefix_prediction, exit_rules" in out
    assert run_analyze([small], sections="7", bootstrap=50, full=True) == 0
    assert "Small population: 2 question(s) in the smallest cell" in capsys.readouterr().out  # not eaten as markup
    assert run_analyze([big], sections="3,4", bootstrap=50, fmt="json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert not any("Small population" in t["title"] for an in doc["analyses"] for t in an["tables"].values())
    assert run_analyze([small], sections="3", bootstrap=0, fmt="json") == 0  # no intervals, no note
    doc = json.loads(capsys.readouterr().out)
    assert not any("Small population" in t["title"] for an in doc["analyses"] for t in an["tables"].values())


def test_every_command_has_the_one_bootstrap_default():
    """issue 28: analyze drew 5,000, report 2,000. The commands and the Python API share one
    default, :data:`depthtraj.analysis.core.bootstrap.DEFAULT_DRAWS` (the paper's 2,000)."""
    import inspect

    import typer.main
    from depthtraj.analysis.cli import compute_analysis
    from depthtraj.analysis.core.bootstrap import DEFAULT_DRAWS
    from depthtraj.analysis.prediction.command import run_exits

    assert DEFAULT_DRAWS == 2000
    commands = typer.main.get_command(app).commands
    for name in ("analyze", "report", "exits"):
        assert next(p for p in commands[name].params if p.name == "bootstrap").default == DEFAULT_DRAWS, name
    for fn, arg in ((compute_analysis, "bootstrap"), (run_exits, "bootstrap")):
        assert inspect.signature(fn).parameters[arg].default == DEFAULT_DRAWS
