"""GPU benchmarks (part of `make bench` where CUDA is available), every figure a ratio measured side by side:

    python benchmarks/gpu.py [--seq 50,200,512] [--presets ctl_gpu,arithmetic_gpu,listops_gpu] [--json out.json]
    python benchmarks/gpu.py --device cpu --tiny --compile-backend eager   # the same code on the CPU, tiny sizes

1. The attention op, forward + backward under bf16 autocast (as the model trains), at N = 50, 200, 512: geometric
   attention (`modeling_ndr.attention_ndr.attention`, the function the model calls, with the direction terms) three
   ways: the PyTorch path eager, the same under `torch.compile`, and the fused Triton kernels
   (`kernel="triton"`, where triton is installed), against `scaled_dot_product_attention` with its flash backend and
   its memory-efficient backend. Time per call (median of interleaved rounds, the device synchronised around each
   call) and peak memory (`torch.cuda.max_memory_allocated` above what the inputs hold). On the CPU the Triton kernels
   run only in Triton's interpreter (`TRITON_INTERPRET=1`), which checks the code and measures nothing.
2. One training step (forward, backward, gradient clipping, AdamW) of the GPU presets at the paper's sizes, on the
   presets' own batches (the task's training rows, 512 per batch, length-grouped where the preset groups them):
   samples per second and peak memory, eager against `torch.compile`, and the minutes the preset's `max_steps` take at
   the measured speed (the presets' budgets in their comments are estimates made without a GPU).

Without CUDA (`--device cuda`, the default) it prints why it measured nothing and exits 0.
"""

import argparse
import contextlib
import os
import statistics
import time

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import DataCollatorWithPadding
from transformers.trainer_pt_utils import get_length_grouped_indices

from common import machine, ratio, save_json
from modeling_ndr import (
    NDRConfig,
    NDRForSequenceClassification,
    geometric_ndr_triton,
    load_task,
    task_readout,
    task_tokenizer,
)
from modeling_ndr.attention_ndr import attention
from modeling_ndr.geometric_ndr import uses_triton_kernel
from modeling_ndr.tables import markdown_table


GPU_PRESETS = ("ctl_gpu", "arithmetic_gpu", "listops_gpu")
NO_CUDA = "GPU benchmarks skipped: no CUDA device (torch.cuda.is_available() is False)"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_rounds(contenders: dict, device: torch.device, repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each contender, calling them in turn each round, the device synchronised around
    each call (what it costs to finish, launches included)."""
    times = {name: [] for name in contenders}
    for round_index in range(warmup + repeats):
        for name, function in contenders.items():
            synchronize(device)
            start = time.perf_counter()
            function()
            synchronize(device)
            if round_index >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def peak_memory_mib(function, device: torch.device) -> float | None:
    """Peak memory allocated during one call, above what was allocated before it (None off CUDA)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    function()
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


# ---------------------------------------------------------------------------------------------------- attention op


def attention_contenders(
    batch: int, heads: int, seq: int, head_size: int, device: torch.device, compile_backend: str = "inductor"
) -> dict:
    """Forward + backward of geometric attention (eager, compiled, Triton) and of SDPA's flash and memory-efficient
    backends, under bf16 autocast, from the same float32 leaf tensors and the same output gradient."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    shape = (batch, heads, seq, head_size)
    query, key, value = (torch.randn(shape, generator=generator).to(device).requires_grad_() for _ in range(3))
    left, right = (torch.randn(shape[:3], generator=generator).to(device).requires_grad_() for _ in range(2))
    upstream = torch.randn(shape, generator=generator).to(device)
    leaves = (query, key, value, left, right)
    scale = head_size**-0.5
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)

    def call(body):
        def run():
            for tensor in leaves:
                tensor.grad = None
            with autocast:
                output = body()
            output.float().backward(upstream)

        return run

    def geometric():
        return attention(query * scale, key, value, None, "geometric", left, right)[0]

    compiled_attention = torch.compile(attention, backend=compile_backend)

    def compiled():
        return compiled_attention(query * scale, key, value, None, "geometric", left, right)[0]

    def triton():
        return attention(query * scale, key, value, None, "geometric", left, right, kernel="triton")[0]

    def sdpa(backend):
        def body():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(query, key, value)

        return body

    contenders = {"geometric": call(geometric), "compiled": call(compiled)}
    if uses_triton_kernel(torch.empty(0, device=device)):  # triton installed, and it runs on this device
        contenders["triton"] = call(triton)
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            call(sdpa(backend))()
        except RuntimeError:  # the backend does not run here (the CPU has no memory-efficient kernel)
            continue
        contenders[name] = call(sdpa(backend))
    return contenders


# the geometric contenders besides eager, as the table names them
GEOMETRIC_VARIANTS = {"compiled": "compiled", "triton": "Triton"}


def attention_op(
    seqs: list[int], batch: int, heads: int, head_size: int, repeats: int, device, compile_backend: str = "inductor"
) -> list[dict]:
    rows = []
    for seq in seqs:
        contenders = attention_contenders(batch, heads, seq, head_size, device, compile_backend)
        times = timed_rounds(contenders, device, repeats)
        memory = {name: peak_memory_mib(function, device) for name, function in contenders.items()}
        row = {"N": seq, "geometric (ms)": f"{times['geometric'] * 1e3:.2f}"}
        for name in ("flash", "efficient"):
            if name in times:
                row[f"SDPA {name} (ms)"] = f"{times[name] * 1e3:.2f}"
                row[f"geometric / {name}"] = ratio(times["geometric"], times[name])
            else:
                row[f"SDPA {name} (ms)"] = "n/a"
        for name, label in GEOMETRIC_VARIANTS.items():
            row[f"geometric {label} (ms)"] = f"{times[name] * 1e3:.2f}" if name in times else "n/a"
            if name in times and "flash" in times:
                row[f"{label} / flash"] = ratio(times[name], times["flash"])
        if memory["geometric"] is not None:
            row["peak MiB geometric"] = f"{memory['geometric']:.0f}"
            for name, label in GEOMETRIC_VARIANTS.items():
                if memory.get(name) is not None:
                    row[f"peak MiB {label}"] = f"{memory[name]:.0f}"
            for name in ("flash", "efficient"):
                if memory.get(name):
                    row[f"peak MiB {name}"] = f"{memory[name]:.0f}"
            best = min((memory[name] for name in ("flash", "efficient") if memory.get(name)), default=None)
            if best:
                row["memory geometric / best SDPA"] = ratio(memory["geometric"], best)
        rows.append(row)
        print(f"N {seq}: {row}", flush=True)
    return rows


# ------------------------------------------------------------------------------------------------- training step


def preset_model_and_batches(preset: str, device: torch.device, tiny: bool, batches: int = 4):
    """The preset's model (its NDRConfig fields) and `batches` batches of its task's training rows, as train.py
    builds them: the global batch of the preset (`total_batch_size`), length-grouped if the preset groups batches."""
    from modeling_ndr.training import config_values, parse_arguments

    data_args, model_args, run_args, training_args, _ = parse_arguments(
        ["--preset", preset, "--output_dir", os.devnull, "--use_cpu", str(device.type == "cpu")]
    )
    values = config_values(model_args)
    batch_size = run_args.total_batch_size or training_args.per_device_train_batch_size
    if tiny:
        values.update(hidden_size=16, intermediate_size=32, num_attention_heads=2, num_hidden_layers=2)
        batch_size = 8
    task = data_args.task
    tokenizer = task_tokenizer(task)
    options = {"direction": data_args.direction} if data_args.direction else {}
    # a pool of 50 batches, grouped by length as Trainer groups them (megabatches of 50 batches, each sorted), of
    # which `batches` batches spread from the longest to the shortest
    pool = 50 * batch_size
    rows = load_task(task, n_train=max(2000, pool), n_eval=8, **options)["train"].shuffle(seed=0).select(range(pool))
    encoded = [dict(tokenizer(text), labels=label) for text, label in zip(rows["text"], rows["label"])]
    if training_args.train_sampling_strategy == "group_by_length":
        lengths = [len(row["input_ids"]) for row in encoded]
        order = get_length_grouped_indices(lengths, batch_size, generator=torch.Generator().manual_seed(0))
        encoded = [encoded[i] for i in order]
    chosen = [round(i * 49 / max(1, batches - 1)) for i in range(batches)]
    collator = DataCollatorWithPadding(tokenizer)
    data = [collator(encoded[i * batch_size : (i + 1) * batch_size]) for i in chosen]
    data = [{name: tensor.to(device) for name, tensor in batch.items()} for batch in data]
    config = NDRConfig(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, num_labels=10 if task != "ctl" else 8,
        **{"readout": task_readout(task), **values},
    )  # fmt: skip
    return config, data, training_args, batch_size


def training_stepper(model, batches, training_args, device):
    """One training step per call as Trainer takes it (autocast, clipping, AdamW on every parameter), cycling
    through the batches."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=training_args.learning_rate, weight_decay=training_args.weight_decay
    )
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    state = {"index": 0}
    model.train()

    def step():
        batch = batches[state["index"] % len(batches)]
        state["index"] += 1
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), training_args.max_grad_norm)
        optimizer.step()

    return step


def training_steps(presets: list[str], device, tiny: bool, repeats: int, compile_backend: str) -> list[dict]:
    rows = []
    for preset in presets:
        config, batches, training_args, batch_size = preset_model_and_batches(preset, device, tiny)
        torch.manual_seed(0)
        eager = NDRForSequenceClassification(config).to(device)
        torch.manual_seed(0)
        compiled = torch.compile(NDRForSequenceClassification(config).to(device), backend=compile_backend)
        steps = {"eager": training_stepper(eager, batches, training_args, device),
                 "compiled": training_stepper(compiled, batches, training_args, device)}  # fmt: skip
        for step in steps.values():  # compile every batch shape before timing
            for _ in range(len(batches)):
                step()
        times = timed_rounds(steps, device, repeats, warmup=0)
        memory = {name: peak_memory_mib(step, device) for name, step in steps.items()}
        mean_tokens = statistics.mean(batch["input_ids"].shape[1] for batch in batches)
        row = {
            "preset": preset + (" (tiny)" if tiny else ""),
            "batch x padded length": f"{batch_size} x {mean_tokens:.0f}",
            "eager samples/s": f"{batch_size / times['eager']:.0f}",
            "compiled samples/s": f"{batch_size / times['compiled']:.0f}",
            "compiled speed-up": ratio(times["eager"], times["compiled"]),
        }
        if memory["eager"] is not None:
            row["peak GiB eager"] = f"{memory['eager'] / 1024:.2f}"
            row["peak GiB compiled"] = f"{memory['compiled'] / 1024:.2f}"
        row["max_steps"] = f"{training_args.max_steps:,}"
        row["their minutes, eager"] = f"{training_args.max_steps * times['eager'] / 60:.1f}"
        row["their minutes, compiled"] = f"{training_args.max_steps * times['compiled'] / 60:.1f}"
        rows.append(row)
        print(f"{preset}: {row}", flush=True)
    return rows


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke run of the same code)")
    parser.add_argument("--seq", default="50,200,512")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--presets", default=",".join(GPU_PRESETS))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: checks the code, measures nothing")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(NO_CUDA)
        return None
    seqs = [int(n) for n in args.seq.split(",") if n]  # --seq "": the training step alone
    batch, heads, head_size = (args.batch, args.heads, args.head_size) if not args.tiny else (2, 2, 8)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({machine()['cpu']})"
    header = f"{name}, torch {torch.__version__}, bf16 autocast" + (" (tiny sizes: not a measurement)" * args.tiny)
    print(f"### {header}\n", flush=True)
    setting = f"batch {batch}, heads {heads}, head size {head_size}, forward + backward, median"
    if args.tiny:  # small tiles: Triton's interpreter (the CPU) runs a tile element by element
        geometric_ndr_triton.BLOCK_ROWS, geometric_ndr_triton.BLOCK_DISTANCES = 4, 16
    attention_rows = attention_op(seqs, batch, heads, head_size, args.repeats, device, args.compile_backend)
    print(f"\n### attention op on {name} ({setting})\n\n{markdown_table(attention_rows)}\n", flush=True)
    presets = [p for p in args.presets.split(",") if p]
    step_rows = training_steps(presets, device, args.tiny, args.repeats, args.compile_backend)
    print(f"\n### training step on {name} (eager vs torch.compile)\n\n{markdown_table(step_rows)}\n", flush=True)
    results = {"machine": machine(), "device": name, "attention": attention_rows, "training_step": step_rows}
    return save_json(args.json, results)


if __name__ == "__main__":
    main()
