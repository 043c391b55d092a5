"""The ssh launcher without ssh: hostfiles, where each role runs, the remote command line,
and the job secret kept off it. (A real job through this machine's sshd is in
tests/realrun/emulated/test_cluster.py.)"""

from __future__ import annotations

from pathlib import Path

from realrun.launching.ssh_launcher import SshLauncher, read_hostfile, remote_command, stdin_payload


def test_hostfiles_and_the_remote_command(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# lab\n10.0.0.1\n\n10.0.0.2  # second\n")
    assert read_hostfile(hostfile) == ["10.0.0.1", "10.0.0.2"]
    launcher = SshLauncher(read_hostfile(hostfile), ["Port=2222"])
    # MXNet's launch.py cycles servers and workers over the hosts; the scheduler is first.
    assert [launcher.host_of("server", r) for r in range(3)] == ["10.0.0.1", "10.0.0.2"] * 1 + [
        "10.0.0.1"
    ]
    assert launcher.host_of("scheduler", 0) == "10.0.0.1"
    assert launcher.ssh_argv("10.0.0.2")[-3:] == ["-o", "Port=2222", "10.0.0.2"]
    line = remote_command(["python", "-m", "realrun.node"], {"DMLC_ROLE": "server"}, "/a b")
    assert line.startswith("cd '/a b' && exec setsid --wait sh -c ")
    assert "echo realrun-pgid $$; exec env DMLC_ROLE=server python -m realrun.node" in line


def test_the_job_secret_never_reaches_an_ssh_command_line() -> None:
    """ps shows every argv to every user of a host: the secret travels on the session's stdin
    and the remote shell reads it with a builtin."""
    secret = "ab" * 32
    env = {"DMLC_ROLE": "worker", "REALRUN_JOB_SECRET": secret}
    line = remote_command(["python", "-m", "realrun.node"], env, "/w")
    assert secret not in line
    assert "IFS= read -r REALRUN_JOB_SECRET && export REALRUN_JOB_SECRET && exec env" in line
    assert stdin_payload(env) == secret + "\n"
    assert stdin_payload({"DMLC_ROLE": "worker"}) == ""
