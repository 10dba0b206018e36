"""`train.py --push_to_hub`: the hub-ready export folder with ndr's model card goes to the Hub once, at the end, to the
repository the user named (`--hub_model_id`, else the one Trainer resolves from the output folder's name), with the
user's token and privacy choice; checkpoints go there only with `--hub_strategy checkpoint` (into `last-checkpoint/`)
and Trainer never pushes `output_dir` or its own card. The hub client's calls are recorded: nothing reaches a network.
"""

import json
import os
import random
from concurrent.futures import Future
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import HfApi, RepoUrl
from scripts import load_script


TINY_RUN = [
    "--hidden_size", "16", "--intermediate_size", "16", "--num_hidden_layers", "2", "--max_steps", "5",
    "--save_steps", "2", "--per_device_train_batch_size", "16", "--use_cpu", "true", "--disable_tqdm", "true",
    "--report_to", "none", "--seed", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def train():
    return load_script("training/train.py", "ndr_train_hub_push")


@pytest.fixture(scope="module")
def data_flags(tmp_path_factory) -> list[str]:
    """A toy task as jsonl (the majority bit of 1-5 bits), 64 training and 16 evaluation rows."""
    folder = tmp_path_factory.mktemp("majority")
    rng = random.Random(0)
    for split, n in (("train", 64), ("ood_test", 16)):
        rows = [[rng.choice("01") for _ in range(rng.choice([1, 3, 5]))] for _ in range(n)]
        lines = [json.dumps({"text": " ".join(bits), "label": max("01", key=bits.count)}) for bits in rows]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return ["--train_file", str(folder / "train.jsonl"), "--eval_files", f"ood_test={folder / 'ood_test.jsonl'}"]


@pytest.fixture
def hub_calls(monkeypatch) -> list[dict]:
    """Every call of the hub client that would write to the Hub, recorded in order; `create_repo` answers as the Hub
    does (a name without a namespace lands in the token's, here `user`), uploads do nothing."""
    calls = []

    def create_repo(self, repo_id, *, token=None, private=None, exist_ok=False, **kwargs):
        calls.append({"call": "create_repo", "repo_id": repo_id, "token": token, "private": private})
        return RepoUrl(f"https://huggingface.co/{repo_id if '/' in repo_id else 'user/' + repo_id}")

    def upload_folder(self, *, repo_id, folder_path, path_in_repo=None, token=None, run_as_future=False, **kwargs):
        folder = Path(folder_path)
        files = sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())
        readme = folder / "README.md"
        calls.append({
            "call": "upload_folder", "repo_id": repo_id, "folder": os.path.abspath(folder_path), "files": files,
            "path_in_repo": path_in_repo, "token": token, "card": readme.read_text() if readme.is_file() else None,
        })  # fmt: skip
        if not run_as_future:
            return None
        done = Future()
        done.set_result(None)
        return done

    def unexpected(name):
        def call(*args, **kwargs):
            calls.append({"call": name})

        return call

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    for name in ("upload_file", "create_commit", "delete_file", "delete_folder"):
        monkeypatch.setattr(HfApi, name, unexpected(f"HfApi.{name}"))
    for name in ("create_repo", "upload_folder", "upload_file", "create_commit"):  # the module's bound functions
        monkeypatch.setattr(huggingface_hub, name, unexpected(f"huggingface_hub.{name}"))
    return calls


def test_push_to_hub_uploads_the_export_folder_once_with_ndr_s_card_and_the_user_s_token(
    train, data_flags, hub_calls, tmp_path
):
    output_dir = tmp_path / "run"
    train.main(
        data_flags
        + TINY_RUN
        + [
            "--output_dir",
            str(output_dir),
            "--push_to_hub",
            "true",
            "--hub_model_id",
            "me/x",
            "--hub_token",
            "hf_secret",
            "--hub_private_repo",
            "true",
        ]  # fmt: skip
    )
    assert [call["call"] for call in hub_calls] == ["create_repo", "upload_folder"], (
        f"one repository and one upload, nothing at the saves of steps 2 and 4: {hub_calls}"
    )
    created, upload = hub_calls
    assert (created["repo_id"], created["token"], created["private"]) == ("me/x", "hf_secret", True)
    export = output_dir / "export"
    assert upload["folder"] == str(export) and upload["path_in_repo"] is None, "the export folder, at the top"
    assert (upload["repo_id"], upload["token"]) == ("me/x", "hf_secret"), "to the id given, with the token given"
    assert upload["files"] == sorted(p.name for p in export.iterdir()), "exactly the export's files"
    assert "Neural Data Router" in upload["card"] and 'from_pretrained("me/x"' in upload["card"], (
        "ndr's card, whose snippets load the repository it is pushed to"
    )


def test_without_an_id_the_repository_is_trainer_s_and_checkpoints_go_up_only_when_asked(
    train, data_flags, hub_calls, tmp_path
):
    output_dir = tmp_path / "majority-run"
    argv = data_flags + TINY_RUN + ["--output_dir", str(output_dir), "--push_to_hub", "true"]
    train.main(argv + ["--hub_strategy", "checkpoint"])
    created, *uploads = hub_calls
    assert created["repo_id"] == "majority-run", "Trainer names the repository after the output folder"
    assert all(call["call"] == "upload_folder" for call in uploads), hub_calls
    *checkpoints, export = uploads
    assert [call["path_in_repo"] for call in checkpoints] == ["last-checkpoint"] * 3, "steps 2, 4 and 5, as asked"
    assert all(Path(call["folder"]).name.startswith("checkpoint-") for call in checkpoints), "each checkpoint alone"
    assert export["folder"] == str(output_dir / "export") and export["repo_id"] == "user/majority-run", (
        "the export goes to the repository Trainer resolved (the token's namespace)"
    )
    assert 'from_pretrained("user/majority-run"' in export["card"]
    assert str(output_dir) not in [call["folder"] for call in uploads], "output_dir itself is never uploaded"
