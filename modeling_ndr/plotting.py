"""Pictures of what an NDR does: the copy gate and the attention of every step on one input, and CTL++'s look at the
representations functions hand on (needs matplotlib)."""

import torch


@torch.no_grad()
def plot_routing(
    model, tokenizer, text: str, num_steps: int | None = None, head: int | None = None, path=None, adaptive=None
):
    """Draw the paper's maps for one input: the copy gate of every column at every step (top; mean over channels,
    1 = the column takes its update) and the attention matrix of each step (below; mean over heads unless `head`).

    Args:
        model: an `NDRModel`, `NDRForSequenceClassification` (the title shows its label) or
            `NDRForTokenClassification` (the title shows the label of every token between `[BOS]` and `[EOS]`).
        tokenizer: its tokenizer; `text` is encoded with it (one sequence, no padding).
        num_steps (`int`, *optional*): steps to draw (default: the model's evaluation step count, or with adaptive
            steps the step where the sample stopped, if that is later).
        head (`int`, *optional*): show this attention head instead of the mean over heads.
        path (*optional*): save the figure there (any format matplotlib knows, e.g. `routing.png`).
        adaptive (`bool`, *optional*): mark where the sample stops with adaptive steps (a red line on the gate map
            and in the title); defaults to `model.config.adaptive_steps`.

    Returns:
        `matplotlib.figure.Figure`.
    """
    import matplotlib.pyplot as plt

    was_training = model.training
    model.eval()
    encoding = tokenizer([text], return_tensors="pt").to(model.device)
    adaptive = model.config.adaptive_steps if adaptive is None else adaptive
    stopped = None
    if adaptive:
        stopped = int(model(**encoding, adaptive_steps=True).num_steps_taken[0])
        if num_steps is None:
            num_steps = max(stopped, model.config.eval_num_hidden_layers or model.config.num_hidden_layers)
    outputs = model(**encoding, num_steps=num_steps, adaptive_steps=False, output_attentions=True, output_gates=True)
    model.train(was_training)
    tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"][0])
    attentions = torch.stack(outputs.attentions)[:, 0]  # (steps, heads, seq, seq)
    attentions = attentions.mean(1) if head is None else attentions[:, head]
    steps = attentions.shape[0]

    columns = min(steps, 6)
    rows = 1 + -(-steps // columns)
    figure = plt.figure(figsize=(2.6 * columns, 2.6 * rows), constrained_layout=True)
    grid = figure.add_gridspec(rows, columns)
    if outputs.gates:  # empty for variants without a copy gate
        gate_axis = figure.add_subplot(grid[0, :])
        gates = torch.stack(outputs.gates)[:, 0].mean(-1).float().cpu()  # (steps, seq)
        image = gate_axis.imshow(gates.T.numpy(), aspect="auto", vmin=0, vmax=1, cmap="viridis")
        gate_axis.set_yticks(range(len(tokens)), tokens)
        gate_axis.set_xticks(range(steps), [str(s + 1) for s in range(steps)])
        gate_axis.set_xlabel("step")
        gate_axis.set_title("copy gate (1 = update, 0 = copy)")
        if stopped is not None:
            gate_axis.axvline(stopped - 0.5, color="red", linewidth=2)
        figure.colorbar(image, ax=gate_axis)
    for step in range(steps):
        axis = figure.add_subplot(grid[1 + step // columns, step % columns])
        axis.imshow(attentions[step].float().cpu().numpy(), vmin=0, vmax=1, cmap="Blues")
        axis.set_title(f"step {step + 1}", fontsize=9)
        axis.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
        axis.set_yticks(range(len(tokens)), tokens, fontsize=7)
    stop = "" if stopped is None else f"  (adaptive: stops after step {stopped})"
    figure.suptitle(f"{text}  →  {_prediction(model, outputs)}{stop}")
    if path is not None:
        figure.savefig(path, dpi=110)
    return figure


def _prediction(model, outputs) -> str:
    logits = getattr(outputs, "logits", None)
    if logits is None:
        return "(encoder)"
    labels = logits[0].argmax(-1)
    if labels.dim() == 1:  # one label per token (NDRForTokenClassification): those between [BOS] and [EOS]
        return " ".join(str(model.config.id2label.get(label, label)) for label in labels[1:-1].tolist())
    return str(model.config.id2label.get(labels.item(), labels.item()))


@torch.no_grad()
def _classifier_inputs(model, tokenizer, texts: list[str], batch_size: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """The states a sequence classifier reads (its head's input) and its predicted label ids, for each text."""
    states, predictions = [], []
    handle = model.classifier.register_forward_pre_hook(lambda module, inputs: states.append(inputs[0].float()))
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(texts), batch_size):
            encoding = tokenizer(texts[start : start + batch_size], return_tensors="pt", padding=True).to(model.device)
            predictions.append(model(**encoding).logits.argmax(-1))
    finally:
        handle.remove()
        model.train(was_training)
    return torch.cat(states).cpu(), torch.cat(predictions).cpu()


def ctlpp_group_accuracy(model, tokenizer, world, direction: str = "backward") -> dict[tuple[str, str], float]:
    """Accuracy on every composition of two functions, `f2(f1(x))` for all symbols and functions, by the groups of
    `f1` and `f2`: `{(group of f1, group of f2): accuracy}`. Which orders of groups a CTL++ model composes."""
    from .tasks.ctlpp import CTLPP_SYMBOLS, ctlpp_text

    samples = [(x, f1, f2) for x in range(len(CTLPP_SYMBOLS)) for f1 in range(32) for f2 in range(32)]
    texts = [ctlpp_text(x, (f1, f2), direction) for x, f1, f2 in samples]
    _, predicted = _classifier_inputs(model, tokenizer, texts)
    right: dict[tuple[str, str], list[bool]] = {}
    for (x, f1, f2), label in zip(samples, predicted.tolist()):
        answer = model.config.id2label[label] == CTLPP_SYMBOLS[world.apply(x, (f1, f2))]
        right.setdefault((world.group_of(f1), world.group_of(f2)), []).append(answer)
    return {key: sum(values) / len(values) for key, values in right.items()}


def plot_representation_similarity(model, tokenizer, world, direction: str = "backward", path=None):
    """CTL++'s look at the representations functions hand on (Csordás, Irie & Schmidhuber 2022): for each symbol `s`,
    the states the classifier reads for the 32 single applications `f(x) = s` (one per function: each is a
    permutation), compared by cosine similarity, the functions ordered by group; beside them, the accuracy on every
    two-function composition by the groups of the first and the second function (`ctlpp_group_accuracy`).

    A model that composes across groups gives a symbol one representation whichever group produced it (one bright
    block); one that fails keeps a cluster per group, and the functions of the other group cannot read it.

    Args:
        model: an `NDRForSequenceClassification` trained on CTL++.
        tokenizer: its tokenizer.
        world: the task it was trained on, `modeling_ndr.tasks.ctlpp_world(seed, variant, ...)` (its functions and
            groups).
        direction (*optional*): how its texts are written (`"backward"`, CTL++'s, or `"forward"`).
        path (*optional*): save the figure there.

    Returns:
        `(figure, summary)`: `summary` holds `within_group` and `between_groups`, the mean cosine similarity of two
        functions' states for the same symbol (over symbols; the groups without the overlap group), `groups`, the
        same for each pair of groups (`"a1~b1"`; `"a1~a1"`: within one; None for a group of one function with
        itself), and `accuracy`, the group accuracies.
    """
    import matplotlib.pyplot as plt

    from .tasks.ctlpp import CTLPP_FUNCTIONS, CTLPP_SYMBOLS, ctlpp_text

    order = [f for members in world.groups.values() for f in members]
    inverse = [{value: x for x, value in enumerate(table)} for table in world.tables]
    texts = [ctlpp_text(inverse[f][s], (f,), direction) for s in range(len(CTLPP_SYMBOLS)) for f in order]
    states, _ = _classifier_inputs(model, tokenizer, texts)
    states = torch.nn.functional.normalize(states, dim=-1).view(len(CTLPP_SYMBOLS), len(order), -1)
    similarity = states @ states.transpose(1, 2)  # (symbols, functions, functions)
    groups = [world.group_of(f) for f in order]
    names = [g for g, members in world.groups.items() if members]  # the groups that have functions
    main = [g for g in names if g != "o"]
    same = torch.tensor([[a == b and a in main for b in groups] for a in groups]) & ~torch.eye(len(order), dtype=bool)
    apart = torch.tensor([[a != b and a in main and b in main for b in groups] for a in groups])
    accuracy = ctlpp_group_accuracy(model, tokenizer, world, direction)
    summary = {"within_group": similarity[:, same].mean().item(), "between_groups": similarity[:, apart].mean().item(),
               "accuracy": {f"{a}->{b}": value for (a, b), value in sorted(accuracy.items())}}  # fmt: skip
    # each pair of groups on its own (the 2-stage variant's question is a1 against b1: what stage 2 reads)
    summary["groups"], off_diagonal = {}, ~torch.eye(len(order), dtype=torch.bool)
    for i, a in enumerate(names):
        for b in names[i:]:
            pair = torch.tensor([[x == a and y == b for y in groups] for x in groups]) & off_diagonal
            summary["groups"][f"{a}~{b}"] = similarity[:, pair].mean().item() if pair.any() else None  # (1 function)

    figure = plt.figure(figsize=(15, 6.4), layout="constrained")
    grid = figure.add_gridspec(2, 5)
    bounds = [i - 0.5 for i in range(1, len(groups)) if groups[i] != groups[i - 1]]
    for s in range(len(CTLPP_SYMBOLS)):
        axis = figure.add_subplot(grid[s // 4, s % 4])
        image = axis.imshow(similarity[s].numpy(), vmin=0, vmax=1, cmap="magma")
        for bound in bounds:
            axis.axhline(bound, color="black", linewidth=0.8)
            axis.axvline(bound, color="black", linewidth=0.8)
        axis.set_xticks(range(len(order)), [CTLPP_FUNCTIONS[f] for f in order], fontsize=5)
        axis.set_yticks(range(len(order)), [CTLPP_FUNCTIONS[f] for f in order], fontsize=5)
        axis.set_title(f"f(x) = {CTLPP_SYMBOLS[s]}", fontsize=9)
    figure.colorbar(image, ax=figure.axes, shrink=0.6, label="cosine similarity")
    axis = figure.add_subplot(grid[:, 4])
    table = [[accuracy.get((a, b), float("nan")) for b in names] for a in names]
    axis.imshow(table, vmin=0, vmax=1, cmap="viridis")
    for i, row in enumerate(table):
        for j, value in enumerate(row):
            axis.text(
                j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color="white" if value < 0.6 else "black"
            )
    axis.set_xticks(range(len(names)), names)
    axis.set_yticks(range(len(names)), names)
    axis.set_xlabel("group of the second function")
    axis.set_ylabel("group of the first function")
    axis.set_title("accuracy, two functions", fontsize=9)
    figure.suptitle(f"{world.variant}: the states read for f(x) = s, functions by group (lines); within a group "
                    f"{summary['within_group']:.2f}, between groups {summary['between_groups']:.2f}")  # fmt: skip
    if path is not None:
        figure.savefig(path, dpi=110)
        plt.close(figure)
    return figure, summary
