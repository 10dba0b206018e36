"""What a model card says of how far a result goes beyond the run itself: the splits a CTL++ model falls short on
(`shortfalls`), and what other training seeds of a release's recipe gave (`other_seeds`, recorded in its
`run_config.json` by `hub_cards/make_model_repos.py --other_seeds`)."""


def shortfalls(eval_results: dict, margin: float = 0.05) -> dict:
    """`iid_test`'s accuracy (the training orders) and the splits whose accuracy is more than `margin` below it."""
    iid = (eval_results.get("iid_test") or {}).get("accuracy", 0.0)
    return {"iid": iid, "splits": [(split, values["accuracy"]) for split, values in eval_results.items()
                                   if split != "iid_test" and values["accuracy"] < iid - margin]}  # fmt: skip


def other_seeds(run_config: dict, eval_results: dict, split: str = "ood_test", margin: float = 0.05) -> dict | None:
    """What other training seeds of a release's recipe gave on `split` (`run_config["other_seeds"]`, recorded by
    `hub_cards/make_model_repos.py --other_seeds`), for its card: the runs, the range over them and this model, and
    how many of them came within `margin` of this model. None where nothing is recorded."""
    runs = [run for run in run_config.get("other_seeds") or () if split in run["accuracy"]]
    if not runs or split not in eval_results:
        return None
    ours = eval_results[split]["accuracy"]
    scores = [run["accuracy"][split] for run in runs]
    return {
        "split": split,
        "runs": runs,
        "low": min(scores + [ours]),
        "high": max(scores + [ours]),
        "close": sum(score >= ours - margin for score in scores),
        "margin": margin,
    }
