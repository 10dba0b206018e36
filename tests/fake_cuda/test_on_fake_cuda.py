"""Every variant on simulated CUDA (simulation.py): a bf16-autocast training step that reads nothing on the host,
inference, geometric attention in float32, a collated batch through Trainer's loss, the host reads that ACT and
adaptive steps make by design, and two planted bugs that these tests must catch."""

import importlib
import shutil
import sys

import pytest
import torch
from simulation import (
    REPO,
    VARIANTS,
    Answer,
    HostReadError,
    HostReads,
    OpDtypes,
    cuda_autocast,
    cuda_batch,
    fake_cuda_mode,
    fake_cuda_model,
    variant_config,
)


# What an inference forward reads by design, each answered so that the forward goes on: the input value checks (one
# read for all of them: "nothing is wrong") and, with ACT, whether every column has halted ("not yet").
INPUT_CHECKS = {"modeling_ndr.py:check_input_values": Answer(scalar=False)}
ACT_HALTED = {"modeling_ndr.py:_act_steps": Answer(scalar=True)}
ACT_VARIANTS = [variant for variant in VARIANTS if variant_config(variant).halting == "act"]


@pytest.fixture
def fake_cuda():
    with fake_cuda_mode() as mode:
        yield mode


def adamw(model) -> torch.optim.AdamW:
    """The presets' optimizer (`adamw_torch`) as a GPU runs it: `foreach`, which it picks for CUDA parameters by
    itself but not for fake ones."""
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)


def training_step(model, batch: dict, optimizer) -> torch.Tensor:
    """What Trainer's loop does in a step with bf16 autocast: forward, backward, clip to 1.0 (`foreach`, as on a
    GPU), AdamW, zero the gradients."""
    model.train()
    with cuda_autocast(torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optimizer.step()
    optimizer.zero_grad()
    return loss


# ---------------------------------------------------------------------------------------------- training


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_bf16_training_step_reads_nothing_on_the_host(variant, fake_cuda):
    model = fake_cuda_model(variant_config(variant))
    optimizer, batch = adamw(model), cuda_batch()
    with HostReads() as reads:  # nothing allowed: a read raises HostReadError naming its line
        training_step(model, batch, optimizer)
        loss = training_step(model, batch, optimizer)  # the second step: with AdamW's state
    assert reads.reads == []
    assert loss.device.type == "cuda" and loss.dtype == torch.float32, (loss.device, loss.dtype)
    for name, parameter in model.named_parameters():
        assert parameter.device.type == "cuda" and parameter.dtype == torch.float32, (name, parameter.dtype)


def test_a_coupled_model_computes_its_position_ids_in_training_without_host_reads(fake_cuda):
    """`config.position_coupling` (a release's fine-tuning): the ids are computed from the tokens on the device; the
    row check, which reads them, runs only where `may_read_values` allows it (not in a GPU training step)."""
    config = variant_config("ndr", relative_key_window=1, position_coupling="copy",
                            position_coupling_token_ids={"=": 5, "_": 6})  # fmt: skip
    model = fake_cuda_model(config)
    optimizer, batch = adamw(model), cuda_batch()
    with HostReads() as reads:
        loss = training_step(model, batch, optimizer)
    assert reads.reads == [] and loss.device.type == "cuda"


def test_autocast_is_on_in_the_simulated_training_step(fake_cuda):
    """Without it the dtype checks would pass with autocast off, as `torch.autocast("cuda")` is on a machine without
    CUDA unless `cuda_autocast` makes it."""
    model = fake_cuda_model(variant_config("ndr")).train()
    with cuda_autocast(torch.bfloat16), OpDtypes() as log:
        model(**cuda_batch())
    matmuls = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    linear = {dtype for _, func, dtype, _ in log.ops if func in matmuls}
    assert linear == {torch.bfloat16}, f"the linear layers ran in {linear}, not in autocast's bf16"


# ---------------------------------------------------------------------------------------------- inference


@pytest.mark.parametrize("variant", VARIANTS)
def test_inference_with_fixed_steps_reads_only_the_input_checks(variant, fake_cuda):
    model = fake_cuda_model(variant_config(variant)).eval()
    with torch.inference_mode(), cuda_autocast(torch.bfloat16), HostReads(INPUT_CHECKS | ACT_HALTED) as reads:
        logits = model(**cuda_batch(), num_steps=5).logits
    expected = [("modeling_ndr.py:check_input_values", "scalar")]
    if variant in ACT_VARIANTS:
        expected += [("modeling_ndr.py:_act_steps", "scalar")] * 5
    assert reads.reads == expected
    assert logits.shape == (4, 3) and logits.device.type == "cuda", (logits.shape, logits.device)


# ---------------------------------------------------------------------------------------------- geometric attention


def test_geometric_attention_computes_in_float32_under_bf16_autocast(fake_cuda):
    from modeling_ndr.attention_ndr import attention

    b, h, n, e = 3, 2, 9, 8
    query, key, value = (torch.randn(b, h, n, e, device="cuda") for _ in range(3))
    left, right = (torch.randn(b, h, n, device="cuda") for _ in range(2))
    mask = torch.ones(b, n, dtype=torch.long, device="cuda")
    with cuda_autocast(torch.bfloat16), HostReads(), OpDtypes() as log:
        output, weights = attention(query, key, value, mask, "geometric", left, right)
    logits = [dtype for place, func, dtype, shape in log.ops if place.endswith(":attention") and shape[-2:] == (n, n)]
    assert logits[0] == torch.bfloat16, "autocast computes the logits q . k in bf16"
    inside = {
        dtype for place, _, dtype, _ in log.ops if place.startswith("geometric_ndr.") and dtype.is_floating_point
    }
    assert inside == {torch.float32}, f"geometric attention computed in {inside}: its (n, n) passes must be float32"
    assert weights.dtype == torch.float32 and output.dtype == torch.bfloat16, (weights.dtype, output.dtype)


# ---------------------------------------------------------------------------------------------- Trainer's path


def test_a_collated_batch_moved_to_the_device_gives_a_loss_without_host_reads(tmp_path):
    """train.py's pieces: the task's tokenizer and data, `encode`, `DataCollatorWithPadding`, NDRTrainer's data loader
    and `compute_loss`; the batch moved to the device as Trainer's `_prepare_input` does (`tensor.to(args.device)`)."""
    from transformers import DataCollatorWithPadding, TrainingArguments

    import modeling_ndr
    from ndr_training.checkpoints import new_model
    from ndr_training.data import encode
    from ndr_training.trainer import NDRTrainer

    sizes = dict(hidden_size=16, intermediate_size=24, num_attention_heads=2, num_hidden_layers=3)
    tokenizer, cpu_model = new_model("listops", sizes, modeling_ndr.task_label_names("listops"), None)
    data = encode(modeling_ndr.load_task("listops", n_train=16, n_eval=4, cache_dir=str(tmp_path / "data")),
                  tokenizer, cpu_model.config.label2id)  # fmt: skip
    args = TrainingArguments(str(tmp_path / "run"), use_cpu=True, report_to="none", per_device_train_batch_size=8,
                             label_names=["labels", "depth"])  # fmt: skip
    trainer = NDRTrainer(model=cpu_model, args=args, train_dataset=data["train"],
                         data_collator=DataCollatorWithPadding(tokenizer))  # fmt: skip
    batch = next(iter(trainer.get_train_dataloader()))  # real CPU tensors, as the data loader gives them
    assert {"input_ids", "attention_mask", "labels", "depth"} <= set(batch), sorted(batch)
    with fake_cuda_mode():
        model = fake_cuda_model(cpu_model.config).train()
        inputs = {name: tensor.to("cuda") for name, tensor in batch.items()}
        with HostReads() as reads:
            with cuda_autocast(torch.bfloat16):
                loss = trainer.compute_loss(model, inputs)
            loss.backward()
    assert reads.reads == [] and loss.device.type == "cuda", (reads.reads, loss.device)


# ---------------------------------------------------------------------------------------------- ACT and adaptive steps


@pytest.mark.parametrize("variant", ACT_VARIANTS)
def test_act_at_inference_reads_once_per_step_whether_all_columns_halted(variant, fake_cuda):
    model = fake_cuda_model(variant_config(variant)).eval()
    with torch.inference_mode(), HostReads(INPUT_CHECKS | ACT_HALTED) as reads:
        output = model(**cuda_batch(), num_steps=4)
    assert [place for place, _ in reads.reads].count("modeling_ndr.py:_act_steps") == 4, reads.reads
    assert output.halting_steps.shape == (4, 7) and output.halting_steps.device.type == "cuda"


@pytest.mark.parametrize("variant", ACT_VARIANTS)
def test_act_in_training_reads_nothing(variant, fake_cuda):
    model = fake_cuda_model(variant_config(variant)).train()
    with HostReads() as reads:
        with cuda_autocast(torch.bfloat16):
            loss = model(**cuda_batch(), num_steps=4).loss
        loss.backward()
    assert reads.reads == []


def test_adaptive_steps_read_which_samples_finished_after_each_step(fake_cuda):
    """The compact loop (finished samples leave the batch) asks after every step whether all samples go on and, if
    not, selects the finished and the running ones with bool masks. Answered "no", with every mask keeping half of
    its samples, the batch shrinks 4 → 2 → 1 → 0 in three steps."""
    model = fake_cuda_model(variant_config("ndr", adaptive_steps=True)).eval()
    adaptive = {"modeling_ndr.py:_adaptive_steps": Answer(scalar=False, kept=lambda n: n // 2)}
    with torch.inference_mode(), HostReads(INPUT_CHECKS | adaptive) as reads:
        output = model(**cuda_batch())
    places = {place for place, _ in reads.reads}
    assert places == {"modeling_ndr.py:check_input_values", "modeling_ndr.py:_adaptive_steps"}, places
    steps = [kind for place, kind in reads.reads if place.endswith("_adaptive_steps") and kind == "scalar"]
    assert len(steps) == 3, f"one 'do all samples go on?' per step, 3 steps; got {reads.reads}"
    assert output.logits.shape == (4, 3), "every sample's final state is written back into the whole batch"


def test_adaptive_steps_recording_outputs_read_once_per_step_whether_any_sample_runs(fake_cuda):
    model = fake_cuda_model(variant_config("ndr", adaptive_steps=True, max_adaptive_steps=5)).eval()
    adaptive = {"modeling_ndr.py:_adaptive_steps": Answer(scalar=True)}
    with torch.inference_mode(), HostReads(INPUT_CHECKS | adaptive) as reads:
        output = model(**cuda_batch(), output_hidden_states=True)
    assert [kind for place, kind in reads.reads if place.endswith("_adaptive_steps")] == ["scalar"] * 5, reads.reads
    assert len(output.hidden_states) == 6, "the embeddings and 5 steps, each over the whole batch"


# ---------------------------------------------------------------------------------------------- the tests' own test

# the files a remote-code copy of the model holds
MODEL_FILES = ("configuration_ndr.py", "modeling_ndr.py", "attention_ndr.py", "geometric_ndr.py", "dropout_ndr.py",
               "kernel_autograd_ndr.py", "position_coupling.py")  # fmt: skip


def planted_copy(tmp_path, name: str, old: str, new: str):
    """A copy of the model's files as package `name`, with `old` replaced by `new` in its modeling_ndr.py; returns
    that module."""
    folder = tmp_path / name
    folder.mkdir()
    for file in MODEL_FILES:
        shutil.copy(REPO / "modeling_ndr" / file, folder / file)
    (folder / "__init__.py").write_text("")
    source = (folder / "modeling_ndr.py").read_text()
    assert source.count(old) == 1, f"the line to plant the bug in is no longer in modeling_ndr.py: {old!r}"
    (folder / "modeling_ndr.py").write_text(source.replace(old, new))
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(f"{name}.modeling_ndr")
    finally:
        sys.path.remove(str(tmp_path))


def train_planted_copy(module):
    config = module.NDRConfig(**variant_config("ndr", gate_dropout=0.1).to_dict())
    model = fake_cuda_model(config, module.NDRForSequenceClassification)
    with HostReads():
        training_step(model, cuda_batch(), adamw(model))


def test_the_unplanted_copy_trains(tmp_path, fake_cuda):
    """The two tests below fail because of what they plant, not because a copy cannot run."""
    old = "        for _ in range(num_steps):\n"
    train_planted_copy(planted_copy(tmp_path, "planted_nothing", old, old))


def test_a_tensor_made_without_a_device_is_caught(tmp_path, fake_cuda):
    old = "keep = torch.rand(gate.shape[:-1] + (1,), device=gate.device)"
    module = planted_copy(tmp_path, "planted_device", old, "keep = torch.rand(gate.shape[:-1] + (1,))")
    with pytest.raises(RuntimeError, match=r"cuda:0.*cpu|cpu.*cuda:0"):
        train_planted_copy(module)


def test_an_item_in_the_step_loop_is_caught(tmp_path, fake_cuda):
    old = "        for _ in range(num_steps):\n"
    new = old + "            hidden_states.norm().item()\n"
    module = planted_copy(tmp_path, "planted_item", old, new)
    with pytest.raises(HostReadError, match=r"planted_item/modeling_ndr.py:\d+ \(modeling_ndr.py:forward\)"):
        train_planted_copy(module)
