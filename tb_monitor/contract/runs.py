"""Run names: one run directory per process role and rank.

A run id, role or host name becomes part of a path as it is, letters of any script included
(``训练-1``), with only what a file name cannot safely hold percent-encoded, reversibly
(``encode_part`` / ``decode_part``): ``/``, ``\\``, ``%``, control characters, lone surrogates
(undecodable bytes of the environment) and a leading ``.`` (so ``..`` or ``.`` never name a
parent or the logdir itself). Distinct ids are distinct directories, none outside the logdir.
"""

from __future__ import annotations

import os
import re
import socket
import unicodedata
import urllib.parse
from collections.abc import Mapping

__all__ = ["agent_run_name", "decode_part", "encode_part", "rank_of", "run_name_from_env"]

_ESCAPED = frozenset("/\\%")
#: The empty text's component: a bare "%" is nothing else's encoding (a "%" is "%25").
_EMPTY = "%"


def _escape(char: str) -> str:
    data = char.encode("utf-8", "surrogatepass")
    return "".join(f"%{byte:02X}" for byte in data)


def encode_part(part: object) -> str:
    """``part`` as one path component: the text itself, with what a file name cannot safely
    hold percent-encoded (see the module docstring); ``decode_part`` gives the text back."""
    text = str(part)
    encoded = "".join(
        _escape(char) if char in _ESCAPED or unicodedata.category(char) in ("Cc", "Cs") else char
        for char in text
    )
    if encoded.startswith("."):
        return _escape(".") + encoded[1:]
    return encoded or _EMPTY


def decode_part(part: str) -> str:
    """The text ``encode_part`` encoded into ``part`` (a run directory's name, for display)."""
    return "" if part == _EMPTY else urllib.parse.unquote(part, errors="surrogatepass")


def run_name_from_env(environ: Mapping[str, str] | None = None) -> str:
    """Run (relative directory) for this process, from torchelastic's worker environment.

    A torchelastic worker writes to ``<run id>/rank-<RANK>`` (``<run id>/<role>-rank-<RANK>`` for
    a role other than ``default``); any other process writes to the logdir itself (``""``).
    A restarted worker keeps its run: the writer continues each tag's steps from what the run
    already holds (see ``docs/DESIGN.md``), so attempts follow each other on one curve.
    """
    env = os.environ if environ is None else environ
    run_id, rank = env.get("TORCHELASTIC_RUN_ID"), env.get("RANK")
    if not run_id or rank is None:
        return ""
    role = env.get("ROLE_NAME", "default")
    worker = (
        f"rank-{encode_part(rank)}"
        if role == "default"
        else f"{encode_part(role)}-rank-{encode_part(rank)}"
    )
    return f"{encode_part(run_id)}/{worker}"


def agent_run_name(run_id: str, hostname: str | None = None, pid: int | None = None) -> str:
    """Run of a torchelastic agent: ``<run id>/agent-<host>-<pid>``.

    The agent is named by host and pid, not group rank: its group rank is only known after the
    first rendezvous and may change at every restart, while the process lives for the whole job.
    """
    host = hostname or socket.gethostname()
    return f"{encode_part(run_id)}/agent-{encode_part(host)}-{os.getpid() if pid is None else pid}"


_RANK_RUN = re.compile(r"(?:^|/)(?:[^/]*-)?rank-(\d+)$")  # any role: see encode_part


def rank_of(run: str) -> int | None:
    """The rank a worker's run holds (``job/rank-3``, ``job/trainer-rank-3``), or None."""
    match = _RANK_RUN.search(run)
    return int(match.group(1)) if match else None
