"""Stores where users keep them: ``file://`` URLs, a real HTTP server and a real S3-compatible
server (moto in server mode), both on 127.0.0.1. ``validate`` and ``analyze`` give the local
store's results; a missing package, an unreachable server or nothing at the URL is one line
saying so. Needs the ``remote`` extra (aiohttp, s3fs) and ``moto[server]`` (``make test``
installs both)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import sys
import threading
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from depthtraj.cli import app


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Path:
    """A conforming store of 24 questions (chunks of 8) and a corrupt copy, side by side."""
    from depthtraj.testing import synthetic_store

    root = tmp_path_factory.mktemp("remote")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(root / "s.zarr", 24, endpoint=6, k_mix={3: 1, 4: 1}, arrangements=2,
                        precision=("bf16", "fp32"), chunk_size=8)
    return root / "s.zarr"


class _NoListing(http.server.SimpleHTTPRequestHandler):
    """A static file server that, like most object stores behind HTTP, does not list directories."""

    def list_directory(self, path):
        self.send_error(404, "no listing")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def http_url(local):
    handler = functools.partial(_NoListing, directory=str(local.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{local.name}"
    server.shutdown()


@pytest.fixture(scope="module")
def s3_url(local):
    """The store uploaded to a bucket of a moto S3 server; AWS_ENDPOINT_URL points at it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])
    s3.create_bucket(Bucket="stores")
    for f in local.rglob("*"):
        if f.is_file():
            s3.upload_file(str(f), "stores", f"{local.name}/{f.relative_to(local)}")
    yield f"s3://stores/{local.name}"
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _validate(url: str):
    r = CliRunner().invoke(app, ["validate", url, "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    return doc


def _analyze(url: str) -> dict:
    r = CliRunner().invoke(app, ["analyze", url, "--format", "json", "--bootstrap", "50", "--grid", "quarter"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout.replace(json.dumps(url)[1:-1], "STORE"))
    for entry in doc["inputs"]:
        entry["notes"] = [n for n in entry["notes"] if "cannot list" not in n]
    return doc


@pytest.mark.parametrize("kind", ["file", "http", "s3"])
def test_validate_and_analyze_equal_the_local_store(request, local, kind):
    url = {"file": lambda: local.as_uri(), "http": lambda: request.getfixturevalue("http_url"),
           "s3": lambda: request.getfixturevalue("s3_url")}[kind]()
    ref_v, got_v = _validate(str(local)), _validate(url)
    assert got_v["findings"] == ref_v["findings"] == [] and got_v["store"] == url
    if kind == "http":  # what could not be checked is said, not claimed
        assert got_v["notes"] and "cannot list" in got_v["notes"][0]
    else:
        assert got_v["notes"] == []
    assert _analyze(url) == _analyze(str(local))


def test_http_store_with_a_corrupt_chunk_is_named(local, http_url, tmp_path):
    # a damaged chunk is found over HTTP too (no listing needed to decode what is there)
    import shutil

    bad = local.parent / "bad.zarr"
    if not bad.exists():
        shutil.copytree(local, bad)
        (bad / "score" / "c" / "1" / "0" / "0" / "0" / "0").write_bytes(b"not zstd")
    url = http_url.rsplit("/", 1)[0] + "/bad.zarr"
    r = CliRunner().invoke(app, ["validate", url])
    assert r.exit_code == 1 and "DT-DATA-013" in r.stdout and "questions 8..15" in r.stdout
    r = CliRunner().invoke(app, ["analyze", url, "--bootstrap", "0"])
    assert r.exit_code == 2 and "array 'score' chunk (1, 0, 0, 0, 0)" in r.stderr


@pytest.mark.parametrize(("url", "needle"), [
    ("http://127.0.0.1:9/s.zarr", "cannot connect to the server"),
    ("foo://x/s.zarr", "unknown protocol 'foo'"),
])
def test_unreachable_or_unknown_is_one_line(url, needle):
    for cmd in (["validate", url], ["analyze", url]):
        r = CliRunner().invoke(app, cmd)
        assert r.exit_code == 2 and needle in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_nothing_at_the_url(http_url, s3_url):
    for url in (http_url.rsplit("/", 1)[0] + "/none.zarr", "s3://stores/none.zarr", "s3://no-bucket/s.zarr"):
        r = CliRunner().invoke(app, ["validate", url])
        assert r.exit_code == 2 and "no zarr v3 store there" in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize(("scheme", "module", "package"), [("s3", "s3fs", "s3fs"), ("http", "aiohttp", "aiohttp")])
def test_a_missing_package_says_what_to_install(monkeypatch, scheme, module, package):
    registry = sys.modules["fsspec.registry"]._registry  # filesystems fsspec already imported
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    if scheme == "http":  # fsspec's http filesystem module imports aiohttp
        monkeypatch.setitem(sys.modules, "fsspec.implementations.http", None)
    for name in (scheme, "https" if scheme == "http" else "s3a"):
        monkeypatch.delitem(registry, name, raising=False)
    url = f"{scheme}://somewhere/s.zarr"
    for cmd in (["validate", url], ["analyze", url]):
        r = CliRunner().invoke(app, cmd)
        assert r.exit_code == 2, r.output
        assert f"needs {package}: pip install 'depthtraj[remote]'" in r.stderr and r.stderr.count("\n") == 1
