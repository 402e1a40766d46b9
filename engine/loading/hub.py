"""Where official weights come from: a local folder, the Hugging Face cache, or a download.

With `weights_dir`, files are read from that folder under their names on the Hub (a repository
that is a whole folder, such as a text encoder, sits in a subfolder named after the repository) and
nothing is downloaded. Without it, huggingface_hub downloads into its cache, or reads the cache.
Offline (HF_HUB_OFFLINE=1), or when the Hub cannot be reached within a few seconds (a machine
without network, where the Hub client would retry each file for most of a minute), only the cache is
read and a file that is not cached fails at once; every failure is a WeightsError that names what to
download and where to put it.
"""
from __future__ import annotations

import logging
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from engine.model.weights import WeightsError

log = logging.getLogger("engine.loading.hub")

WEIGHTS_DIR_VARIABLE = "LANTERN_WEIGHTS_DIR"  # a folder of official files, named as on the Hub
PROBE_TIMEOUT_S = 3.0  # how long a connection to the Hub may take before it counts as unreachable
PROBE_REUSE_S = 60.0  # a probe's answer is reused this long, so that a page's retries stay fast
_last_probe: tuple[str, float, bool] | None = None  # (endpoint, when, reachable)


def hub_reachable() -> bool:
    """False when huggingface_hub is set offline or its endpoint does not accept a connection within
    PROBE_TIMEOUT_S; the answer is reused for PROBE_REUSE_S."""
    global _last_probe
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = constants.ENDPOINT
    if _last_probe is not None and _last_probe[0] == endpoint and time.monotonic() - _last_probe[1] < PROBE_REUSE_S:
        return _last_probe[2]
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=PROBE_TIMEOUT_S):
            reachable = True
    except OSError:
        reachable = False
        log.info("the Hugging Face Hub (%s) is unreachable: reading its cache only", endpoint)
    _last_probe = (endpoint, time.monotonic(), reachable)
    return reachable


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


def _why(err: Exception) -> str:
    if _last_probe is not None and not _last_probe[2]:
        return "it is unreachable and the file is not in the cache"
    from huggingface_hub import constants

    return "offline, and the file is not in the cache" if constants.HF_HUB_OFFLINE else type(err).__name__


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
        return Path(hf_hub_download(repo_id, filename, local_files_only=not hub_reachable()))
    except (HfHubHTTPError, OSError, ValueError) as err:
        raise WeightsError(f"could not get {filename} from the Hugging Face Hub ({_why(err)}); "
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
            folder = Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=not hub_reachable()))
        except (HfHubHTTPError, OSError, ValueError) as err:
            raise WeightsError(f"could not get {repo_id} from the Hugging Face Hub ({_why(err)}); "
                               + folder_hint(repo_id, patterns, _where(weights_dir, sub))) from err
    absent = [name for name in required if not (folder / name).is_file()]
    if absent:
        raise WeightsError(f"{folder} lacks {', '.join(absent)}; " + folder_hint(repo_id, patterns, folder))
    log.info("using %s from %s", repo_id, folder)
    return folder
