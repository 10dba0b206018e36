"""The attention op, forward + backward: geometric attention as the NDR computes it against torch's SDPA.

    python benchmarks/attention.py [--seq 13,50,200,512] [--batch 128 --heads 4 --head-size 64] [--dtype bf16]

Both start from the same query, key and value `(batch, heads, seq, head_size)` and a dense gradient of the output.
Geometric attention is `modeling_ndr.attention_ndr.attention` (the function the model calls) with the directional
terms; SDPA is `torch.nn.functional.scaled_dot_product_attention` (torch's fused kernel) and, for memory, its math
path. `--dtype bf16`: the query, key, value and gradient in bf16, geometric attention under bf16 autocast as a training
step runs it (its weights in float32, cast for the product with the values), SDPA in bf16. Times are medians of
interleaved rounds; peak memory is the growth of the process's resident set during one forward + backward, each
measured in a fresh process (Linux: `/proc/self/clear_refs` resets the high-water mark)."""

import argparse
import multiprocessing
import os

import torch
from torch.nn import functional as F

from common import interleaved, machine, ratio, save_json
from modeling_ndr.attention_ndr import attention
from modeling_ndr.tables import markdown_table


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def inputs(batch, heads, seq, head_size, seed=0, dtype="fp32"):
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, heads, seq, head_size)
    tensors = [torch.randn(shape, generator=generator).to(DTYPES[dtype]) for _ in range(3)]
    tensors += [torch.randn(shape[:3], generator=generator).to(DTYPES[dtype]) for _ in range(2)]  # left, right terms
    upstream = torch.randn(shape, generator=generator).to(DTYPES[dtype])
    return [t.requires_grad_() for t in tensors], upstream


def contenders(tensors, upstream):
    query, key, value, left, right = tensors
    scale = query.shape[-1] ** -0.5
    low_precision = query.dtype == torch.bfloat16

    def geometric():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low_precision):
            output, _ = attention(query * scale, key, value, None, "geometric", left, right)
        output.backward(upstream)

    def sdpa():
        F.scaled_dot_product_attention(query, key, value).backward(upstream)

    def sdpa_math():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            F.scaled_dot_product_attention(query, key, value).backward(upstream)

    def run(function):
        def call():
            for tensor in tensors:
                tensor.grad = None
            function()

        return call

    return {"geometric": run(geometric), "sdpa": run(sdpa), "sdpa_math": run(sdpa_math)}


def _resident_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def _peak_memory_worker(shape, name, queue, dtype="fp32"):
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    tensors, upstream = inputs(*shape, dtype=dtype)
    function = contenders(tensors, upstream)[name]
    function()  # allocator and kernel warm-up
    for tensor in tensors:
        tensor.grad = None
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident set to the current one
    before = _resident_kib("VmRSS")
    function()
    queue.put((_resident_kib("VmHWM") - before) / 1024)


def peak_memory_mib(shape, name, dtype="fp32") -> float | None:
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_peak_memory_worker, args=(shape, name, queue, dtype))
    process.start()
    process.join()
    return queue.get() if process.exitcode == 0 else None


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq", default="13,50,200,512")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="the inputs' precision")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    os.environ["BENCH_THREADS"] = str(torch.get_num_threads())
    rows = []
    for seq in [int(n) for n in args.seq.split(",")]:
        shape = (args.batch, args.heads, seq, args.head_size)
        tensors, upstream = inputs(*shape, dtype=args.dtype)
        repeats = args.repeats if seq <= 200 else max(3, args.repeats // 3)
        times = interleaved(contenders(tensors, upstream), repeats)
        row = {
            "seq": seq,
            "geometric (ms)": f"{times['geometric'] * 1000:.1f}",
            "SDPA (ms)": f"{times['sdpa'] * 1000:.1f}",
            "SDPA math (ms)": f"{times['sdpa_math'] * 1000:.1f}",
            "geometric / SDPA": ratio(times["geometric"], times["sdpa"]),
        }
        if not args.no_memory:
            memory = {name: peak_memory_mib(shape, name, args.dtype) for name in ("geometric", "sdpa", "sdpa_math")}
            if all(value is not None for value in memory.values()):
                row |= {
                    "peak MiB geometric": f"{memory['geometric']:.0f}",
                    "peak MiB SDPA math": f"{memory['sdpa_math']:.0f}",
                    "peak MiB SDPA": f"{memory['sdpa']:.0f}",
                    "memory geometric / SDPA math": ratio(memory["geometric"], memory["sdpa_math"]),
                }
        rows.append(row)
        print(f"seq {seq}: {row}", flush=True)
    header = (f"{args.dtype}, batch {args.batch}, heads {args.heads}, head size {args.head_size}, forward + backward, "
              "median")  # fmt: skip
    print(f"\n### attention op ({header})\n\n{markdown_table(rows)}")
    results = {"machine": machine(), "setting": header, "rows": rows}
    return save_json(args.json, results)


if __name__ == "__main__":
    main()
