"""The report read in a real browser (issue 36): headless Chromium driven by Selenium loads the demo
report and a two-store report (the demo's recurrent store beside a layer store) at 700 and 1280 px
and fails when

* any element other than a table's own scroll box (or what is inside one) is wider than the
  viewport, or the page scrolls sideways;
* an image does not load;
* a link to a place in the page (a symbol's glossary entry, a contents entry) does not resolve;
* the page logs a JavaScript error;
* on the demo's first screen (1280 × 800) the glance table and the accuracy-across-depth figure
  are not both in view.

Screenshots of both widths are written to ``$DEPTHTRAJ_SCREENSHOTS`` (default: the test's temporary
directory) for a person to look at. Debian's ``chromium`` and ``chromium-driver`` are installed by
``.ci/run``, which sets ``DEPTHTRAJ_BROWSER=require``: without them the module fails there, and is
skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.models, pytest.mark.browser]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

WIDTHS = (700, 1280)


@pytest.fixture(scope="module")
def reports(browser, demo_and_layer_store):
    """``{"demo": report.html, "two": report.html}``: the demo's report, and a report of the demo's
    recurrent store beside a 6-layer logit-lens store of the same ARC questions."""
    root = demo_and_layer_store
    return {"demo": root / "demo" / "report" / "report.html", "two": root / "both" / "report.html"}


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through Selenium; without Debian's chromium and chromium-driver the tests
    skip (marker ``browser``), or fail where ``DEPTHTRAJ_BROWSER=require`` (CI)."""
    if not (CHROMIUM and DRIVER):
        why = "no chromium/chromedriver on this machine (apt-get install chromium chromium-driver)"
        if os.environ.get("DEPTHTRAJ_BROWSER") == "require":
            pytest.fail(f"DEPTHTRAJ_BROWSER=require: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--hide-scrollbars"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def _open(driver, page: Path, width: int, height: int = 800) -> None:
    driver.set_window_size(width, height)
    # the viewport, not the window, must be `width` wide
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(width + (width - inner[0]), height + (height - inner[1]))
    driver.get(page.as_uri())
    driver.execute_script("return document.readyState")


_OVERFLOW = """
const vw = document.documentElement.clientWidth, bad = [];
for (const el of document.body.querySelectorAll('*')) {
  const box = el.closest('.tbl');
  if (box && box !== el) continue;                 // inside a table's own scroll box
  const r = el.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) continue;   // not rendered (a closed <details>)
  if (r.right > vw + 1 || r.left < -1) bad.push(`${el.tagName}.${el.className} ${Math.round(r.left)}..${Math.round(r.right)}`);
}
return {bad: bad.slice(0, 10), scroll: document.documentElement.scrollWidth, vw: vw};
"""

_IMAGES = """
return Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));
"""

_LINKS = """
return Array.from(document.querySelectorAll('a[href^="#"]')).map(a => a.getAttribute('href').slice(1))
  .filter(id => !document.getElementById(decodeURIComponent(id)));
"""


_READING = """
const ps = [...document.querySelectorAll('p')].map(p => p.innerText.trim()).filter(t => t.length > 60);
const seen = {}; ps.forEach(t => seen[t] = (seen[t] || 0) + 1);
const glance = document.querySelector('#glance .tbl');
return {
  repeated: Object.entries(seen).filter(([t, n]) => n > 1).map(([t, n]) => `${n}x ${t.slice(0, 80)}`),
  captions_in_boxes: document.querySelectorAll('.tbl caption').length,
  glance_scrolls: glance.scrollWidth > glance.clientWidth + 1,
  figures: [...document.images].map(i => [i.getAttribute('src'), i.naturalWidth, i.getBoundingClientRect().width]),
  small_text: [...document.querySelectorAll('body *')].filter(e => [...e.childNodes].some(
    n => n.nodeType === 3 && n.textContent.trim()) && e.getClientRects().length &&
    parseFloat(getComputedStyle(e).fontSize) < 9).map(e => e.tagName).slice(0, 5),
};
"""


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["demo", "two"])
def test_the_report_reads_at_any_width(reports, browser, name, width, tmp_path):
    from PIL import Image

    _open(browser, reports[name], width)
    over = browser.execute_script(_OVERFLOW)
    assert not over["bad"] and over["scroll"] <= over["vw"] + 1, over
    # what a reader found (issue 48): a paragraph said twice, a table title cut inside its scroll
    # box, the glance table scrolling sideways, text under 9 px on the page or in a figure
    reading = browser.execute_script(_READING)
    assert reading["repeated"] == [] and reading["captions_in_boxes"] == 0, reading
    assert not reading["glance_scrolls"] and reading["small_text"] == [], reading
    for src, natural, shown in reading["figures"]:
        meta = Image.open(reports[name].parent / src).info  # min font (pt) at the PNG's dpi, 200
        px = float(meta["depthtraj:min_font_pt"]) * 200 / 72 * shown / natural
        assert px >= 9 and meta["depthtraj:cut"] == "0", (src, round(px, 1), meta["depthtraj:cut"])
    assert browser.execute_script(_IMAGES) == []
    links = browser.execute_script("return document.querySelectorAll('a.sym').length")
    assert links > 10  # the symbols link to their definitions ...
    assert browser.execute_script(_LINKS) == []  # ... and every in-page link resolves
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    # the key columns are held in place by the page's script: sticky cells with offsets
    assert browser.execute_script("return document.querySelectorAll('table.data .stick').length") > 0
    shots = Path(os.environ.get("DEPTHTRAJ_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(shots / f"report-{name}-{width}.png"))


def test_the_first_screen_answers_first(reports, browser):
    """1280 × 800: the glance table (every store, task and arm with A_T, the best depth and τ) and
    the accuracy-across-depth figure are both in view; a random-weight model says so."""
    _open(browser, reports["demo"], 1280, 800)
    rects = browser.execute_script("""
      const t = document.querySelector('#glance table'), f = document.querySelector('#glance figure img');
      return [t.getBoundingClientRect().bottom, f ? f.getBoundingClientRect().bottom : 1e9,
              document.querySelectorAll('#glance tbody tr').length, document.querySelector('.note') ?
              document.querySelector('.note').textContent : ''];
    """)
    table_bottom, figure_bottom, rows, note = rects
    assert rows == 4  # the demo: 2 tasks × 2 arms
    assert table_bottom <= 800 and figure_bottom <= 800, rects
    assert "Random weights" in note and "†" in note


# ------------------------------------------------------------------------------------------
# the archive's index page (issue 50): report PREFIX --out DIR --all
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def archive_index(tmp_path_factory) -> Path:
    """The index of an archive of four synthetic stores (two models, a text store, one store
    with a lost chunk, excluded), each trusted store's own report written (``--all``)."""
    import shutil
    import warnings

    from depthtraj.cli import app
    from depthtraj.testing import synthetic_store
    from typer.testing import CliRunner

    root = tmp_path_factory.mktemp("archive")
    lab = root / "lab"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(lab / "model-a" / "arc-mmlu.zarr", 64, endpoint=12, precision=("bf16", "fp32"),
                        chunk_size=32, seed=1, model="model-a")
        synthetic_store(lab / "model-b" / "arc-mmlu.zarr", 64, endpoint=24, chunk_size=32, seed=2, model="model-b")
        synthetic_store(lab / "model-b" / "text.zarr", 48, endpoint=24, readout="text", tasks=("arc_challenge",),
                        chunk_size=16, seed=3, model="model-b")
    shutil.copytree(lab / "model-b" / "arc-mmlu.zarr", lab / "model-c-damaged.zarr")
    shutil.rmtree(lab / "model-c-damaged.zarr" / "score" / "c" / "1")
    r = CliRunner().invoke(app, ["report", str(lab), "--out", str(root / "idx"), "--all", "--bootstrap", "50",
                                 "--sections", "3,4"])
    assert r.exit_code == 0, r.stderr
    return root / "idx" / "index.html"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_archive_index_reads_at_any_width_and_sorts(archive_index, browser, width, tmp_path):
    _open(browser, archive_index, width)
    over = browser.execute_script(_OVERFLOW)
    assert not over["bad"] and over["scroll"] <= over["vw"] + 1, over
    assert browser.execute_script(_IMAGES) == []
    assert browser.execute_script(_LINKS) == []
    # every link to a store's report is a file that is there
    hrefs = browser.execute_script("return [...document.querySelectorAll('#compare-table a')].map(a => a.getAttribute('href'))")
    assert len(hrefs) == 7 and all((archive_index.parent / h).is_file() for h in hrefs)  # rows: 4 + 2 + 1
    assert "model-c-damaged.zarr" in browser.find_element("id", "excluded").text
    # sorting: a click on A_T orders the rows by it, highest first; a second click, lowest first
    col = browser.execute_script("return [...document.querySelectorAll('#compare-table thead th')].findIndex("
                                 "th => th.textContent.startsWith('A_T'))")
    read = ("return [...document.querySelectorAll('#compare-table tbody tr')].map(r => "
            f"parseFloat(r.cells[{col}].getAttribute('data-sort')))")
    button = browser.find_elements("css selector", "#compare-table thead th button")[col]
    button.click()
    values = browser.execute_script(read)
    assert values == sorted(values, reverse=True) and len(set(values)) > 1, values
    button.click()
    assert browser.execute_script(read) == sorted(values)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    shots = Path(os.environ.get("DEPTHTRAJ_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(shots / f"archive-index-{width}.png"))
