"""Step 16's memory calculator (docs/javascripts/memory-calculator.js) against
code/memory_formula.py, on a laptop, on a phone and in the dark scheme."""
import memory_formula as mf
import pytest

from .conftest import js, to_dark, url_of

CALCULATOR_PAGE = "16-memory"
# What a reader types: billions of parameters, layout, devices, precision, optimizer, device,
# activations (GiB, "" for none), and for fsdp2-tp the TP degree and the share it does not split.
# 1B to 70B, every layout, both precisions, optimizers and devices, 1, 4 and 8 devices.
CALCULATOR_CASES = [
    ("1", "ddp", "1", "fp32", "sgd", "GH200 (Roihu)", "", None),
    ("7", "ddp", "4", "bf16-mixed", "adam", "GH200 (Roihu)", "", None),
    ("7", "zero1", "4", "bf16-mixed", "adam", "GH200 (Roihu)", "", None),
    ("7", "zero2", "8", "bf16-mixed", "adam", "MI250X GCD (LUMI)", "", None),
    ("7", "fsdp2", "4", "bf16-mixed", "adam", "GH200 (Roihu)", "20", None),
    ("13", "fsdp2", "8", "fp32", "adam", "MI250X GCD (LUMI)", "", None),
    ("13", "zero1", "1", "fp32", "sgd", "MI250X GCD (LUMI)", "", None),
    ("13", "ddp", "8", "bf16-mixed", "sgd", "MI250X GCD (LUMI)", "3.5", None),
    ("1", "zero2", "4", "fp32", "adam", "GH200 (Roihu)", "0.125", None),  # (a tie: Python prints 0.12)
    ("70", "fsdp2", "8", "bf16-mixed", "adam", "GH200 (Roihu)", "", None),
    ("70", "fsdp2-tp", "8", "bf16-mixed", "adam", "GH200 (Roihu)", "", ("4", "0")),
    ("70", "fsdp2-tp", "8", "bf16-mixed", "sgd", "MI250X GCD (LUMI)", "12", ("2", "0.01")),
    ("7", "fsdp2-tp", "4", "fp32", "adam", "GH200 (Roihu)", "", ("4", "")),
    # the rows step 16's notebook measures: 3,159,050 parameters (6 blocks of width 256), 4
    # processes, fp32; under fsdp2-tp the norms, the head and the down biases (7,178) are not split
    ("0.00315905", "zero2", "4", "fp32", "sgd", "MI250X GCD (LUMI)", "", None),
    ("0.00315905", "fsdp2-tp", "4", "fp32", "adam", "GH200 (Roihu)", "", ("2", str(7178 / 3159050))),
]


def fill_calculator(calc, params, layout, devices, precision, optimizer, device, activations, tp):
    """Type a case into the calculator's form as a reader would; return what it shows."""
    calc.locator("select[name=layout]").select_option(layout)  # (first: it shows the TP fields)
    calc.locator("input[name=params]").fill(params)
    calc.locator("input[name=devices]").fill(devices)
    calc.locator("select[name=precision]").select_option(precision)
    calc.locator("select[name=optimizer]").select_option(optimizer)
    calc.locator("select[name=device]").select_option(device)
    calc.locator("input[name=activations]").fill(activations)
    if tp:
        calc.locator("input[name=tp]").fill(tp[0])
        calc.locator("input[name=replicated]").fill(tp[1])
    return calc.locator(".mc-result").evaluate(js("calculator_result"))


def test_memory_calculator_prints_what_the_formula_computes(tab, base_url):
    """The calculator on step 16's page prints, for each case a reader types, the bytes of
    code/memory_formula.py: each term's bytes exactly (its data-bytes), in GiB with 2 decimals,
    the total with the activations, fits or does not fit; and a layout that cannot be built, or a
    field that is not a number, in one line."""
    tab.goto(base_url + url_of(CALCULATOR_PAGE))
    calc = tab.locator("article div.memory-calculator")
    assert calc.count() == 1, f"{CALCULATOR_PAGE}: {calc.count()} calculators"
    calc.locator("form").wait_for()
    verdicts = set()
    for case in CALCULATOR_CASES:
        params, layout, devices, precision, optimizer, device, activations, tp = case
        shown = fill_calculator(calc, *case)
        kw = dict(precision=precision, optimizer=optimizer)
        if tp:
            kw.update(tp=int(tp[0]), replicated=float(tp[1] or 0))
        terms = mf.bytes_per_device(float(params) * 1e9, layout, int(devices), **kw)
        gib, ok = mf.fits(float(params) * 1e9, layout, int(devices), device, float(activations or 0), **kw)
        act = float(activations or 0)
        expected = [[t, terms[t], f"{terms[t] / mf.GIB:.2f} GiB"] for t in ("weights", "gradients", "optimizer")]
        expected += [["activations", act, f"{act:.2f} GiB"], ["total", gib, f"{gib:.2f} GiB"]]
        rows = [[t, float(v), text] for t, v, text in shown["rows"]]  # (JavaScript writes 4e9 as 4000000000)
        assert shown["error"] is None and rows == expected, (case, shown)
        words = "fits" if ok else "does not fit"
        assert shown["verdict"].startswith(f"{words} ") and f"{mf.DEVICES[device]} GiB of one {device}" in shown["verdict"], (case, shown)
        verdicts.add(ok)
    assert verdicts == {True, False}, "the cases should include a model that fits and one that does not"
    # Impossible input: one line, the formula's own message where the formula refuses.
    errors = [
        (("7", "fsdp2-tp", "4", "bf16-mixed", "adam", "GH200 (Roihu)", "", ("3", "0")),
         lambda: mf.bytes_per_device(7e9, "fsdp2-tp", 4, tp=3)),
        (("7", "fsdp2", "0", "bf16-mixed", "adam", "GH200 (Roihu)", "", None),
         lambda: mf.bytes_per_device(7e9, "fsdp2", 0)),
        (("7", "zero1", "2.5", "fp32", "adam", "GH200 (Roihu)", "", None),
         lambda: mf.bytes_per_device(7e9, "zero1", 2.5)),
    ]
    for case, python in errors:
        with pytest.raises(ValueError) as e:
            python()
        shown = fill_calculator(calc, *case)
        assert shown["error"] == str(e.value) and not shown["rows"], (case, shown)
    for field, value, message in [("params", "seven", 'parameters: "seven" is not a number'),
                                  ("devices", "", 'devices: "" is not a number'),
                                  ("activations", "-1", "activations -1: at least 0 GiB")]:
        fill_calculator(calc, *CALCULATOR_CASES[1])
        calc.locator(f"input[name={field}]").fill(value)
        assert calc.locator(".mc-error").text_content() == message, (field, value)
        assert calc.locator(".mc-error").evaluate(js("helpers", "lines")) == 1, (field, value)


def test_memory_calculator_on_a_phone_and_in_dark_mode(page, base_url):
    """At 390 px the form's fields stand one under the other and neither they nor the result make
    the page scroll sideways; in the dark scheme its labels, fields and numbers stay readable."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(base_url + url_of(CALCULATOR_PAGE))
    calc = page.locator("article div.memory-calculator")
    calc.locator("form").wait_for()
    fill_calculator(calc, *CALCULATOR_CASES[10])  # every field shown
    m = calc.evaluate(js("calculator_layout"))
    assert m["page"] <= m["window"] and m["calc"][0] <= m["calc"][1] + 1, m
    assert m["right"] <= m["article"] + 1 and m["table"] <= m["article"] + 1, m
    assert m["labels"] == 9 and m["lefts"] == 1, f"the fields do not stand one under the other: {m}"
    page.set_viewport_size({"width": 1280, "height": 900})
    to_dark(page)
    contrast = page.evaluate(js("contrast"), ".memory-calculator label > span, .memory-calculator input, "
                             ".memory-calculator select, .memory-calculator th, .memory-calculator td, .mc-verdict")
    low = [(round(c, 1), what) for c, what in contrast if c < 4.5]
    assert len(contrast) >= 10 and not low, f"the calculator in dark mode: {low or contrast}"
