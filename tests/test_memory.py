"""Step 16's formulas (code/memory_formula.py): the numbers its page states are the formula's,
and bad input gets a one-line error. The measurements against the frameworks run in
notebooks/16-memory.ipynb; the calculator's JavaScript is compared in tests/browser/test_calculator.py."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
import memory_formula as mf  # noqa: E402

PAGE = (ROOT / "docs" / "16-memory.md").read_text()
LAYOUT = {"DDP": "ddp", "ZeRO-1": "zero1", "ZeRO-2": "zero2", "FSDP2 (ZeRO-3)": "fsdp2"}


def gib(params, layout, devices):
    return mf.bytes_per_device(params, layout, devices, "bf16-mixed", "adam")["total"] / mf.GIB


def test_the_pages_7b_column_is_the_formulas():
    rows = re.findall(r"^\| (DDP|ZeRO-1|ZeRO-2|FSDP2 \(ZeRO-3\)) \|.*= (\d+) GiB \|$", PAGE, re.M)
    assert sorted(name for name, _ in rows) == sorted(LAYOUT), rows
    for name, shown in rows:
        assert int(shown) == round(gib(7e9, LAYOUT[name], 4)), (name, shown, gib(7e9, LAYOUT[name], 4))


def test_the_pages_7b_sentences_are_the_formulas():
    whole = re.search(r"the state alone is (\d+) GiB", PAGE)
    assert whole and int(whole.group(1)) == round(gib(7e9, "ddp", 1))
    eight = re.search(r"FSDP2 on 8 devices needs (\d+) GiB", PAGE)
    assert eight and int(eight.group(1)) == round(gib(7e9, "fsdp2", 8))


def test_bytes_per_parameter():
    assert mf.bytes_per_parameter("fp32", "adam") == (4, 4, 8)
    assert mf.bytes_per_parameter("bf16-mixed", "adam") == (2, 2, 12)  # the Playbook's 2 + 2 + 12
    assert sum(mf.bytes_per_parameter("bf16-mixed", "sgd")) == 12


def test_fsdp2_tp_shares_only_what_tp_does_not_split():
    whole = mf.bytes_per_device(1000, "fsdp2-tp", 4, tp=2)["total"]
    assert whole == mf.bytes_per_device(1000, "fsdp2", 4)["total"]
    some = mf.bytes_per_device(1000, "fsdp2-tp", 4, tp=2, replicated=0.5)["total"]
    assert some == 16 * 1000 * (0.5 / 4 + 0.5 / 2)


@pytest.mark.parametrize("kwargs, message", [
    (dict(layout="fsdp2-tp", devices=4, tp=3), "does not divide 4 devices"),
    (dict(layout="ddp", devices=0), "a whole number, at least 1"),
    (dict(layout="ddp", devices=2, tp=2), "needs the layout fsdp2-tp"),
    (dict(layout="zero3", devices=2), "one of ddp, zero1"),
    (dict(layout="ddp", devices=2, precision="fp16"), "one of fp32, bf16-mixed"),
])
def test_bad_input_says_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mf.bytes_per_device(1e9, **kwargs)
