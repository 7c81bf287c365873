"""Where a local cluster keeps its state: one per-user directory, laid out by :class:`LocalPaths`.

::

    <state>/                     $DET_LOCAL_STATE_DIR, else $XDG_DATA_HOME/det/local,
                                 else ~/.local/share/det/local
      master.yaml                the master's config (written by ``up``)
      admin_password             the admin password, mode 0600
      cluster.json               what ``up`` started: URL, port, agent ids
      master.pid  master.log
      master/                    the master's data_dir (embedded PostgreSQL, its db_password,
                                 agent_token)
      agents/local-agent-<i>.{pid,log,yaml}
      agents/local-agent-<i>/    the agent's own state_dir
      checkpoints/               shared_fs checkpoint storage
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STATE_DIR_ENV = "DET_LOCAL_STATE_DIR"


def default_state_dir() -> Path:
    """The per-user state directory (``$DET_LOCAL_STATE_DIR`` wins, for tests and demos)."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser().resolve() / "det" / "local"


def agent_id(index: int) -> str:
    return f"local-agent-{index}"


@dataclass(frozen=True)
class LocalPaths:
    root: Path

    @classmethod
    def at(cls, state_dir: Path | None) -> LocalPaths:
        return cls(Path(state_dir).expanduser().resolve() if state_dir else default_state_dir())

    @property
    def master_yaml(self) -> Path:
        return self.root / "master.yaml"

    @property
    def password_file(self) -> Path:
        return self.root / "admin_password"

    @property
    def cluster_json(self) -> Path:
        return self.root / "cluster.json"

    @property
    def master_pid(self) -> Path:
        return self.root / "master.pid"

    @property
    def master_log(self) -> Path:
        return self.root / "master.log"

    @property
    def data_dir(self) -> Path:
        return self.root / "master"

    @property
    def agent_token(self) -> Path:
        return self.data_dir / "agent_token"

    @property
    def postmaster_pid(self) -> Path:
        """Written by the embedded PostgreSQL (``det.master.db.start_embedded``)."""
        return self.data_dir / "postgres" / "postmaster.pid"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def agents_dir(self) -> Path:
        return self.root / "agents"

    def agent_pid(self, aid: str) -> Path:
        return self.agents_dir / f"{aid}.pid"

    def agent_log(self, aid: str) -> Path:
        return self.agents_dir / f"{aid}.log"

    def agent_state(self, aid: str) -> Path:
        return self.agents_dir / aid

    def agent_ids_on_disk(self) -> list[str]:
        """Agents that have a pid file, in index order."""
        if not self.agents_dir.is_dir():
            return []
        ids = [p.stem for p in self.agents_dir.glob("local-agent-*.pid")]
        return sorted(ids, key=lambda s: int(s.rsplit("-", 1)[1]) if s[-1].isdigit() else 0)


def write_private(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` readable by the owner only (0600 from creation on)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
