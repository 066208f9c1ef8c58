"""attnroof explore in a real browser: Debian's Chromium, headless, driven by Selenium through
Debian's chromedriver (.ci/run installs both). The page loads with no console error; changing
the model, the device and the batch changes the numbers, and the page's data equal the command
line's JSON; a bad config shows its one-line error; the roofline has one mark per operator; the
view lives in the URL."""

from __future__ import annotations

import json
import math
import shlex
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnroof.commands._run import run
from attnroof.explore.server import make_server, page_url
from conftest import run_cli_process

pytestmark = pytest.mark.xdist_group("explore_browser")  # one worker, one browser

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
)
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1200",
)


@pytest.fixture(scope="module")
def site() -> Iterator[tuple[str, str]]:
    """(the page's URL with this run's token, as the command prints it; the token)."""
    srv, explorer = make_server(run)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield page_url(srv, explorer), explorer.token
    srv.shutdown()
    srv.server_close()
    explorer.close()


@pytest.fixture(scope="module")
def base(site: tuple[str, str]) -> str:
    return site[0]


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install selenium)"
    )
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("Chromium or chromedriver is absent (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield d
    d.quit()


def _redraws(d: Any) -> int:
    return int(d.execute_script("return document.body.dataset.redraws || 0"))


def _wait(d: Any, after: int, what: str = "redraws", timeout: float = 300) -> None:
    """Until the page's counter passes ``after`` (it says it has redrawn): a wait on the page's
    state; the limit only keeps a broken page from hanging the suite."""
    deadline = time.monotonic() + timeout
    while int(d.execute_script(f"return document.body.dataset.{what} || 0")) <= after:
        assert time.monotonic() < deadline, f"the page did not redraw within {timeout} s"
        time.sleep(0.05)


def _open(d: Any, base: str, state: str = "") -> None:
    d.get("about:blank")  # a new load: another hash on the same page would only redraw it
    d.get(f"{base}#{state}" if state else base)
    _wait(d, 0)


def _select(d: Any, id_: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    before = _redraws(d)
    Select(d.find_element("id", id_)).select_by_value(value)
    _wait(d, before)


def _type(d: Any, id_: str, value: str) -> None:
    from selenium.webdriver.common.keys import Keys

    before = _redraws(d)
    el = d.find_element("id", id_)
    el.send_keys(Keys.CONTROL, "a")  # typed over (clear() would say "change" with an empty field)
    el.send_keys(value, Keys.TAB)  # a number field says "change" when it loses the focus
    _wait(d, before)


def _page(d: Any, what: str = "model") -> dict[str, Any]:
    return json.loads(d.execute_script(f"return JSON.stringify(window.explorer.last[{what!r}])"))


def _shown(d: Any) -> dict[str, Any]:
    """The summary table's numbers: field → the value the row carries."""
    rows = d.find_elements("css selector", "#summary tr")
    return {r.get_attribute("data-field"): json.loads(r.get_attribute("data-value")) for r in rows}


def _field(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def _cli(*words: str) -> dict[str, Any]:
    r = run_cli_process(*words, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_page_loads_with_no_console_error(driver, base):
    _open(driver, base)
    assert driver.execute_script("return document.body.dataset.ok") == "1"
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    assert driver.find_element("id", "error").is_displayed() is False


def test_model_device_and_batch_change_the_numbers_and_equal_the_command_line(driver, base):
    _open(driver, base, "model=llama-3.1-8b&device=H100+SXM&context=8192")
    words = ["--model", "llama-3.1-8b", "--device", "H100 SXM", "--context", "8192", "--batch", "1"]
    seen = [_shown(driver)]
    assert _page(driver) == _cli("model", *words, "--phase", "decode", "--dtype", "bf16")
    for control, value, flag in (
        ("model", "qwen2.5-7b", "--model"),
        ("device", "A100 SXM 80GB", "--device"),
        ("batch", "32", "--batch"),
    ):
        if control == "batch":
            _type(driver, control, value)
        else:
            _select(driver, control, value)
        words[words.index(flag) + 1] = value
        page = _page(driver)
        assert page == _cli("model", *words, "--phase", "decode", "--dtype", "bf16"), control
        shown = _shown(driver)
        assert shown and all(_field(page, f) == v for f, v in shown.items())
        assert shown["totals.time_s"] != seen[-1]["totals.time_s"], control
        seen.append(shown)
        assert f"{flag}={value}" in driver.find_element("id", "command").text
    pasted = shlex.split(driver.find_element("id", "command").text)  # the line as a shell reads it
    assert pasted[:2] == ["attnroof", "model"] and "--device=A100 SXM 80GB" in pasted
    assert _cli("model", *[w for w in pasted[2:] if w != "--json"]) == page
    # Qwen2.5-7B at batch 32 on an A100: 32 caches of 8192 tokens at 28 layers × 4 KV heads × 128
    # × 2 (K, V) × 2 B = 57,344 B a token → 15,032,385,536 B
    assert page["memory"]["kv_cache_bytes"] == 32 * 8192 * 28 * 4 * 128 * 2 * 2
    assert "batch=32" in driver.current_url and "model=qwen2.5-7b" in driver.current_url
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []


def test_a_view_is_shared_by_its_url(driver, base):
    _open(driver, base, "model=gpt2&device=L4&phase=prefill&batch=4&context=1024&tp=2")
    assert driver.find_element("id", "model").get_attribute("value") == "gpt2"
    assert driver.find_element("id", "tp").get_attribute("value") == "2"
    page = _page(driver)
    cli = _cli(
        "model",
        "--model",
        "gpt2",
        "--device",
        "L4",
        "--phase",
        "prefill",
        "--batch",
        "4",
        "--context",
        "1024",
        "--dtype",
        "bf16",
        "--tp",
        "2",
    )
    assert page == cli and page["parallel"]["tp"] == 2
    shown = _shown(driver)  # under a plan, memory is a device's
    assert shown["memory.per_device.total_bytes"] == cli["memory"]["per_device"]["total_bytes"]
    assert all(_field(page, f) == v for f, v in shown.items())


def test_a_bad_config_shows_its_one_line_error(driver, site):
    base, token = site
    _open(driver, base)
    driver.find_element("css selector", "#config-box summary").click()
    before = _redraws(driver)
    driver.find_element("id", "config").send_keys('{"model_type": "llama", "hidden_size": ')
    _wait(driver, before)
    error = driver.find_element("id", "error")
    assert error.is_displayed()
    req = urllib.request.Request(
        base.split("?")[0] + "api/model",
        headers={"Content-Type": "application/json", "X-Attnroof-Token": token},
        data=json.dumps(
            {
                "params": {
                    "phase": "decode",
                    "batch": "1",
                    "context": "8192",
                    "dtype": "bf16",
                    "device": "H100 SXM",
                },
                "config": '{"model_type": "llama", "hidden_size": ',
            }
        ).encode(),
    )
    try:
        urllib.request.urlopen(req, timeout=60)
    except urllib.error.HTTPError as e:
        expected = json.loads(e.read())["error"]
    assert error.text == expected and "\n" not in expected and "config.json" in expected


def test_the_roofline_has_one_mark_per_operator(driver, base):
    for state in (
        "model=llama-3.1-8b&batch=8",
        "model=mixtral-8x7b&phase=prefill&context=2048&batch=2&tp=2&ep=2",
    ):
        _open(driver, base, state)
        ops = _page(driver)["ops"]
        marks = driver.execute_script(
            "const gd = document.getElementById('roofline');"
            "const i = gd.data.findIndex(t => t.name === 'operators');"
            "return [gd.data[i].x.length,"
            " document.querySelectorAll('#roofline .scatterlayer .trace')[i].querySelectorAll('path.point').length];"
        )
        assert marks == [len(ops), len(ops)], state


def test_serving_load_equals_serve_sim(driver, base):
    _open(driver, base, "model=llama-3.1-8b&device=H100+SXM&rate=5&num-requests=50")
    before = int(driver.execute_script("return document.body.dataset.serves || 0"))
    driver.find_element("id", "serve").click()
    _wait(driver, before, "serves")
    cli = _cli(
        "serve-sim",
        "--model",
        "llama-3.1-8b",
        "--device",
        "H100 SXM",
        "--dtype",
        "bf16",
        "--rate",
        "5",
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--num-requests",
        "50",
    )
    assert _page(driver, "serve") == cli
    rows = driver.find_elements("css selector", "#serving tr")
    shown = {r.get_attribute("data-field"): json.loads(r.get_attribute("data-value")) for r in rows}
    assert shown["summary.latency_s.ttft.p99"] == cli["summary"]["latency_s"]["ttft"]["p99"]


def test_plan_search_equals_plan_and_a_front_plan_shows_above(driver, base):
    _open(driver, base, "model=llama-3.1-8b&device=H100+SXM&batch=64&devices=8")
    before = int(driver.execute_script("return document.body.dataset.searches || 0"))
    driver.find_element("id", "search").click()
    _wait(driver, before, "searches")
    cli = _cli(
        "plan",
        "--devices",
        "8",
        "--phase",
        "decode",
        "--context",
        "8192",
        "--batch",
        "64",
        "--dtype",
        "bf16",
        "--model",
        "llama-3.1-8b",
        "--device",
        "H100 SXM",
    )
    assert _page(driver, "plan") == cli
    rows = driver.find_elements("css selector", "#plans tbody tr")
    assert [json.loads(r.get_attribute("data-value")) for r in rows] == cli["front"]
    first = cli["front"][0]["parallel"]
    names = [r.find_element("tag name", "button").get_attribute("aria-label") for r in rows]
    assert names[0].startswith(f"show the plan TP {first['tp']} × PP {first['pp']}") and len(
        set(names)
    ) == len(names)
    charts = driver.find_elements("css selector", ".chart")
    assert charts and all(c.get_attribute("role") == "img" and c.get_attribute("aria-label") for c in charts)
    before = _redraws(driver)
    rows[0].find_element("tag name", "button").click()
    _wait(driver, before)
    plan = {k: first[k] for k in ("tp", "pp", "ep", "dp")}
    assert {k: int(driver.find_element("id", k).get_attribute("value")) for k in plan} == plan
    page = _page(driver)
    pasted = shlex.split(driver.find_element("id", "command").text)  # the plan's every flag, --overlap too
    assert ("--overlap" in pasted) == first["overlap"]
    assert _same(_cli("model", *[w for w in pasted[2:] if w != "--json"]), page)
    # the front's fastest plan, shown above: its step time is the model's for that plan
    assert page["totals"]["time_s"] == cli["front"][0]["time_s"]


def test_no_chart_offers_to_upload_itself_and_nothing_links_out(driver, base):
    """Plotly's toolbar can carry "Edit in Chart Studio" and "Share chart" (both send the figure to
    Plotly's servers): every toolbar button on the page is one that stays in the browser (zoom,
    pan, reset, a PNG download), and no link or script points anywhere but this server."""
    _open(driver, base, "model=llama-3.1-8b&device=H100+SXM&context=8192")
    driver.execute_script(
        "document.querySelectorAll('.js-plotly-plot').forEach(p => p.dispatchEvent(new MouseEvent('mouseover')))"
    )
    titles = driver.execute_script(
        "return [...document.querySelectorAll('.modebar-btn')].map(b => b.getAttribute('data-title') || '')"
    )
    assert titles, "no chart toolbar found"
    offers = [
        t for t in titles if any(w in t.lower() for w in ("cloud", "studio", "share", "upload", "plotly"))
    ]
    assert offers == []
    outside = driver.execute_script(
        "return [...document.querySelectorAll('a[href], script[src], link[href], img[src]')]"
        ".map(e => e.href || e.src).filter(u => u && !u.startsWith(location.origin) && !u.startsWith('data:'))"
    )
    assert outside == []


def test_shares_read_as_percentages_as_the_cli_prints_them(driver, base):
    """Attention's share of the time and the MFU bound are fractions in the JSON (0.06675) and
    percentages on the page (6.68%), as `attnroof model` prints them; the row keeps the JSON's."""
    _open(driver, base, "model=llama-3.1-8b&device=H100+SXM&context=8192&phase=prefill")
    for field in ("totals.attention_share", "totals.mfu"):
        rows = driver.find_elements("css selector", f'#summary tr[data-field="{field}"]')
        if not rows:
            continue
        value = json.loads(rows[0].get_attribute("data-value"))
        assert (
            0 < value <= 1
            and rows[0].find_elements("tag name", "td")[1].text == f"{float(f'{100 * value:.3g}'):g}%"
        )
    assert driver.find_elements("css selector", '#summary tr[data-field="totals.attention_share"]')


def test_a_phone_s_width_keeps_every_result_on_screen(driver, base):
    """At 390 px (a phone's width) nothing is wider than the screen: the page does not scroll
    sideways, and the summary and each chart lie inside the viewport."""
    before = driver.get_window_size()
    try:
        driver.set_window_size(390, 844)
        _open(driver, base, "model=llama-3.1-8b&device=H100+SXM&context=8192")
        width = driver.execute_script("return window.innerWidth")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= width
        boxes = driver.execute_script(
            "return [document.getElementById('summary'), ...document.querySelectorAll('.chart')]"
            ".map(e => { const r = e.getBoundingClientRect(); return [r.left, r.right]; })"
        )
        assert len(boxes) >= 2 and all(left >= 0 and right <= width + 0.5 for left, right in boxes), boxes
    finally:
        driver.set_window_size(before["width"], before["height"])


def _same(a: Any, b: Any) -> bool:
    """JSON equal as a browser reads it: a number past 2^53 that the CLI writes as a float
    (2.698531388050637e+16) comes back from JavaScript as the integer of its shortest digits
    (26985313880506370), the same double."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def test_show_draws_a_training_plan_exactly_as_the_cli_costs_it(driver, base):
    """A training search (Llama 3.1 8B, 64 sequences of 8192, up to 8 H100s): "show" on each of
    the front's first plans sets every control the plan has — its degrees, CP, micro-batches,
    schedule and chunks, sequence parallelism, overlap, ZeRO stage, recomputation — so the page's
    step is the plan's: its bound and memory a device are the search's, and the command printed
    under the charts, pasted, gives the page's JSON. (It once copied TP/PP/EP/DP alone: a
    64-device plan of 63.5 GB became 2.08 TB a device.)"""
    _open(driver, base, "model=llama-3.1-8b&device=H100+SXM&phase=train&batch=64&context=8192&devices=8")
    before = int(driver.execute_script("return document.body.dataset.searches || 0"))
    driver.find_element("id", "search").click()
    _wait(driver, before, "searches")
    rows = driver.find_elements("css selector", "#plans tbody tr")
    plans = [json.loads(r.get_attribute("data-value")) for r in rows]
    shown = 0
    for i, plan in enumerate(plans[:4]):
        before = _redraws(driver)
        driver.find_elements("css selector", "#plans tbody tr")[i].find_element("tag name", "button").click()
        _wait(driver, before)
        page = _page(driver)
        assert math.isclose(page["totals"]["time_s"], plan["time_s"], rel_tol=1e-9), (i, plan["parallel"])
        held = page["memory"].get("per_device", page["memory"])["total_bytes"]
        assert math.isclose(held, plan["memory_per_device_bytes"], rel_tol=1e-9), (i, plan["parallel"])
        pasted = shlex.split(driver.find_element("id", "command").text)
        assert _same(_cli("model", *[w for w in pasted[2:] if w != "--json"]), page)
        shown += plan["parallel"]["zero"] > 0 or plan["parallel"]["cp"] > 1 or plan["recompute"] != "none"
    assert shown, "no plan with ZeRO, CP or recomputation among the first four"


def test_sizes_take_the_command_line_s_suffixes(driver, base):
    """ "8k" typed into the context is the command line's 8k, 8192 tokens (a number field kept only
    the 8); the command printed says --context=8k and the view's address keeps it."""
    _open(driver, base, "model=llama-3.1-8b&device=H100+SXM")
    _type(driver, "context", "8k")
    _type(driver, "batch", "2k")
    page = _page(driver)
    assert page["context"] == 8192 and page["batch"] == 2048
    text = driver.find_element("id", "command").text
    assert "--context=8k" in text and "--batch=2k" in text and "context=8k" in driver.current_url
