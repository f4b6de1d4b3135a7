"""Per-question inputs read chunk by chunk (:mod:`depthtraj.analysis.core.questions`): the pass never
holds a whole per-question column, and its results do not depend on how questions are chunked."""

from __future__ import annotations

import numpy as np
import pytest

from depthtraj.store import open_store


def _pass(ds, chunk, draws=20):
    from depthtraj.analysis import finish_pass, parse_grid, score_of, store_pass

    score = score_of(ds)
    score = score.chunk({"question": chunk})
    rec = [int(t) for t in ds.depth.values]
    grids = [parse_grid(g, rec, rec[-1]) for g in ("quarter", "native")]
    delayed, meta = store_pass(score, grids, by="task", draws=draws, seed=3, windows=((1, 2), (5, 6), 1))
    return finish_pass(delayed.compute(), meta)


def test_question_ids_and_coordinates_stay_lazy(small_store):
    from depthtraj.analysis import score_of

    ds = open_store(small_store, question_index=False)
    assert "question" not in ds.indexes and "depth" in ds.indexes and "precision" in ds.indexes
    score = score_of(ds)
    for name in ("question", "task", "subject", "n_candidates", "label", "n_arrangements"):
        assert score[name].chunks is not None, name  # dask-backed: read chunk by chunk
        assert score[name].chunks[0] == score.chunks[0], name


@pytest.mark.parametrize("chunk", [5, 16, 64])
def test_pass_does_not_depend_on_chunking_or_the_index(small_store, chunk):
    # cells and marginal groups come from each chunk's own keys merged by name in order of
    # first appearance: the same names, order and sums for any chunking, with or without an index
    ref = _pass(open_store(small_store), 64)
    got = _pass(open_store(small_store, question_index=False), chunk)
    assert got.groups == ref.groups
    np.testing.assert_allclose(got.sums, ref.sums, rtol=1e-12)
    np.testing.assert_array_equal(got.counts, ref.counts)
    np.testing.assert_allclose(got.boot_sums, ref.boot_sums, rtol=1e-6)
    np.testing.assert_allclose(got.ladder, ref.ladder, rtol=1e-12, atol=1e-12)
    for win in ("all", "late"):
        for key in ("xi_marg", "xi_obs", "n"):
            np.testing.assert_allclose(got.extra["marginal"][win][key], ref.extra["marginal"][win][key], rtol=1e-12)
    for name, (s, c) in ref.extra["sum"].items():
        np.testing.assert_allclose(got.extra["sum"][name][0], s, rtol=1e-12, atol=1e-12, err_msg=name)


def test_cells_and_groups_are_in_order_of_first_appearance():
    from depthtraj.analysis.core.questions import group_name, local_codes, merge_keys

    cols = {"cell": np.array(["b", "a", "b", "c"], dtype=object), "within:subject": np.array(["x", "y", "x", "x"]),
            "K": np.array([4, 4, 4, 5]), "A": np.array([1, 1, 1, 1])}
    cells, rows, cc, gc = local_codes(cols)
    assert cells == ["b", "a", "c"] and cc.tolist() == [0, 1, 0, 2]
    assert rows == [("b", "x", 4, 1), ("a", "y", 4, 1), ("c", "x", 5, 1)] and gc.tolist() == [0, 1, 0, 2]
    assert group_name(rows[2]) == "c|x|K=5|A=1"
    keys, pos = merge_keys(["a", "b"], ["c", "a"])
    assert keys == ["a", "b", "c"] and pos.tolist() == [2, 0]


def test_marginal_groups_match_a_plain_loop(small_store):
    from depthtraj.analysis import score_of
    from depthtraj.analysis.composition.marginal import marginal_groups

    ds = open_store(small_store)
    score = score_of(ds)
    names, codes, cells, cell_of, K_of = marginal_groups(score)
    A = np.asarray(score.n_arrangements.values)
    seen: dict = {}
    want = [seen.setdefault(f"{t}|{s}|K={k}|A={a}", len(seen))
            for t, s, k, a in zip(ds.task.values.tolist(), ds.subject.values.tolist(),
                                  ds.n_candidates.values.tolist(), A.tolist())]
    assert names == list(seen) and codes.tolist() == want
    assert cells == list(dict.fromkeys(ds.task.values.tolist()))
    assert [cells[c] for c in cell_of] == [n.split("|")[0] for n in names]
    assert K_of.tolist() == [int(n.split("K=")[1].split("|")[0]) for n in names]


def test_open_for_analysis_reads_canonical_chunks(small_store, monkeypatch):
    # analysis chunks are a power of two of questions fitting CHUNK_BYTES, whatever the stored
    # chunks (16 here), each read straight from the store: every per-question coordinate
    # chunked alike, the same pass results as in the stored chunks
    from depthtraj.analysis import open_for_analysis, score_of
    from depthtraj.analysis.core import data

    ds = open_store(small_store, question_index=False)
    per_question = int(np.prod(ds["score"].shape[1:])) * ds["score"].dtype.itemsize
    monkeypatch.setattr(data, "CHUNK_BYTES", 40 * per_question)  # room for 2.5 stored chunks
    assert data.analysis_rows(ds) == 32  # the power of two below 40
    opened = open_for_analysis(small_store)
    assert "question" not in opened.indexes
    score = score_of(opened)
    assert score.chunks[0] == (32, 32)
    for name in ("question", "task", "n_candidates", "label"):
        assert score[name].chunks[0] == (32, 32), name
    ref, got = _pass(ds, 16), _pass(opened, 32)
    assert got.groups == ref.groups
    np.testing.assert_allclose(got.sums, ref.sums, rtol=1e-12)
    np.testing.assert_allclose(got.boot_sums, ref.boot_sums, rtol=1e-12)
    # a selection keeps the canonical cuts: chunks of 32 over the selected questions
    assert score_of(opened.isel(question=np.arange(3, 64))).chunks[0] == (32, 29)
    monkeypatch.setattr(data, "CHUNK_BYTES", 16 * per_question)  # the stored chunk is the analysis chunk
    assert data.analysis_rows(ds) == 16
    assert score_of(open_for_analysis(small_store)).chunks[0] == (16,) * 4


@pytest.mark.parametrize("kind", ["StringDType", "object", "U", "int"])
def test_key_factorisation_matches_a_plain_loop(kind):
    # codes and uniques in order of first appearance, whatever the number of values (the
    # whole-column scans for the common values, then hashing for the rest) and the dtype
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from depthtraj.analysis.core.questions import _factorize

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.integers(0, 12), max_size=300), st.integers(1, 12))
    def check(draw, spread):
        vals = [v % spread for v in draw]
        if kind == "int":
            x, want_vals = np.array(vals, dtype=np.int64), vals
        else:
            names = [f"t{v}" if v else "" for v in vals]  # "" too: an empty text is a value
            dtype = {"StringDType": np.dtypes.StringDType(), "object": object, "U": "U4"}[kind]
            x, want_vals = np.array(names, dtype=dtype).reshape(len(names)), names
        seen: dict = {}
        want = [seen.setdefault(v, len(seen)) for v in want_vals]
        codes, uniques = _factorize(x, kind != "int")
        assert codes.tolist() == want and list(uniques) == list(seen)

    check()


@pytest.mark.parametrize("draws", [0, 20])
def test_a_pass_without_geometry_gives_the_same_later_sections(small_store, draws):
    # geometry=False skips the §3 sweep: no geometry column, zero ladder totals; the §5–6 sums,
    # their bootstrap and the marginal reference are those of the full pass (same questions, keys)
    from depthtraj.analysis import finish_pass, parse_grid, score_of, store_pass

    score = score_of(open_store(small_store, question_index=False))
    rec = [int(t) for t in score.depth.values]
    grids = [parse_grid(g, rec, rec[-1]) for g in ("quarter", "native")]
    kw = dict(by="task", draws=draws, seed=3, windows=((1, 2), (5, 6), 1))
    full = finish_pass(*((lambda d, m: (d.compute(), m))(*store_pass(score, grids, **kw))))
    d, meta = store_pass(score, grids, geometry=False, dynamics=False, **kw)
    part = finish_pass(d.compute(), meta)
    assert part.columns == [] and part.sums.shape == (len(full.groups), 0) and not part.ladder.any()
    assert part.groups == full.groups
    for name, (s, c, bs, bc) in part.extra["boot"].items():
        f = full.extra["boot"][name]
        np.testing.assert_array_equal(s, f[0], err_msg=name)
        np.testing.assert_array_equal(c, f[1], err_msg=name)
        np.testing.assert_allclose(bs, f[2], rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(bc, f[3], rtol=1e-6, err_msg=name)
    from depthtraj.analysis.composition.section import ENERGY_SUM
    from depthtraj.analysis.sensitivity.section import SCALE_SUM

    assert set(part.extra["sum"]) == {f"int_{v}" for v in ENERGY_SUM} | set(SCALE_SUM)
    for name, (s, c) in part.extra["sum"].items():
        np.testing.assert_array_equal(s, full.extra["sum"][name][0], err_msg=name)
    for win in ("all", "late"):
        for key in ("xi_marg", "xi_obs", "n"):
            np.testing.assert_array_equal(part.extra["marginal"][win][key], full.extra["marginal"][win][key])
