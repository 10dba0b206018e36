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
from modeling_ndr.training.errors import first_line


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
) -> tuple[dict, dict[str, str]]:
    """Forward + backward of geometric attention (eager, compiled, Triton) and of SDPA's flash and memory-efficient
    backends, under bf16 autocast, from the same float32 leaf tensors and the same output gradient. Returns those
    that ran once (the first call compiles) and, for the others, why not: one that fails to compile or to run here
    leaves the others measured."""
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

    # the code that has run elsewhere first, the code compiled here for the first time last (a failed kernel launch
    # can leave the device unusable for what follows)
    candidates = {"geometric": call(geometric), "flash": call(sdpa(SDPBackend.FLASH_ATTENTION)),
                  "efficient": call(sdpa(SDPBackend.EFFICIENT_ATTENTION)), "compiled": call(compiled)}  # fmt: skip
    if uses_triton_kernel(torch.empty(0, device=device)):  # triton installed, and it runs on this device
        candidates["triton"] = call(triton)
    contenders, failures = {}, {}
    for name, function in candidates.items():
        try:
            function()
        except Exception as error:  # e.g. the CPU has no memory-efficient SDPA; a kernel that does not compile
            failures[name] = first_line(error)
            continue
        contenders[name] = function
    return contenders, failures


# the geometric contenders besides eager, as the table names them
GEOMETRIC_VARIANTS = {"compiled": "compiled", "triton": "Triton"}


def attention_op(
    seqs: list[int],
    batch: int,
    heads: int,
    head_size: int,
    repeats: int,
    device,
    compile_backend: str = "inductor",
    rows: list[dict] | None = None,
    saved=lambda: None,
) -> list[dict]:
    """One row per length, appended to `rows` and `saved()` as it is measured."""
    rows = [] if rows is None else rows
    for seq in seqs:
        contenders, failures = attention_contenders(batch, heads, seq, head_size, device, compile_backend)
        times = timed_rounds(contenders, device, repeats)
        memory = {name: peak_memory_mib(function, device) for name, function in contenders.items()}
        row = {"N": seq, "geometric (ms)": f"{times['geometric'] * 1e3:.2f}" if "geometric" in times else "n/a"}
        for name in ("flash", "efficient"):
            if name in times:
                row[f"SDPA {name} (ms)"] = f"{times[name] * 1e3:.2f}"
                if "geometric" in times:
                    row[f"geometric / {name}"] = ratio(times["geometric"], times[name])
            else:
                row[f"SDPA {name} (ms)"] = "n/a"
        for name, label in GEOMETRIC_VARIANTS.items():
            row[f"geometric {label} (ms)"] = f"{times[name] * 1e3:.2f}" if name in times else "n/a"
            if name in times and "flash" in times:
                row[f"{label} / flash"] = ratio(times[name], times["flash"])
        if memory.get("geometric") is not None:
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
        if failures:
            row["failed"] = "; ".join(f"{name}: {why}" for name, why in failures.items())
        rows.append(row)
        saved()
        print(f"N {seq}: {row}", flush=True)
    return rows


# ------------------------------------------------------------------------------------------------- training step


def preset_model_and_batches(preset: str, device: torch.device, tiny: bool, batches: int = 4):
    """The preset's model (its NDRConfig fields) and `batches` batches of its task's training rows, as train.py
    builds them: the global batch of the preset (`total_batch_size`), length-grouped if the preset groups batches."""
    from ndr_training import config_values, parse_arguments

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


def training_steps(
    presets: list[str],
    device,
    tiny: bool,
    repeats: int,
    compile_backend: str,
    rows: list[dict] | None = None,
    saved=lambda: None,
) -> list[dict]:
    """One row per preset, appended to `rows` and `saved()` as it is measured: eager first, then compiled (whose
    compilation may take long or fail: the eager figures are kept either way), timed side by side with eager."""
    rows = [] if rows is None else rows
    for preset in presets:
        row = {"preset": preset + (" (tiny)" if tiny else "")}
        rows.append(row)
        try:
            config, batches, training_args, batch_size = preset_model_and_batches(preset, device, tiny)
        except Exception as error:  # the next preset is still measured
            row["failed"] = f"data: {first_line(error)}"
            saved()
            continue
        mean_tokens = statistics.mean(batch["input_ids"].shape[1] for batch in batches)
        row["batch x padded length"] = f"{batch_size} x {mean_tokens:.0f}"
        steps, times = {}, {}
        for name in ("eager", "compiled"):
            try:
                torch.manual_seed(0)
                model = NDRForSequenceClassification(config).to(device)
                model = torch.compile(model, backend=compile_backend) if name == "compiled" else model
                step = training_stepper(model, batches, training_args, device)
                for _ in range(len(batches)):  # every batch shape compiled before timing
                    step()
                times = timed_rounds({**steps, name: step}, device, repeats, warmup=0)  # beside those before it
                memory = peak_memory_mib(step, device)
            except Exception as error:  # a model that does not compile, or does not fit: the figures so far stay
                row["failed"] = f"{name}: {first_line(error)}"
                break
            steps[name] = step
            row.update({f"{measured} samples/s": f"{batch_size / seconds:.0f}" for measured, seconds in times.items()})
            if memory is not None:
                row[f"peak GiB {name}"] = f"{memory / 1024:.2f}"
            saved()
        if len(steps) == 2:
            row["compiled speed-up"] = ratio(times["eager"], times["compiled"])
        row["max_steps"] = f"{training_args.max_steps:,}"
        for name, seconds in times.items():
            row[f"their minutes, {name}"] = f"{training_args.max_steps * seconds / 60:.1f}"
        saved()
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
    # written again after every row: a run stopped from outside keeps what it measured
    results = {"machine": machine(), "device": name, "attention": [], "training_step": []}
    saved = lambda: save_json(args.json, results)  # noqa: E731
    attention_op(
        seqs, batch, heads, head_size, args.repeats, device, args.compile_backend, results["attention"], saved
    )
    print(f"\n### attention op on {name} ({setting})\n\n{markdown_table(results['attention'])}\n", flush=True)
    presets = [p for p in args.presets.split(",") if p]
    training_steps(presets, device, args.tiny, args.repeats, args.compile_backend, results["training_step"], saved)
    table = markdown_table(results["training_step"])
    print(f"\n### training step on {name} (eager vs torch.compile)\n\n{table}\n", flush=True)
    return save_json(args.json, results)


if __name__ == "__main__":
    main()
