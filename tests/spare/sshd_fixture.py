"""A throwaway OpenSSH server on 127.0.0.1 for end-to-end tests: own host key, user key, config and pid file."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rft.cpu.local_ray import free_port
from tests.support.processes import start_group, stop_group

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


def find_sshd() -> str | None:
    """Path of the sshd binary, or None."""
    found = shutil.which("sshd")
    return found or next((p for p in SSHD_CANDIDATES if os.access(p, os.X_OK)), None)


def missing_binaries() -> list[str]:
    """Binaries the ssh end-to-end tests need that are absent here."""
    need = {
        "sshd": find_sshd(),
        **{b: shutil.which(b) for b in ("ssh", "ssh-keygen", "tmux", "rsync", "git")},
    }
    return [name for name, path in need.items() if path is None]


@dataclass
class SshServer:
    """A running sshd and what a client needs to log in to it."""

    proc: subprocess.Popen
    port: int
    user: str
    key: Path
    log: Path

    @property
    def client_options(self) -> list[str]:
        """ssh options for a throwaway host key (no known_hosts, no prompts, no banner noise).

        `-F /dev/null` ignores ~/.ssh/config and /etc/ssh/ssh_config, so no Host alias, ProxyJump or GSSAPI
        setting there can send a test anywhere but 127.0.0.1.
        """
        return [
            "-F",
            "/dev/null",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
        ]

    @property
    def destination(self) -> str:
        """user@127.0.0.1."""
        return f"{self.user}@127.0.0.1"

    def stop(self) -> None:
        """Terminate sshd (and wait for it)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        stop_group(self.proc)  # the per-connection sshd children with it


def start_sshd(workdir: Path, timeout: float = 15.0) -> SshServer:
    """Generate keys and a config in `workdir`, start `sshd -D -e -f cfg` on a free port, wait until it answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    host_key, user_key = workdir / "host_ed25519", workdir / "user_ed25519"
    for key in (host_key, user_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (workdir / "authorized_keys").write_text(Path(f"{user_key}.pub").read_text())
    os.chmod(workdir / "authorized_keys", 0o600)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # privilege separation dir
    user = getpass.getuser()
    port = free_port()
    cfg = workdir / "sshd_config"
    cfg.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {workdir / 'sshd.pid'}",
                f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                "StrictModes no",
                "UsePAM no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                f"AllowUsers {user}",
                "PrintMotd no",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    log = workdir / "sshd.log"
    sshd = find_sshd()
    assert sshd is not None
    with open(log, "wb") as out:
        proc = start_group([sshd, "-D", "-e", "-f", str(cfg)], stdout=out, stderr=subprocess.STDOUT)
    server = SshServer(proc, port, user, user_key, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"sshd did not answer on port {port} within {timeout}s: {log.read_text()[-2000:]}")
