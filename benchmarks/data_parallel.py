"""Data parallelism on the CPU: training samples per second of 2 processes x 1 thread (gloo DDP) against the best
single process, at the `ctl_cpu` preset's size (total batch 128, d=128, 14 steps), on real CTL batches.

    python benchmarks/data_parallel.py [--steps 30] [--json out.json]

Besides throughput it reports what bounds the scaling: each DDP process's step time with gradient synchronisation
switched off (`no_sync`: compute alone) and the time of one all-reduce of a gradient-sized buffer.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common import machine, ratio, save_json
from modeling_ndr import NDRConfig, NDRForSequenceClassification
from modeling_ndr.tables import markdown_table
from training_step import SIZES, config_kwargs, task_batches


TOTAL_BATCH = 128


def make_model():
    size = SIZES["ctl_cpu"]
    torch.manual_seed(0)
    return NDRForSequenceClassification(NDRConfig(**config_kwargs(size, size["task"]))).train()


def timed_steps(model, optimizer, batches, steps: int, context=None) -> float:
    """Seconds per training step over `steps` steps (after two warm-up steps)."""
    for index in range(steps + 2):
        if index == 2:
            start = time.perf_counter()
        batch = batches[index % len(batches)]
        optimizer.zero_grad()
        if context is not None:
            with context():
                model(**batch).loss.backward()
        else:
            model(**batch).loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps


def single_process(threads: int, steps: int) -> float:
    torch.set_num_threads(threads)
    model = make_model()
    batches = task_batches("ctl", TOTAL_BATCH)
    return TOTAL_BATCH / timed_steps(model, torch.optim.AdamW(model.parameters(), lr=1e-4), batches, steps)


def _worker(rank: int, world: int, steps: int, port: int, queue):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [  # each process takes its half of the same global batches
        {k: v[rank::world] for k, v in batch.items()} for batch in task_batches("ctl", TOTAL_BATCH)
    ]
    synchronised = timed_steps(model, optimizer, batches, steps)
    compute_only = timed_steps(model, optimizer, batches, steps, context=model.no_sync)
    buffer = torch.zeros(sum(p.numel() for p in model.parameters()))
    for _ in range(3):
        dist.all_reduce(buffer)
    start = time.perf_counter()
    for _ in range(20):
        dist.all_reduce(buffer)
    all_reduce = (time.perf_counter() - start) / 20
    if rank == 0:
        queue.put({"step": synchronised, "compute": compute_only, "all_reduce": all_reduce})
    dist.destroy_process_group()


def two_processes(steps: int) -> dict:
    context = mp.get_context("spawn")
    queue = context.Queue()
    mp.start_processes(_worker, args=(2, steps, 29561, queue), nprocs=2, join=True, start_method="spawn")
    return queue.get()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    one_thread = single_process(1, args.steps)
    two_threads = single_process(2, args.steps)
    torch.set_num_threads(threads)
    ddp = two_processes(args.steps)
    ddp_samples = TOTAL_BATCH / ddp["step"]
    best = max(one_thread, two_threads)
    rows = [
        {"setup": "1 process x 1 thread", "samples/s": f"{one_thread:.0f}"},
        {"setup": "1 process x 2 threads", "samples/s": f"{two_threads:.0f}"},
        {"setup": "2 processes x 1 thread (gloo DDP)", "samples/s": f"{ddp_samples:.0f}",
         "vs best single process": ratio(ddp_samples, best)},
    ]  # fmt: skip
    bound = {
        "DDP step (ms)": f"{ddp['step'] * 1000:.1f}",
        "of which compute, no sync (ms)": f"{ddp['compute'] * 1000:.1f}",
        "all-reduce of all gradients (ms)": f"{ddp['all_reduce'] * 1000:.1f}",
        "ideal 2-process speed-up given the compute": ratio(2 * TOTAL_BATCH / 2 / ddp["compute"], one_thread),
    }
    print(f"\n### data parallelism (ctl_cpu size, total batch {TOTAL_BATCH})\n")
    print(f"{markdown_table(rows)}\n\n{markdown_table([bound])}")
    results = {"machine": machine(), "rows": rows, "bound": bound}
    return save_json(args.json, results)


if __name__ == "__main__":
    main()
