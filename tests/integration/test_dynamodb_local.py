"""DynamoDB Local as the local runtime uses it: the table from template.yaml, items, and persistence."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from punctual.stores.dynamodb.table import DUE_INDEX, SCHEDULE_INDEX, TENANT_ACTIVE_INDEX, TENANT_INDEX
from punctual_tools.local.dynamodb_local import (
    DynamoDBLocal,
    DynamoDBLocalError,
    _AdoptedProcess,
    _answers,
    make_client,
)
from punctual_tools.template import TABLE_RESOURCE, create_table_kwargs, ensure_table, load_template
from support import wait_until

RETIRED_TENANT_ACTIVE_INDEX = "tenant_active"  # read by nothing, in the template until the release after the next


def _template_table() -> dict[str, Any]:
    table: dict[str, Any] = load_template()["Resources"][TABLE_RESOURCE]["Properties"]
    return table


def test_ensure_table_builds_the_table_the_template_defines(ddb_local_client: Any, local_table: str) -> None:
    # Given the Tasks table created from template.yaml (by the local_table fixture)
    template = _template_table()

    # When DynamoDB Local describes it
    table = ddb_local_client.describe_table(TableName=local_table)["Table"]

    # Then the keys, the sparse indexes and the stream are those of the template
    assert table["TableStatus"] == "ACTIVE"
    assert table["KeySchema"] == template["KeySchema"]
    indexes = {gsi["IndexName"]: gsi for gsi in table["GlobalSecondaryIndexes"]}
    names = (DUE_INDEX, SCHEDULE_INDEX, TENANT_INDEX, TENANT_ACTIVE_INDEX, RETIRED_TENANT_ACTIVE_INDEX)
    assert set(indexes) == set(names)
    for name in names:
        template_index = next(gsi for gsi in template["GlobalSecondaryIndexes"] if gsi["IndexName"] == name)
        assert indexes[name]["KeySchema"] == template_index["KeySchema"]
        assert indexes[name]["Projection"]["ProjectionType"] == template_index["Projection"]["ProjectionType"]
    assert table["StreamSpecification"] == {
        "StreamEnabled": True,
        "StreamViewType": template["StreamSpecification"]["StreamViewType"],
    }
    # And finished tasks expire by the template's TTL attribute
    ttl = ddb_local_client.describe_time_to_live(TableName=local_table)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == (
        "ENABLED",
        template["TimeToLiveSpecification"]["AttributeName"],
    )


def test_ensure_table_is_idempotent(ddb_local_client: Any, local_table: str) -> None:
    # Given a table that exists
    # When ensure_table runs again
    created = ensure_table(ddb_local_client, local_table)

    # Then it reports that it created nothing
    assert created is False


def test_item_written_can_be_read_back_and_found_in_the_due_index(ddb_local_client: Any, local_table: str) -> None:
    # Given a task item with due-index keys
    item = {
        "task_id": {"S": "t-1"},
        "due_bucket": {"S": "202601011200#0"},
        "due_ms": {"N": "1767268800123"},
        "payload": {"S": "hello"},
    }

    # When it is put
    ddb_local_client.put_item(TableName=local_table, Item=item)

    # Then a consistent get returns it unchanged, and the due index finds it by bucket and time
    got = ddb_local_client.get_item(TableName=local_table, Key={"task_id": {"S": "t-1"}}, ConsistentRead=True)
    assert got["Item"] == item
    due = ddb_local_client.query(
        TableName=local_table,
        IndexName=DUE_INDEX,
        KeyConditionExpression="due_bucket = :b AND due_ms <= :t",
        ExpressionAttributeValues={":b": {"S": "202601011200#0"}, ":t": {"N": "1767268800123"}},
    )
    assert [i["task_id"]["S"] for i in due["Items"]] == ["t-1"]


def test_table_in_data_dir_survives_stop_and_start(tmp_path: Path) -> None:
    # Given a DynamoDB Local on disk (its own instance, not the session's) holding a table with one item
    data_dir = tmp_path / "ddb"
    first = DynamoDBLocal(data_dir=data_dir)
    with first:
        client = make_client(first.endpoint_url)
        ensure_table(client, "punctual-persist")
        client.put_item(TableName="punctual-persist", Item={"task_id": {"S": "kept"}})
    assert first.pid is None
    assert list(data_dir.glob("*.db")), "DynamoDB Local wrote no database file"

    # When a new server starts on the same directory
    with DynamoDBLocal(data_dir=data_dir) as second:
        client = make_client(second.endpoint_url)

        # Then the table and its item are still there
        assert "punctual-persist" in client.list_tables()["TableNames"]
        got = client.get_item(TableName="punctual-persist", Key={"task_id": {"S": "kept"}}, ConsistentRead=True)
        assert got["Item"] == {"task_id": {"S": "kept"}}


def test_a_server_left_running_is_adopted_with_its_data_and_stopped_by_its_new_owner(tmp_path: Path) -> None:
    # Given a DynamoDB Local on disk holding a table with one item, whose owner is gone (it is not stopped)
    data_dir = tmp_path / "ddb"
    first = DynamoDBLocal(data_dir=data_dir)
    endpoint = first.start()
    pid, port = first.pid, first.port
    assert pid is not None
    assert port is not None
    make_client(endpoint).put_item(TableName=ensure_and_name(endpoint), Item={"task_id": {"S": "kept"}})
    try:
        # When a new object on the same directory adopts it (and one asked for another port does not)
        assert DynamoDBLocal(data_dir=data_dir, port=port + 1 if port < 65535 else 1).adopt(pid, port) is False
        second = DynamoDBLocal(data_dir=data_dir)
        assert second.adopt(pid, port) is True

        # Then it serves the same data at the same address, as the same process
        assert (second.endpoint_url, second.pid) == (endpoint, pid)
        got = make_client(second.endpoint_url).get_item(
            TableName="punctual-adopted", Key={"task_id": {"S": "kept"}}, ConsistentRead=True
        )
        assert got["Item"] == {"task_id": {"S": "kept"}}
        # ... and stopping it stops the process
        second.stop()
        assert second.pid is None
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    finally:
        first.stop()


def test_a_server_that_does_not_answer_is_not_adopted(tmp_path: Path) -> None:
    # Given a pid that is no DynamoDB Local (this test's own process) and a port nobody serves
    server = DynamoDBLocal(data_dir=tmp_path / "ddb")
    # When it is offered for adoption / Then it is refused, and nothing is held
    assert server.adopt(os.getpid(), _free_port(), timeout=1.0) is False
    assert server.pid is None


def ensure_and_name(endpoint: str) -> str:
    ensure_table(make_client(endpoint), "punctual-adopted")
    return "punctual-adopted"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_start_refuses_a_port_that_is_already_served(ddb_local: str) -> None:
    # Given the session's DynamoDB Local listening on a port
    taken = int(ddb_local.rsplit(":", 1)[1])

    # When another server is asked to use that port
    # Then it refuses instead of reporting the other server as its own
    with pytest.raises(DynamoDBLocalError, match="already in use"):
        DynamoDBLocal(in_memory=True, port=taken).start()


def test_stop_is_idempotent() -> None:
    # Given a server that was never started
    server = DynamoDBLocal(in_memory=True)

    # When it is stopped twice
    server.stop()
    server.stop()

    # Then nothing runs
    assert server.pid is None


def test_a_table_from_an_older_template_gets_the_indexes_it_lacks(ddb_local_client: Any, fresh_table_name: str) -> None:
    # Given a table made before the tenant indexes existed (a local stack's data kept on disk), or before the
    # tenants' active count was sharded
    tenants = {TENANT_INDEX, RETIRED_TENANT_ACTIVE_INDEX, TENANT_ACTIVE_INDEX}
    older = create_table_kwargs(fresh_table_name)
    older["GlobalSecondaryIndexes"] = [i for i in older["GlobalSecondaryIndexes"] if i["IndexName"] not in tenants]
    older["AttributeDefinitions"] = [
        a for a in older["AttributeDefinitions"] if a["AttributeName"] not in ("tenant", "tenant_shard")
    ]
    ddb_local_client.create_table(**older)
    try:
        # When the runtime ensures its table  Then it is not re-created, and it has the indexes, active
        assert ensure_table(ddb_local_client, fresh_table_name) is False
        indexes = ddb_local_client.describe_table(TableName=fresh_table_name)["Table"]["GlobalSecondaryIndexes"]
        status = {i["IndexName"]: i.get("IndexStatus", "ACTIVE") for i in indexes}
        assert status[TENANT_INDEX] == status[TENANT_ACTIVE_INDEX] == status[RETIRED_TENANT_ACTIVE_INDEX] == "ACTIVE"
        assert ensure_table(ddb_local_client, fresh_table_name) is False  # and again changes nothing
    finally:
        ddb_local_client.delete_table(TableName=fresh_table_name)


START_FROM_A_THREAD = """
import sys, threading, time
from pathlib import Path
from punctual_tools.local.dynamodb_local import DynamoDBLocal

server = DynamoDBLocal(data_dir=Path(sys.argv[1]))
starter = threading.Thread(target=server.start)
starter.start()
starter.join()
print(server.pid, server.endpoint_url, flush=True)
time.sleep(600)
"""


def test_a_server_outlives_the_thread_that_started_it_and_dies_with_its_process(tmp_path: Path) -> None:
    # Given a process that started DynamoDB Local on disk from a thread which has ended since
    child = subprocess.Popen(
        [sys.executable, "-c", START_FROM_A_THREAD, str(tmp_path / "ddb")], stdout=subprocess.PIPE, text=True
    )
    server = None
    try:
        assert child.stdout is not None
        pid_text, endpoint = child.stdout.readline().split()
        server = _AdoptedProcess(int(pid_text))
        # Then the server runs on and answers (its life is not the starting thread's)
        assert server.poll() is None
        assert _answers(endpoint, 30)
        started = time.monotonic()
        ensure_table(make_client(endpoint), "punctual-kept")
        write_s = time.monotonic() - started
        # When that process is killed (SIGKILL: it stops nothing itself)
        child.kill()
        child.wait()
        # Then the server ends with it (in a moment: as long as creating a table took, at most), its data on disk
        assert wait_until(lambda: server.poll() is not None, timeout=max(write_s, 5.0), interval=0.05)
        with DynamoDBLocal(data_dir=tmp_path / "ddb") as again:
            assert "punctual-kept" in make_client(again.endpoint_url).list_tables()["TableNames"]
    finally:
        child.kill()
        child.wait()
        if server is not None:
            server.kill()
