"""A sandbox root on one of the kernel's pseudo file systems is refused at start.

As root every permission check passes, in ``/proc`` and ``/sys`` too, so a sandbox root
such as ``/proc/memstrata`` or ``/sys/fs/x`` was accepted and every sandbox write failed
later (``mkdir /proc/x``: ENOENT; ``/sys/fs/x``: EPERM). The check reads the file system
type of the nearest existing directory from /proc/self/mountinfo
(``memstrata.cli.local_dirs``); these tests run as root in CI, where the old check passed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.cli.local_dirs import STORING, local_dir_problem, mount_in
from memstrata.config import Settings
from tests.cli.cli_env import clean_env, run_cli

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/mountinfo").exists(), reason="reads Linux /proc/self/mountinfo"
)


def settings_for(tmp_path: Path, root: str | Path) -> Settings:
    return Settings(environment="test", data_dir=tmp_path / "data", sandbox_root=Path(root))


def mounted_type(path: str) -> str | None:
    mount = mount_in(path, Path("/proc/self/mountinfo").read_text())
    return None if mount is None else mount[1]


@pytest.mark.parametrize(
    ("root", "nearest", "fstype", "point"),
    [
        ("/proc/memstrata", "/proc", "proc", "/proc"),
        ("/proc/self/memstrata/sandboxes", None, "proc", "/proc"),  # a link, resolved
        ("/sys/fs/x", "/sys/fs", "sysfs", "/sys"),
    ],
)
def test_a_root_on_procfs_or_sysfs_is_refused(
    tmp_path: Path, root: str, nearest: str | None, fstype: str, point: str
) -> None:
    problem = local_dir_problem(settings_for(tmp_path, root))
    nearest = nearest or str(Path(root).parents[1])
    assert problem == (
        f"MEMSTRATA_SANDBOX_ROOT: cannot write the sandbox root {root}: {nearest} is on the "
        f"kernel's {fstype} pseudo file system (mounted on {point}); set "
        f"MEMSTRATA_SANDBOX_ROOT to {STORING}"
    )


def test_a_root_under_dev_follows_its_file_system(tmp_path: Path) -> None:
    """/dev is devtmpfs on a host (root may make files there: device nodes' home) and
    often a tmpfs in a container, which stores files: only the former is refused."""
    problem = local_dir_problem(settings_for(tmp_path, "/dev/memstrata"))
    if mounted_type("/dev") == "devtmpfs":
        assert problem is not None and "the kernel's devtmpfs pseudo file system" in problem
    else:
        assert problem is None


def test_ordinary_roots_still_pass(tmp_path: Path) -> None:
    assert local_dir_problem(settings_for(tmp_path, tmp_path / "a" / "b")) is None
    assert not (tmp_path / "a").exists()  # nothing is made, nothing probed
    shm = Path("/dev/shm")
    if shm.is_dir() and mounted_type(str(shm)) == "tmpfs":
        assert local_dir_problem(settings_for(tmp_path, shm / "memstrata-x")) is None


def test_serve_refuses_to_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Before anything starts: the database URL points at a port nobody listens on, and
    the message would be another one had the check not come first."""
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none",
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
            "MEMSTRATA_JWT_SECRET": "s" * 40,
            "MEMSTRATA_LOG_JSON": "false",
            "MEMSTRATA_SANDBOX_ROOT": "/proc/memstrata",
        },
    )
    code, _out, err = run_cli("serve", "--port", "0")
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "error: MEMSTRATA_SANDBOX_ROOT: cannot write the sandbox root /proc/memstrata: /proc "
        "is on the kernel's proc pseudo file system (mounted on /proc); set "
        f"MEMSTRATA_SANDBOX_ROOT to {STORING}"
    )


MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime shared:7 - sysfs sysfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 27 0:40 / /srv/my\040data rw,relatime master:3 shared:9 - xfs /dev/vdb rw
51 27 0:41 / /srv/over rw - ext4 /dev/vdc rw
52 27 0:42 / /srv/over rw - proc proc rw
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/proc/1/x", ("/proc", "proc")),
        ("/proc", ("/proc", "proc")),
        ("/processes/x", ("/", "ext4")),  # a prefix of the name is not a parent
        ("/sys/fs/x", ("/sys", "sysfs")),  # optional fields before the separator
        ("/sys/fs/cgroup/x", ("/sys/fs/cgroup", "tmpfs")),  # the longest mount point
        ("/sys/fs/cgroup/unified/x", ("/sys/fs/cgroup/unified", "cgroup2")),
        ("/srv/my data/sandboxes", ("/srv/my data", "xfs")),  # \040 is a space
        ("/srv/over/x", ("/srv/over", "proc")),  # mounted over again: the last one shows
        ("/home/u", ("/", "ext4")),
    ],
)
def test_the_mount_holding_a_path(path: str, expected: tuple[str, str]) -> None:
    assert mount_in(path, MOUNTINFO) == expected
