"""``depthtraj exits``: Learn then Test against its definition and by simulation, the Ouro and KL
rules on hand-made trajectories, the serving policies, and the command (exit 0 with the JSON
written; one-line errors with exit 2; the Ouro rule skipped without ``exit_gate``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from depthtraj.analysis.core.data import score_of
from depthtraj.analysis.prediction import base_rules, evaluate_exits
from depthtraj.analysis.prediction.exits import binomial_cdf, calibrate_ltt, calibrate_plugin, hb_pvalue
from depthtraj.analysis.prediction.prefix import exit_positions, fired_counts, rule_statistics, trajectory_features
from depthtraj.cli import app

from . import reference_prediction as R


# ------------------------------------------------------------------------------ Learn then Test
@pytest.mark.parametrize("n,p", [(10, 0.3), (57, 0.025), (400, 0.1), (1000, 0.025)])
def test_binomial_cdf_is_the_sum_of_the_pmf(n, p):
    for k in sorted({0, 1, 2, int(n * p), int(n * p) + 3, n - 1}):
        assert binomial_cdf(k, n, p) == pytest.approx(R.binomial_cdf(k, n, p), rel=1e-9, abs=1e-300)


def test_hb_pvalue_and_fixed_sequence_equal_their_definitions():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 400))
        alpha = float(rng.choice([0.01, 0.025, 0.1, 0.3]))
        delta = float(rng.choice([0.05, 0.1, 0.2]))
        # nondecreasing loss sums with fractional (arrangement-averaged) values
        losses = np.cumsum(rng.random(30) * rng.choice([0.0, 0.5, 2.0])) / 2
        losses = np.round(losses * 6) / 6
        for s in losses[:5]:
            assert hb_pvalue(s, n, alpha) == pytest.approx(R.hb_pvalue(s, n, alpha), rel=1e-9, abs=1e-12)
        assert calibrate_ltt(losses, n, alpha, delta) == R.ltt(list(losses), n, alpha, delta)
    assert calibrate_ltt([0.0, 0.0], 0, 0.1, 0.1) == -1  # no calibration question: never exit


def test_plugin_is_the_most_liberal_threshold_meeting_the_target_among_exits():
    dis = np.array([0, 0, 1, 1, 3, 2, 9], dtype=float)
    ex = np.array([0, 10, 20, 40, 60, 80, 100], dtype=float)
    # ratios: -, 0, .05, .025, .05, .025, .09 → the last one ≤ 0.025 is index 5
    assert calibrate_plugin(dis, ex, 0.025) == 5
    assert calibrate_plugin(dis, ex, 0.0) == 1
    assert calibrate_plugin(np.ones(3), np.ones(3), 0.5) == -1


def _simulate(calibrate, n=300, reps=400, alpha=0.05, seed=0):
    """Risk R(k) known and increasing over 40 thresholds; per repetition draw n calibration
    questions (Bernoulli losses, nested: a question that disagrees at k disagrees at k+1), calibrate,
    and record whether the chosen threshold's true risk exceeds α."""
    rng = np.random.default_rng(seed)
    risk = np.linspace(0.0, 0.2, 40)
    bad = 0
    for _ in range(reps):
        u = rng.random(n)
        sums = (u[None, :] < risk[:, None]).sum(axis=1).astype(float)
        k = calibrate(sums, n)
        bad += k >= 0 and risk[k] > alpha
    return bad / reps


def test_learn_then_test_controls_the_risk_by_simulation():
    """Pr(R(k̂) > α) ≤ δ over repetitions (δ = 0.1, slack 0.03 for 400 repetitions); the plug-in
    empirical choice (R̂ ≤ α) breaks it on the same draws, so the check can fail."""
    delta, alpha = 0.1, 0.05
    assert _simulate(lambda s, n: calibrate_ltt(s, n, alpha, delta), alpha=alpha) <= delta + 0.03
    naive = _simulate(lambda s, n: int(np.flatnonzero(s / n <= alpha)[-1]), alpha=alpha)
    assert naive > delta + 0.03


def test_held_out_disagreement_meets_the_target_on_synthetic_trajectories(tmp_path):
    """End to end on a synthetic store whose trajectories settle late: over 12 seeds (folds and
    bootstrap), the held-out disagreement of the quotient ranking under Learn then Test is at
    most the target in at least 1 − δ − slack of them."""
    from depthtraj.analysis.core.data import open_for_analysis
    from depthtraj.testing import synthetic_store

    p = synthetic_store(tmp_path / "s.zarr", 400, endpoint=12, k_mix={4: 1}, chunk_size=128, seed=11)
    score = score_of(open_for_analysis(p))
    ok = 0
    for seed in range(12):
        ev = evaluate_exits(score, draws=0, folds=2, seed=seed, target=0.05, delta=0.1, by="none")
        ok += ev.estimates(0, 0, 1, "quotient")["disagree"] <= 0.05
    assert ok >= 12 * (1 - 0.1) - 2


# ------------------------------------------------------------------------------ hand-made rules
def test_ouro_exits_when_the_gate_cdf_reaches_q():
    """λ_t = 0.5 at every depth: F_t = 1 − 0.5^t; threshold q exits at the first candidate
    depth with F_t ≥ q."""
    J = 10
    s = np.tile(np.array([2.0, 1.0, 0.0])[None, None, :, None, None], (1, J, 1, 1, 1))
    gate = np.full((1, J, 1, 1), 0.5)
    rule = next(r for r in base_rules() if r.name == "ouro")
    feat = trajectory_features(s, np.array([3]), T_pos=J - 1, gate=gate)
    cpos = list(range(3, J - 1))  # depths 4..9
    z = rule_statistics(feat, rule, cpos, {})
    np.testing.assert_allclose(z[0, 0, 0], [1 - 0.5 ** (j + 1) for j in cpos])
    f = fired_counts(z.reshape(1, -1), rule)
    for k, q in enumerate(rule.grid):
        want = next((c for c, j in enumerate(cpos) if 1 - 0.5 ** (j + 1) >= q), len(cpos))
        assert exit_positions(f, k, rule.size)[0] == want, q
    assert rule_statistics(trajectory_features(s, np.array([3]), T_pos=J - 1), rule, cpos, {}) is None


def test_kl_is_zero_once_the_candidate_distribution_stops_moving():
    J = 8
    s = np.zeros((1, J, 3, 1, 1))
    s[0, :, :, 0, 0] = [[0.0, 0.3 * t, -0.1 * t] for t in range(J)]
    s[0, 5:, :, 0, 0] = s[0, 4, :, 0, 0] + 7.5  # a translation: the same distribution
    rule = next(r for r in base_rules() if r.name == "kl")
    z = rule_statistics(trajectory_features(s, np.array([3]), T_pos=J - 1), rule, [3, 4, 5, 6], {})[0, 0, 0]
    assert z[0] > 1e-4 and z[1] > 1e-4 and z[2] == pytest.approx(0.0, abs=1e-15)
    p4 = np.exp(s[0, 4, :, 0, 0]) / np.exp(s[0, 4, :, 0, 0]).sum()
    p3 = np.exp(s[0, 3, :, 0, 0]) / np.exp(s[0, 3, :, 0, 0]).sum()
    assert z[1] == pytest.approx(float((p4 * np.log(p4 / p3)).sum()), rel=1e-12)
    f = fired_counts(z[None], rule)
    assert exit_positions(f, 0, rule.size)[0] == 2  # even θ = 1e-10 fires at depth 6


def _evaluated(n: int, seed: int, chunk: int, target: float):
    """evaluate_exits on n random K = 3 questions with exit gates (T = 7, candidate depths 2..6,
    2 folds, window 2, δ = 0.2, no draws)."""
    rng = np.random.default_rng(seed)
    st_ = R.Store(score=rng.integers(-2, 3, size=(n, 7, 3, 1, 1)).astype(float), K=np.full(n, 3),
                  n_arr=np.ones(n, int), label=rng.integers(0, 3, n), gate=rng.uniform(0, 0.5, (n, 7, 1, 1)),
                  tasks=["arc"] * n, chunk=chunk)
    ds = st_.dataset()
    return evaluate_exits(score_of(ds), gate=ds["exit_gate"], depths=[2, 3, 4, 5, 6], draws=0, folds=2, window=2,
                          target=target, delta=0.2)


def test_policies_are_learn_then_test_on_every_question():
    ev = _evaluated(40, seed=3, chunk=16, target=0.2)
    names = [r.name for r in ev.rules]
    tot = ev.sums[0, :, 0].sum(axis=0)
    for pol in ev.policies():
        if pol["rule"] == "richer":
            continue
        r = names.index(pol["rule"])
        k = R.ltt(list(tot[r, 2] / ev.setup.L), 40, 0.2, 0.2)
        assert pol["threshold"] == (None if k < 0 else float(ev.rules[r].grid[k]))
        assert pol["calibration_questions"] == 40 and pol["direction"] == ev.rules[r].direction
        assert "learn-then-test" in pol["method"] and "2110.01052" in pol["method"]
    assert {p["rule"] for p in ev.policies()} == {"raw", "mean", "quotient", "richer", "kl", "ouro", "max_prob",
                                                  "margin"}


def test_the_policy_bounds_the_disagreement_over_all_questions_and_shows_it_among_exits():
    """Issue 35: Learn then Test bounds the per-question disagreement over *all* questions (a
    question that runs to T counts 0); among the questions that exit the rate is higher and not
    bounded. The policy says which, and carries both: all = among exits × exit share."""
    ev = _evaluated(400, seed=5, chunk=128, target=0.3)
    names = [r.name for r in ev.rules]
    tot = ev.sums[0, :, 0].sum(axis=0)
    seen_gap = False
    for pol in ev.policies():
        assert "over all questions" in pol["guarantee"] and "counts 0" in pol["guarantee"]
        assert "fraction of answers at exit" not in pol["guarantee"]
        if pol["never_exit"] or pol["rule"] == "richer":
            continue
        r, k = names.index(pol["rule"]), ev.rules[names.index(pol["rule"])].grid.tolist().index(pol["threshold"])
        exits, disagree = tot[r, 0, k], tot[r, 2, k]  # arrangement-weighted sums over the 400 questions
        assert pol["calibration_disagreement"] == pytest.approx(disagree / ev.setup.L / 400)
        assert pol["calibration_disagreement_exits"] == pytest.approx(disagree / exits)
        share = exits / ev.setup.L / 400
        assert pol["calibration_disagreement"] == pytest.approx(pol["calibration_disagreement_exits"] * share)
        seen_gap |= share < 1 and pol["calibration_disagreement_exits"] > pol["calibration_disagreement"]
    assert seen_gap  # some policy exits on part of the questions: the two rates differ


# ------------------------------------------------------------------------------ the command
@pytest.fixture(scope="module")
def gated_store(tmp_path_factory):
    """A conforming store with the optional exit_gate, written as ``synthetic_store`` writes its
    stores (the public writer), with λ_t in (0, 0.5)."""
    from depthtraj.store import TrajectoryWriter
    from depthtraj.testing import synthetic_attrs, synthetic_questions, synthetic_scores

    path = tmp_path_factory.mktemp("exits") / "gated.zarr"
    depths = np.arange(1, 11)
    attrs = synthetic_attrs(endpoint=10, readout="label", precision=("bf16",), tasks=("arc_challenge", "mmlu"), seed=2,
                            options_displayed=True)
    qs = synthetic_questions(96, k_mix={3: 1, 4: 1}, tasks=("arc_challenge", "mmlu"), arrangements=1, seed=2)
    w = TrajectoryWriter.create(path, attrs, qs, depths=depths, optional=("exit_gate",), chunk_size=32,
                                score_dtype="float32", overwrite=True)
    for ci, region in enumerate(w.chunks()):
        rng = np.random.default_rng([2, ci])
        nc = qs.n_candidates[region]
        score = synthetic_scores(nc, depths, 1, 1, rng=rng, readout="label", dtype="float32", k_max=qs.k_max)
        gate = rng.uniform(0.0, 0.5, size=(len(nc), len(depths), 1, 1)).astype("float32")
        w.write(region, score=score, exit_gate=gate)
    w.finalize()
    return str(path)


def _invoke(*args):
    return CliRunner().invoke(app, ["exits", *map(str, args)])


def test_exits_writes_the_document_and_one_policy_per_rule(gated_store, tmp_path):
    out = tmp_path / "out"
    r = _invoke(gated_store, "--out", out, "--bootstrap", 30, "--folds", 3)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "exits.json").read_text())
    assert doc["schema"] == "depthtraj.exits/1"
    st_ = doc["stores"][0]
    assert st_["skipped"] == {} and st_["candidate_depths"] == list(range(4, 10)) and st_["endpoint"] == 10
    rules = {row["rule"].split(" ")[0] for row in st_["rules"]["rows"]}
    assert rules == {"raw", "mean", "quotient", "richer", "kl", "ouro", "max_prob", "margin"}
    files = sorted(p.name for p in out.glob("policy-*.json"))
    assert files == sorted(f"policy-{n}.json" for n in rules)
    pol = json.loads((out / "policy-ouro.json").read_text())
    for key in ("rule", "statistic", "threshold", "direction", "window", "candidate_depths", "target_disagreement",
                "delta", "method", "calibration_questions", "store", "model", "precision"):
        assert key in pol
    assert pol["direction"] == ">=" and pol["calibration_questions"] == 96 and pol["target_disagreement"] == 0.025
    assert list(out.glob("exits_*.png"))
    curves = st_["curves"]["rows"]
    assert {c["rule"] for c in curves} == rules - {"richer"}


def test_a_store_without_exit_gate_skips_the_ouro_rule(small_store, tmp_path):
    r = _invoke(small_store, "--bootstrap", 0, "-f", "json", "--folds", 2)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    st_ = doc["stores"][0]
    assert "ouro" in st_["skipped"] and "exit_gate" in st_["skipped"]["ouro"]
    assert all(not row["rule"].startswith("ouro") for row in st_["rules"]["rows"])
    assert "skipped ouro" in r.stderr


def test_table_and_csv_formats(small_store):
    r = _invoke(small_store, "--bootstrap", 20, "--depths", "4:6", "--window", 2)
    assert r.exit_code == 0 and "quotient" in r.stdout and "Work saved" in r.stdout
    r = _invoke(small_store, "--bootstrap", 0, "-f", "csv")
    assert r.exit_code == 0 and r.stdout.splitlines()[0].startswith("store,model")


@pytest.mark.parametrize("args,message", [
    (["--folds", "1"], "--folds must be ≥ 2"),
    (["--target", "2"], "--target must lie in (0, 1)"),
    (["--delta", "0"], "--delta must lie in (0, 1)"),
    (["--window", "0"], "--window must be ≥ 1"),
    (["--depths", "40:50"], "holds no recorded depth below T=8"),
    (["--depths", "4,5,40"], "not recorded below the endpoint"),
    (["--folds", "100000"], "--folds must be ≤ 100"),
    (["--bootstrap", str(10 ** 12)], "--bootstrap must be ≤ 100,000"),
    (["--depths", "four"], "not understood"),
    (["-f", "yaml"], "--format must be one of"),
])
def test_bad_options_are_one_line_and_exit_2(small_store, args, message):
    r = _invoke(small_store, *args)
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("depthtraj: error:") and message in err[0]


def test_a_bad_store_is_one_line_and_exit_2(tmp_path):
    r = _invoke(tmp_path / "missing.zarr")
    assert r.exit_code == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("depthtraj: error:")
    assert not list(tmp_path.glob("*.json"))


def test_help_lists_exits_and_stays_lazy():
    import subprocess
    import sys

    code = ("import sys; from depthtraj.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['exits', '--help']); assert r.exit_code == 0, r.output; "
            "assert '--target' in r.output and '--delta' in r.output; "
            "assert 'xarray' not in sys.modules and 'dask' not in sys.modules, 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_analyze_section_7_checks_the_exit_gate_it_reads(gated_store, tmp_path):
    """The Ouro rule of ``analyze --sections 7`` reads ``exit_gate``: a NaN gate of a complete
    question refuses the store (DT-DATA-011), as ``depthtraj exits`` does; §3–6 do not read it."""
    import shutil

    import zarr

    bad = tmp_path / "bad.zarr"
    shutil.copytree(gated_store, bad)
    g = zarr.open_group(str(bad), mode="r+")
    gate = g["exit_gate"]
    gate[3, 2, 0, 0] = np.nan
    r = CliRunner().invoke(app, ["analyze", str(bad), "--sections", "7", "--bootstrap", "0"])
    assert r.exit_code == 2 and "DT-DATA-011" in r.output and "exit_gate" in r.output, r.output
    r = CliRunner().invoke(app, ["analyze", str(bad), "--sections", "3", "--bootstrap", "0", "-f", "json"])
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------ issue 30: sparse depths, policies
def _sparse(tmp_path, depths, **kw):
    import warnings

    from depthtraj.testing import synthetic_store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return synthetic_store(tmp_path / "sparse.zarr", 48, depths=depths, chunk_size=16, seed=4, **kw)


@pytest.mark.parametrize("depths,used", [([8, 16, 24, 32], [8, 16, 24]), ([1, 2, 4, 8, 12, 15, 16], [4, 8, 12, 15])])
def test_sparse_depths_keep_the_recorded_candidates(tmp_path, depths, used):
    """spec/exits.md §3: the default candidate depths 4:T−1 are the recorded depths in that range
    (``exits``, ``analyze --sections 7`` and ``report`` ran into 'not recorded' on such stores)."""
    from depthtraj.analysis.prediction.exits import candidate_depths

    assert candidate_depths(None, depths, depths[-1]) == used
    assert candidate_depths("1:99999999999", depths, depths[-1]) == depths[:-1]  # never materialised
    store = _sparse(tmp_path, depths)
    out = tmp_path / "ex"
    r = _invoke(store, "--bootstrap", 20, "--out", out)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "exits.json").read_text())
    assert doc["stores"][0]["candidate_depths"] == used
    assert f"candidate depths {','.join(map(str, used))}" in " ".join(r.stdout.split())
    pol = json.loads((out / "policy-quotient.json").read_text())
    assert pol["candidate_depths"] == used and pol["recorded_depths"] == depths
    assert "recorded depths only" in pol["guarantee"]
    r = CliRunner().invoke(app, ["analyze", store, "--sections", "7", "--bootstrap", "20", "-f", "json"])
    assert r.exit_code == 0, r.output
    tables = json.loads(r.stdout)["analyses"][0]["tables"]
    assert "prefix_prediction" in tables and "exit_rules" in tables
    from depthtraj.analysis.report import run_report

    assert run_report([store], out=tmp_path / "rep", bootstrap=0, sections="7", grids=["native"]) == 0
    assert "pd:app:prefix-prediction" in (tmp_path / "rep" / "report.md").read_text()


def test_a_policy_records_what_a_serving_loop_must_compute(gated_store, tmp_path):
    """Issue 30 §3: the policy lists the depths its statistic runs over, the statistic's exact
    recipe and what Learn then Test's guarantee covers."""
    out = tmp_path / "p"
    r = _invoke(gated_store, "--out", out, "--bootstrap", 0, "--folds", 2)
    assert r.exit_code == 0, r.output
    for rule in ("quotient", "kl", "ouro", "richer", "margin", "max_prob"):
        pol = json.loads((out / f"policy-{rule}.json").read_text())
        assert pol["recorded_depths"] == list(range(1, 11)) and pol["candidate_depths"] == list(range(4, 10))
        recipe = pol["recipe"]
        assert recipe["kind"] in ("prefix", "kl", "ouro", "max_prob", "margin") and recipe["statistic"]
        assert "1 − δ" not in pol["guarantee"] and "probability at least 0.9" in pol["guarantee"]
        assert "exchangeable" in pol["guarantee"]
    q = json.loads((out / "policy-quotient.json").read_text())["recipe"]
    assert q["radius"].startswith("B_q") and "last 4 steps" in q["aggregation"]
    assert "recorded s ≤ t" in json.loads((out / "policy-ouro.json").read_text())["recipe"]["statistic"]


def test_the_guarantee_names_the_arrangement_averaged_risk(small_store):
    r = _invoke(small_store, "--bootstrap", 0, "-f", "json", "--folds", 2)
    assert r.exit_code == 0, r.output
    pol = json.loads(r.stdout)["stores"][0]["policies"][0]
    assert "2 displayed arrangements" in pol["guarantee"] and "another population" in pol["guarantee"]


# ------------------------------------------------------------------ issue 30 §5: admission and output
def test_exits_refuses_score_defects_as_analyze_does(tmp_path):
    import shutil

    import zarr

    bad = tmp_path / "bad.zarr"
    shutil.copytree(_sparse(tmp_path, [1, 2, 3, 4, 5, 6, 7, 8]), bad)
    zarr.open_group(str(bad), mode="r+")["score"][3, 1, 0, 0, 0] = 0.5  # a label log-probability above 0
    r = _invoke(bad, "--bootstrap", 0, "--out", tmp_path / "o")
    assert r.exit_code == 2 and "DT-DATA-003" in r.stderr and "--allow-defects" in r.stderr, r.output
    assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(app, ["analyze", str(bad), "--bootstrap", "0"])
    assert r.exit_code == 2 and "DT-DATA-003" in r.stderr
    r = _invoke(bad, "--bootstrap", 0, "--allow-defects")
    assert r.exit_code == 0 and "analysed anyway" in r.stderr, r.output


def test_exits_out_is_written_whole_or_not_at_all(small_store, tmp_path, monkeypatch):
    from depthtraj.analysis.prediction import command

    out = tmp_path / "ex"
    r = _invoke(small_store, "--bootstrap", 0, "--folds", 2, "--out", out)
    assert r.exit_code == 0 and (out / "exits.json").is_file()
    r = _invoke(small_store, "--bootstrap", 0, "--folds", 2, "--out", out)
    assert r.exit_code == 2 and "exists and is not empty" in r.stderr
    assert _invoke(small_store, "--bootstrap", 0, "--folds", 2, "--out", out, "--overwrite").exit_code == 0

    def boom(directory, *a, **k):
        (directory / "exits.json").write_text("{")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(command, "_write_files", boom)
    fresh = tmp_path / "fresh"
    r = _invoke(small_store, "--bootstrap", 0, "--folds", 2, "--out", fresh)
    assert r.exit_code == 2 and "No space left" in r.stderr
    assert not fresh.exists() and not list(tmp_path.glob(".fresh.tmp-*"))


def test_the_family_order_is_the_one_the_spec_writes():
    """spec/exits.md §2: the richer comparator's members in the order that breaks ties."""
    from depthtraj.analysis.prediction.prefix import family_rules

    names = [r.name for r in family_rules(4)]
    assert names == ["raw", "mean", "quotient", "raw-step-1", "mean-step-1", "q-step-1",
                     "raw-step-2", "mean-step-2", "q-step-2", "raw-disp-2", "mean-disp-2", "q-disp-2",
                     "raw-disp-4", "mean-disp-4", "q-disp-4", "raw-step-8", "mean-step-8", "q-step-8",
                     "raw-disp-8", "mean-disp-8", "q-disp-8"]


def test_ties_among_family_members_go_to_the_first_in_family_order():
    from depthtraj.analysis.prediction import exits as E

    tot = np.zeros((4, 4, 3))
    tot[1, 1, 2] = tot[2, 1, 0] = tot[3, 1, 1] = 7.0  # members 1, 2, 3 save 7 steps each
    picks = {1: 2, 2: 0, 3: 1}
    assert E._select(tot, [0, 1, 2, 3], lambda r: picks.get(r, -1)) == (1, 2)
    assert E._select(tot, [0, 3, 2, 1], lambda r: picks.get(r, -1)) == (3, 1)


def test_a_store_too_small_for_learn_then_test_says_so(small_store):
    """Issue 28: every rule printed 'never' with 0.00 [0.00,0.00] without saying that Learn then
    Test cannot certify anything at that n; the title (and the figure) name the n it needs."""
    from depthtraj.analysis.prediction.exits import hb_pvalue, ltt_min_questions

    n = ltt_min_questions(0.025, 0.1)
    assert n == 91 and hb_pvalue(0.0, n, 0.025) <= 0.1 < hb_pvalue(0.0, n - 1, 0.025)
    r = _invoke(small_store, "--bootstrap", 0, "-f", "json", "--folds", 2)
    title = json.loads(r.stdout)["stores"][0]["rules"]["title"]
    import re

    assert "too few questions for Learn then Test" in title and "at least 91" in title
    assert re.search(r"this store has \d+ per training fold \(64 for the policy\)", title)
