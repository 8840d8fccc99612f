"""Loads the host's status page in headless Chromium (Debian's chromium + chromedriver,
driven by Selenium) and reports what a person would see, as JSON on stdout:

- the task rows (id, state, steps text) and each job's progress bar value, once at least
  --tasks rows are shown;
- the same again after the page has redrawn with new figures (live updates);
- the sparklines' point counts and the device memory bar;
- a screenshot (--screenshot FILE.png), taken when sparklines have points.

Exits 1 with a message when the page never shows what is expected within --timeout seconds.
"""
import argparse
import json
import shutil
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

SNAPSHOT_JS = """
const rows = [...document.querySelectorAll('tr[data-task-id]')].map(r => ({
  task_id: Number(r.dataset.taskId), state: r.dataset.state,
  steps: r.querySelector('td.steps').textContent,
  rate: r.querySelector('td.rate').textContent}));
const jobs = [...document.querySelectorAll('[data-job-progress]')].map(b => ({
  job_id: Number(b.dataset.jobProgress), progress: Number(b.getAttribute('aria-valuenow'))}));
const sparks = [...document.querySelectorAll('svg[data-spark-task]')].map(s => ({
  task_id: Number(s.dataset.sparkTask), points: Number(s.getAttribute('data-points') || 0),
  valid_points: Number(s.getAttribute('data-valid-points') || 0)}));
const devices = [...document.querySelectorAll('[data-device]')].map(d => ({
  name: d.dataset.device, label: d.getAttribute('aria-label')}));
return {rows, jobs, sparks, devices,
        connection: document.getElementById('connection').textContent};
"""


def wait_for(driver, what, predicate, timeout):
    deadline = time.time() + timeout
    snap = None
    while time.time() < deadline:
        snap = driver.execute_script(SNAPSHOT_JS)
        if predicate(snap):
            return snap
        time.sleep(0.25)
    sys.exit(f"status page: {what} not seen within {timeout} s; last view: {json.dumps(snap)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--tasks", type=int, required=True, help="rows expected at least")
    ap.add_argument("--screenshot")
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not chromium or not chromedriver:
        sys.exit("chromium and chromedriver are needed: run `make browser-tools` "
                 "(or set TLI_SKIP_BROWSER_TESTS=1)")
    options = Options()
    options.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1000", "--hide-scrollbars"):
        options.add_argument(a)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        driver.set_page_load_timeout(args.timeout)
        driver.get(args.url)
        first = wait_for(driver, f"{args.tasks} task rows",
                         lambda s: len(s["rows"]) >= args.tasks and s["jobs"], args.timeout)
        before = {r["task_id"]: r["steps"] for r in first["rows"]}
        progress_before = {j["job_id"]: j["progress"] for j in first["jobs"]}

        def updated(s):
            steps_changed = any(before.get(r["task_id"]) not in (None, r["steps"]) for r in s["rows"])
            progress_changed = any(j["progress"] != progress_before.get(j["job_id"], j["progress"])
                                   for j in s["jobs"])
            return steps_changed or progress_changed

        second = wait_for(driver, "a live update (new steps or progress)", updated, args.timeout)
        third = wait_for(driver, "a sparkline with points",
                         lambda s: any(p["points"] >= 2 for p in s["sparks"]), args.timeout)
        # A template task's train_loss sparkline with its valid_loss beside it (dashed).
        fourth = wait_for(driver, "a sparkline with its validation twin",
                          lambda s: any(p["valid_points"] >= 2 for p in s["sparks"]), args.timeout)
        if args.screenshot:
            driver.save_screenshot(args.screenshot)
        json.dump({"first": first, "second": second, "third": third, "fourth": fourth}, sys.stdout)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
