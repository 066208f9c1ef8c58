"""How long ``attnroof explore`` takes to redraw after a control changes (not a timed test): run
``python benchmarks/explore_redraw.py``. Target: ≤ 200 ms for a built-in model.

The server runs in a process of its own (``python -m attnroof explore``), the page in headless
Chromium (Debian's chromium and chromium-driver, through Selenium). Each change is a new view,
never one the page has cached: the batch steps through values not seen before, then the context,
the model, the device, the phase and the plan. Two times per change, each reported as median and
worst over the changes:

- the page's own: from the control's ``change`` event to the last chart drawn
  (``window.explorer.lastRedrawMs``: the requests to the server, which runs ``attnroof model``,
  ``devices``, ``sweep`` and ``crossover`` with ``--json``, and plotly's redraw of the four charts);
- the driver's: from Selenium's action to the page saying it has redrawn (adds WebDriver's own
  round trips, an upper bound on what a person sees).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from explore_screenshot import chrome, start_server  # noqa: E402

TARGET_MS = 200.0


def _redraws(d) -> int:  # type: ignore[no-untyped-def]
    return int(d.execute_script("return document.body.dataset.redraws || 0"))


def _wait(d, after: int) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + 60
    while _redraws(d) <= after:
        if time.time() > deadline:
            raise SystemExit("the page did not redraw within 60 s")
        time.sleep(0.002)


def _change(d, control: str, value: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Set ``control`` to ``value`` as a user would, and wait for the redraw: (page ms, driver ms)."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    before = _redraws(d)
    el = d.find_element("id", control)
    start = time.perf_counter()
    if el.tag_name == "select":
        Select(el).select_by_value(value)
    else:
        el.send_keys(
            Keys.CONTROL, "a"
        )  # typed over, as a person does (clear() says "change" with an empty field)
        el.send_keys(value, Keys.TAB)
    _wait(d, before)
    wall = (time.perf_counter() - start) * 1000
    if d.execute_script("return document.body.dataset.ok") != "1":
        raise SystemExit(f"{control}={value}: {d.find_element('id', 'error').text}")
    return float(d.execute_script("return window.explorer.lastRedrawMs")), wall


CHANGES = (
    *[("batch", str(b)) for b in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)],
    *[("context", str(c)) for c in (1024, 2048, 4096, 16384, 32768)],
    ("model", "qwen2.5-7b"),
    ("model", "mistral-7b"),
    ("model", "llama-3.1-70b"),
    ("device", "A100 SXM 80GB"),
    ("device", "MI300X"),
    ("device", "H200 SXM"),
    ("phase", "prefill"),
    ("tp", "2"),
    ("tp", "4"),
    ("phase", "decode"),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=True)
    proc, url = start_server()
    d = chrome()
    try:
        d.get(f"{url}#model=llama-3.1-8b&device=H100+SXM&context=8192")
        _wait(d, 0)
        page, wall = zip(*(_change(d, c, v) for c, v in CHANGES), strict=True)
    finally:
        d.quit()
        proc.terminate()
        proc.wait(10)
    out = {
        "changes": len(CHANGES),
        "page_ms": {"median": statistics.median(page), "max": max(page)},
        "driver_ms": {"median": statistics.median(wall), "max": max(wall)},
        "target_ms": TARGET_MS,
        "each": [
            {"change": f"{c}={v}", "page_ms": p, "driver_ms": w}
            for (c, v), p, w in zip(CHANGES, page, wall, strict=True)
        ],
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{len(CHANGES)} control changes, each a new view (target ≤ {TARGET_MS:.0f} ms):")
        print(
            f"  page (change event → charts drawn): median {out['page_ms']['median']:.0f} ms, worst {max(page):.0f} ms"
        )
        print(
            f"  driver (action → page redrawn):     median {out['driver_ms']['median']:.0f} ms, worst {max(wall):.0f} ms"
        )
    return 0 if out["page_ms"]["median"] <= TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
