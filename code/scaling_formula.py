"""Compute against communication in data parallelism: one training step's
compute time and its gradient all-reduce time, for a model and a machine.
Standard library only: code/14_envelope.py uses the same all-reduce formula on
this machine's measurements, step 14's page prints the table.

    python code/scaling_formula.py

Per device and optimizer step, with P parameters, T tokens per device, F the
FLOP/s a device reaches, n devices and W the bus bandwidth between them
(nccl-tests' measure, step 11):
  compute    ~ 6 P T / F
             (forward 2 P T FLOPs, backward 4 P T: the usual count)
  all-reduce ~ 2(n-1)/n x g P / W
             (a ring moves 2(n-1)/n of the g P gradient bytes per link)
They are equal at T* = 2(n-1)/n x g F / (6 W) tokens per device: below T* the
all-reduce takes longer than the whole of forward and backward, so no overlap
can hide it and data parallelism is communication-bound. P cancels: T* depends
on the machine (F / W) and the gradient's bytes only.
"""

# The figures the sources state (step 14's page cites each), as plain numbers.
# FLOP/s: torchtitan's Llama 3.1 8B with FSDP, 8 H100s, 5,762 tokens/s per GPU
# (benchmarks/llama3_h100_202412_torchtitan.md)
H100_ACHIEVED = 6 * 8.03e9 * 5762
# FLOP/s, dense bf16: NVIDIA's H100 SXM figure (1,979 with sparsity)
H100_BF16_PEAK = 989e12
# FLOP/s: AMD's MI250X bf16 peak, two GCDs per MI250X
GCD_BF16_PEAK = 383e12 / 2
# B/s each way: NVIDIA's 900 GB/s NVLink per Hopper GPU (both directions)
NVLINK_GH200 = 900e9 / 2
# B/s: CSC, Roihu GPU nodes: four 200 Gb/s InfiniBand NDR links, one per GPU
ROIHU_LINK = 200e9 / 8
# B/s: LUMI-G nodes: four 200 Gb/s Slingshot-11 interfaces, one per MI250X
LUMI_LINK = 200e9 / 8
# bf16 gradients (mixed precision); float32 gradients: 4
GRAD_BYTES = 2

# name: (devices n, achieved FLOP/s per device, bus bandwidth per device in
# B/s, what limits it)
SYSTEMS = {
    "Roihu, 1 node, 4 GH200": (4, H100_ACHIEVED, NVLINK_GH200, "NVLink, peak"),
    "Roihu, 2 nodes, 8 GH200": (8, H100_ACHIEVED, ROIHU_LINK,
                                "one 200 Gb/s link per GPU"),
    # LUMI: an MI250X's 200 Gb/s interface serves its two GCDs; the same share
    # of peak as the H100's
    "LUMI, 2 nodes, 16 GCDs": (
        16, GCD_BF16_PEAK * H100_ACHIEVED / H100_BF16_PEAK, LUMI_LINK / 2,
        "one 200 Gb/s interface per 2 GCDs"),
}


def ring_factor(n):
    """The share of the data a ring all-reduce moves over each link:
    2(n-1)/n."""
    if n < 1:
        raise ValueError(f"n = {n}: an all-reduce needs at least one device")
    return 2 * (n - 1) / n


def allreduce_seconds(nbytes, n, busbw, latency=0.0):
    """latency + 2(n-1)/n x bytes / bus bandwidth (bytes per second)."""
    return latency + ring_factor(n) * nbytes / busbw


def compute_seconds(params, tokens, flops):
    """6 x parameters x tokens / FLOP/s: forward and backward of one step on
    one device."""
    return 6 * params * tokens / flops


def critical_tokens(n, flops, busbw, grad_bytes=GRAD_BYTES):
    """Tokens per device where compute time = all-reduce time; fewer:
    communication-bound."""
    return ring_factor(n) * grad_bytes * flops / (6 * busbw)


def table(params=(1e9, 7e9), tokens=8 * 4096, systems=SYSTEMS):
    """Lines: per system and model, the compute and all-reduce time of a step
    of `tokens` tokens per device, and the tokens per device below which the
    step is communication-bound."""
    lines = [f"per device and step, {tokens:,} tokens per device, "
             f"bf16 gradients ({GRAD_BYTES} bytes each):"]
    for name, (n, flops, busbw, limit) in systems.items():
        lines.append(f"{name} ({flops / 1e12:.0f} TFLOP/s reached per device, "
                     f"bus bandwidth {busbw / 1e9:.1f} GB/s: {limit}):")
        for p in params:
            c, a = (compute_seconds(p, tokens, flops),
                    allreduce_seconds(GRAD_BYTES * p, n, busbw))
            lines.append(f"  {p / 1e9:.0f}B parameters: "
                         f"compute {c * 1e3:,.0f} ms, "
                         f"all-reduce {a * 1e3:,.0f} ms, communication-bound "
                         f"below {critical_tokens(n, flops, busbw):,.0f} "
                         f"tokens per device")
    return lines


if __name__ == "__main__":
    print("\n".join(table()))
