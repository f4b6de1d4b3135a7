"""Readout normalisation (pd:app:eq:text-scoring), question selection and text-store tables."""

import json

import numpy as np
import pytest

from depthtraj.analysis.cli import run_analyze
from depthtraj.analysis.core.inputs import normalized_score, parse_selections, readout_info, select_questions
from depthtraj.store import open_store
from depthtraj.testing import synthetic_store


@pytest.fixture(scope="module")
def text_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.zarr"
    return synthetic_store(path, 40, endpoint=8, k_mix={3: 0.3, 4: 0.5, 5: 0.2}, arrangements=4,
                           readout="text", chunk_size=16, seed=3)


def test_normalisations_are_the_paper_divisors(text_store):
    ds = open_store(text_store)
    assert readout_info(ds)["label"] in ("F2", "F3")
    total = ds.logprob_sum.values.astype(np.float64)
    n_tok = ds.n_tokens.values[:, None, :, :, None].astype(np.float64)  # (q, 1, c, a, 1)
    n_chr = ds.n_chars.values[:, None, :, None, None].astype(np.float64)
    K = ds.n_candidates.values
    real = np.arange(ds.sizes["candidate"])[None, None, :, None, None] < K[:, None, None, None, None]
    for name, want in (("sum", total), ("token", total / np.where(n_tok > 0, n_tok, np.nan)),
                       ("char", total / np.where(n_chr > 0, n_chr, np.nan))):
        got = normalized_score(ds, name)["score"].values
        want = np.where(real, want, np.nan).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True, err_msg=name)
        assert np.isnan(got[~np.broadcast_to(real, got.shape)]).all()
    # lm-eval's acc_norm divides by the answer text's characters, the target delimiter " " not counted
    got = normalized_score(ds, "lmeval")["score"].values
    want = np.where(real, total / np.where(n_chr - 1 > 0, n_chr - 1, np.nan), np.nan).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    # the stored score is the character mean
    np.testing.assert_allclose(normalized_score(ds, "char")["score"].values, ds.score.values, rtol=1e-5, equal_nan=True)
    assert normalized_score(ds, None) is ds


def test_lmeval_accuracy_is_the_argmax_of_its_scores(capsys, text_store):
    """``--normalization sum`` / ``lmeval`` reproduce lm-eval's acc / acc_norm at the endpoint:
    the share of (question, arrangement) whose argmax (first maximum) of logprob_sum / L is the
    label, arrangements averaged within questions."""
    ds = open_store(text_store)
    T = int(ds.depth.values[-1])
    total = ds.logprob_sum.sel(depth=T).values.astype(np.float64)  # q, c, a, p
    n_chr = ds.n_chars.values.astype(np.float64)
    K, label = ds.n_candidates.values, ds.label.values
    tasks = np.array([str(t) for t in np.asarray(ds.task.values).tolist()])
    for name, L in (("sum", np.ones_like(n_chr)), ("lmeval", n_chr - 1)):
        code = run_analyze([text_store], grids=["quarter"], bootstrap=0, fmt="json", normalization=name, sections="4")
        out, err = capsys.readouterr()
        assert code == 0, err
        rows = json.loads(out)["analyses"][0]["tables"]["accuracy"]["rows"]
        for row in rows:
            per_q = []
            for i in np.flatnonzero(tasks == row["task"]):
                hits = [float(np.argmax(total[i, :K[i], a, 0] / L[i, :K[i]]) == label[i])
                        for a in range(ds.sizes["arrangement"]) if np.isfinite(total[i, :K[i], a, 0]).all()]
                per_q.append(np.mean(hits))
            assert row["A_T"] == pytest.approx(100 * np.mean(per_q), abs=1e-9), name


def test_selection_keeps_matching_questions(text_store):
    ds = open_store(text_store)
    sel = parse_selections(["K=4,5", "task=mmlu"])
    assert sel == {"n_candidates": ["4", "5"], "task": ["mmlu"]}
    sub = select_questions(ds, sel)
    K = ds.n_candidates.values
    tasks = np.asarray(ds.task.values).tolist()
    want = [q for q, k, t in zip(ds.question.values.tolist(), K, tasks) if k in (4, 5) and t == "mmlu"]
    assert sub.question.values.tolist() == want


def test_text_store_tables_and_normalisations(capsys, text_store):
    code = run_analyze([text_store], grids=["quarter"], bootstrap=50, fmt="json", normalization="token")
    out, err = capsys.readouterr()
    assert code == 0, err
    a = json.loads(out)["analyses"][0]
    assert a["readout"].endswith("token") and "text_geometry" in a["tables"]
    assert set(a["skipped"]) == {"precision"}  # one arm: the only table a one-arm text store lacks
    row = a["tables"]["text_geometry"]["rows"][0]
    assert row["delta_dp"] == pytest.approx(row["delta_dir"] + row["delta_pair"], abs=1e-8)


def test_text_variants_from_several_normalisations(capsys, text_store, tmp_path):
    from depthtraj.testing import synthetic_store

    label = synthetic_store(tmp_path / "label.zarr", 40, endpoint=8, k_mix={3: 0.3, 4: 0.5, 5: 0.2}, seed=3)
    code = run_analyze([label, text_store], grids=["quarter", "native"], bootstrap=40, fmt="json",
                       normalization="sum,token,char")
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    readouts = {(a["store"], a["readout"]) for a in doc["analyses"]}
    assert sorted(r.split()[-1] for s, r in readouts if s == text_store) == ["char", "sum", "token"]
    assert [r for s, r in readouts if s == label] == ["F1"]  # a label store is analysed as it is
    tv = next(t for t in doc["comparisons"] if t["name"] == "text_variants")
    by_readout = {}
    for r in tv["rows"]:
        by_readout.setdefault(r["readout"].split()[-1], []).append(r)
    assert set(by_readout) == {"F1", "sum", "token", "char"}
    for a in doc["analyses"]:  # ΔW of every row is the depth_area increment of its analysis
        for r in a["tables"]["depth_area"]["rows"]:
            row = next(x for x in tv["rows"] if (x["store"], x["readout"], x["task"], x["precision"]) == (a["store"], a["readout"], r["task"], r["precision"]))
            assert row[f"dW_{a['grid']}"] == pytest.approx(r["delta_tr"])
        # Ξ (pd:app:eq:xi) is the §5 marginal table's all-increment Ξ_obs of the same analysis
        for r in a["tables"].get("marginal", {}).get("rows", []):
            if r["window"] != "all":
                continue
            row = next(x for x in tv["rows"] if (x["store"], x["readout"], x["task"], x["precision"]) == (a["store"], a["readout"], r["task"], r["precision"]))
            assert (row["xi"], row["xi_lo"], row["xi_hi"]) == (r["xi_obs"], r["xi_obs_lo"], r["xi_obs_hi"])
            assert 0 <= row["xi_lo"] <= row["xi"] <= row["xi_hi"] <= 100
    assert all(r["xi"] is not None for r in tv["rows"])
    assert any(t["name"] == "format" for t in doc["comparisons"])  # label vs text on shared ids
