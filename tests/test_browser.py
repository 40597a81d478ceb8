"""Notebook 01 in JupyterLab, in a real (headless) browser: run all cells, check what the page
shows (tables, a figure, no error), then use two widgets and see their output change.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them where it can);
without them the test is skipped, saying so. Nothing downloads a browser. Screenshots land in
``output/browser/`` (not committed) for a person to look at.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from perflab.implementations.model import get_preset
from perflab.measure.device import resolve_device
from perflab.measure.paths import NOTEBOOKS_DIR, REPO_ROOT, device_slug

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
from selenium.common.exceptions import (  # noqa: E402
    SessionNotCreatedException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

NOTEBOOK = "01_benchmarking.ipynb"
SCREENSHOTS = REPO_ROOT / "output" / "browser"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
TOKEN = "perflab-browser-test"

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="headless Chromium not found: `apt-get install -y chromium chromium-driver` "
    "(Debian) to run the JupyterLab browser test",
)

# The notebook's state, read from JupyterLab's own model (``window.jupyterapp``, exposed by
# ``--LabApp.expose_app_in_browser``): kernel status, and per code cell its execution count
# and output types.
NOTEBOOK_STATE_JS = """
const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
if (!panel || !panel.content || !panel.sessionContext.session) { return null; }
const kernel = panel.sessionContext.session.kernel;
const cells = panel.content.widgets.filter(c => c.model.type === 'code').map(c => ({
  count: c.model.executionCount,
  outputs: c.model.outputs.toJSON().map(o => o.output_type),
}));
return {status: kernel ? kernel.status : 'none', cells: cells};
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(condition, timeout: float, what: str, every: float = 0.5):
    """Poll ``condition()`` with selenium's ``WebDriverWait`` until it returns something true
    (an element re-rendered while it was read counts as not yet); fail naming ``what``."""
    wait = WebDriverWait(
        None, timeout, poll_frequency=every, ignored_exceptions=(StaleElementReferenceException,)
    )
    return wait.until(lambda _: condition(), message=f"{timeout:.0f} s waiting for {what}")


def _write_settings(folder: Path, plugin: str, **values) -> None:
    """JupyterLab user settings for ``@jupyterlab/<plugin>``."""
    path = folder / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))


@pytest.fixture
def jupyter_lab(tmp_path):
    """JupyterLab on loopback with a token and no browser of its own, serving a copy of
    notebook 01; its results go to a data folder holding the committed results of notebook 01,
    so the sweeps resume instead of measuring again (nbval's run of the notebook measures)."""
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(NOTEBOOKS_DIR / NOTEBOOK, root / NOTEBOOK)
    data = tmp_path / "data"
    committed = REPO_ROOT / "data" / "results" / "01_benchmarking"
    shutil.copytree(committed, data / "results" / "01_benchmarking")
    # Every cell stays in the page (no windowing), so the checks below see all outputs; no
    # toast asking about Jupyter news covers the page.
    _write_settings(tmp_path / "settings", "notebook-extension/tracker", windowingMode="none")
    _write_settings(
        tmp_path / "settings",
        "apputils-extension/notification",
        fetchNews="false",
        checkForUpdates=False,
    )
    port = _free_port()
    # The kernel as a user gets it: the test session's MPLBACKEND=Agg would hide the figures.
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env |= {
        "PERFLAB_DATA_DIR": str(data),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
    }  # no user's ~/.jupyter
    as_root = ["--allow-root"] if os.geteuid() == 0 else []  # CI's containers run as root
    log = open(tmp_path / "jupyter.log", "w")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=None",
            f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
            f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
            *as_root,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy

    def up() -> bool:
        if server.poll() is not None:
            last = (tmp_path / "jupyter.log").read_text().splitlines()[-3:]
            raise AssertionError("jupyter lab exited: " + " / ".join(last))
        try:
            with direct.open(f"{url}/api/status?token={TOKEN}", timeout=2):
                return True
        except OSError:
            return False

    try:
        _wait_for(up, 120, "jupyter lab to start")
        yield url, data
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    except SessionNotCreatedException as error:  # e.g. a driver of another Chromium version
        pytest.skip(f"{CHROMIUM} with {CHROMEDRIVER} does not start: {error.msg.splitlines()[0]}")
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver, element, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    time.sleep(0.5)
    driver.save_screenshot(str(SCREENSHOTS / name))


def _widget(driver, text: str):
    """The ipywidgets ``interactive`` box whose text contains ``text``."""
    for box in driver.find_elements(By.CSS_SELECTOR, ".widget-interact"):
        if text in box.text:
            return box
    raise AssertionError(f"no widget showing {text!r} in the page")


def _shown(driver, box) -> list[str]:
    """The words of the tables in the widget's output area (not of its menus), read in one
    step in the page, so that a table re-rendered meanwhile cannot be half read."""
    return driver.execute_script(
        "return Array.from(arguments[0].querySelectorAll('.widget-output table'))"
        ".map(t => t.innerText).join(' ');",
        box,
    ).split()


def _dropdown(box, label: str) -> Select:
    for item in box.find_elements(By.CSS_SELECTOR, ".widget-dropdown"):
        if item.find_element(By.TAG_NAME, "label").text == label:
            return Select(item.find_element(By.TAG_NAME, "select"))
    raise AssertionError(f"no menu {label!r} in the widget")


def test_notebook_01_runs_in_jupyterlab_and_its_widgets_respond(jupyter_lab, browser):
    url, data = jupyter_lab
    browser.get(f"{url}/lab/tree/{NOTEBOOK}?token={TOKEN}")
    _wait_for(
        lambda: (s := browser.execute_script(NOTEBOOK_STATE_JS)) and s["status"] == "idle",
        180,
        "the notebook to open with an idle kernel",
    )
    # Clear the committed outputs first, so that every execution count seen below is new.
    browser.execute_script("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs');")
    _wait_for(
        lambda: all(
            c["count"] is None and not c["outputs"]
            for c in browser.execute_script(NOTEBOOK_STATE_JS)["cells"]
        ),
        30,
        "the committed outputs to be cleared",
    )
    browser.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells');")

    def finished():  # every cell ran, or one failed (run-all then drops the cells after it)
        state = browser.execute_script(NOTEBOOK_STATE_JS)
        ran = all(c["count"] is not None for c in state["cells"])
        failed = any("error" in c["outputs"] for c in state["cells"])
        return state if state["status"] == "idle" and (ran or failed) else None

    state = _wait_for(finished, 900, "all cells of notebook 01 to run", every=2)
    errors = [i for i, c in enumerate(state["cells"]) if "error" in c["outputs"]]
    assert not errors, f"code cells {errors} ended in an error"
    page = browser.find_element(By.CSS_SELECTOR, ".jp-Notebook")
    assert "Traceback" not in page.text
    tables = page.find_elements(By.CSS_SELECTOR, ".jp-RenderedHTMLCommon table.dataframe")
    figures = page.find_elements(By.CSS_SELECTOR, ".jp-RenderedImage img")
    assert len(tables) >= 5 and len(figures) >= 2, (len(tables), len(figures))
    _shot(browser, figures[0], "01_after_run_all.png")

    # The explorer: choosing one preset leaves only its rows in the widget's table.
    explorer = _widget(browser, "num_parameters")
    assert {"cpu-tiny", "cpu-small"} <= set(_shown(browser, explorer))
    _dropdown(explorer, "preset").select_by_visible_text("cpu-small")
    _wait_for(
        lambda: (s := _shown(browser, explorer)) and "cpu-tiny" not in s and "cpu-small" in s,
        60,
        "the explorer's table to follow the preset menu",
    )
    assert explorer.find_elements(By.CSS_SELECTOR, "img"), "the explorer draws no figure"
    _shot(browser, explorer, "01_explorer_cpu_small.png")

    # Measure now: nothing under the button until it is pressed; then the configuration chosen
    # in the menus (not the one it starts at) is measured, shown and saved.
    measure = _widget(browser, "measure now")
    assert not _shown(browser, measure), "the control showed a table before being pressed"
    here = device_slug(resolve_device("auto"))  # the notebook's device="auto"
    saved = data / "results" / "01_benchmarking" / here / "measure_now.csv"
    assert not saved.exists()
    _dropdown(measure, "preset").select_by_visible_text("cpu-small")
    _dropdown(measure, "mode").select_by_visible_text("forward-backward")
    measure.find_element(By.XPATH, ".//button[normalize-space()='measure now']").click()
    shown = _wait_for(lambda: _shown(browser, measure), 300, "the measured row under the control")
    assert {"ok", "cpu-small", "forward-backward"} <= set(shown)
    _shot(browser, measure, "01_measure_now.png")
    row = pd.read_csv(saved).iloc[-1]
    small = get_preset("cpu-small")
    assert (row["preset"], row["mode"], row["d_model"], row["num_layers"]) == (
        "cpu-small",
        "forward-backward",
        small.d_model,
        small.num_layers,
    )
