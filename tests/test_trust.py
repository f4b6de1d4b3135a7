"""``depthtraj analyze`` holds every store to the contract before computing (issue: trustworthy
results). Each case is a store class that today's main analysed silently (exit 0 with tables)
or crashed on (a traceback): another format major, a deleted or corrupt chunk, incomplete
questions counted in N, data defects (positive label log-probabilities, values past K), wrong
dtypes and shapes. Each must give exit 2 and one line naming the store and the rule, array or
chunk, with nothing written — or, for incomplete questions, an explicit exclusion."""

from __future__ import annotations

import json
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
