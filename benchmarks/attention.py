"""Forward+backward time of geometric attention against torch's scaled_dot_product_attention, measured side by side.

    python benchmarks/attention.py [--batch 128 --heads 4 --seq 50 --head-size 64 --repeats 20 --device cpu]

Both start from the same q, k, v (batch, heads, seq, head_size) and return the attended values; geometric attention
also builds its directional term and computes its weights with `modeling_ndr.geometric_attention_weights`. The
timings are interleaved (one call of each per round) so machine noise hits both alike; the script prints the
median of each and their ratio.
"""

import argparse
import statistics
import time

import torch
from torch.nn import functional as F

from modeling_ndr import geometric_attention_weights


def geometric_attention(query, key, value, left, right):
    n = query.shape[-2]
    key_is_right = torch.ones(n, n, dtype=torch.bool, device=query.device).triu(1)
    logits = query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5  # (b, h, n, n)
    logits = logits + torch.where(key_is_right, right.unsqueeze(-1), left.unsqueeze(-1))
    return geometric_attention_weights(logits).to(value.dtype) @ value  # (b, h, n, e)


def sdpa_attention(query, key, value, left, right):
    return F.scaled_dot_product_attention(query, key, value)


def time_forward_backward(function, inputs, device) -> float:
    for tensor in inputs:
        tensor.grad = None
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    function(*inputs).sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=50)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    generator = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.seq, args.head_size)
    inputs = [torch.randn(shape, generator=generator) for _ in range(3)]
    inputs += [torch.randn(shape[:3], generator=generator) for _ in range(2)]  # left, right direction scalars
    inputs = [t.to(device).requires_grad_(True) for t in inputs]

    contenders = {"geometric": geometric_attention, "sdpa": sdpa_attention}
    times = {name: [] for name in contenders}
    for round_index in range(args.warmup + args.repeats):
        for name, function in contenders.items():
            elapsed = time_forward_backward(function, inputs, device)
            if round_index >= args.warmup:
                times[name].append(elapsed)

    medians = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"device={device} threads={torch.get_num_threads()} batch={args.batch} heads={args.heads} "
        f"seq={args.seq} head_size={args.head_size} repeats={args.repeats} (forward+backward, median)"
    )
    for name, median in medians.items():
        print(f"  {name:<10} {median * 1000:9.2f} ms")
    print(f"  ratio geometric / sdpa: {medians['geometric'] / medians['sdpa']:.2f}x")


if __name__ == "__main__":
    main()
