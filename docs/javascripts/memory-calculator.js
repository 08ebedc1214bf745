/* The calculator on step 16's page: bytes per device of a model's training state, by term, and
   whether it fits a GH200 or an MI250X GCD. Every <div class="memory-calculator"> gets a form.

   The formula is code/memory_formula.py, line for line, with the same names (PRECISIONS, MOMENTS,
   LAYOUTS, DIVIDED, GIB, DEVICES, bytes_per_parameter, bytes_per_device, fits): a reader sees
   one formula, and tests/browser/test_calculator.py checks that this page prints what the Python prints.
   Plain JavaScript: no library, no network. */
(function () {
  "use strict";

  // --- code/memory_formula.py -----------------------------------------------------------------
  const PRECISIONS = {  // bytes per parameter: weights, gradients, optimizer state without the moments
    "fp32": [4, 4, 0],
    "bf16-mixed": [2, 2, 4],  // the fp32 master copy lives with the optimizer state
  };
  const MOMENTS = {"sgd": 4, "adam": 8};  // SGD with momentum: one fp32 buffer; Adam: exp_avg, exp_avg_sq
  const LAYOUTS = ["ddp", "zero1", "zero2", "fsdp2", "fsdp2-tp"];
  const DIVIDED = {  // which terms a layout divides by the devices: weights, gradients, optimizer state
    "ddp": [false, false, false],
    "zero1": [false, false, true],
    "zero2": [false, true, true],
    "fsdp2": [true, true, true],
    "fsdp2-tp": [true, true, true],
  };
  const GIB = 2 ** 30;
  const DEVICES = {  // usable HBM per device, GiB (sources on step 16's page)
    "GH200 (Roihu)": 95,
    "MI250X GCD (LUMI)": 64,
  };

  // bytes_per_parameter: [weights, gradients, optimizer state] bytes per parameter, undivided.
  function bytes_per_parameter(precision, optimizer) {
    if (!(precision in PRECISIONS)) throw new Error(`precision ${precision}: one of ${Object.keys(PRECISIONS).join(", ")}`);
    if (!(optimizer in MOMENTS)) throw new Error(`optimizer ${optimizer}: one of ${Object.keys(MOMENTS).join(", ")}`);
    const [w, g, master] = PRECISIONS[precision];
    return [w, g, master + MOMENTS[optimizer]];
  }

  // bytes_per_device: {weights, gradients, optimizer, total}, bytes one device holds in training.
  function bytes_per_device(params, layout, devices, precision, optimizer, tp, replicated) {
    if (!LAYOUTS.includes(layout)) throw new Error(`layout ${layout}: one of ${LAYOUTS.join(", ")}`);
    if (devices < 1 || Math.trunc(devices) !== devices) throw new Error(`devices ${devices}: a whole number, at least 1`);
    if (layout === "fsdp2-tp") {
      if (tp < 1 || devices % tp) throw new Error(`tensor-parallel degree ${tp} does not divide ${devices} devices`);
    } else if (tp !== 1) {
      throw new Error(`tp=${tp} needs the layout fsdp2-tp`);
    }
    if (!(0 <= replicated && replicated <= 1)) throw new Error(`replicated ${replicated}: a share between 0 and 1`);
    const per_param = bytes_per_parameter(precision, optimizer);
    const dp = Math.floor(devices / tp);
    const out = {};
    ["weights", "gradients", "optimizer"].forEach((name, i) => {
      const b = per_param[i];
      if (!DIVIDED[layout][i]) {
        out[name] = params * b;
      } else if (layout === "fsdp2-tp") {  // split over tp and sharded over dp; the rest over dp only
        out[name] = params * b * ((1 - replicated) / devices + replicated / dp);
      } else {
        out[name] = params * b / devices;
      }
    });
    out.total = out.weights + out.gradients + out.optimizer;
    return out;
  }

  // fits: [GiB per device, whether it fits the device's HBM with the activations added].
  function fits(params, layout, devices, device, activations_gib, precision, optimizer, tp, replicated) {
    const gib = bytes_per_device(params, layout, devices, precision, optimizer, tp, replicated).total / GIB + activations_gib;
    return [gib, gib <= DEVICES[device]];
  }

  // --- The form ---------------------------------------------------------------------------------
  const LABELS = {
    "fp32": "fp32", "bf16-mixed": "bf16 mixed, fp32 master weights",
    "sgd": "SGD with momentum", "adam": "Adam",
    "ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "fsdp2": "FSDP2 = ZeRO-3", "fsdp2-tp": "FSDP2 × TP",
  };
  const TERMS = [["weights", "Weights"], ["gradients", "Gradients"], ["optimizer", "Optimizer state"]];

  // Python's f"{x:.2f}": the double's exact decimal digits, a tie (0.125) to the even digit;
  // toFixed(2) would round a tie up (0.13) and print another number than the Python.
  function fixed2(x) {
    const exact = Math.abs(x).toFixed(100), dot = exact.indexOf(".");
    const rest = exact.slice(dot + 3).replace(/0+$/, "");
    let cents = BigInt(exact.slice(0, dot) + exact.slice(dot + 1, dot + 3));
    if (rest > "5" || (rest === "5" && cents % 2n === 1n)) cents += 1n;
    const digits = cents.toString().padStart(3, "0");
    return (x < 0 || Object.is(x, -0) ? "-" : "") + digits.slice(0, -2) + "." + digits.slice(-2);
  }

  const options = keys => keys.map(k => `<option value="${k}">${LABELS[k] || k}</option>`).join("");
  const field = (name, label, input, hidden) =>
    `<label class="mc-${name}"${hidden ? " hidden" : ""}><span>${label}</span>${input}</label>`;
  const text = (name, value) => `<input name="${name}" type="text" inputmode="decimal" value="${value}" autocomplete="off">`;

  function render(root) {
    if (root.dataset.rendered) return;  // (document$ emits again after each instant navigation)
    root.dataset.rendered = "1";
    const devices = Object.keys(DEVICES).map(k => `<option value="${k}">${k}, ${DEVICES[k]} GiB</option>`).join("");
    root.innerHTML = `<form autocomplete="off">
      ${field("params", "Parameters, billions", text("params", "7"))}
      ${field("precision", "Precision", `<select name="precision">${options(Object.keys(PRECISIONS))}</select>`)}
      ${field("optimizer", "Optimizer", `<select name="optimizer">${options(Object.keys(MOMENTS))}</select>`)}
      ${field("layout", "Layout", `<select name="layout">${options(LAYOUTS)}</select>`)}
      ${field("devices", "Devices", text("devices", "4"))}
      ${field("device", "Device", `<select name="device">${devices}</select>`)}
      ${field("tp", "Tensor-parallel degree", text("tp", "2"), true)}
      ${field("replicated", "Share TP does not split (0 to 1)", text("replicated", "0"), true)}
      ${field("activations", "Activations, GiB per device (optional)", text("activations", ""))}
    </form>
    <div class="mc-result" aria-live="polite"></div>`;
    const form = root.querySelector("form");
    form.precision.value = "bf16-mixed";
    form.optimizer.value = "adam";
    form.layout.value = "fsdp2";
    const update = () => show(form, root.querySelector(".mc-result"));
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    form.addEventListener("submit", e => e.preventDefault());  // (Enter in a field: nothing to send)
    update();
  }

  // A field's number, or an error that names the field ("" reads as `empty` where a field may be empty).
  function number(form, name, what, empty) {
    const raw = form[name].value.trim();
    if (raw === "" && empty !== undefined) return empty;
    const v = Number(raw);
    if (raw === "" || !Number.isFinite(v)) throw new Error(`${what}: "${raw}" is not a number`);
    return v;
  }

  function show(form, out) {
    const layout = form.layout.value;
    const tpLayout = layout === "fsdp2-tp";
    form.querySelector(".mc-tp").hidden = !tpLayout;
    form.querySelector(".mc-replicated").hidden = !tpLayout;
    try {
      const params = number(form, "params", "parameters") * 1e9;
      if (!(params > 0)) throw new Error("parameters: more than 0 billion");
      const devices = number(form, "devices", "devices");
      const tp = tpLayout ? number(form, "tp", "tensor-parallel degree") : 1;
      if (tpLayout && (tp < 1 || Math.trunc(tp) !== tp)) throw new Error(`tensor-parallel degree ${tp}: a whole number, at least 1`);
      const replicated = tpLayout ? number(form, "replicated", "share TP does not split", 0) : 0;
      const activations = number(form, "activations", "activations", 0);
      if (activations < 0) throw new Error(`activations ${activations}: at least 0 GiB`);
      const kw = [form.precision.value, form.optimizer.value, tp, replicated];
      const terms = bytes_per_device(params, layout, devices, ...kw);
      const device = form.device.value;
      const [gib, ok] = fits(params, layout, devices, device, activations, ...kw);
      const row = (key, label, bytes) =>
        `<tr data-term="${key}" data-bytes="${bytes}"><th scope="row">${label}</th><td>${fixed2(bytes / GIB)} GiB</td></tr>`;
      out.innerHTML = `<table class="mc-terms">
        ${TERMS.map(([key, label]) => row(key, label, terms[key])).join("")}
        <tr data-term="activations" data-gib="${activations}"><th scope="row">Activations</th><td>${fixed2(activations)} GiB</td></tr>
        <tr data-term="total" data-gib="${gib}" class="mc-total"><th scope="row">Total per device</th><td>${fixed2(gib)} GiB</td></tr>
      </table>
      <p class="mc-verdict" data-fits="${ok}"><strong>${ok ? "fits" : "does not fit"}</strong>
        ${ok ? "in" : "into"} the ${DEVICES[device]} GiB of one ${device}</p>`;
    } catch (e) {
      out.innerHTML = `<p class="mc-error" role="alert">${e.message.replace(/[<&]/g, c => c === "<" ? "&lt;" : "&amp;")}</p>`;
    }
  }

  const renderAll = () => document.querySelectorAll("div.memory-calculator").forEach(render);
  // Material's document$ emits on the first load and after each instant navigation.
  if (window.document$ && typeof window.document$.subscribe === "function") window.document$.subscribe(renderAll);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", renderAll);
  else renderAll();
})();
