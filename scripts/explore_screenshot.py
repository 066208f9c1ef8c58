"""Write a screenshot of ``attnroof explore`` (docs/explore.png): the server started here on a
free port, the page opened in headless Chromium (Debian's chromium and chromium-driver) through
Selenium, at a view given by its URL state.

    python scripts/explore_screenshot.py [--out docs/explore.png] [--state 'model=...&batch=8']
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = "model=llama-3.1-8b&device=H100+SXM&batch=16&context=8192"


def chrome(width: int = 1500, height: int = 1400):  # type: ignore[no-untyped-def]
    """Headless Chromium under Selenium, with the flags a closed network needs."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnroof", "explore"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.split()[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "explore.png"))
    ap.add_argument("--state", default=STATE, help="the page's URL state (after '#')")
    args = ap.parse_args()
    proc, url = start_server()
    driver = chrome()
    try:
        driver.get(f"{url}#{args.state}")
        deadline = time.time() + 60
        while driver.execute_script("return document.body.dataset.redraws") is None:
            if time.time() > deadline:
                raise SystemExit("the page did not draw within 60 s")
            time.sleep(0.1)
        time.sleep(0.5)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1500, height + 40)
        time.sleep(0.5)
        driver.save_screenshot(args.out)
        print(f"wrote {args.out}")
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
