"""The validator never crashes and misses nothing its rules name.

Fuzzing found: a lone surrogate in an attrs string crashed both renderers; a 5,000-digit
version number raised an uncaught ValueError; DT-ATTR-003 accepted what the JSON Schema it
cites rejects (``endpoint: "16"`` or ``true``, ``options_displayed: "yes"``, ``created:
1700000000``) and the structure level then skipped the endpoint check; a chunk length of 0
passed; undecodable chunks of ``seed``/``subject`` passed. Regression tests for each, then
property tests that mutate valid stores at all three levels against an oracle written
independently from ``spec/v1/rules.md`` (plain Python, the committed schema file read
directly): zero crashes, zero misses.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from depthtraj.cli import app
from depthtraj.validate import Report, render_json, validate_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "v1" / "store-attrs.schema.json").read_text())
SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
FUZZ = int(os.environ.get("DT_FUZZ", 0))  # DT_FUZZ=500: more, random examples
PROFILE = settings(deadline=None, derandomize=not FUZZ, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    """A conforming label store: 8 questions in chunks of 3, K in {3,4}, 2 arrangements."""
    from conftest import write_store  # tests/validate/conftest.py (the tests have no packages)

    return write_store(tmp_path_factory.mktemp("robust") / "base.zarr", 8, k_mix=(3, 4), arrangements=2)


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> str:
    """A conforming label store with the format-1.1 content: the §7 probes at anchors 1, 2 and an
    exit gate; 8 questions in chunks of 3, K in {3, 4}, 2 arrangements, 2 arms."""
    from conftest import write_store

    return write_store(tmp_path_factory.mktemp("robust11") / "probed.zarr", 8, k_mix=(3, 4), arrangements=2,
                       precision=("bf16", "fp32"), probes=(1, 2), optional=("exit_gate",))


def _copy(base: str, tmp: Path) -> str:
    dst = tmp / f"s{len(list(tmp.iterdir()))}.zarr"
    shutil.copytree(base, dst)
    return str(dst)


def _edit_attrs(path: str, edit) -> None:
    """Edit ``attributes.depthtraj`` of the root zarr.json (the consolidated copy goes stale
    only in its own key, which readers do not use for attrs)."""
    meta = Path(path) / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"] = edit(doc["attributes"])
    meta.write_text(json.dumps(doc))


def _rules(report) -> set[str]:
    return {f.rule for f in report.findings}


def _renders(path: str) -> tuple[int, str]:
    """Run the real CLI with both renderers; both must end without a traceback."""
    r = CliRunner().invoke(app, ["validate", path])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    j = CliRunner().invoke(app, ["validate", path, "--format", "json"])
    assert j.exception is None or isinstance(j.exception, SystemExit), repr(j.exception)
    assert r.exit_code == j.exit_code and r.exit_code in (0, 1, 2)
    if j.exit_code != 2:
        json.loads(j.stdout)  # valid JSON, surrogates and all
    return r.exit_code, r.stdout


# ------------------------------------------------------------------------------------------------
# regressions
# ------------------------------------------------------------------------------------------------
def test_lone_surrogates_render_in_text_and_json(base, tmp_path):
    p = _copy(base, tmp_path)
    _edit_attrs(p, lambda a: {**a, "depthtraj": {**a["depthtraj"], "format_version": "\ud800", "x\udfff": "\ud83d"}})
    code, out = _renders(p)
    assert code == 1 and "\\ud800" in out  # shown escaped
    report = validate_store(p, level="attrs")
    doc = json.loads(render_json(report))
    assert doc["format_version"] == "\\ud800" and {"DT-ATTR-002", "DT-ATTR-003"} <= _rules(report)


@pytest.mark.parametrize("version", ["1" + "0" * 5000 + ".0.0", "1." + "9" * 5000 + ".0", "1.4." + "7" * 6000])
def test_huge_version_numbers_are_read(base, tmp_path, version):
    p = _copy(base, tmp_path)
    _edit_attrs(p, lambda a: {**a, "depthtraj": {**a["depthtraj"], "format_version": version}})
    report = validate_store(p, level="structure")
    f = [f for f in report.findings if f.rule == "DT-ATTR-002"]
    assert len(f) == 1 and len(f[0].message) < 400
    assert f[0].severity == ("error" if version.startswith("10") else "warning")
    _renders(p)


@pytest.mark.parametrize(("field", "value"), [
    (("endpoint",), "3"), (("endpoint",), True), (("endpoint",), 3.5), (("readout", "options_displayed"), "yes"),
    (("readout", "options_displayed"), 1), (("created",), 1700000000), (("created",), "2025-01-01T00:00:00"),
    (("seeds", "base"), "0"), (("software",), {"depthtraj": 1}), (("precision", 0, "name"), 5),
])
def test_attrs_are_checked_with_the_schemas_types(base, tmp_path, field, value):
    p = _copy(base, tmp_path)

    def edit(a):
        o = a["depthtraj"]
        for k in field[:-1]:
            o = o[k]
        o[field[-1]] = value
        return a

    _edit_attrs(p, edit)
    report = validate_store(p, level="structure")
    path = "attrs.depthtraj" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in field)
    assert any(f.rule == "DT-ATTR-003" and f.path.startswith(path) for f in report.findings), report.findings
    assert not _schema_accepts(json.loads((Path(p) / "zarr.json").read_text())["attributes"]["depthtraj"])


def test_integral_float_endpoint_is_not_an_integer(base, tmp_path):
    # JSON Schema 2020-12 counts 4.0 as the integer 4; the store's integers MUST be JSON integers
    # (DT-ATTR-003): a whole-number float slipped past the rules that read integers (issue 30:
    # probe anchors [4.0, 99.0] skipped DT-STRUCT-013's anchor check).
    p = _copy(base, tmp_path)
    _edit_attrs(p, lambda a: {**a, "depthtraj": {**a["depthtraj"], "endpoint": 3.0}})
    report = validate_store(p, level="structure")
    assert any(f.rule == "DT-ATTR-003" and f.path == "attrs.depthtraj.endpoint" for f in report.findings)


def test_float_probe_anchors_are_refused_not_skipped(probed, tmp_path):
    p = _copy(probed, tmp_path)

    def edit(a):
        a["depthtraj"]["probes"]["anchors"] = [1.0, 99.0]
        return a

    _edit_attrs(p, edit)
    report = validate_store(p, level="data")
    assert any(f.rule == "DT-ATTR-003" and "anchors" in f.path for f in report.findings), report.findings


@pytest.mark.parametrize("name", ["seed", "subject", "label", "candidate_text", "complete", "score"])
def test_undecodable_chunks_are_named(base, tmp_path, name):
    p = _copy(base, tmp_path)
    chunk = sorted((Path(p) / name / "c").rglob("*"))
    chunk = [c for c in chunk if c.is_file()][-1]
    chunk.write_bytes(b"\x28\xb5\x2f\xfd garbage")
    report = validate_store(p, level="data")
    f = [f for f in report.findings if f.rule == "DT-DATA-013" and f.path.startswith(name)]
    assert f and f"array {name!r} chunk" in f[0].message and "questions 6..7" in f[0].message
    _renders(p)


# ------------------------------------------------------------------------------------------------
# the oracle, from spec/v1/rules.md
# ------------------------------------------------------------------------------------------------
def _schema_accepts(doc) -> bool:
    """DT-ATTR-003's schema half: the committed schema file, JSON Schema 2020-12 with formats,
    integers written as JSON integers (rules.md: "not `4.0`")."""
    import jsonschema

    draft = jsonschema.Draft202012Validator

    def json_integer(_checker, x):
        return type(x) is int

    cls = jsonschema.validators.extend(draft, type_checker=draft.TYPE_CHECKER.redefine("integer", json_integer))
    v = cls(SCHEMA, format_checker=draft.FORMAT_CHECKER)
    try:
        return v.is_valid({**doc, "format_version": "1.4.0"})
    except RecursionError:
        return False


def _attrs_oracle(root: dict) -> set[str]:
    """The rule ids the attrs level must report for root attributes ``root``."""
    if not isinstance(root.get("depthtraj"), dict):
        return {"DT-ATTR-001"}
    a = root["depthtraj"]
    out = set()
    v = a.get("format_version")
    m = SEMVER.match(v) if isinstance(v, str) else None
    newer = m is not None and m.group(1) == "1" and (int(m.group(2)), int(m.group(3))) > (4, 0)
    if m is None or m.group(1) != "1" or newer:
        out.add("DT-ATTR-002")  # missing, not semver, another major (error) or newer than 1.4.0 (warning)
    elif int(m.group(2)) < _content_minor(a):
        out.add("DT-ATTR-002")  # declared older than its content (warning)
    doc = _drop_unknown(a) if newer else a  # a newer minor's unknown keys are ignored
    if not (_schema_accepts(doc) and _model_rules_hold(doc)):
        out.add("DT-ATTR-003")
    sw = a.get("software")
    if isinstance(sw, dict):
        family = a["model"].get("family") if isinstance(a.get("model"), dict) else None
        want = ["depthtraj"] + (["torch", "transformers"] if isinstance(family, str) and family != "synthetic" else [])
        if any(w not in sw for w in want):
            out.add("DT-ATTR-004")
    return out


def _content_minor(a: dict) -> int:
    """The minor version the attrs' content needs (rules.md DT-ATTR-002, spec §2): `collection`,
    `model.source` 1.3; `depth` 1.2; `execution`, `probes`, a task's `prompt_template`,
    `target_delimiter` or `harness` 1.1."""
    model = a.get("model")
    if a.get("collection") is not None or (isinstance(model, dict) and model.get("source") is not None):
        return 3
    minor = 2 if a.get("depth") is not None or (isinstance(model, dict) and model.get("random_weights") is not None) else 0
    if a.get("execution") is not None or a.get("probes") is not None:
        minor = max(minor, 1)
    tasks = a.get("tasks")
    for t in tasks if isinstance(tasks, list) else []:
        if isinstance(t, dict) and any(t.get(k) is not None for k in ("prompt_template", "target_delimiter", "harness")):
            minor = max(minor, 1)
    return minor


def _drop_unknown(doc):
    """Unknown keys at every level removed (a newer minor version's additions)."""
    def walk(o, schema):
        if "$ref" in schema:
            schema = SCHEMA["$defs"][schema["$ref"].split("/")[-1]]
        if isinstance(o, dict) and "properties" in schema:
            return {k: walk(x, schema["properties"][k]) for k, x in o.items() if k in schema["properties"]}
        if isinstance(o, list) and "items" in schema:
            return [walk(x, schema["items"]) for x in o]
        return o
    return walk(doc, SCHEMA)


def _model_rules_hold(a: dict) -> bool:
    """The v1 model's rules the schema cannot state (rules.md DT-ATTR-003): unique arm and task
    names, label readouts with normalization 'none' and text readouts without it, strictly
    increasing positive probe anchors, and ``probes.score`` naming the readout's own score
    (``score`` for label, ``logprob_sum`` for text readouts)."""
    try:
        arms = [x["name"] for x in a["precision"]]
        tasks = [x["name"] for x in a["tasks"]]
        r = a["readout"]
        if len(set(arms)) != len(arms) or len(set(tasks)) != len(tasks):
            return False
        if r["kind"] == "label" and r["normalization"] != "none":
            return False
        if r["kind"] == "text" and r["normalization"] == "none":
            return False
        probes = a.get("probes")
        if isinstance(probes, dict):
            anchors = probes["anchors"]
            if anchors[0] < 1 or any(y <= x for x, y in zip(anchors, anchors[1:])):
                return False
            if probes["score"] != ("score" if r["kind"] == "label" else "logprob_sum"):
                return False
        source = a["model"].get("source")
        if isinstance(source, dict):
            if any(x["name"] == "native" and x.get("weights_dtype", "bfloat16") != source["dequantized_to"]
                   for x in a["precision"]):
                return False
            if source["quantization"] != sorted(set(source["quantization"])):
                return False
        collection = a.get("collection")
        if isinstance(collection, dict) and type(collection.get("plan_version")) is not int:
            return False
    except (KeyError, TypeError, AttributeError, IndexError):
        return True  # the schema half reports the shape
    return True


# ------------------------------------------------------------------------------------------------
# attrs: exactly the oracle's rules, never a crash
# ------------------------------------------------------------------------------------------------
_LEAVES = [("format_version",), ("endpoint",), ("created",), ("device",), ("notes",), ("readout", "kind"),
           ("readout", "options_displayed"), ("readout", "normalization"), ("readout", "fewshot"),
           ("readout", "prompt_template", "id"), ("model", "name"), ("model", "family"),
           ("model", "adapter", "version"), ("seeds", "base"), ("seeds", "scheme"), ("precision",),
           ("precision", 0, "name"), ("precision", 0, "head_dtype"), ("tasks",), ("tasks", 0, "name"),
           ("software",), ("software", "depthtraj"), ("model",), ("readout",), ("unknown_key",),
           # format 1.1
           ("probes",), ("probes", "anchors"), ("probes", "anchors", 0), ("probes", "score"), ("probes", "draws"),
           ("probes", "sigma"), ("execution",), ("execution", "batching"), ("execution", "batch_size"),
           # format 1.2
           ("depth",), ("depth", "kind"), ("model", "random_weights"),
           # format 1.3
           ("collection",), ("collection", "plan_version"), ("model", "source"), ("model", "source", "sha256"),
           ("model", "source", "quantization"), ("model", "source", "dequantized_to")]
#: Values a lax parser would coerce into another field's type ("3" -> 3, 1 -> True, ...).
_CONFUSABLE = st.sampled_from(["3", "16", "yes", "true", "1", True, False, 0, 1, 3, 3.0, 1700000000, "bf16"])
_JSON = _CONFUSABLE | _CONFUSABLE | st.recursive(
    st.none() | st.booleans() | st.integers(-2, 10) | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(["", "1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0", "2.0.0", "label",
                                                                        "text", "char", "none", "bf16",
                                                                        "2025-01-01T00:00:00Z", "2025-01-01T00:00:00",
                                                                        "\ud800", "x\udfffy", "1" + "0" * 5000 + ".0.0"])
    | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=6,
)


@settings(PROFILE, max_examples=FUZZ or 160)
@given(st.data())
def test_attrs_mutations_match_the_oracle(base, probed, tmp_path_factory, data):
    from depthtraj.validate.attrs import check_attrs
    from depthtraj.validate.context import Context
    from depthtraj.validate.report import Collector

    start = data.draw(st.sampled_from([base, probed]))
    root = json.loads((Path(start) / "zarr.json").read_text())["attributes"]
    root = copy.deepcopy(root)
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["set", "delete", "replace"]))
        if how == "replace":
            root["depthtraj"] = data.draw(_JSON)
            continue
        path = data.draw(st.sampled_from(_LEAVES))
        o = root.get("depthtraj")
        try:
            for k in path[:-1]:
                o = o[k]
            if how == "set":
                o[path[-1]] = data.draw(_JSON)
            elif isinstance(o, dict):
                o.pop(path[-1], None)
        except (KeyError, IndexError, TypeError):
            pass
    col = Collector()
    check_attrs(Context(store="s", group=None, consolidated=None, root_attrs=root), col)
    got = {f.rule for f in col.findings()}
    assert got == _attrs_oracle(root), [(f.rule, f.path, f.message) for f in col.findings()]
    if isinstance(root.get("depthtraj"), dict) and not got & {"DT-ATTR-002", "DT-ATTR-003"}:
        # the schema and the pydantic models agree: what the validator accepts, the writer's
        # model accepts, and what the model writes the schema accepts
        from depthtraj.models.v1 import StoreAttrs

        written = StoreAttrs.model_validate(root["depthtraj"]).model_dump(mode="json")
        assert _schema_accepts(written)
    json.loads(render_json(Report("s", None, "attrs", col.findings())))


# ------------------------------------------------------------------------------------------------
# structure and data: the oracle's rules are among the findings, never a crash
# ------------------------------------------------------------------------------------------------
_STRUCT_READ = {"question", "task", "n_candidates", "depth", "candidate", "arrangement", "precision", "position"}
_COORDS = {"question", "task", "subject", "n_candidates", "label", "seed", "depth", "candidate", "arrangement",
           "precision", "position"}
_REQUIRED = {"score", "arrangement_order", "complete", "candidate_text", "candidate_label"}
_FLOATS = {"score", "logsumexp", "latent_step_norm"}


def _mutate_store(p: str, data) -> tuple[str, set[str]]:
    """One fault and the rule ids spec/v1/rules.md says it must raise."""
    root = Path(p)
    names = sorted(x.name for x in root.iterdir() if x.is_dir())
    kind = data.draw(st.sampled_from(["delete_array", "dims", "dtype", "zero_chunk", "split_chunk", "corrupt",
                                      "delete_chunk", "score", "label", "K"]))
    name = data.draw(st.sampled_from(names))
    meta = root / name / "zarr.json"
    if kind == "delete_array":
        shutil.rmtree(root / name)
        return kind, {"DT-STRUCT-001"} if name in _COORDS else ({"DT-STRUCT-002"} if name in _REQUIRED else set())
    if kind in ("dims", "dtype", "zero_chunk", "split_chunk"):
        doc = json.loads(meta.read_text())
        if kind == "dims":
            doc["dimension_names"] = ["item"] + list(doc["dimension_names"][1:])
            expect = {"DT-STRUCT-001"} if name in _COORDS else {"DT-STRUCT-002"}
        elif kind == "dtype":
            if name not in _FLOATS:
                return kind, set()
            doc["data_type"], doc["fill_value"] = "int32", 0
            expect = {"DT-STRUCT-003"}
        elif kind == "zero_chunk":
            shape = doc["chunk_grid"]["configuration"]["chunk_shape"]
            shape[data.draw(st.integers(0, len(shape) - 1))] = 0
            expect = {"DT-STRUCT-004"}
        else:
            shape = doc["chunk_grid"]["configuration"]["chunk_shape"]
            if len(shape) < 2 or doc["shape"][1] < 2:
                return kind, set()
            shape[1] = 1
            expect = {"DT-STRUCT-004"}
        meta.write_text(json.dumps(doc))
        return kind, expect
    if kind in ("corrupt", "delete_chunk"):
        files = sorted(f for f in (root / name).rglob("*") if f.is_file() and f.name != "zarr.json")
        if not files:
            return kind, set()
        f = data.draw(st.sampled_from(files))
        if kind == "corrupt":
            f.write_bytes(data.draw(st.binary(min_size=1, max_size=12)))
            return kind, {"DT-STRUCT-012"} if name in _STRUCT_READ else {"DT-DATA-013"}
        f.unlink()
        return kind, {"DT-DATA-013"} if name in {"score", "logsumexp", "latent_step_norm"} else set()
    if kind == "score":
        s = zarr.open_array(str(root / "score"), mode="r+")
        K = zarr.open_array(str(root / "n_candidates"))[:]
        q = data.draw(st.integers(0, s.shape[0] - 1))
        c = data.draw(st.integers(0, s.shape[2] - 1))
        value = data.draw(st.sampled_from([np.nan, np.inf, 0.5, -1.0]))
        block = s[q:q + 1]
        block[0, 0, c, 0, 0] = value
        s[q:q + 1] = block
        if c >= K[q]:
            return kind, set() if np.isnan(value) else {"DT-DATA-002"}
        return kind, {"DT-DATA-001"} if not np.isfinite(value) else ({"DT-DATA-003"} if value > 0 else set())
    a = zarr.open_array(str(root / ("label" if kind == "label" else "n_candidates")), mode="r+")
    q = data.draw(st.integers(0, a.shape[0] - 1))
    if kind == "label":
        K = zarr.open_array(str(root / "n_candidates"))[q]
        a[q] = data.draw(st.sampled_from([-2, int(K), 9]))
        return kind, {"DT-DATA-006"}
    a[q] = data.draw(st.sampled_from([0, 1]))
    return kind, {"DT-DATA-005"}


def _mutate_11(p: str, data) -> tuple[str, set[str]]:
    """One fault in the format-1.1 content of a probed store and the rule ids rules.md names:
    DT-DATA-011 (exit_gate finite and in [0, 1] in used arrangements), DT-DATA-015 (probes finite
    exactly on real candidates, probe_sigma >= 0), DT-STRUCT-013 (the probe group whole, anchors
    as declared), DT-ATTR-003 (anchors as JSON integers, probes.score the readout's own)."""
    root = Path(p)
    K = zarr.open_array(str(root / "n_candidates"))[:]
    kind = data.draw(st.sampled_from(["gate", "sigma", "mean", "drop_probe", "anchors", "probe_score"]))
    q = data.draw(st.integers(0, len(K) - 1))
    if kind == "gate":
        g = zarr.open_array(str(root / "exit_gate"), mode="r+")
        value = data.draw(st.sampled_from([1.5, -0.1, np.nan, np.inf, 0.0, 1.0, 0.7]))
        block = g[q:q + 1]
        block[0, data.draw(st.integers(0, g.shape[1] - 1)), data.draw(st.integers(0, g.shape[2] - 1)), 0] = value
        g[q:q + 1] = block
        return kind, {"DT-DATA-011"} if not (np.isfinite(value) and 0.0 <= value <= 1.0) else set()
    if kind == "sigma":
        a = zarr.open_array(str(root / "probe_sigma"), mode="r+")
        value = data.draw(st.sampled_from([-0.5, np.nan, 0.0, 2.0]))
        block = a[q:q + 1]
        block[0, 0, 0, 0] = value
        a[q:q + 1] = block
        return kind, {"DT-DATA-015"} if not (np.isfinite(value) and value >= 0) else set()
    if kind == "mean":
        a = zarr.open_array(str(root / "probe_nl_mean"), mode="r+")
        c = data.draw(st.integers(0, a.shape[2] - 1))
        value = data.draw(st.sampled_from([np.nan, 0.25]))
        block = a[q:q + 1]
        block[0, 0, c, 0, 0] = value
        a[q:q + 1] = block
        real = c < K[q]
        if real and not np.isnan(value):  # the nonlinear covariance moment − μμᵀ must stay PSD (1e-4 of its trace)
            k = int(K[q])
            mu = block[0, 0, :k, 0, 0].astype(np.float64)
            mom = zarr.open_array(str(root / "probe_nl_moment"))[q, 0, :k, :k, 0, 0].astype(np.float64)
            cov = mom - np.outer(mu, mu)
            ok = np.linalg.eigvalsh((cov + cov.T) / 2).min() >= -1e-4 * max(abs(np.trace(cov)), 1e-30)
            return kind, set() if ok else {"DT-DATA-015"}
        return kind, {"DT-DATA-015"} if (real and np.isnan(value)) or (not real and not np.isnan(value)) else set()
    if kind == "drop_probe":
        shutil.rmtree(root / data.draw(st.sampled_from(["probe_sigma", "probe_jjt", "probe_nl_mean",
                                                          "probe_nl_moment"])))
        return kind, {"DT-STRUCT-013"}

    def edit(a):
        if kind == "anchors":
            a["depthtraj"]["probes"]["anchors"] = data.draw(st.sampled_from([[1.0, 2.0], [1, 3], [2, 1]]))
        else:
            a["depthtraj"]["probes"]["score"] = "logprob_sum"  # a label store
        return a

    _edit_attrs(p, edit)
    anchors = json.loads((root / "zarr.json").read_text())["attributes"]["depthtraj"]["probes"]["anchors"]
    if kind == "anchors" and anchors == [1, 3]:
        return kind, {"DT-STRUCT-013"}  # declared [1, 3] against the coordinate [1, 2]
    return kind, {"DT-ATTR-003"}


@settings(PROFILE, max_examples=FUZZ or 24)
@given(st.data())
def test_format_11_mutations_raise_what_the_rules_name(probed, tmp_path_factory, data):
    p = _copy(probed, tmp_path_factory.mktemp("m11"))
    kind, expect = _mutate_11(p, data)
    report = validate_store(p, level="data")
    got = _rules(report)
    assert expect <= got, (kind, expect, [(f.rule, f.path, f.message) for f in report.findings][:5])
    if not expect:  # a value the rules allow: no finding at all
        assert not got - {"DT-STRUCT-010"}, (kind, [(f.rule, f.path, f.message) for f in report.findings][:5])
    _renders(p)


@settings(PROFILE, max_examples=FUZZ or 40)
@given(st.data())
def test_store_mutations_raise_what_the_rules_name(base, tmp_path_factory, data):
    p = _copy(base, tmp_path_factory.mktemp("m"))
    kind, expect = _mutate_store(p, data)
    report = validate_store(p, level="data")  # never raises
    missed = expect - _rules(report)
    assert not missed, (kind, missed, [(f.rule, f.path, f.message) for f in report.findings][:5])
    _renders(p)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d", "ab", "é", "q-1", "q-10", "x" * 40]),
                max_size=30),
       st.sampled_from(["string", "object"]))
def test_repeated_question_ids_found_alike_with_and_without_pandas(values, kind):
    """DT-STRUCT-007's duplicate search hashes (pandas loaded) or sorts (plain validate): both
    must find exactly the positions whose id occurs more than once."""
    import sys

    import pandas  # noqa: F401 - the hashing path
    from depthtraj.validate.structure import repeated_positions

    keys = np.array(values, dtype=np.dtypes.StringDType() if kind == "string" else object)
    expected = [i for i, v in enumerate(values) if values.count(v) > 1]
    assert repeated_positions(keys).tolist() == expected
    saved = sys.modules.pop("pandas")
    try:
        assert repeated_positions(keys).tolist() == expected
    finally:
        sys.modules["pandas"] = saved
