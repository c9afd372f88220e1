"""JupyterLab in headless Chromium (Debian's, driven by Playwright): run a %%distribute job from a notebook, watch
its row and progress in the jobs panel, cancel it there, and see it cancelled with its ranks stopped.

Everything is real: `jupyter lab` with the extension, a kernel, a local ipyparallel cluster, Horovod over gloo.
"""
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = pathlib.Path(__file__).parent / "artifacts"

TRAIN = """%%distribute -n 2 --name browser-job
import keras
x = x_small.repeat(4, axis=0); y = y_small.repeat(4, axis=0)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(x, y, batch_size=16, epochs=400, verbose=0)
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    data_dir = tmp_path_factory.mktemp("data")
    nb = new_notebook(cells=[
        new_code_cell("%load_ext jupyter_dl\nfrom sklearn.datasets import load_digits\n"
                      "d = load_digits(); x_small = (d.data / 16).astype('float32'); y_small = d.target"),
        new_code_cell(TRAIN),
        new_code_cell("%%distribute -n 2 --manual --name after-cancel\nimport horovod.tensorflow as hvd\n"
                      "print('ranks after cancel:', hvd.size())"),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, root / "job.ipynb")
    token, port = secrets.token_hex(16), _free_port()
    env = {**os.environ, "JUPYTER_DATA_DIR": str(data_dir), "TF_CPP_MIN_LOG_LEVEL": "2"}
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.workspaces_dir={tmp_path_factory.mktemp('workspaces')}",  # no layout restored from earlier runs
         f"--LabApp.user_settings_dir={tmp_path_factory.mktemp('settings')}"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    import requests

    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(f"{url}/api/status", params={"token": token}, timeout=2).ok:
                break
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError((root / "lab.log").read_text()[-3000:])
        time.sleep(0.3)
    yield {"url": url, "token": token, "root": root, "data_dir": data_dir}
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def page(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.goto(f"{lab['url']}/lab/tree/job.ipynb?token={lab['token']}")
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
        yield page
        browser.close()


def _api(lab, *path):
    import requests

    response = requests.get("/".join([lab["url"], "jupyter-dl", "api", *path]),
                            headers={"Authorization": f"token {lab['token']}"}, timeout=10)
    response.raise_for_status()
    return response.json()


def _run_cell(page, index, wait_done=False, timeout=120_000):
    cell = page.locator(".jp-NotebookPanel .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    prompt = cell.locator(".jp-InputPrompt")
    # Wait until the kernel took the cell: its prompt turns from [ ] to [*] (running) or [n] (done).
    page.wait_for_function("(el) => /\\[(\\*|\\d+)\\]/.test(el.textContent)", arg=prompt.element_handle(),
                           timeout=timeout)
    if wait_done:
        page.wait_for_function("(el) => /\\[\\d+\\]/.test(el.textContent)", arg=prompt.element_handle(),
                               timeout=timeout)


@pytest.fixture
def on_failure_evidence(lab, page, request):
    """Keep a screenshot and the server log when the test fails (CI machines are not ours to poke at)."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "failure.png"))
        (ARTIFACTS / "failure-lab.log").write_text((lab["root"] / "lab.log").read_text()[-20000:])


def test_run_watch_and_cancel_from_the_panel(lab, page, on_failure_evidence):
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".jp-StatusBar-Widget", has_text="Idle").first.wait_for(timeout=90_000)  # the kernel is up
    _run_cell(page, 0, wait_done=True)
    _run_cell(page, 1)

    # Open the sidebar from its tab (the panel's widget id is jp-dl-jobs-panel); the tab toggles, so only if closed.
    panel = page.locator("#jp-dl-jobs-panel")
    if not panel.is_visible():
        page.locator('.jp-SideBar [data-id="jp-dl-jobs-panel"]').first.click()
    panel.wait_for(state="visible", timeout=30_000)
    row = panel.locator("li.jp-dl-job", has_text="browser-job")
    row.wait_for(timeout=240_000)  # cluster start and TensorFlow import in the kernel and engines come first
    page.wait_for_selector('#jp-dl-jobs-panel li.jp-dl-job[data-state="running"]', timeout=240_000)

    progress = row.locator(".jp-dl-job-progress")
    def fraction():
        value = progress.get_attribute("data-fraction")
        return float(value) if value not in (None, "", "null") else 0.0
    first = fraction()
    deadline = time.monotonic() + 60
    while fraction() <= first and time.monotonic() < deadline:
        time.sleep(0.5)
    second = fraction()
    assert second > first, (first, second)  # the progress bar moves while the job trains
    panel.screenshot(path=str(ARTIFACTS / "jobs-panel-running.png"))

    job_id = row.get_attribute("data-job-id")
    assert _api(lab, "jobs", job_id)["state"] == "running"

    row.locator("button.jp-dl-cancel").click()
    page.locator(".jp-Dialog button.jp-mod-accept").click()
    page.wait_for_selector(f'#jp-dl-jobs-panel li.jp-dl-job[data-job-id="{job_id}"][data-state="cancelled"]',
                           timeout=30_000)
    panel.screenshot(path=str(ARTIFACTS / "jobs-panel-cancelled.png"))
    job = _api(lab, "jobs", job_id)
    assert job["state"] == "cancelled"
    assert job["elapsed"] < job["timestamps"]["cancelled"] - job["created"] + 1

    # The notebook cell raised the cancellation, and the engines run the next cell: all ranks were stopped.
    page.wait_for_selector(".jp-OutputArea-output:has-text('JobCancelled')", timeout=30_000)
    _run_cell(page, 2)
    page.wait_for_selector(".jp-OutputArea-output:has-text('ranks after cancel: 2')", timeout=120_000)
    page.screenshot(path=str(ARTIFACTS / "jupyterlab-after-cancel.png"))

    # Logs and loss plot open in main-area tabs from the rows.
    after = panel.locator("li.jp-dl-job", has_text="after-cancel")
    after.wait_for(timeout=30_000)
    after_id = after.get_attribute("data-job-id")
    after.locator("button.jp-dl-logs").click()
    page.wait_for_selector(f"#jp-dl-logs-{after_id} .jp-dl-log-text:has-text('ranks after cancel: 2')",
                           timeout=30_000)
    row.locator("button.jp-dl-plot").click()
    page.wait_for_selector(f"#jp-dl-plot-{job_id} svg.jp-dl-chart path", timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "loss-plot-tab.png"))
