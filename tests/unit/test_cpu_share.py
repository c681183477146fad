"""punctual.config.cpu_share: the CPU quota of this process, read from its cgroup (v1 or v2, the tightest of the group
and its ancestors), else from Lambda's memory size."""

from __future__ import annotations

from pathlib import Path

import pytest

from punctual.config.cpu_share import cgroup_cpu_share, detect_cpu_share


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v1_tree(tmp_path: Path, quotas: dict[str, tuple[int, int]]) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    for group, (quota, period) in quotas.items():
        write(root / "cpu" / group / "cpu.cfs_quota_us", f"{quota}\n")
        write(root / "cpu" / group / "cpu.cfs_period_us", f"{period}\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("9:name=systemd:/\n4:memory:/x\n1:cpu:/punctual-1/w1\n0::/\n")
    return str(proc), str(root)


def test_a_v1_group_quota_is_its_share_of_a_core(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path, {"": (-1, 100_000), "punctual-1/w1": (14_471, 100_000)})
    assert cgroup_cpu_share(proc, root) == pytest.approx(0.14471)


def test_the_tightest_quota_of_the_group_and_its_ancestors_wins(tmp_path: Path) -> None:
    proc, root = v1_tree(
        tmp_path, {"": (-1, 100_000), "punctual-1": (10_000, 100_000), "punctual-1/w1": (50_000, 100_000)}
    )
    assert cgroup_cpu_share(proc, root) == pytest.approx(0.1)


def test_no_quota_anywhere_is_none(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path, {"": (-1, 100_000), "punctual-1/w1": (-1, 100_000)})
    assert cgroup_cpu_share(proc, root) is None
    assert cgroup_cpu_share(str(tmp_path / "missing"), root) is None


def test_a_v2_cpu_max_is_read_and_max_means_no_quota(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    write(root / "cpu.max", "max 100000\n")
    write(root / "app" / "cpu.max", "29000 100000\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/app\n")
    assert cgroup_cpu_share(str(proc), str(root)) == pytest.approx(0.29)


def test_without_a_cgroup_quota_lambdas_memory_size_gives_the_share(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path, {"": (-1, 100_000)})
    assert detect_cpu_share({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512"}, proc, root) == pytest.approx(512 / 1769)
    assert detect_cpu_share({}, proc, root) is None
    assert detect_cpu_share({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "lots"}, proc, root) is None


def test_lambdas_memory_size_wins_over_a_cgroup_quota_which_in_the_init_is_the_inits_cpu(tmp_path: Path) -> None:
    # Given a process in a group whose quota is still its INIT's whole core
    proc, root = v1_tree(tmp_path, {"punctual-1/w1": (100_000, 100_000)})
    # Then a function's memory size says its share, and without one the group's quota does
    assert detect_cpu_share({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256"}, proc, root) == pytest.approx(256 / 1769)
    assert detect_cpu_share({}, proc, root) == pytest.approx(1.0)
