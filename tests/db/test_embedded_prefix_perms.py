"""As root, the wheel runs the embedded server as its own system user, which has to reach
``pgdata``. The wheel opened every ancestor of ``pgdata`` to all users for that (g+rx,o+rx,
on every start: ``/root`` listable by everyone again); a start now adds search permission
(g+x,o+x) only, and only where it is missing (``memstrata.db.embedded_perms``)."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from memstrata.db.embedded import EmbeddedPostgres
from memstrata.db.embedded_perms import grant_traverse


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.geteuid() != 0, reason="the wheel changes modes only when run as root")
def test_a_root_start_lets_the_server_user_search_the_ancestors_not_list_them(
    tmp_path: Path,
) -> None:
    data = tmp_path / "rp" / "home" / "data"
    data.mkdir(parents=True)
    private = [tmp_path / "rp", tmp_path / "rp" / "home", data]
    for directory in private:
        directory.chmod(0o700)
    server = EmbeddedPostgres(data)
    server.start()
    server.stop()
    assert {d.name: oct(mode(d)) for d in private} == {
        "rp": "0o711",
        "home": "0o711",
        "data": "0o711",
    }
    pgdata = data / "pgdata"
    assert mode(pgdata) == 0o700
    assert pwd.getpwuid(pgdata.stat().st_uid).pw_name == "embedded_postgres"


def test_grant_traverse_adds_search_for_group_and_others_where_missing_and_nothing_else(
    tmp_path: Path,
) -> None:
    a = tmp_path / "a"
    b = a / "b"
    c = b / "c"
    target = c / "pgdata"
    target.mkdir(parents=True)
    for directory, bits in ((a, 0o750), (b, 0o711), (c, 0o700), (target, 0o700)):
        directory.chmod(bits)
    changed = grant_traverse(target)
    assert (mode(a), mode(b), mode(c), mode(target)) == (0o751, 0o711, 0o711, 0o700)
    assert a in changed and c in changed
    assert b not in changed and target not in changed
