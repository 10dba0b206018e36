"""`ndr_training.trainer` on its own: the contract of the private `Trainer` methods `NDRTrainer` overrides
and of the order `LatestBestOnTies` relies on (a transformers release that renames them, changes their signature or
stops calling them fails here), the depth-balanced sampling as Trainer's own dataloader delivers it, and the
per-depth `compute_metrics`."""

import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import DataCollatorWithPadding, EvalPrediction, Trainer, TrainingArguments

from datasets import Dataset
from modeling_ndr import NDRConfig, NDRForSequenceClassification, build_tokenizer
from ndr_training import NDRTrainer, depth_weights, load_depth_accuracy, metrics_function
from ndr_training.sampling import SampleShare, operator_weights


def tiny_trainer(tmp_path, train_dataset=None, keep_tied_best=False, **args) -> NDRTrainer:
    model = NDRForSequenceClassification(
        NDRConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_labels=2)
    )
    arguments = TrainingArguments(output_dir=str(tmp_path), report_to="none", seed=3, use_cpu=True, **args)
    return NDRTrainer(model=model, args=arguments, train_dataset=train_dataset, balance_depths=True,
                      keep_tied_best=keep_tied_best)  # fmt: skip


# ------------------------------------------------------------------------------------- the private Trainer methods


def test_the_overridden_private_methods_keep_their_signatures():
    """NDRTrainer overrides `_get_train_sampler(train_dataset)` and `_push_from_checkpoint(checkpoint_folder)`, and its
    `save_model` passes `_internal_call`: if transformers renames them or changes their parameters, the overrides
    would silently stop being called (docs/contributing.md lists them)."""
    for name, parameters in {
        "_get_train_sampler": ["self", "train_dataset"],
        "_push_from_checkpoint": ["self", "checkpoint_folder"],
        "save_model": ["self", "output_dir", "_internal_call"],
    }.items():
        assert callable(getattr(Trainer, name, None)), f"Trainer.{name} is gone: NDRTrainer's override is dead code"
        assert list(inspect.signature(getattr(Trainer, name)).parameters) == parameters, f"Trainer.{name} changed"
        assert list(inspect.signature(getattr(NDRTrainer, name)).parameters) == parameters


def test_trainer_s_own_dataloader_draws_depths_uniformly(tmp_path):
    """`get_train_dataloader` (public) builds its sampler with `_get_train_sampler`: one epoch of its batches holds
    each depth about equally often, though depth 1 is 1% of the data."""
    depths = [1] * 10 + [2] * 90 + [5] * 900
    dataset = Dataset.from_dict(
        {"input_ids": [[2, 3, 4]] * len(depths), "labels": [0] * len(depths), "depth": depths, "row": range(1000)}
    )
    trainer = tiny_trainer(tmp_path, dataset, per_device_train_batch_size=50, remove_unused_columns=False)
    trainer.data_collator = DataCollatorWithPadding(build_tokenizer(texts=["a"]))
    drawn = torch.cat([batch["depth"] for batch in trainer.get_train_dataloader()])
    assert len(drawn) == len(depths), "one epoch draws as many samples as the dataset holds"
    shares = [(drawn == d).float().mean().item() for d in (1, 2, 5)]
    assert all(abs(share - 1 / 3) < 0.07 for share in shares), f"depth shares {shares} should all be about 1/3"


def evaluate_as_trainer_does(trainer, metrics: dict) -> bool:
    """What Trainer does with an evaluation's metrics: the callbacks' `on_evaluate` (inside `evaluate`), then its own
    comparison with the best so far (`_maybe_log_save_evaluate`); returns Trainer's verdict."""
    trainer.control = trainer.callback_handler.on_evaluate(trainer.args, trainer.state, trainer.control, metrics)
    return trainer._determine_best_metric(metrics=metrics, trial=None)


def test_trainer_calls_the_callbacks_on_evaluate_before_it_compares_with_the_best_metric():
    """`LatestBestOnTies` moves the best step in `on_evaluate`; it works only while Trainer runs the callbacks first
    (in `_evaluate`) and compares after (`_determine_best_metric`, strictly better only)."""
    source = inspect.getsource(Trainer._maybe_log_save_evaluate)
    assert source.index("self._evaluate(") < source.index("self._determine_best_metric("), "the order changed"
    compare = inspect.getsource(Trainer._determine_best_metric)
    assert "np.greater if self.args.greater_is_better else np.less" in compare, "Trainer's comparison changed"


def test_a_tie_with_the_best_metric_moves_the_best_checkpoint_to_the_latest(tmp_path):
    """The paper keeps the latest of equally good checkpoints; Trainer keeps the first. Trainer saves
    `state.best_global_step` as the best checkpoint."""
    trainer = tiny_trainer(tmp_path, save_strategy="steps", metric_for_best_model="ood_valid_accuracy")
    verdicts = []
    for step, accuracy in [(1, 0.5), (2, 0.7), (3, 0.7), (4, 0.6), (5, 0.8), (6, 0.7)]:
        trainer.state.global_step = step
        verdicts.append(evaluate_as_trainer_does(trainer, {"eval_ood_valid_accuracy": accuracy}))
        if step == 3:
            assert (trainer.state.best_global_step, trainer.state.best_metric) == (3, 0.7), "a tie: the latest"
    assert verdicts == [True, True, False, False, True, False], "Trainer's verdicts: strict improvements only"
    assert (trainer.state.best_global_step, trainer.state.best_metric) == (5, 0.8)


def test_keep_tied_best_keeps_the_checkpoints_a_tie_replaces_until_a_strict_improvement(tmp_path):
    """With `keep_tied_best` the checkpoint that a tie takes the best's place from is kept (hard links) in
    `tied-best/` before Trainer's rotation deletes it; a strict improvement empties the folder."""
    import shutil

    trainer = tiny_trainer(
        tmp_path, keep_tied_best=True, save_strategy="steps", metric_for_best_model="ood_valid_accuracy"
    )
    kept = tmp_path / "tied-best"
    held = {}
    for step, accuracy in [(2, 0.7), (4, 0.7), (6, 0.7), (8, 0.8), (10, 0.6), (12, 0.8)]:
        trainer.state.global_step = step
        evaluate_as_trainer_does(trainer, {"eval_ood_valid_accuracy": accuracy})
        folder = tmp_path / f"checkpoint-{step}"  # what Trainer saves next, then its rotation (best and last kept)
        folder.mkdir()
        (folder / "model.safetensors").write_text(f"weights of step {step}")
        trainer.state.best_model_checkpoint = str(tmp_path / f"checkpoint-{trainer.state.best_global_step}")
        for old in tmp_path.glob("checkpoint-*"):
            if old.name not in (folder.name, Path(trainer.state.best_model_checkpoint).name):
                shutil.rmtree(old)
        held[step] = sorted(path.name for path in kept.glob("checkpoint-*"))
        if step == 6:
            assert not (tmp_path / "checkpoint-2").exists(), "Trainer's rotation deleted it"
            assert (kept / "checkpoint-2" / "model.safetensors").read_text() == "weights of step 2", "but it is kept"
    assert held[2] == [] and held[4] == ["checkpoint-2"], held
    assert held[6] == ["checkpoint-2", "checkpoint-4"], held
    assert held[8] == [] and held[10] == [], "0.8 is better than every kept checkpoint"
    assert held[12] == ["checkpoint-8"], held
    assert trainer.state.best_global_step == 12


def test_a_lower_is_better_metric_ties_the_same_way(tmp_path):
    trainer = tiny_trainer(tmp_path, metric_for_best_model="eval_ood_valid_loss", greater_is_better=False)
    for step, loss in [(1, 0.9), (2, 0.4), (3, 0.4), (4, 0.5)]:
        trainer.state.global_step = step
        evaluate_as_trainer_does(trainer, {"eval_ood_valid_loss": loss})
    assert (trainer.state.best_global_step, trainer.state.best_metric) == (3, 0.4)


def test_metrics_of_another_split_leave_the_best_checkpoint_alone(tmp_path):
    """Trainer evaluates each split on its own (one `on_evaluate` each): only the selection split's metric counts."""
    trainer = tiny_trainer(tmp_path, save_strategy="steps", metric_for_best_model="ood_valid_accuracy")
    trainer.state.global_step = 1
    evaluate_as_trainer_does(trainer, {"eval_ood_valid_accuracy": 0.7})
    trainer.state.global_step = 2
    trainer.control = trainer.callback_handler.on_evaluate(
        trainer.args, trainer.state, trainer.control, {"eval_iid_test_accuracy": 0.7}
    )
    assert trainer.state.best_global_step == 1


# ---------------------------------------------------------------------------------------- sampling and metrics


@pytest.mark.parametrize("balance_depths", [False, True])
def test_operator_weights_draw_every_operator_equally_often_within_its_depth(balance_depths):
    """Depth 1 holds operator 7 nine times and operator 8 once (ListOps' [SM at depth 1 is that rare); depth 2 holds
    three operators ten times each. Each depth keeps its share of the data (1/4, 3/4), or with balance_depths 1/2."""
    depths = [1] * 10 + [2] * 30
    operators = [7] * 9 + [8] + [7] * 10 + [8] * 10 + [9] * 10
    weights = operator_weights(depths, operators, balance_depths)
    mass = {}
    for depth, operator, weight in zip(depths, operators, weights.tolist()):
        mass[depth, operator] = mass.get((depth, operator), 0.0) + weight / float(weights.sum())
    depth_1, depth_2 = (0.5, 0.5) if balance_depths else (0.25, 0.75)
    expected = {
        (1, 7): depth_1 / 2,
        (1, 8): depth_1 / 2,
        (2, 7): depth_2 / 3,
        (2, 8): depth_2 / 3,
        (2, 9): depth_2 / 3,
    }
    assert mass == pytest.approx(expected), "every operator of a depth is drawn as often as the others"


def test_depth_weights_give_every_depth_the_same_total_weight():
    depths = [3] * 5 + [1] * 2 + [7] * 93
    weights = depth_weights(depths)
    totals = {d: weights[torch.tensor(depths) == d].sum().item() for d in (1, 3, 7)}
    assert totals == pytest.approx({1: 1.0, 3: 1.0, 7: 1.0}) and weights.dtype == torch.float64


def test_compute_metrics_reports_accuracy_and_accuracy_per_depth():
    rng = np.random.default_rng(0)
    logits, labels, depths = rng.normal(size=(300, 4)), rng.integers(0, 4, 300), rng.integers(1, 6, 300)
    compute_metrics = metrics_function(load_depth_accuracy())
    correct = logits.argmax(-1) == labels
    metrics = compute_metrics(EvalPrediction(predictions=logits, label_ids=(labels, depths)))
    assert metrics["accuracy"] == pytest.approx(correct.mean())
    by_depth = {int(k.removeprefix("accuracy_depth_")): v for k, v in metrics.items() if "accuracy_depth_" in k}
    assert by_depth == pytest.approx({d: correct[depths == d].mean() for d in range(1, 6)})
    plain = compute_metrics(EvalPrediction(predictions=logits, label_ids=labels))
    assert plain["accuracy"] == pytest.approx(correct.mean())
    assert not any("depth" in key for key in plain), "no depths given: no per-depth metrics"


def test_compute_metrics_reports_accuracy_per_first_token_and_per_first_token_and_depth():
    """`--eval_by_first_token`: ListOps' curves per root operator ([SM is the one that stays at chance)."""
    rng = np.random.default_rng(1)
    logits, labels, depths = rng.normal(size=(400, 4)), rng.integers(0, 4, 400), rng.integers(1, 4, 400)
    first_tokens = rng.choice([11, 12], 400)
    compute_metrics = metrics_function(load_depth_accuracy(), first_token_names={11: "MIN", 12: "SM"})
    metrics = compute_metrics(EvalPrediction(predictions=logits, label_ids=(labels, depths, first_tokens)))
    correct = logits.argmax(-1) == labels
    for token, name in ((11, "MIN"), (12, "SM")):
        assert metrics[f"accuracy_first_{name}"] == pytest.approx(correct[first_tokens == token].mean())
        for depth in (1, 2, 3):
            group = (first_tokens == token) & (depths == depth)
            assert metrics[f"accuracy_first_{name}_depth_{depth}"] == pytest.approx(correct[group].mean())
    assert metrics["accuracy"] == pytest.approx(correct.mean()), "the overall accuracy is unchanged"


def test_sample_shares_give_a_group_its_share_of_the_draws_and_the_rest_keep_their_proportions(tmp_path):
    """`--sample_shares '[SM:1=0.25'`: the rare group (token 5 at depth 1, 2% of the rows) is a quarter of the draws;
    the other rows keep the proportions depth balancing gives them."""
    depths = [1] * 100 + [2] * 900
    first = [5] * 20 + [6] * 80 + [5] * 450 + [6] * 450
    dataset = Dataset.from_dict({"depth": depths, "input_ids": [[2, token, 3] for token in first]})
    trainer = tiny_trainer(tmp_path, dataset)
    trainer.sample_shares = [SampleShare(5, 1, None, 0.25)]
    drawn = list(trainer._get_train_sampler(dataset))
    group = np.array([first[i] == 5 and depths[i] == 1 for i in drawn])
    assert abs(group.mean() - 0.25) < 0.04, f"the group is {group.mean():.3f} of the draws, not 0.25"
    rest_depths = np.array([depths[i] for i in drawn])[~group]
    # depth balancing gives depth 1 half the mass, a fifth of it the group's: the rest is 0.4 (depth 1) to 0.5
    assert abs((rest_depths == 1).mean() - 0.4 / 0.9) < 0.06, "the rest keep depth balancing's proportions"
    trainer.sample_shares = [SampleShare(5, 1, None, 1.0)]  # a curriculum's first phase: only the group
    assert all(first[i] == 5 and depths[i] == 1 for i in trainer._get_train_sampler(dataset)), "only the group"


def test_sample_shares_can_name_a_length_and_a_sample_belongs_to_the_first_share_that_names_it(tmp_path):
    """'[SM:1:4=0.5' then '[SM:1=0.5': half the draws are the 4-word lists ([SM d d ]), half the other depth-1 ones."""
    texts = [[2, 5, 9, 9, 7, 3]] * 10 + [[2, 5, 9, 9, 9, 7, 3]] * 90 + [[2, 6, 9, 9, 7, 3]] * 900
    dataset = Dataset.from_dict({"depth": [1] * 1000, "input_ids": texts})
    trainer = tiny_trainer(tmp_path, dataset)
    trainer.sample_shares = [SampleShare(5, 1, 4, 0.5), SampleShare(5, 1, None, 0.5)]
    drawn = [len(texts[i]) for i in trainer._get_train_sampler(dataset)]
    assert abs(np.mean(np.array(drawn) == 6) - 0.5) < 0.05, "the 4-word lists: half the draws"
    assert all(texts[i][1] == 5 for i in trainer._get_train_sampler(dataset)), "shares of 1 in all: only the groups"


@pytest.mark.parametrize(
    "items, message",
    [
        (["[SM:1"], "expected FIRST_TOKEN[:DEPTH[:WORDS]][@NESTED]=SHARE"),
        (["[SM:x=0.2"], "expected FIRST_TOKEN[:DEPTH[:WORDS]][@NESTED]=SHARE"),
        (["[SM:1:4:2=0.2"], "expected FIRST_TOKEN[:DEPTH[:WORDS]][@NESTED]=SHARE"),
        (["[SM:1:7=0.2"], "no training sample starts with [SM at depth 1 with 7 words"),
        (["[SM=1.5"], "0 < SHARE <= 1"),
        (["[SM=0.6", "[MIN=0.5"], "add up to more than 1"),
        (["[XX=0.2"], "'[XX' is not a word"),
        (["[SM:1@0=0.2"], "expected FIRST_TOKEN[:DEPTH[:WORDS]][@NESTED]=SHARE"),
        (["[SM:1@x=0.2"], "expected FIRST_TOKEN[:DEPTH[:WORDS]][@NESTED]=SHARE"),
        (["[SM:1@1=0.2"], "no training sample starts with [SM at depth 1 with 1 nested arguments"),
        (["[SM:9=0.2"], "no training sample starts with [SM at depth 9"),
    ],
)
def test_bad_sample_shares_are_one_line_naming_the_item(items, message):
    from modeling_ndr import task_tokenizer
    from modeling_ndr.training import UsageError
    from ndr_training.sampling import resolve_sample_shares

    tokenizer = task_tokenizer("listops")
    train = Dataset.from_dict({"depth": [1, 2], "input_ids": [tokenizer("[SM 1 2 ]")["input_ids"]] * 2})
    with pytest.raises(UsageError, match=re.escape(message)):
        resolve_sample_shares(items, tokenizer, train)
    sm = tokenizer.convert_tokens_to_ids("[SM")
    assert resolve_sample_shares(["[SM:1=0.2"], tokenizer, train) == [SampleShare(sm, 1, None, 0.2)]
    assert resolve_sample_shares(["[SM:1:4=0.2"], tokenizer, train) == [SampleShare(sm, 1, 4, 0.2)]


@pytest.mark.parametrize(
    "text, nested",
    [
        ("[SM 1 2 ]", 0),
        ("[SM 1 [MAX 2 [MIN 3 4 ] ] ]", 1),  # a chain: one list argument per level, holding the next
        ("[SM [MAX 1 2 ] [MIN 3 4 ] ]", 0),  # two list arguments, neither holds a list
        ("[SM [MAX [MIN 1 2 ] 3 ] [MED 4 5 ] ]", 1),
        ("[SM [MAX [MIN 1 2 ] 3 ] [MED [SM 4 5 ] 6 ] ]", 2),
        ("[MIN 1 [SM [MAX [MIN 1 2 ] 3 ] [MED [SM 4 [MIN 5 6 ] ] 6 ] [MAX [MAX 1 2 ] 3 ] ] ]", 3),
    ],
)
def test_nested_arguments_counts_the_arguments_of_one_list_that_hold_lists(text, nested):
    from modeling_ndr import task_tokenizer
    from ndr_training.sampling import bracket_ids, nested_arguments

    tokenizer = task_tokenizer("listops")
    openers, closer = bracket_ids(tokenizer.get_vocab())
    assert {tokenizer.convert_ids_to_tokens(i) for i in openers} == {"[MIN", "[MAX", "[MED", "[SM"}
    assert nested_arguments(tokenizer(text)["input_ids"], openers, closer) == nested


def test_a_nested_share_draws_only_lists_with_that_many_nested_arguments(tmp_path):
    """'[SM@2=0.5': half the draws are [SM lists with a list of two or more nested list arguments, which are 1% of
    the rows here; the other half the rest."""
    from modeling_ndr import task_tokenizer
    from modeling_ndr.training import UsageError
    from ndr_training.sampling import resolve_sample_shares

    tokenizer = task_tokenizer("listops")
    texts = ["[SM [MAX [MIN 1 2 ] 3 ] [MED [SM 4 5 ] 6 ] ]"] * 10 + ["[SM [MAX [MIN 1 2 ] 3 ] [MED 4 5 ] ]"] * 990
    dataset = Dataset.from_dict({"depth": [3] * 1000, "input_ids": [tokenizer(t)["input_ids"] for t in texts]})
    trainer = tiny_trainer(tmp_path, dataset)
    trainer.sample_shares = resolve_sample_shares(["[SM@2=0.5"], tokenizer, dataset)
    drawn = np.array(list(trainer._get_train_sampler(dataset)))
    assert abs(np.mean(drawn < 10) - 0.5) < 0.05, "the nested lists: half the draws"
    with pytest.raises(UsageError, match=re.escape("with 3 nested arguments")):
        resolve_sample_shares(["[SM@3=0.5"], tokenizer, dataset)


def test_the_sampler_and_the_shares_read_depths_from_arrow_not_row_by_row(monkeypatch):
    """`dataset["depth"]` is a lazy column that numpy reads row by row (11 s for ListOps' 1M rows, at each of the
    line's six uses); the shares and the sampler read the Arrow buffers, of a shuffled selection as of a whole set."""
    from transformers import TrainingArguments

    from modeling_ndr import task_tokenizer
    from ndr_training.sampling import balanced_sampler, depth_values, first_tokens_and_lengths, resolve_sample_shares

    tokenizer = task_tokenizer("listops")
    rows = [tokenizer(text)["input_ids"] for text in ("[SM 1 2 ]", "[MIN 3 [SM 1 2 ] ]", "[MAX 4 5 ]")] * 20
    whole = Dataset.from_dict({"depth": [1, 2, 1] * 20, "input_ids": rows})
    train = whole.shuffle(seed=1).select(range(5, 50))
    assert depth_values(train).tolist() == [row["depth"] for row in train]
    assert depth_values(whole.remove_columns("depth")) is None
    from datasets.arrow_dataset import Column

    def row_by_row(self, *args):
        raise AssertionError("a column was read row by row")

    monkeypatch.setattr(Column, "__iter__", row_by_row)
    monkeypatch.setattr(Column, "__getitem__", row_by_row)
    shares = resolve_sample_shares(["[SM:1=0.5", "[MIN:2=0.2"], tokenizer, train)
    sampler = balanced_sampler(train, TrainingArguments(output_dir="unused", report_to="none", seed=3), True,
                               False, shares)  # fmt: skip
    drawn = first_tokens_and_lengths(train)[0][list(sampler)[:400]]
    sm = tokenizer.convert_tokens_to_ids("[SM")
    assert abs((drawn == sm).mean() - 0.5) < 0.1, "[SM at depth 1 gets its half of the draws"


def test_first_tokens_and_lengths_read_from_arrow_equal_the_rows_read_one_by_one():
    import datasets
    from ndr_training.sampling import first_tokens_and_lengths

    generator = np.random.default_rng(0)
    rows = [[2, *generator.integers(4, 20, size=generator.integers(0, 9)).tolist(), 3] for _ in range(300)]
    rows[7], rows[8] = [2], []  # fewer than two tokens: no first token
    dataset = datasets.Dataset.from_dict({"input_ids": rows, "depth": [i % 3 for i in range(300)]})
    for view in (
        dataset,
        dataset.select(range(100, 250)),
        dataset.shuffle(seed=1),
        dataset.filter(lambda r: r["depth"]),
    ):
        first, lengths = first_tokens_and_lengths(view)
        ids = view["input_ids"]
        assert first.tolist() == [row[1] if len(row) > 1 else -1 for row in ids], "the fast path reads the plain rows"
        assert lengths.tolist() == [len(row) for row in ids], "lengths as the rows give them"
