"""The writer protocol: template, whole-chunk regions, complete flags, resume checks, finalize."""

import numpy as np
import pytest
import dask.array as da

from depthtraj.store import QuestionSet, StoreError, TrajectoryWriter, open_store, question_seed
from depthtraj.testing import synthetic_attrs, synthetic_questions, synthetic_scores, synthetic_store


def _writer(tmp_path, n=10, chunk=4, **kw):
    attrs = synthetic_attrs(endpoint=3)
    qs = synthetic_questions(n, k_mix={3: 1, 4: 1, 5: 1})
    return TrajectoryWriter.create(tmp_path / "s.zarr", attrs, qs, chunk_size=chunk, optional=(), **kw), attrs, qs


def _arrays(w, region, seed=0):
    kk = np.asarray(w.group["n_candidates"][region])
    rng = np.random.default_rng(seed)
    return {"score": synthetic_scores(kk, np.arange(1, 4), 1, 1, rng=rng)}


def test_template_layout(tmp_path):
    w, attrs, qs = _writer(tmp_path)
    ds = open_store(w.path)
    assert ds.score.dims == ("question", "depth", "candidate", "arrangement", "precision")
    assert ds.score.shape == (10, 3, 5, 1, 1)
    assert ds.score.chunks[0] == (4, 4, 2)
    assert all(len(c) == 1 for c in ds.score.chunks[1:])  # other dims whole
    assert not ds.complete.values.any()
    assert np.isnan(ds.score.values).all()
    assert list(ds.question.values) == qs.id
    assert ds.attrs["depthtraj"]["endpoint"] == 3
    assert w.group["question"].metadata.data_type.to_json(zarr_format=3) == "string"  # vlen UTF-8


def test_regions_must_be_whole_chunks(tmp_path):
    w, *_ = _writer(tmp_path)
    with pytest.raises(StoreError, match="whole chunks"):
        w.write(slice(1, 4), **_arrays(w, slice(1, 4)))
    with pytest.raises(StoreError, match="whole chunks"):
        w.write(slice(0, 6), **_arrays(w, slice(0, 6)))
    w.write(slice(8, 10), **_arrays(w, slice(8, 10)))  # the short last chunk is whole
    with pytest.raises(StoreError, match="missing"):
        w.write(slice(0, 4))


def test_complete_and_pending(tmp_path):
    w, *_ = _writer(tmp_path)
    assert w.pending() == [slice(0, 4), slice(4, 8), slice(8, 10)]
    w.write(slice(4, 8), **_arrays(w, slice(4, 8)))
    assert w.pending() == [slice(0, 4), slice(8, 10)]
    assert w.complete().tolist() == [False] * 4 + [True] * 4 + [False] * 2
    with pytest.raises(StoreError, match="incomplete"):
        w.finalize()


def test_resume_checks_coordinates(tmp_path):
    w, attrs, qs = _writer(tmp_path)
    w.write(slice(0, 4), **_arrays(w, slice(0, 4)))
    again = TrajectoryWriter.resume(w.path, qs, attrs)
    assert again.pending() == [slice(4, 8), slice(8, 10)]
    other = QuestionSet(**{**qs.__dict__, "id": [f"z{i}" for i in range(10)]})
    with pytest.raises(StoreError, match=r"coordinate question\[0\]"):
        TrajectoryWriter.resume(w.path, other, attrs)
    reseeded = qs.with_seeds(99)
    with pytest.raises(StoreError, match="coordinate seed"):
        TrajectoryWriter.resume(w.path, reseeded, attrs)
    with pytest.raises(StoreError, match="endpoint"):
        TrajectoryWriter.resume(w.path, qs, attrs.model_copy(update={"endpoint": 4}))
    # nothing was rewritten
    assert list(open_store(w.path).question.values) == qs.id


def test_create_refuses_existing(tmp_path):
    w, attrs, qs = _writer(tmp_path)
    with pytest.raises(StoreError, match="already exists"):
        TrajectoryWriter.create(w.path, attrs, qs)


def test_finalize_consolidates(tmp_path):
    p = synthetic_store(tmp_path / "s.zarr", n=20, endpoint=4, chunk_size=8)
    import json

    meta = json.loads((tmp_path / "s.zarr" / "zarr.json").read_text())
    assert "consolidated_metadata" in meta and meta["consolidated_metadata"]
    assert open_store(p).complete.values.all()


def test_seeds_depend_only_on_id():
    assert question_seed(0, "a") == question_seed(0, "a")
    assert question_seed(0, "a") != question_seed(1, "a")
    assert 0 <= question_seed(123, "Mercury_7175875") < 2**63


def test_synthetic_store_is_lazy_and_well_formed(tmp_path):
    p = synthetic_store(tmp_path / "s.zarr", n=300, endpoint=6, k_mix={3: 1, 4: 2, 5: 1}, arrangements=4, precision=("bf16", "fp32"), readout="label", chunk_size=128, tie_rate=0.1, stall_rate=0.2)
    ds = open_store(p)
    assert isinstance(ds.score.data, da.Array)
    s = ds.score.values
    k = ds.n_candidates.values
    present = np.arange(5)[None, :] < k[:, None]
    assert np.isfinite(s.transpose(0, 2, 1, 3, 4)[present]).all()
    assert np.isnan(s.transpose(0, 2, 1, 3, 4)[~present]).all()
    assert np.nanmax(s) <= 0
    order = ds.arrangement_order.values
    for i in range(20):
        for a in range(4):
            assert sorted(order[i, a, : k[i]]) == list(range(k[i]))


def test_open_store_errors(tmp_path):
    with pytest.raises(StoreError, match="no such file"):
        open_store(tmp_path / "missing.zarr")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreError, match="not a zarr v3 group"):
        open_store(tmp_path / "plain")


def test_question_text_is_stored_declared_1_4_and_shown(tmp_path):
    """Format 1.4: a QuestionSet with ``question_text`` writes the variable, the store declares
    1.4.0 (the oldest version holding it) and validates clean, ``depthtraj question`` shows what
    was asked, and a resume with another question's text is refused."""
    from depthtraj.analysis.trajectory import question_trajectory, render_trajectory
    from depthtraj.validate import validate_store

    attrs = synthetic_attrs(endpoint=3)
    qs = synthetic_questions(4, k_mix={4: 1})
    asked = ["Which gas do plants take in?", "", "What is 2 + 2?\nAnswer briefly.", "Ünïcode ✓"]
    qs = QuestionSet(**{**qs.__dict__, "question_text": asked})
    w = TrajectoryWriter.create(tmp_path / "q.zarr", attrs, qs, chunk_size=4, optional=())
    w.write(slice(0, 4), **_arrays(w, slice(0, 4)))
    w.finalize()
    ds = open_store(w.path)
    assert ds["question_text"].dims == ("question",) and list(ds["question_text"].values) == asked
    assert ds.attrs["depthtraj"]["format_version"] == "1.4.0"
    report = validate_store(w.path)
    assert report.findings == [] and report.format_version == "1.4.0"
    first = question_trajectory(ds, qs.id[0])
    assert first.question_text == asked[0] and first.to_json()["question_text"] == asked[0]
    assert f"question text: {asked[0]}" in render_trajectory(first)
    assert "question text: What is 2 + 2? Answer briefly." in render_trajectory(question_trajectory(ds, qs.id[2]))
    with pytest.raises(StoreError, match="question_text"):
        TrajectoryWriter.resume(w.path, QuestionSet(**{**qs.__dict__, "question_text": asked[::-1]}), attrs)
    # without the field, the store stays at the version its other content needs
    plain, _, _ = _writer(tmp_path / "plain")
    assert "question_text" not in open_store(plain.path) and open_store(plain.path).attrs["depthtraj"]["format_version"] != "1.4.0"
