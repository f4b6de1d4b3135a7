"""Stores where users keep them: ``file://`` URLs, real HTTP servers (Python's ``http.server``,
one that lists directories and one that does not) and a real S3-compatible server (moto's
threaded server), all on 127.0.0.1. ``validate`` and ``analyze`` give the local store's results;
what a store that cannot list hides is said, never claimed; a missing package, an unreachable
server, nothing at the URL or a file is one line saying so (exit 2). Needs the ``remote`` extra
(aiohttp, s3fs) and the ``test`` extra (moto, flask): ``make test`` installs both."""

from __future__ import annotations

import functools
import http.server
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from depthtraj.cli import app
from typer.testing import CliRunner

NOTE = "cannot list its keys"


# ------------------------------------------------------------------------------------------
# stores and servers
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """``p.zarr``: 24 questions in chunks of 8, the last chunk unwritten (8 incomplete
    questions: one warning, excluded by analyze), consolidated; and damaged copies of it:
    ``miss.zarr`` (a chunk of complete questions deleted), ``bad.zarr`` (a corrupt chunk),
    ``nocm.zarr`` (no consolidated metadata)."""
    import zarr
    from depthtraj.testing import synthetic_store

    root = tmp_path_factory.mktemp("remote")
    p = root / "p.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(p, 24, endpoint=6, k_mix={3: 1, 4: 1}, arrangements=2,
                        precision=("bf16", "fp32"), chunk_size=8, complete=False)
        zarr.consolidate_metadata(str(p), zarr_format=3)
    for name in ("miss.zarr", "bad.zarr", "nocm.zarr"):
        shutil.copytree(p, root / name)
    (root / "miss.zarr" / "score" / "c" / "1" / "0" / "0" / "0" / "0").unlink()
    (root / "bad.zarr" / "score" / "c" / "1" / "0" / "0" / "0" / "0").write_bytes(b"not zstd")
    meta = json.loads((root / "nocm.zarr" / "zarr.json").read_text())
    meta.pop("consolidated_metadata")
    (root / "nocm.zarr" / "zarr.json").write_text(json.dumps(meta))
    (root / "plain.txt").write_text("not a store\n")
    (root / "empty.zarr").mkdir()
    return root


class _Handler(http.server.SimpleHTTPRequestHandler):
    """A static file server; ``/status/<code>/...`` answers that HTTP status. With
    ``listing = False`` it does not list directories (like most object stores behind HTTP)."""

    listing = True

    def send_head(self):
        parts = self.path.split("/")
        if len(parts) > 2 and parts[1] == "status":
            self.send_error(int(parts[2]))
            return None
        return super().send_head()

    def list_directory(self, path):
        if not self.listing:
            self.send_error(404, "no listing")
            return None
        return super().list_directory(path)

    def log_message(self, *args):
        pass


def _serve(root: Path, listing: bool):
    handler = type("H", (_Handler,), {"listing": listing})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module")
def http_base(root):
    """``python -m http.server``: lists directories (fsspec reads the HTML listing)."""
    server, url = _serve(root, listing=True)
    yield url
    server.shutdown()


@pytest.fixture(scope="module")
def plain_base(root):
    """A server that cannot list: the store is read through its consolidated metadata."""
    server, url = _serve(root, listing=False)
    yield url
    server.shutdown()


@pytest.fixture(scope="module")
def s3_endpoint(root):
    """A moto S3 server with bucket ``stores`` holding ``p.zarr`` and ``miss.zarr``; the
    endpoint is passed as a CLI user does, with ``AWS_ENDPOINT_URL`` (fake credentials)."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():
            mp.setenv(k, v)
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "FSSPEC_S3_ENDPOINT_URL"):
            mp.delenv(k, raising=False)
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="stores")
        for name in ("p.zarr", "miss.zarr"):
            for f in (root / name).rglob("*"):
                if f.is_file():
                    key = f"{name}/{f.relative_to(root / name).as_posix()}"
                    s3.upload_file(str(f), "stores", key)
        yield endpoint
    server.stop()


def _url(request, root: Path, kind: str, name: str) -> str:
    if kind == "local":
        return str(root / name)
    if kind == "file":
        return (root / name).as_uri()
    if kind == "s3":
        request.getfixturevalue("s3_endpoint")
        return f"s3://stores/{name}"
    return f"{request.getfixturevalue({'http': 'http_base', 'plain': 'plain_base'}[kind])}/{name}"


# ------------------------------------------------------------------------------------------
# the CLI, in process
# ------------------------------------------------------------------------------------------
def _run(*args: str):
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def _validate(url: str) -> tuple[int, dict]:
    code, out, err = _run("validate", url, "--format", "json")
    assert code in (0, 1), err
    doc = json.loads(out)
    assert doc.pop("store") == url
    return code, doc


def _analyze(url: str) -> tuple[int, dict | None, str]:
    """Exit code, the JSON with the store's URL as ``STORE`` (None when refused), stderr."""
    code, out, err = _run("analyze", url, "--format", "json", "--bootstrap", "200")
    doc = json.loads(out.replace(json.dumps(url)[1:-1], "STORE")) if code == 0 else None
    return code, doc, err.replace(url, "STORE")


@functools.cache
def _local(path: str, what: str):
    return _validate(path) if what == "validate" else _analyze(path)


def _one_line_error(err: str, url: str) -> str:
    assert err.startswith(f"depthtraj: error: {url}: ") and err.count("\n") == 1, err
    return err


def _refusal(err: str, url: str) -> str:
    """The error line of a refused store, after its notes (excluded questions, ...)."""
    *notes, last = err.splitlines(keepends=True)
    assert all(n.startswith(f"depthtraj: note: {url}: ") for n in notes), err
    return _one_line_error(last, url)


# ------------------------------------------------------------------------------------------
# the same results as the local store
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["file", "http", "plain", "s3"])
def test_validate_and_analyze_equal_the_local_store(request, root, kind):
    url = _url(request, root, kind, "p.zarr")
    code, doc = _validate(url)
    ref_code, ref = _local(str(root / "p.zarr"), "validate")
    assert [f["rule"] for f in ref["findings"]] == ["DT-DATA-010"]  # the incomplete questions
    assert code == ref_code == 0
    notes = doc.pop("notes")
    assert doc == {k: v for k, v in ref.items() if k != "notes"}
    if kind == "plain":  # what could not be checked is said, not claimed
        assert len(notes) == 1 and NOTE in notes[0] and "chunks missing from the store" in notes[0]
    else:
        assert notes == ref["notes"] == []

    code, got, err = _analyze(url)
    ref_code, want, ref_err = _local(str(root / "p.zarr"), "analyze")
    assert code == ref_code == 0, err
    assert want["inputs"][0]["n_incomplete"] == 8
    if kind == "plain":
        notes = got["inputs"][0]["notes"]
        assert [n for n in notes if NOTE in n] and f"note: STORE: the store {NOTE}" in err
        got["inputs"][0]["notes"] = [n for n in notes if NOTE not in n]
        err = "\n".join(line for line in err.splitlines() if NOTE not in line) + "\n"
    assert got == want
    assert err == ref_err  # the same notes and skipped tables


@pytest.mark.parametrize("kind", ["http", "s3", "plain"])
def test_a_missing_chunk(request, root, kind):
    url = _url(request, root, kind, "miss.zarr")
    local = str(root / "miss.zarr")
    code, doc = _validate(url)
    ref_code, ref = _local(local, "validate")
    assert code == ref_code == 1
    missing = [f for f in ref["findings"] if f["rule"] == "DT-DATA-013"]
    assert len(missing) == 1 and "score" in missing[0]["path"]
    code, _, err = _run("analyze", url, "--bootstrap", "0")
    assert code == 2
    err = _refusal(err, url)
    _, _, ref_err = _run("analyze", local, "--bootstrap", "0")
    ref_err = _refusal(ref_err, local)
    if kind != "plain":  # a listing store: the same findings, the chunk named
        assert doc == ref
        assert err.replace(url, "STORE") == ref_err.replace(local, "STORE")
        assert "array 'score' chunk (1, 0, 0, 0, 0) (questions 8..15) is missing" in err
    else:  # plain HTTP cannot see that the chunk is absent: the NaNs it reads as are refused
        assert len(doc.pop("notes")) == 1
        # a store that lists its keys reports the cause alone (DT-DATA-013; its NaNs are not read)
        assert {f["rule"] for f in ref["findings"]} - {"DT-DATA-010"} == {"DT-DATA-013"}
        assert {f["rule"] for f in doc["findings"]} - {"DT-DATA-010"} == {"DT-DATA-001"}
        assert all("[q=" in f["path"] and int(f["path"].split("[q=")[1].split(",")[0]) in range(8, 16)
                   for f in doc["findings"] if "[q=" in f["path"])
        assert "DT-DATA-001" in err and "questions 8" not in err


def test_a_corrupt_chunk_over_plain_http(root, plain_base):
    # decoding needs no listing: the damaged chunk is found and named
    url = f"{plain_base}/bad.zarr"
    code, out, _ = _run("validate", url)
    assert code == 1 and "DT-DATA-013" in out and "questions 8..15" in out
    code, _, err = _run("analyze", url, "--bootstrap", "0")
    assert code == 2 and "array 'score' chunk (1, 0, 0, 0, 0)" in _refusal(err, url)


def test_no_consolidated_metadata_over_plain_http(root, plain_base):
    # the validator finds the arrays by the format's names (no false "missing" findings) ...
    url = f"{plain_base}/nocm.zarr"
    code, doc = _validate(url)
    ref_code, ref = _local(str(root / "nocm.zarr"), "validate")
    assert code == ref_code == 0
    assert [f["rule"] for f in doc["findings"]] == ["DT-STRUCT-010", "DT-DATA-010"]
    assert doc["findings"] == ref["findings"] and NOTE in doc["notes"][0]
    # ... but xarray cannot find them: analyze says why, in one line
    code, _, err = _run("analyze", url, "--bootstrap", "0")
    assert code == 2 and NOTE in _refusal(err, url) and "consolidated metadata is missing" in err


def test_anonymous_s3_access_denied(monkeypatch, s3_endpoint):
    # fsspec's config as FSSPEC_S3_ANON=true sets it: moto refuses unsigned requests
    import fsspec.config

    monkeypatch.setitem(fsspec.config.conf, "s3", {"anon": True})
    url = "s3://stores/p.zarr"
    code, _, err = _run("validate", url)
    assert code == 2 and "access denied" in _one_line_error(err, url)


def test_the_s3_endpoint_from_fsspec_config(root, s3_endpoint):
    # FSSPEC_S3_ENDPOINT_URL (fsspec's config, read when fsspec is imported) instead of
    # AWS_ENDPOINT_URL; a real process, as a user runs it
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    env["FSSPEC_S3_ENDPOINT_URL"] = s3_endpoint
    cmd = [sys.executable, "-c", "from depthtraj.cli import main; main()"]
    r = subprocess.run([*cmd, "validate", "s3://stores/p.zarr", "--format", "json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["findings"] == _local(str(root / "p.zarr"), "validate")[1]["findings"]


# ------------------------------------------------------------------------------------------
# one line, exit 2, naming the URL and what is wrong
# ------------------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_NOT_A_GROUP = "not a zarr v3 group"
_A_FILE = "a file, not a directory"


@pytest.mark.parametrize(("kind", "name", "needle"), [
    # nothing there, a file, a directory without zarr.json: not a zarr v3 group, and why
    ("http", "none.zarr", "nothing there ({url}/zarr.json not found)"),
    ("plain", "none.zarr", "nothing there ({url}/zarr.json not found)"),
    ("s3", "none.zarr", "nothing there ({url}/zarr.json not found)"),
    ("plain", "p.zarr/zarr.json", _A_FILE + " (a zarr store is a directory holding zarr.json; "
                                  "the store is {base}/p.zarr)"),
    ("s3", "p.zarr/zarr.json", _A_FILE + " (a zarr store is a directory holding zarr.json; "
                               "the store is {base}/p.zarr)"),
    ("http", "plain.txt", _A_FILE),
    ("local", "plain.txt", _A_FILE),
    ("file", "plain.txt", _A_FILE),
    ("local", "empty.zarr", "the directory has no zarr.json"),
    # the rest says what it is, and never "not a zarr v3 group"
    ("local", "none.zarr", "no such file or directory"),
    ("s3", "../no-bucket/p.zarr", "no such bucket 'no-bucket'"),
    ("http", "status/401/p.zarr", "access denied"),
    ("http", "status/403/p.zarr", "access denied"),
    ("http", "status/500/p.zarr", "the server answered HTTP 500"),
    ("unreachable", "p.zarr", "cannot connect to the server"),
    ("unknown", "p.zarr", "unknown protocol 'foo'"),
])
def test_a_store_that_cannot_be_opened_is_one_line(request, root, kind, name, needle):
    if kind == "unreachable":
        url = f"http://127.0.0.1:{_closed_port()}/{name}"
    elif kind == "unknown":
        url = f"foo://x/{name}"
    elif name.startswith("../"):
        url = f"s3://{name[3:]}"
        request.getfixturevalue("s3_endpoint")
    else:
        url = _url(request, root, kind, name)
    needle = needle.format(url=url, base=url.rsplit("/", 2)[0])
    for cmd in ("validate", "analyze"):
        code, out, err = _run(cmd, url)
        assert code == 2 and out == "", (out, err)
        assert needle in _one_line_error(err, url)
        what = ("nothing there", _A_FILE, "no zarr.json")
        assert (_NOT_A_GROUP in err) == any(k in needle for k in what)


@pytest.mark.parametrize("port", [40491, 8404, 404])
def test_a_port_holding_404_is_not_a_not_found(port):
    """An HTTP 500 from a server on a port whose digits hold "404" is the server's error, not
    "nothing there" (the port 40491 once made the 500 case above fail: "404" was looked for
    anywhere in the message, URL included); a 404 status or word still is."""
    from depthtraj.store import _open_error

    class ClientResponseError(Exception):  # aiohttp's name, which the classifier reads
        def __init__(self, status, url):
            super().__init__(f"{status}, message='Internal Server Error', url='{url}/zarr.json'")
            self.status = status

    url = f"http://127.0.0.1:{port}/status/500/p.zarr"
    assert "the server answered HTTP 500" in _open_error(url, ClientResponseError(500, url))
    assert "nothing there" in _open_error(url, ClientResponseError(404, url))
    assert "nothing there" in _open_error(url, OSError(f"GET {url}/zarr.json: 404 Not Found"))


@pytest.mark.parametrize(("scheme", "module", "needle"), [
    ("s3", "s3fs", "needs s3fs: pip install 'depthtraj[remote]'"),
    ("http", "aiohttp", "needs aiohttp: pip install 'depthtraj[remote]'"),
    ("https", "aiohttp", "needs aiohttp: pip install 'depthtraj[remote]'"),
    # not in the extra: fsspec's own hint, and what the extra covers
    ("gs", "gcsfs", "needs a package that is not installed (Please install gcsfs to access Google "
                    "Storage); depthtraj[remote] covers http(s):// and s3://"),
])
def test_a_missing_package_says_what_to_install(monkeypatch, scheme, module, needle):
    registry = sys.modules["fsspec.registry"]._registry  # filesystems fsspec already imported
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    if module == "aiohttp":  # fsspec's http filesystem module imports aiohttp
        monkeypatch.setitem(sys.modules, "fsspec.implementations.http", None)
    for name in ("http", "https", "s3", "s3a", "gs", "gcs"):
        monkeypatch.delitem(registry, name, raising=False)
    url = f"{scheme}://somewhere/s.zarr"
    for cmd in ("validate", "analyze"):
        code, _, err = _run(cmd, url)
        assert code == 2
        assert needle in _one_line_error(err, url)
        assert _NOT_A_GROUP not in err


def test_can_list_is_never_stale(root):
    # the answer is remembered per live store: a store that reuses a freed store's id is asked
    import zarr.storage
    from depthtraj.chunks import can_list

    for _ in range(50):
        unlistable = zarr.storage.MemoryStore()  # lists nothing: no zarr.json
        assert not can_list(unlistable)
        del unlistable  # freed at once: the next store often gets its id
        assert can_list(zarr.storage.LocalStore(str(root / "p.zarr")))


@pytest.mark.parametrize("kind", ["local", "http", "plain"])
def test_info_says_the_size_only_where_the_file_system_can_tell(request, root, kind):
    """Over HTTP without directory listings fsspec sums nothing (0 bytes): ``info`` says the size
    is unknown instead of printing 0 B (issue 37's remote-stores how-to found it)."""
    from depthtraj.info import _size

    url = _url(request, root, kind, "p.zarr")
    size = _size(url)
    if kind == "plain":
        assert size is None
        code, out, err = _run("info", url)
        assert code == 0, err
        assert "unknown (the server lists no files)" in out
    else:
        assert size and size > 0


# ------------------------------------------------------------------------------------------
# depthtraj catalog over S3 and HTTP (issue 50)
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def archive(root, tmp_path_factory) -> Path:
    """``p.zarr`` and ``miss.zarr`` in a folder of their own, with its catalog file."""
    arch = tmp_path_factory.mktemp("archive")
    for name in ("p.zarr", "miss.zarr"):
        shutil.copytree(root / name, arch / name)
    code, _, err = _run("catalog", str(arch), "--write")
    assert code == 0, err
    return arch


def _rows(code, out, err) -> list[dict]:
    assert code == 0, err
    return json.loads(out)["rows"]


def test_catalog_of_an_s3_prefix_equals_the_local_one(archive, s3_endpoint):
    """The moto bucket holds the same two stores: the same rows (sizes and fingerprints too), and
    the catalog file written there is read back without a stale note."""
    local = _rows(*_run("catalog", str(archive), "-f", "json"))
    code, out, err = _run("catalog", "s3://stores", "-f", "json", "--write")
    assert _rows(code, out, err) == local and "wrote s3://stores/depthtraj-catalog.json" in err
    code, _, err = _run("catalog", "s3://stores/")
    assert code == 0 and "stale" not in err, err


def test_catalog_of_an_http_archive_is_read_through_its_catalog_file(archive, tmp_path):
    """A server that lists nothing: the stores its catalog file names, read over HTTP, the sizes
    the file records; without the file, or to write one, one line and exit 2."""
    local = _rows(*_run("catalog", str(archive), "-f", "json"))
    server, url = _serve(archive, listing=False)
    try:
        code, out, err = _run("catalog", url, "-f", "json")
        assert _rows(code, out, err) == local
        assert "the stores are those depthtraj-catalog.json lists" in err
        code, out, err = _run("catalog", url, "--write")
        assert code == 2 and err.strip().splitlines() == [
            f"depthtraj: error: {url}: an HTTP archive is read-only; write the catalog where the stores are made, "
            "and serve the file with them"]
    finally:
        server.shutdown()
    one, one_url = _serve(archive / "p.zarr", listing=False)  # a store served alone: its rows, size unknown
    try:
        assert _rows(*_run("catalog", one_url, "-f", "json")) == [
            {**r, "store": one_url, "size_bytes": None} for r in local if r["store"] == "p.zarr"]  # no listing
    finally:
        one.shutdown()
    (tmp_path / "stores").mkdir()
    bare, bare_url = _serve(tmp_path / "stores", listing=False)  # a folder without a catalog file
    try:
        code, _, err = _run("catalog", bare_url)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "no depthtraj-catalog.json here" in err, err
    finally:
        bare.shutdown()


# ------------------------------------------------------------------------------------------
# depthtraj compare over S3 and HTTP (issue 50): the local comparison's rows and exclusions
# ------------------------------------------------------------------------------------------
def _compared(*args: str) -> dict:
    code, out, err = _run("compare", *args, "--bootstrap", "100", "-f", "json")
    assert code == 0, err
    return json.loads(out)


def test_compare_over_s3_and_http_equals_the_local_one(archive, s3_endpoint):
    """The same archive on a moto S3 prefix and on an HTTP server that cannot list (through its
    catalog file, or the file named): the same rows, byte for byte, and ``miss.zarr`` excluded.
    Over S3 for the same rule (its missing chunk is listed as missing, DT-DATA-013); over the
    server that cannot list, the chunk reads as missing values and the pass refuses the store for
    them (DT-DATA-001), and the admission said what it could not see."""
    local = _compared(str(archive))
    assert [r["store"] for r in local["rows"]] and {r["store"] for r in local["rows"]} == {"p.zarr"}
    assert [e["store"] for e in local["excluded"]] == ["miss.zarr"] and "DT-DATA-013" in local["excluded"][0]["reason"]
    s3 = _compared("s3://stores")
    assert (s3["rows"], s3["excluded"]) == (local["rows"], local["excluded"])
    server, url = _serve(archive, listing=False)
    try:
        for source in (url, f"{url}/depthtraj-catalog.json"):
            http = _compared(source)
            assert http["rows"] == local["rows"]
            assert [e["store"] for e in http["excluded"]] == ["miss.zarr"]
            assert "DT-DATA-001" in http["excluded"][0]["reason"]
            assert any(NOTE in n for n in http["notes"]), http["notes"]
    finally:
        server.shutdown()


def test_report_of_an_s3_or_http_prefix_is_the_local_index(archive, s3_endpoint, tmp_path):
    """``report PREFIX --out DIR --all`` on the moto bucket and on the HTTP server that cannot list
    (through its catalog file): the archive's index, its rows the local comparison's, each trusted
    store's report written from there."""
    local = _compared(str(archive))
    server, url = _serve(archive, listing=False)
    try:
        for name, prefix in (("s3", "s3://stores"), ("http", url)):
            idx = tmp_path / name
            code, out, err = _run("report", prefix, "--out", str(idx), "--all", "--bootstrap", "100", "--sections", "3,4")
            assert code == 0, err
            doc = json.loads((idx / "compare.json").read_text())
            assert doc["rows"] == local["rows"] and [e["store"] for e in doc["excluded"]] == ["miss.zarr"], name
            assert (idx / "stores" / "p.zarr" / "report.html").is_file()
            assert 'href="stores/p.zarr/report.html"' in (idx / "index.html").read_text()
    finally:
        server.shutdown()
