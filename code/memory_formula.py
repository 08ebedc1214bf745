"""Bytes per device of a model's training state, by term, under each way of
splitting it.

Standard library only: step 16's script checks every formula against what the
frameworks really hold, and the calculator on step 16's page
(docs/javascripts/memory-calculator.js) computes the same numbers in the
browser (tests/browser/test_calculator.py compares the two).

    from memory_formula import bytes_per_device
    bytes_per_device(7e9, "fsdp2", devices=4, precision="bf16-mixed",
                     optimizer="adam")

Per parameter (the Ultra-Scale Playbook's accounting, ZeRO paper's K = 12 for
Adam):
  fp32:        weights 4, gradients 4, optimizer state: SGD with momentum 4,
               Adam 8 (two moments)
  bf16-mixed:  weights 2 (the bf16 copy computed with), gradients 2, optimizer
               state: the fp32 master weights 4 plus SGD's momentum 4 or
               Adam's 8
Each layout divides some terms by the devices that share them:
  ddp     every device holds everything
  zero1   the optimizer state / N
  zero2   gradients and optimizer state / N
  fsdp2   everything / N (ZeRO stage 3: weights too; a block's weights are
          gathered while it runs)
  fsdp2-tp  everything / N as well, with N = dp x tp devices (tensor parallel
          splits what FSDP2 shards); the weights tensor parallel does not
          split (norms, biases of row-wise layers) are sharded over dp only:
          `replicated` is their share of the parameters.
Activations are not in these terms: they grow with the batch and the sequence
(step 16 measures them), and a framework's own buffers and padding add a
little (step 16 measures that too).
"""

# bytes per parameter: weights, gradients, optimizer state without the moments
PRECISIONS = {
    "fp32": (4, 4, 0),
    # the fp32 master copy lives with the optimizer state
    "bf16-mixed": (2, 2, 4),
}
# SGD with momentum: one fp32 buffer; Adam: exp_avg, exp_avg_sq
MOMENTS = {"sgd": 4, "adam": 8}
LAYOUTS = ("ddp", "zero1", "zero2", "fsdp2", "fsdp2-tp")
# which terms a layout divides by the devices: weights, gradients, optimizer
# state
DIVIDED = {
    "ddp": (False, False, False),
    "zero1": (False, False, True),
    "zero2": (False, True, True),
    "fsdp2": (True, True, True),
    "fsdp2-tp": (True, True, True),
}
GIB = 2 ** 30
DEVICES = {  # usable HBM per device, GiB (sources on step 16's page)
    "GH200 (Roihu)": 95,
    "MI250X GCD (LUMI)": 64,
}


def bytes_per_parameter(precision="fp32", optimizer="adam"):
    """(weights, gradients, optimizer state) bytes per parameter, undivided."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: "
                         f"one of {', '.join(PRECISIONS)}")
    if optimizer not in MOMENTS:
        raise ValueError(f"optimizer {optimizer!r}: "
                         f"one of {', '.join(MOMENTS)}")
    w, g, master = PRECISIONS[precision]
    return w, g, master + MOMENTS[optimizer]


def bytes_per_device(params, layout, devices=1, precision="fp32",
                     optimizer="adam", tp=1, replicated=0.0):
    """{'weights', 'gradients', 'optimizer', 'total'}: bytes one device holds
    in training, between steps. tp: tensor-parallel degree (fsdp2-tp only;
    devices must be a multiple of it); replicated: the share of parameters
    tensor parallel does not split (fsdp2-tp only)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: one of {', '.join(LAYOUTS)}")
    if devices < 1 or int(devices) != devices:
        raise ValueError(f"devices {devices!r}: a whole number, at least 1")
    if layout == "fsdp2-tp":
        if tp < 1 or devices % tp:
            raise ValueError(f"tensor-parallel degree {tp} does not divide "
                             f"{devices} devices")
    elif tp != 1:
        raise ValueError(f"tp={tp} needs the layout fsdp2-tp")
    if not 0 <= replicated <= 1:
        raise ValueError(f"replicated {replicated!r}: a share between 0 and 1")
    per_param = bytes_per_parameter(precision, optimizer)
    dp = devices // tp
    out = {}
    for name, b, divided in zip(("weights", "gradients", "optimizer"),
                                per_param, DIVIDED[layout]):
        if not divided:
            out[name] = params * b
        elif layout == "fsdp2-tp":
            # split over tp and sharded over dp; the rest over dp only
            out[name] = params * b * ((1 - replicated) / devices
                                      + replicated / dp)
        else:
            out[name] = params * b / devices
    out["total"] = out["weights"] + out["gradients"] + out["optimizer"]
    return out


def fits(params, layout, devices, device="GH200 (Roihu)", activations_gib=0.0,
         **kw):
    """(GiB per device, whether it fits the device's HBM with the activations
    added)."""
    gib = (bytes_per_device(params, layout, devices, **kw)["total"] / GIB
           + activations_gib)
    return gib, gib <= DEVICES[device]
