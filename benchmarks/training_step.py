"""Training-step time (forward, backward, AdamW step) on real task batches, measured side by side in one run.

    python benchmarks/training_step.py [--sections before_after,variants,compiled] [--repeats 10] [--json out.json]

* `before_after`: the NDR at the `arithmetic_cpu` preset's size (batch 64 of arithmetic rows, d=128, 4 heads, 15 steps,
  dropout 0.1) with the model code of the commit before the performance work (`common.REFERENCE_COMMIT`, loaded from
  git) against the current code, one thread, the same weights (the current model loads the old state dict).
* `variants`: the NDR against the `transformer` variant (softmax attention, sinusoidal positions, no copy gate) of the
  same size, at the `ctl_cpu` preset's size (batch 64, d=128, d_ff=256, 1 head, 14 steps) and at the paper's CTL size
  (batch 512, d=256, d_ff=512, 1 head, 14 steps).
* `compiled`: the NDR at the three CPU presets' sizes (`arithmetic_cpu`, `listops_cpu`, `ctl_cpu`: their model and
  dropouts, batch 64 of real task rows, one thread as each of train.py's two processes), eager against
  `torch.compile(dynamic=True)` with inductor, in fp32 and in bf16 autocast (bf16 where the CPU has native bf16; else
  the row says it was not measured), every batch's length compiled before timing; the warm-up's seconds (the compile
  time a run pays once) beside the step times.
"""

import argparse
import contextlib
import sys

import torch
from transformers import DataCollatorWithPadding

import modeling_ndr
from common import interleaved, load_reference_package, machine, ratio, save_json
from modeling_ndr import NDRConfig, NDRForSequenceClassification, load_task, task_tokenizer
from modeling_ndr.tables import markdown_table


TRANSFORMER = dict(attention_type="softmax", position_encoding="absolute", copy_gate=False)
SIZES = {
    "arithmetic_cpu": dict(task="arithmetic", batch=64, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                           num_hidden_layers=15),
    "ctl_cpu": dict(task="ctl", batch=64, hidden_size=128, intermediate_size=256, num_attention_heads=1,
                    num_hidden_layers=14),
    "ctl_paper": dict(task="ctl", batch=512, hidden_size=256, intermediate_size=512, num_attention_heads=1,
                      num_hidden_layers=14),
}  # fmt: skip


def task_batches(task: str, batch_size: int, count: int = 4) -> list[dict]:
    """`count` padded batches of training rows of `task` (labels included)."""
    tokenizer = task_tokenizer(task)
    rows = load_task(task, n_train=max(2000, batch_size * count), n_eval=32)["train"].shuffle(seed=0)
    rows = rows.select(range(batch_size * count))
    encoded = [dict(tokenizer(text), labels=label) for text, label in zip(rows["text"], rows["label"])]
    collator = DataCollatorWithPadding(tokenizer)
    return [collator(encoded[i : i + batch_size]) for i in range(0, len(encoded), batch_size)]


def config_kwargs(size: dict, task: str) -> dict:
    kwargs = {k: v for k, v in size.items() if k not in ("task", "batch")}
    return dict(kwargs, vocab_size=len(task_tokenizer(task)), num_labels=10 if task != "ctl" else 8,
                hidden_dropout_prob=0.1, attention_dropout=0.1, gate_dropout=0.1)  # fmt: skip


def stepper(model, batches):
    """One training step per call, cycling through the batches."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    state = {"index": 0}

    def step():
        batch = batches[state["index"] % len(batches)]
        state["index"] += 1
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()

    return step


def before_after(repeats: int) -> list[dict]:
    size = SIZES["arithmetic_cpu"]
    batches = task_batches(size["task"], size["batch"])
    reference = load_reference_package()
    reference_config = sys.modules["ndr_reference.configuration_ndr"].NDRConfig(**config_kwargs(size, size["task"]))
    torch.manual_seed(0)
    old = reference.NDRForSequenceClassification(reference_config)
    new = NDRForSequenceClassification(NDRConfig(**config_kwargs(size, size["task"])))
    new.load_state_dict(old.state_dict())  # same keys: a checkpoint of the old code loads into the new one
    with torch.no_grad():
        batch = {k: v for k, v in batches[0].items() if k != "labels"}
        difference = (old.eval()(**batch).logits - new.eval()(**batch).logits).abs().max().item()
    with single_thread():
        times = interleaved({"before": stepper(old, batches), "now": stepper(new, batches)}, repeats)
    return [{
        "size": "arithmetic_cpu (batch 64, d=128, 4 heads, 15 steps), 1 thread",
        "before (ms)": f"{times['before'] * 1000:.0f}",
        "now (ms)": f"{times['now'] * 1000:.0f}",
        "speed-up": ratio(times["before"], times["now"]),
        "max logit difference (eval)": f"{difference:.1e}",
    }]  # fmt: skip


@contextlib.contextmanager
def single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def variants(repeats: int) -> list[dict]:
    rows = []
    for name in ("ctl_cpu", "ctl_paper"):
        size = SIZES[name]
        batches = task_batches(size["task"], size["batch"])
        torch.manual_seed(0)
        ndr = NDRForSequenceClassification(NDRConfig(**config_kwargs(size, size["task"])))
        transformer = NDRForSequenceClassification(NDRConfig(**config_kwargs(size, size["task"]), **TRANSFORMER))
        times = interleaved({"ndr": stepper(ndr, batches), "transformer": stepper(transformer, batches)},
                            repeats if name == "ctl_cpu" else max(3, repeats // 3))  # fmt: skip
        rows.append({
            "size": f"{name} (batch {size['batch']}, d={size['hidden_size']}, {size['num_hidden_layers']} steps)",
            "NDR (ms)": f"{times['ndr'] * 1000:.0f}",
            "transformer variant (ms)": f"{times['transformer'] * 1000:.0f}",
            "NDR / transformer": ratio(times["ndr"], times["transformer"]),
        })  # fmt: skip
    return rows


def compiled(repeats: int, presets=("arithmetic_cpu", "listops_cpu", "ctl_cpu")) -> list[dict]:
    import time

    from modeling_ndr.training.presets import read_preset
    from ndr_training.devices import cpu_has_native_bf16
    from precision import preset_model, step_function

    rows = []
    for preset in presets:
        batches = task_batches(read_preset(preset)["task"], 64)
        for bf16 in (False, True):
            row = {"preset": preset, "precision": "bf16" if bf16 else "fp32"}
            if bf16 and not cpu_has_native_bf16():
                rows.append(dict(row, **{"eager (ms)": "not measured: no native bf16"}))
                continue
            (eager, _), (model, _) = preset_model(preset), preset_model(preset)  # the same weights (seed 0)
            torch._dynamo.reset()
            with single_thread():
                compiled_step = step_function(torch.compile(model, dynamic=True), batches, bf16)
                start = time.perf_counter()
                for _ in range(len(batches)):  # compile every length before timing
                    compiled_step()
                warm_up = time.perf_counter() - start
                times = interleaved({"eager": step_function(eager, batches, bf16), "compiled": compiled_step}, repeats)
            rows.append(dict(row, **{
                "eager (ms)": f"{times['eager'] * 1000:.0f}",
                "inductor (ms)": f"{times['compiled'] * 1000:.0f}",
                "eager / inductor": ratio(times["eager"], times["compiled"]),
                "compile warm-up (s)": f"{warm_up:.0f}",
            }))  # fmt: skip
    return rows


SECTIONS = {"before_after": before_after, "variants": variants, "compiled": compiled}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    results = {"machine": machine(), "kernel": modeling_ndr.geometric_ndr.uses_cpu_kernel(torch.zeros(1))}
    for name in args.sections.split(","):
        results[name] = SECTIONS[name](args.repeats)
        print(f"\n### training step: {name}\n\n{markdown_table(results[name])}", flush=True)
    return save_json(args.json, results)


if __name__ == "__main__":
    main()
