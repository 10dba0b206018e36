"""Put a saved model folder into the offline HF hub cache layout, so `from_pretrained("org/name")` finds it."""

import hashlib
import os
import shutil


def install_in_hub_cache(folder: str, repo_id: str, hf_home: str) -> str:
    """Copy `folder` to `$HF_HOME/hub/models--org--name/snapshots/<commit>/` and point `refs/main` at it."""
    repo_dir = os.path.join(hf_home, "hub", "models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()  # any 40-hex id will do
    snapshot = os.path.join(repo_dir, "snapshots", commit)
    shutil.copytree(folder, snapshot, dirs_exist_ok=True)
    os.makedirs(os.path.join(repo_dir, "refs"), exist_ok=True)
    with open(os.path.join(repo_dir, "refs", "main"), "w") as f:
        f.write(commit)
    return snapshot
