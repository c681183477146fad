"""The executors' CPU quota (``punctual_tools.local.cpu_quota``) on stand-in cgroup trees: folders laid out as
cgroup v1's cpu hierarchy or cgroup v2's unified one, with the mount table and ``/proc/self/cgroup`` that point
at them. What the kernel does by itself (control files in a new group, removed with it) the stand-in does too.
The real hierarchy is the end-to-end tier's (``tests/e2e/test_lambda_profile.py``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from punctual_tools.local import cpu_quota
from punctual_tools.local.cpu_quota import PERIOD_US, CpuGroups, init_quota_us, quota_us, remove_stale_groups

NO_SUCH_PID = 4_194_305  # above Linux's largest pid (PID_MAX_LIMIT): never a running process
V1_FILES = {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000", "cgroup.procs": ""}


@pytest.fixture(autouse=True)
def cgroupfs_rmdir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Removing a group removes its control files too, as in cgroupfs (a plain folder keeps them)."""
    monkeypatch.setattr(cpu_quota, "_rmdir", shutil.rmtree)


def write_tree(root: Path, files: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)


def v1(tmp_path: Path, own: str = "/") -> tuple[Path, str, str]:
    """A v1 cpu hierarchy mounted at <tmp>/cpu, this process in ``own``: (mount, mountinfo, proc cgroup)."""
    mount = tmp_path / "cpu"
    write_tree(mount / own.lstrip("/"), V1_FILES)
    mountinfo = (
        f"30 25 0:26 / {mount} rw,nosuid - cgroup cgroup rw,cpu\n"
        f"31 25 0:27 / {tmp_path / 'memory'} rw - cgroup cgroup rw,memory\n"
    )
    return mount, mountinfo, f"4:memory:/elsewhere\n1:cpu:{own}\n0::/\n"


def v2(tmp_path: Path, controllers: str = "cpu memory pids", subtree: str = "") -> tuple[Path, str, str]:
    mount = tmp_path / "unified"
    write_tree(mount, {"cgroup.controllers": controllers, "cgroup.subtree_control": subtree, "cgroup.procs": ""})
    return mount, f"40 25 0:30 / {mount} rw - cgroup2 cgroup2 rw\n", "0::/\n"


def open_groups(tmp_path: Path, mountinfo: str, proc_cgroup: str) -> tuple[CpuGroups | None, str]:
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(proc_cgroup)
    return CpuGroups.open(str(tmp_path / "mountinfo"), str(tmp_path / "cgroup"), pid=4242)


def test_the_quota_is_the_memory_sizes_share_of_a_100_ms_period_rounded_down() -> None:
    assert quota_us(1769) == PERIOD_US
    assert quota_us(256) == PERIOD_US * 256 // 1769  # rounded down: never more than Lambda gives
    assert PERIOD_US == 20_000  # the period Lambda enforces a quota in (punctual.config.cpu_share)
    assert quota_us(3538) == 2 * PERIOD_US
    assert quota_us(1) == 1_000  # the kernel's smallest quota


def test_cgroup_v1_each_worker_gets_a_group_with_its_cfs_quota(tmp_path: Path) -> None:
    # Given a v1 cpu hierarchy where this process is in a nested group
    mount, mountinfo, proc_cgroup = v1(tmp_path, own="/user.slice/session")
    # When the groups are opened and one is made for a 256 MB worker
    groups, where = open_groups(tmp_path, mountinfo, proc_cgroup)
    assert groups is not None, where
    group = groups.create(256)
    # Then it sits under punctual-<pid> in this process's group, with 2894 us of CPU every 20000 us
    assert groups.parent == mount / "user.slice" / "session" / "punctual-4242"
    assert where == f"cgroup v1 at {groups.parent}"
    assert group.parent == groups.parent
    assert (group / "cpu.cfs_period_us").read_text() == "20000"
    assert (group / "cpu.cfs_quota_us").read_text() == "2894"
    # ... and only it: the probe made at opening is gone; removing the group and closing leave nothing
    assert [p.name for p in groups.parent.iterdir()] == [group.name]
    groups.remove(group)
    groups.close()
    assert not groups.parent.exists()


def test_cgroup_v2_enables_the_cpu_controller_and_writes_cpu_max(tmp_path: Path) -> None:
    # Given a v2 hierarchy whose root offers the cpu controller, not yet enabled for its children
    mount, mountinfo, proc_cgroup = v2(tmp_path)
    # When the groups are opened and one is made for a 512 MB worker
    groups, where = open_groups(tmp_path, mountinfo, proc_cgroup)
    assert groups is not None, where
    group = groups.create(512)
    # Then the cpu controller was enabled for the children of this process's group and of punctual-<pid>, and
    # the group's cpu.max is "quota period"
    assert (mount / "cgroup.subtree_control").read_text() == "+cpu"
    assert (groups.parent / "cgroup.subtree_control").read_text() == "+cpu"
    assert (group / "cpu.max").read_text() == f"{quota_us(512)} 20000"
    assert where == f"cgroup v2 at {mount / 'punctual-4242'}"


def test_init_gets_a_whole_core_or_the_memory_sizes_share_when_it_buys_more() -> None:
    assert init_quota_us(256) == PERIOD_US
    assert init_quota_us(1769) == PERIOD_US
    assert init_quota_us(3538) == 2 * PERIOD_US


@pytest.mark.parametrize("version", [1, 2])
def test_a_group_made_with_inits_cpu_is_set_to_the_memory_sizes_share(tmp_path: Path, version: int) -> None:
    # Given the groups of a v1 or a v2 hierarchy, and a 256 MB worker's group made with INIT's CPU
    _mount, mountinfo, proc_cgroup = v1(tmp_path) if version == 1 else v2(tmp_path)
    groups, where = open_groups(tmp_path, mountinfo, proc_cgroup)
    assert groups is not None, where
    group = groups.create(256, init_quota_us(256))

    def quota() -> str:
        return (group / ("cpu.cfs_quota_us" if version == 1 else "cpu.max")).read_text().split()[0]

    assert quota() == str(PERIOD_US)
    # When its INIT is over  Then it has the share of a core 256 MB buys
    groups.set_quota(group, quota_us(256))
    assert quota() == str(quota_us(256)) == "2894"


def test_v1s_cpu_hierarchy_wins_over_a_v2_one_beside_it(tmp_path: Path) -> None:
    # Given both (a hybrid layout: the cpu controller is v1's)
    _m1, mountinfo1, proc1 = v1(tmp_path)
    _m2, mountinfo2, _proc2 = v2(tmp_path, controllers="hugetlb")
    # Then v1 is used
    groups, where = open_groups(tmp_path, mountinfo2 + mountinfo1, proc1)
    assert groups is not None, where
    assert groups.version == 1, where


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        ("v2 without cpu", "the cpu controller is not available to this group"),
        ("nothing mounted", "no cgroup hierarchy with a cpu controller is mounted"),
        ("v1 without bandwidth control", "no cpu.cfs_quota_us"),
    ],
)
def test_where_no_quota_can_be_set_the_reason_is_given(tmp_path: Path, layout: str, reason: str) -> None:
    if layout == "v2 without cpu":
        _mount, mountinfo, proc_cgroup = v2(tmp_path, controllers="memory pids")
    elif layout == "nothing mounted":
        mountinfo, proc_cgroup = "22 1 0:21 / /proc rw - proc proc rw\n", "0::/\n"
    else:
        mount, mountinfo, proc_cgroup = v1(tmp_path)
        (mount / "cpu.cfs_quota_us").unlink()
    groups, why = open_groups(tmp_path, mountinfo, proc_cgroup)
    assert groups is None
    assert reason in why


def test_groups_left_by_a_process_that_no_longer_runs_are_removed_at_the_next_opening(tmp_path: Path) -> None:
    # Given the groups of a stack that was killed (its pid runs no more), and those of one that still runs
    mount, mountinfo, proc_cgroup = v1(tmp_path)
    write_tree(mount / f"punctual-{NO_SUCH_PID}" / "w7", V1_FILES)
    write_tree(mount / f"punctual-{os.getpid()}" / "w1", V1_FILES)
    # When the groups are opened
    groups, where = open_groups(tmp_path, mountinfo, proc_cgroup)
    assert groups is not None, where
    # Then the dead one's are gone, the live one's kept
    assert not (mount / f"punctual-{NO_SUCH_PID}").exists()
    assert (mount / f"punctual-{os.getpid()}" / "w1").is_dir()


@pytest.mark.parametrize("layout", [v1, v2])
def test_a_dead_stacks_groups_are_removed_without_opening_any(tmp_path: Path, layout: Any) -> None:
    # Given the groups of a stack that was killed, and those of one that still runs
    mount, mountinfo, proc_cgroup = layout(tmp_path)
    write_tree(mount / f"punctual-{NO_SUCH_PID}" / "w7", V1_FILES)
    write_tree(mount / f"punctual-{os.getpid()}" / "w1", V1_FILES)
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(proc_cgroup)
    # When a stack starts that opens none (its executors on whole cores: the local profile)
    remove_stale_groups(str(tmp_path / "mountinfo"), str(tmp_path / "cgroup"))
    # Then the dead one's are gone, the live one's kept, and no group of its own was made
    assert not (mount / f"punctual-{NO_SUCH_PID}").exists()
    assert (mount / f"punctual-{os.getpid()}" / "w1").is_dir()
    assert sorted(p.name for p in mount.glob("punctual-*")) == [f"punctual-{os.getpid()}"]
