"""The explorer in a real browser: headless Chromium (Debian's chromium + chromedriver, driven
by selenium) loads the page, clicks bits, types numbers, picks formats and modes, and the values
it shows are checked against numpy's float16 / the exact Fraction oracle (tests/oracle.py) and
against fpsim's own API (round_to, to_bits, fpsim.arith).

Skipped when selenium, chromium or chromedriver is missing (``make test`` installs them where
it can: see the Makefile's ``browser`` target). Screenshots of each view are written to a
temporary folder (printed with ``-s``); ``FPSIM_EXPLORE_FIGURE=figures/explore.png`` also writes
the README's screenshot (``make explore-figure``).
"""

from __future__ import annotations

import math
import os
import shutil
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from oracle import exact_decimal_oracle as dec
from oracle import ref_round_exact, ref_values

import fpsim
from fpsim import explore
from fpsim.explore import api

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    pytest.skip("chromium and chromedriver are not installed (`make browser` installs them)",
                allow_module_level=True)  # fmt: skip

MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down")


def f16(code: int) -> float:
    return float(np.array([code], np.uint16).view(np.float16)[0])


class Page:
    def __init__(self, driver, url: str, shots: Path):
        self.d = driver
        self.url = url
        self.shots = shots

    def open(self) -> None:
        self.d.get(self.url)
        WebDriverWait(self.d, 300).until(lambda d: d.execute_script("return document.body.dataset.ready"))
        self.idle()

    def idle(self) -> None:
        """Wait until no request is in flight or waiting for a pause in typing."""
        time.sleep(0.05)
        WebDriverWait(self.d, 120).until(
            lambda d: d.execute_script("return document.body.dataset.pending || '0'") == "0"
        )

    def el(self, id_: str):
        return self.d.find_element(By.ID, id_)

    def text(self, id_: str) -> str:
        return self.el(id_).text

    def type_number(self, text: str, box: str = "number-input") -> None:
        e = self.el(box)
        e.clear()
        e.send_keys(text)
        e.send_keys(Keys.ENTER)
        self.idle()

    def format(self, name: str) -> None:
        Select(self.el("format-select")).select_by_value(name)
        self.idle()

    def shown_value(self) -> str:
        return self.text("value-decimal")

    def shown_code(self) -> int:
        return int(self.text("value-hex").split(" = ")[1])

    def bits(self) -> list:
        return self.d.find_elements(By.CSS_SELECTOR, "#bit-fields .bit")

    def error(self, panel: str) -> str | None:
        e = self.el(f"err-{panel}")
        return e.text if e.is_displayed() else None

    def shot(self, name: str) -> Path:
        h = self.d.execute_script("return document.body.scrollHeight")
        self.d.set_window_size(1400, min(h + 80, 8000))
        time.sleep(0.2)
        path = self.shots / f"{name}.png"
        self.d.save_screenshot(str(path))
        self.d.set_window_size(1400, 1000)
        return path


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from fpsim.explore.__main__ import warm_up

    warm_up()  # numba's kernels compiled or loaded before the page's first request
    server = explore.make_server(0)
    server.start_background()
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--no-first-run", "--disable-extensions", "--window-size=1400,1000",
              f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):  # fmt: skip
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    shots = Path(tmp_path_factory.mktemp("explore-screenshots"))
    print(f"\nexplorer screenshots in {shots}")
    p = Page(driver, server.url, shots)
    try:
        p.open()
        yield p
        # no script errors on the page (4xx answers are expected: the tests send bad input)
        errors = [e for e in driver.get_log("browser")
                  if e["level"] == "SEVERE" and "status of 4" not in e["message"]]  # fmt: skip
        assert errors == []
    finally:
        driver.quit()
        server.shutdown()
        server.server_close()


def test_first_view_is_0_1_in_fp16(page):
    page.open()
    want = fpsim.round_to(Fraction(1, 10), "fp16")
    assert want == f16(0x2E66)  # the fp16 nearest to one tenth, from numpy's decoding
    assert page.shown_value() == dec(want)
    assert page.text("value-hex") == f"0x2e66 = {0x2E66}"
    assert "".join(b.text for b in page.bits()) == format(0x2E66, "016b")
    assert page.text("value-int") == "1638 × 2^-14" and 1638 * 2.0**-14 == want
    assert page.text("value-class") == "normal"
    assert page.text("value-ulp") == "2^-14 = 0.00006103515625"
    # the error of the typed number: stored - 1/10 = -1/40960 = -0.0000244140625, -0.4 ulp
    err = Fraction(want) - Fraction(1, 10)
    assert err == Fraction(-1, 40960) and err / Fraction(1, 2**14) == Fraction(-2, 5)
    assert page.text("typed-error") == "-0.0000244140625 (≈ -2.441e-5, -0.4 ulp)"
    # the fields in their colours (Okabe-Ito blue and orange), named in text as well
    ones = [b for b in page.bits() if b.text == "1"]
    colours = {b.get_attribute("data-field"): b.value_of_css_property("background-color") for b in ones}
    assert colours["exponent"] in ("rgba(0, 114, 178, 1)", "rgb(0, 114, 178)")
    assert colours["mantissa"] in ("rgba(230, 159, 0, 1)", "rgb(230, 159, 0)")
    names = [e.text for e in page.d.find_elements(By.CSS_SELECTOR, "#bit-fields .field-name")]
    assert names == ["sign", "exponent (5 bits)", "mantissa (10 bits)"]
    # the projector: large type
    size = float(page.el("value-decimal").value_of_css_property("font-size").rstrip("px"))
    bit = float(page.bits()[0].value_of_css_property("font-size").rstrip("px"))
    assert size >= 28 and bit >= 28
    page.shot("fp16_0.1")


def test_clicking_bits_flips_them(page):
    page.type_number("0.1")
    code = 0x2E66
    for pos in (0, 5, 15, 1):  # the sign, the exponent's last bit, the last mantissa bit, ...
        page.bits()[pos].click()
        page.idle()
        code ^= 1 << (15 - pos)
        assert page.shown_code() == code
        v = f16(code)
        assert page.shown_value() == dec(v), (hex(code), v)
        assert float(fpsim.from_bits(code, "fp16")) == v or math.isnan(v)
        assert page.text("typed-error").startswith("— (bits set by hand")
    # 0 11111 ...: the exponent all ones with a non-zero fraction is NaN
    assert page.text("value-class") == ("nan" if math.isnan(f16(code)) else page.text("value-class"))


def test_neighbour_buttons_walk_the_grid(page):
    page.type_number("1")
    page.el("next-up").click()
    page.idle()
    assert page.shown_value() == dec(float(np.nextafter(np.float16(1), np.float16(2))))
    page.el("next-down").click()
    page.idle()
    page.el("next-down").click()
    page.idle()
    assert page.shown_value() == dec(float(np.nextafter(np.float16(1), np.float16(0))))


TYPED = {
    "1/3": Fraction(1, 3),
    "65520": Fraction(65520),
    "2**-25": Fraction(1, 2**25),
    "-2**-25": Fraction(-1, 2**25),
    "0x1.8p-3": Fraction(3, 16),
    "1.00048828125000000001": Fraction(100048828125000000001, 10**20),
    "nan": math.nan,
    "-0.0": -0.0,
}


@pytest.mark.parametrize("text", list(TYPED))
def test_typed_numbers_in_every_mode(page, text):
    x = TYPED[text]
    page.type_number(text)
    want = ref_round_exact(x, "fp16")
    assert page.shown_value() == dec(want)
    assert (fpsim.round_to(x, "fp16") == want) or math.isnan(want)
    rows = page.d.find_elements(By.CSS_SELECTOR, "#modes tbody tr")
    assert [r.get_attribute("data-mode") for r in rows] == list(MODES)
    for r in rows:
        mode = r.get_attribute("data-mode")
        cell = r.find_element(By.CSS_SELECTOR, "td.val").text
        assert cell == dec(ref_round_exact(x, "fp16", mode)), (text, mode)


def test_stochastic_probabilities_are_shown_exactly(page):
    page.type_number("1/3")
    items = page.d.find_elements(By.CSS_SELECTOR, "#stochastic-outcomes li")
    got = [(li.get_attribute("data-value"), li.find_element(By.CSS_SELECTOR, ".p").text) for li in items]
    # 1/3 lies 1/3 of a quantum (2^-12) above 1365 × 2^-12: up with probability 1/3
    assert got == [(dec(1365 * 2.0**-12), "2/3"), (dec(1366 * 2.0**-12), "1/3")]


def test_malformed_input_shows_a_clear_message(page):
    page.type_number("0.1.2")
    assert "not a number: '0.1.2'" in page.error("input")
    page.type_number("0.5")
    assert page.error("input") is None and page.shown_value() == "0.5"


def test_rounding_mode_and_options(page):
    Select(page.el("rounding-select")).select_by_value("toward_zero")
    page.idle()
    page.type_number("0.1")
    assert page.shown_value() == dec(ref_round_exact(Fraction(1, 10), "fp16", "toward_zero"))
    Select(page.el("rounding-select")).select_by_value("nearest_even")
    page.el("opt-saturate").click()
    page.idle()
    page.type_number("1e5")
    assert page.shown_value() == "65504"
    assert "saturate=True" in page.text("round-notes")
    page.el("opt-saturate").click()
    page.idle()
    assert page.shown_value() == "inf"
    page.el("opt-subnormals").click()
    page.idle()
    page.type_number("2**-20")
    assert page.shown_value() == "0"
    page.el("opt-subnormals").click()
    page.idle()
    assert page.shown_value() == dec(2.0**-20)


def test_small_format_table_number_line_and_clicks(page):
    page.format("fp8_e4m3")
    page.type_number("0.1")
    assert page.shown_value() == dec(ref_round_exact(Fraction(1, 10), "fp8_e4m3"))
    cells = page.d.find_elements(By.CSS_SELECTOR, "#values-table td.v")
    assert len(cells) == 128  # the codes with the sign bit clear: 16 exponent rows x 8 fractions
    by_code = {int(c.get_attribute("data-code")): c for c in cells}
    values = dict((c, v) for v, c in ref_values("fp8_e4m3"))
    for code in (0x00, 0x01, 0x38, 0x7E):
        assert by_code[code].text == dec(values[code])
    by_code[0x38].click()
    page.idle()
    assert page.shown_value() == "1" and page.shown_code() == 0x38
    assert "current" in by_code[0x38].get_attribute("class")
    # the number line: one tick per non-negative finite value (+0 once)
    ticks = page.d.find_elements(By.CSS_SELECTOR, "#full-line g.tick")
    want = sorted({v for v, c in ref_values("fp8_e4m3") if v >= 0 and math.isfinite(v)})
    assert len(ticks) == len(want)
    page.el("zoom-zero").click()
    ticks = page.d.find_elements(By.CSS_SELECTOR, "#full-line g.tick")
    assert len(ticks) == sum(v <= 4 * 2.0**-6 for v in want)
    page.el("zoom-all").click()
    page.type_number("0.1")
    page.shot("fp8_e4m3_0.1")
    figure = os.environ.get("FPSIM_EXPLORE_FIGURE")
    if figure:  # the README's screenshot: the top of this view (the bits and the typed number)
        page.d.set_window_size(1400, 1560)
        page.d.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.3)
        page.d.save_screenshot(figure)
        page.d.set_window_size(1400, 1000)
    page.format("fp16")
    assert page.el("full").is_displayed() is False


def test_custom_and_named_formats(page):
    page.d.find_element(By.CSS_SELECTOR, "#custom summary").click()
    for id_, v in (("custom-e", "3"), ("custom-m", "2")):
        page.el(id_).clear()
        page.el(id_).send_keys(v)
    Select(page.el("custom-style")).select_by_value("fn")
    page.el("custom-go").click()
    page.idle()
    assert "e3m2fn = Format(3, 2, style='fn')" in page.text("format-facts")
    page.type_number("1/3")
    assert page.shown_value() == dec(ref_round_exact(Fraction(1, 3), fpsim.Format(3, 2, style="fn")))
    page.el("format-name").clear()
    page.el("format-name").send_keys("Format(40, 3)", Keys.ENTER)
    page.idle()
    assert "exp_bits must be in 1..11" in page.error("controls")
    page.el("format-name").clear()
    page.el("format-name").send_keys("p3109_k8p3se", Keys.ENTER)
    page.idle()
    assert page.error("controls") is None
    assert page.text("format-facts").startswith("p3109_k8p3se = Format(5, 2, bias=16")
    page.format("fp16")


def test_arithmetic_panel(page):
    page.type_number("1")
    for id_, v in (("arith-a", "1"), ("arith-b", "2**-11")):
        page.el(id_).clear()
        page.el(id_).send_keys(v)
    page.el("arith-go").click()
    page.idle()
    want = fpsim.arith.add(1.0, 2.0**-11, "fp16")
    assert want == float(np.float16(1) + np.float16(2.0**-11)) == 1.0  # a tie, to even
    assert page.text("arith-result").split()[0] == dec(want)
    assert "tie -> the neighbour with an even last bit: 1.0" in page.text("arith-explain")
    assert page.text("arith-exact").startswith("exact result: 1.00048828125")


def test_loss_scale_slider(page):
    page.format("fp16")
    page.d.execute_script(
        "const s = document.getElementById('loss-k'); s.value = '16';"
        "s.dispatchEvent(new Event('input'));"
    )
    page.idle()
    r = api.call("lossscale", {"format": "fp16", "log2_scale": 16, "center": -28, "spread": 3})
    for zone in ("underflow", "subnormal", "normal", "overflow"):
        row = page.d.find_element(By.CSS_SELECTOR, f"#loss-zones tr[data-zone={zone}]")
        assert row.find_element(By.CSS_SELECTOR, "td.scaled").text == f"{r['zones'][zone]['percent']} ({r['zones'][zone]['count']})"
    assert page.text("loss-k-out") == "16"
    assert len(page.d.find_elements(By.CSS_SELECTOR, "#loss-plot rect.bar")) == sum(1 for b in r["bins"] if b["count"])
    page.shot("fp16_loss_scale_2^16")
