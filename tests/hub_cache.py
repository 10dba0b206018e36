"""Put saved model folders and dataset repositories into the offline HF caches, so hub ids resolve without the Hub.

- `install_in_hub_cache`: the hub cache (`$HF_HOME/hub`), where `from_pretrained("org/name")` and
  `snapshot_download` look.
- `cache_as_if_loaded_online`: the `datasets` cache (`$HF_HOME/datasets`), the only place where
  `datasets.load_dataset("org/name", config)` looks for a hub id when offline (datasets 5.2 never reads the hub
  cache for it).
"""

import hashlib
import os
import shutil
import tempfile


def install_in_hub_cache(
    folder: str, repo_id: str, hf_home: str, repo_type: str = "model", exclude: tuple[str, ...] = ()
) -> str:
    """Copy `folder` to `$HF_HOME/hub/<repo_type>s--org--name/snapshots/<commit>/` and point `refs/main` at it.

    `exclude` lists paths relative to `folder` to leave out (files the Hub repo has but a checkout lacks)."""
    repo_dir = os.path.join(hf_home, "hub", f"{repo_type}s--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()  # any 40-hex id will do
    snapshot = os.path.join(repo_dir, "snapshots", commit)
    excluded = {os.path.normpath(os.path.join(folder, path)) for path in exclude}
    shutil.copytree(
        folder,
        snapshot,
        dirs_exist_ok=True,
        ignore=lambda directory, names: [name for name in names if os.path.join(directory, name) in excluded],
    )
    os.makedirs(os.path.join(repo_dir, "refs"), exist_ok=True)
    with open(os.path.join(repo_dir, "refs", "main"), "w") as f:
        f.write(commit)
    return snapshot


def cache_as_if_loaded_online(snapshot: str, repo_id: str, config: str) -> str:
    """Prepare, from a local copy of a dataset repo, the Arrow files that one online `load_dataset(repo_id, config)`
    leaves in the `datasets` cache: `<cache>/<org>___<name>/<config>/0.0.0/<commit>/`, files named after the repo.
    Offline, `load_dataset(repo_id, config)` reloads them. Returns that folder."""
    import datasets  # only the dataset tests need it

    namespace, name = repo_id.split("/")
    commit = os.path.basename(snapshot.rstrip("/"))
    output_dir = os.path.join(datasets.config.HF_DATASETS_CACHE, f"{namespace}___{name}", config, "0.0.0", commit)
    with tempfile.TemporaryDirectory() as staging:
        copy = os.path.join(staging, name)  # datasets names the Arrow files after the folder, as after the repo
        shutil.copytree(snapshot, copy)
        datasets.load_dataset_builder(copy, config).download_and_prepare(output_dir=output_dir)
    return output_dir
