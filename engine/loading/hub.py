"""Where official weights come from: a local folder, the Hugging Face cache, or a download.

With `weights_dir`, files are read from that folder under their names on the Hub (a repository
that is a whole folder, such as a text encoder, sits in a subfolder named after the repository) and
nothing is downloaded. Without it, huggingface_hub downloads into its cache, or reads the cache.
Offline (HF_HUB_OFFLINE=1) a file that is not cached fails at once; every failure is a WeightsError
that names what to download and where to put it.
"""
from __future__ import annotations

import logging
from pathlib import Path

from engine.model.weights import WeightsError

log = logging.getLogger("engine.loading.hub")

WEIGHTS_DIR_VARIABLE = "LANTERN_WEIGHTS_DIR"  # a folder of official files, named as on the Hub


def hub_url(repo_id: str, filename: str) -> str:
    return f"https://huggingface.co/{repo_id}/resolve/main/{filename}"


def folder_name(repo_id: str) -> str:
    """The subfolder of a weights folder that holds a whole-repository download."""
    return repo_id.split("/")[-1]


def folder_hint(repo_id: str, patterns: list[str], where: str | Path) -> str:
    """What to do about a missing or broken whole-repository folder."""
    return f"download the files of https://huggingface.co/{repo_id} matching {', '.join(patterns)} into {where}"


def _where(weights_dir: Path | None, sub: str = "") -> str:
    if weights_dir is not None:
        return str(Path(weights_dir) / sub)
    return (f"a folder DIR{'/' + sub if sub else ''}, then set {WEIGHTS_DIR_VARIABLE}=DIR or pass --weights-dir DIR "
            "(or go online)")


def resolve_file(repo_id: str, filename: str, weights_dir: Path | None) -> Path:
    """The local path of `filename` from Hub repository `repo_id`."""
    if weights_dir is not None:
        path = Path(weights_dir) / filename
        if not path.is_file():
            raise WeightsError(f"{filename} not found in {weights_dir}; download {hub_url(repo_id, filename)} "
                               f"and put it at {path}")
        return path
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return Path(hf_hub_download(repo_id, filename))
    except (HfHubHTTPError, OSError, ValueError) as err:
        raise WeightsError(f"could not get {filename} from the Hugging Face Hub ({type(err).__name__}); "
                           f"download {hub_url(repo_id, filename)} into {_where(weights_dir)}") from err


def resolve_folder(repo_id: str, patterns: list[str], required: list[str], weights_dir: Path | None) -> Path:
    """The local folder of a whole repository (only files matching `patterns` are downloaded).

    `required` names files that must be present, so that a half-copied folder fails here with a clear
    message instead of deep inside a loader.
    """
    sub = folder_name(repo_id)
    if weights_dir is not None:
        folder = Path(weights_dir) / sub
    else:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError

        try:
            folder = Path(snapshot_download(repo_id, allow_patterns=patterns))
        except (HfHubHTTPError, OSError, ValueError) as err:
            raise WeightsError(f"could not get {repo_id} from the Hugging Face Hub ({type(err).__name__}); "
                               + folder_hint(repo_id, patterns, _where(weights_dir, sub))) from err
    absent = [name for name in required if not (folder / name).is_file()]
    if absent:
        raise WeightsError(f"{folder} lacks {', '.join(absent)}; " + folder_hint(repo_id, patterns, folder))
    log.info("using %s from %s", repo_id, folder)
    return folder
