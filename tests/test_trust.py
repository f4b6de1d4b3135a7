"""``depthtraj analyze`` holds every store to the contract before computing (issue: trustworthy
results). Each case is a store class that today's main analysed silently (exit 0 with tables)
or crashed on (a traceback): another format major, a deleted or corrupt chunk, incomplete
questions counted in N, data defects (positive label log-probabilities, values past K), wrong
dtypes and shapes. Each must give exit 2 and one line naming the store and the rule, array or
chunk, with nothing written — or, for incomplete questions, an explicit exclusion."""

from __future__ import annotations

import json
import os
import shutil
import warnings

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from depthtraj.cli import app
from depthtraj.trust import UntrustedStore, admit


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A conforming store: 48 questions in chunks of 16, K in {3,4,5}, 2 arrangements, 2 arms."""
    from depthtraj.testing import synthetic_store

    path = tmp_path_factory.mktemp("trust") / "base.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return synthetic_store(path, 48, endpoint=6, k_mix={3: 1, 4: 1, 5: 1}, arrangements=2,
                               precision=("bf16", "fp32"), chunk_size=16)


@pytest.fixture
def store(base, tmp_path):
    """A fresh copy of ``base`` to break."""
    dst = tmp_path / "store.zarr"
    shutil.copytree(base, dst)
    return str(dst)


def _analyze(*args):
    r = CliRunner().invoke(app, ["analyze", *args, "--bootstrap", "20", "--grid", "quarter",
                                 "--sections", "3,4", "--format", "json"])
    return r.exit_code, r.stdout, r.stderr


def _set_values(path, name, index, value, *, consolidate=False):
    """Overwrite ``name[index] = value`` in place (chunks rewritten through zarr)."""
    arr = zarr.open_array(f"{path}/{name}", mode="r+")
    arr[index] = value
    if consolidate:
        zarr.consolidate_metadata(path)


def _root_attrs(path, edit):
    """Edit the depthtraj attrs in the root zarr.json and its consolidated copy."""
    meta = f"{path}/zarr.json"
    with open(meta) as f:
        doc = json.load(f)
    edit(doc["attributes"]["depthtraj"])
    with open(meta, "w") as f:
        json.dump(doc, f)


def _one_error_line(code, out, err, *needles):
    assert code == 2, (code, err)
    assert out == ""  # nothing on stdout: no tables, no partial JSON
    lines = [x for x in err.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("depthtraj: error:")]
    assert len(errors) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in errors[0], (n, errors[0])
    return errors[0]


# -- refused before computing --------------------------------------------------------------------
def test_other_format_major_is_refused(store, tmp_path):
    _root_attrs(store, lambda a: a.update(format_version="2.0.0"))
    out_dir = tmp_path / "out"
    code, out, err = _analyze(store, "--out", str(out_dir))
    _one_error_line(code, out, err, store, "DT-ATTR-002", "2.0.0")
    assert not out_dir.exists()  # nothing written


def test_missing_score_chunk_is_named(store):
    shutil.rmtree(f"{store}/score/c/1")  # questions 16..31
    line = _one_error_line(*_analyze(store), store, "'score'", "(1, 0, 0, 0, 0)", "16")
    assert "missing" in line


def test_corrupt_score_chunk_is_named(store):
    with open(f"{store}/score/c/2/0/0/0/0", "wb") as f:
        f.write(b"not a zstd frame")
    line = _one_error_line(*_analyze(store), store, "'score'", "(2, 0, 0, 0, 0)")
    assert "decode" in line


@pytest.mark.parametrize("name", ["subject", "seed", "label", "n_candidates", "question"])
def test_corrupt_metadata_chunk_is_named(store, name):
    with open(f"{store}/{name}/c/0", "wb") as f:
        f.write(b"\x00garbage")
    _one_error_line(*_analyze(store), store, f"'{name}'")


def test_wrong_dtype_is_refused(store):
    meta = f"{store}/score/zarr.json"
    doc = json.load(open(meta))
    doc["data_type"] = "int32"
    doc["fill_value"] = 0
    json.dump(doc, open(meta, "w"))
    _one_error_line(*_analyze(store), store, "DT-STRUCT-003", "score")


def test_wrong_shape_is_refused(store):
    meta = f"{store}/label/zarr.json"
    doc = json.load(open(meta))
    doc["shape"] = [40]
    json.dump(doc, open(meta, "w"))
    _one_error_line(*_analyze(store), store, "DT-STRUCT-005", "label")


def test_store_with_no_complete_question_is_refused(store):
    _set_values(store, "complete", slice(None), False)
    _one_error_line(*_analyze(store), store, "none of its 48 questions is complete")


# -- incomplete questions: excluded, counted, said ------------------------------------------------
def test_incomplete_questions_are_excluded_and_counted(store, base):
    _set_values(store, "complete", slice(0, 5), False)  # their scores are written: they would count
    code, out, err = _analyze(store)
    assert code == 0, err
    assert "excluded 5 of 48 questions that are incomplete" in err and "'q00000000'" in err
    doc = json.loads(out)
    (inp,) = doc["inputs"]
    assert (inp["n_questions"], inp["n_complete"], inp["n_incomplete"]) == (48, 43, 5)
    assert inp["incomplete"][:2] == ["q00000000", "q00000001"]
    a = doc["analyses"][0]
    assert a["n_questions"] == 43 and a["n_incomplete"] == 5
    # the same numbers as the store holding only the 43 complete questions
    rows = {(r["task"], r["precision"]): r["N"] for r in a["tables"]["depth_area"]["rows"]}
    assert sum(rows.values()) == 2 * 43


def test_incomplete_excluded_equals_never_written(tmp_path):
    """A collection cut short (last chunk unwritten) analyses exactly its written questions."""
    from depthtraj.testing import synthetic_store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cut = synthetic_store(tmp_path / "cut.zarr", 48, endpoint=6, chunk_size=16, complete=False)
    code, out, err = _analyze(cut)
    assert code == 0, err
    assert "excluded 16 of 48" in err
    assert json.loads(out)["analyses"][0]["n_questions"] == 32


# -- data defects: refused unless --allow-defects -------------------------------------------------
def test_positive_label_logprob_is_a_defect(store):
    s = zarr.open_array(f"{store}/score", mode="r+")
    block = s[3:4]
    block[0, 2, 0, 0, 1] = 0.25  # question 3, depth 3, candidate 0, arrangement 0, fp32
    s[3:4] = block
    _one_error_line(*_analyze(store), store, "DT-DATA-003", "'q00000003'", "depth=3", "--allow-defects")
    code, out, err = _analyze(store, "--allow-defects")
    assert code == 0, err
    assert "DT-DATA-003" in err and "analysed anyway" in err
    (inp,) = json.loads(out)["inputs"]
    (d,) = inp["defects"]
    assert (d["rule"], d["values"], d["questions"]) == ("DT-DATA-003", 1, 1) and inp["defects_allowed"]


def test_value_past_n_candidates_is_a_defect(store):
    K = zarr.open_array(f"{store}/n_candidates", mode="r")[:]
    q = int(np.flatnonzero(K == 3)[0])
    s = zarr.open_array(f"{store}/score", mode="r+")
    block = s[q:q + 1]
    block[0, :, 4, 0, 0] = -1.0  # candidate 4 of a K = 3 question
    s[q:q + 1] = block
    _one_error_line(*_analyze(store), store, "DT-DATA-002", "past the candidates")


def test_nan_score_of_a_complete_question_is_a_defect(store):
    s = zarr.open_array(f"{store}/score", mode="r+")
    block = s[7:8]
    block[0, 1, 0, 0, 0] = np.nan
    s[7:8] = block
    _one_error_line(*_analyze(store), store, "DT-DATA-001", "'q00000007'")


def test_label_out_of_range_is_a_defect(store):
    _set_values(store, "label", 4, 9)
    _one_error_line(*_analyze(store), store, "DT-DATA-006")


# -- the Python entry point -----------------------------------------------------------------------
def test_admit_reports_without_computing(store):
    _set_values(store, "complete", slice(40, 48), False)
    adm = admit(store)
    assert adm.n_incomplete == 8 and adm.incomplete_ids[0] == "q00000040" and not adm.defects
    _root_attrs(store, lambda a: a.update(format_version="2.0.0"))
    with pytest.raises(UntrustedStore, match="DT-ATTR-002"):
        admit(store)


def test_clean_store_is_admitted_unchanged(base):
    adm = admit(base)
    assert adm.n_incomplete == 0 and adm.consolidated and not adm.defects and not adm.notes


def test_open_for_analysis_admits_the_store(store, base):
    """The Python entry point holds the store to the same contract as ``depthtraj analyze``."""
    from depthtraj.analysis import ExcludedQuestionsWarning, open_for_analysis

    whole = open_for_analysis(base)
    assert whole.sizes["question"] == 48 and whole.attrs["depthtraj_admission"]["n_incomplete"] == 0
    _set_values(store, "complete", slice(10, 14), False)
    with pytest.warns(ExcludedQuestionsWarning, match="excluded 4 of 48 questions"):
        ds = open_for_analysis(store)
    assert ds.sizes["question"] == 44 and "q00000010" not in ds["question"].values.tolist()
    assert ds.attrs["depthtraj_admission"]["incomplete"][:1] == ["q00000010"]
    assert open_for_analysis(store, check=False).sizes["question"] == 48  # explicit opt-out
    _set_values(store, "label", 4, 9)
    with pytest.raises(UntrustedStore, match="DT-DATA-006"):
        open_for_analysis(store)
    with pytest.warns(ExcludedQuestionsWarning):
        assert open_for_analysis(store, allow_defects=True).sizes["question"] == 44
    shutil.rmtree(f"{store}/score/c/2")  # questions 32..47, complete
    with pytest.raises(UntrustedStore, match="missing"):
        open_for_analysis(store, allow_defects=True)


# -- fault injection: never a traceback, never a silently wrong number -----------------------------
#: Rules on arrays `analyze --sections 3,4` never reads (or, for DT-DATA-004, reads only in §6):
#: a store breaking only these may be analysed.
UNREAD_RULES = {"DT-DATA-004", "DT-DATA-010", "DT-DATA-011", "DT-DATA-012"}
#: Arrays it never reads (their damaged chunks, DT-DATA-013, do not touch its numbers).
UNREAD_ARRAYS = {"candidate_text", "candidate_label", "latent_step_norm", "exit_gate", "logsumexp"}


def _chunk_files(path):
    out = []
    for root, _, files in os.walk(path):
        if "/c" in root.replace(str(path), "") or root.endswith("/c"):
            out += [os.path.join(root, f) for f in files]
    return sorted(out)


_META_EDITS = [
    ("data_type", "int16"), ("data_type", "float16"), ("data_type", "string"), ("shape", [1]),
    ("shape", []), ("dimension_names", ["question"]), ("dimension_names", None),
    ("chunk_grid", {"name": "regular", "configuration": {"chunk_shape": [0]}}),
    ("fill_value", "NaN"), ("codecs", [{"name": "bytes"}]),
]
_VALUES = [np.nan, np.inf, -np.inf, 0.5, -3.0, 1e30]


def _mutate(path, data):
    """One random fault: a chunk deleted, truncated or overwritten, a metadata field changed,
    a score, label, n_candidates or complete cell rewritten, or an attrs field changed."""
    from hypothesis import strategies as st

    kind = data.draw(st.sampled_from(["delete", "garbage", "truncate", "meta", "score", "label",
                                      "K", "complete", "attrs"]))
    if kind in ("delete", "garbage", "truncate"):
        f = data.draw(st.sampled_from(_chunk_files(path)))
        if kind == "delete":
            os.remove(f)
        elif kind == "garbage":
            with open(f, "wb") as h:
                h.write(data.draw(st.binary(min_size=1, max_size=40)))
        else:
            raw = open(f, "rb").read()
            with open(f, "wb") as h:
                h.write(raw[: data.draw(st.integers(0, max(0, len(raw) - 1)))])
    elif kind == "meta":
        names = sorted(n for n in os.listdir(path) if os.path.isdir(f"{path}/{n}"))
        name = data.draw(st.sampled_from(names))
        key, value = data.draw(st.sampled_from(_META_EDITS))
        meta = f"{path}/{name}/zarr.json"
        doc = json.load(open(meta))
        doc[key] = value
        json.dump(doc, open(meta, "w"))
    elif kind == "score":
        s = zarr.open_array(f"{path}/score", mode="r+")
        q = data.draw(st.integers(0, s.shape[0] - 1))
        cell = tuple(data.draw(st.integers(0, n - 1)) for n in s.shape[1:])
        block = s[q:q + 1]
        block[(0, *cell)] = data.draw(st.sampled_from(_VALUES))
        s[q:q + 1] = block
    elif kind in ("label", "K"):
        name = "label" if kind == "label" else "n_candidates"
        a = zarr.open_array(f"{path}/{name}", mode="r+")
        a[data.draw(st.integers(0, a.shape[0] - 1))] = data.draw(st.integers(-3, 9))
    elif kind == "complete":
        a = zarr.open_array(f"{path}/complete", mode="r+")
        a[data.draw(st.integers(0, a.shape[0] - 1))] = False
    else:
        key, value = data.draw(st.sampled_from([
            ("format_version", "2.0.0"), ("format_version", "1.0"), ("endpoint", 99),
            ("endpoint", "6"), ("precision", []), ("readout", {"kind": "text"}), ("tasks", None),
        ]))
        _root_attrs(path, lambda a: a.update({key: value}))
    return kind


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from depthtraj.testing import synthetic_store

    path = tmp_path_factory.mktemp("fuzz") / "tiny.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return synthetic_store(path, 24, endpoint=4, k_mix={3: 1, 4: 1}, arrangements=2,
                               chunk_size=8, optional=("logsumexp", "latent_step_norm"))


def test_fault_injection_never_crashes_nor_lies(tiny, tmp_path_factory):
    """Every injected fault gives exit 2 with one error line, or an analysis of a store whose
    every data rule on what the analysis reads holds (checked by `depthtraj validate`).
    ``DT_FUZZ=500`` runs 500 random examples instead of the 30 fixed ones."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from depthtraj.validate import validate_store

    fuzz = os.environ.get("DT_FUZZ")

    @settings(max_examples=int(fuzz or 30), deadline=None, derandomize=fuzz is None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        path = str(tmp_path_factory.mktemp("f") / "s.zarr")
        shutil.copytree(tiny, path)
        kind = _mutate(path, data)
        r = CliRunner().invoke(app, ["analyze", path, "--bootstrap", "10", "--grid", "quarter",
                                     "--sections", "3,4", "--format", "json"])
        assert r.exception is None or isinstance(r.exception, SystemExit), (kind, r.exception)
        assert "Traceback" not in r.stderr
        assert r.exit_code in (0, 2), (kind, r.exit_code, r.stderr)
        if r.exit_code == 2:
            assert len([x for x in r.stderr.splitlines() if x.startswith("depthtraj: error:")]) == 1
            assert r.stdout == ""
            return
        doc = json.loads(r.stdout)
        try:
            report = validate_store(path, level="data")
        except Exception:  # noqa: BLE001 - the validator may refuse what analyze refused; not here
            pytest.fail(f"{kind}: analyze accepted a store the validator cannot read")
        bad = {f.rule for f in report.findings if f.severity == "error" and f.rule not in UNREAD_RULES
               and f.path.split(".")[0].split("[")[0] not in UNREAD_ARRAYS}
        assert not bad, (kind, bad, [f.message for f in report.findings][:3])
        n_incomplete = doc["inputs"][0]["n_incomplete"]
        assert doc["analyses"][0]["n_questions"] == 24 - n_incomplete

    run()


def test_a_layer_store_is_never_read_silently_as_a_recurrence(tmp_path):
    """Format 1.2's ``depth``: admission notes a layer store (what the tables' depth is, and
    what §6 and §7 read on it); a store with a recurrence depth, or none, gets no such note."""
    from pathlib import Path

    from depthtraj.trust import admit

    corpus = Path(__file__).resolve().parent / "conformance" / "valid"
    for case, layer in (("depth_layer_tuned_lens", True), ("depth_recurrence", False), ("label_basic", False)):
        store = tmp_path / f"{case}.zarr"
        shutil.copytree(corpus / f"{case}.zarr", store)
        notes = admit(str(store)).notes
        said = [n for n in notes if n.startswith("depth is layer t")]
        assert bool(said) == layer, (case, notes)
        if layer:
            assert "tuned lens" in said[0] and "§7's σ is the residual stream's step" in said[0]
            r = CliRunner().invoke(app, ["analyze", str(store), "--sections", "3", "--bootstrap", "10"])
            assert r.exit_code == 0 and "depth is layer t" in r.stderr


def test_a_damaged_chunk_is_named_and_the_others_still_checked(tmp_path):
    """``validate`` names a damaged label chunk and still finds a bad label four chunks away;
    admission decodes ``subject`` and ``seed`` in slabs of chunks, and a damaged chunk inside a
    slab is still named with its questions."""
    from depthtraj.testing import synthetic_store
    from depthtraj.validate import validate_store

    store = synthetic_store(tmp_path / "s.zarr", 64, endpoint=4, chunk_size=8)
    _set_values(store, "label", 40, 9)  # chunk 5: DT-DATA-006
    with open(f"{store}/label/c/1", "wb") as h:  # chunk 1: undecodable
        h.write(b"not a chunk")
    report = validate_store(store)
    found = {(f.rule, f.path) for f in report.findings}
    assert ("DT-DATA-013", "label.chunks[1]") in found
    assert any(rule == "DT-DATA-006" and "q=40" in path for rule, path in found)
    for name in ("subject", "seed"):
        fresh = synthetic_store(tmp_path / f"{name}.zarr", 64, endpoint=4, chunk_size=8)
        with open(f"{fresh}/{name}/c/6", "wb") as h:
            h.write(b"not a chunk")
        with pytest.raises(UntrustedStore, match=rf"array '{name}' chunk \(6,\) \(questions 48\.\.55\)"):
            admit(fresh)
