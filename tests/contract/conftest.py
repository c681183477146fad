"""Fixtures of the store contract suites: each test runs once per implementation of the ports (and write mode),
with ids that name the store: ``[memory]``, ``[moto-single]``, ``[moto-transaction]``, ``[dynamodb-local-single]``,
``[dynamodb-local-transaction]`` (see ``contract_tools.STORE_KINDS``; the DynamoDB Local ones are marked
``integration``, so ``-m "not integration"`` keeps the suites on moto and in memory and starts no server).

* ``backend`` / ``store``: every implementation;
* ``race_backend``: those whose writes stay atomic under real concurrency (the races);
* ``dynamo_backend``: the DynamoDB adapter, for the tests of the adapter itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from contract_tools import STORE_KINDS, Backend, DynamoBackend, StoreKind, TaskFactory, store_params

from punctual.stores.ports import Stores

assert len({kind.name for kind in STORE_KINDS}) == len(STORE_KINDS), "store kinds need distinct names"


@contextlib.contextmanager
def _opened(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A fresh store of the kind the fixture param names."""
    kind: StoreKind = request.param
    with kind.open(request) as backend:
        backend.kind = kind
        yield backend


@pytest.fixture(params=store_params())
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A fresh, empty store of each kind."""
    with _opened(request) as opened:
        yield opened


@pytest.fixture
def store(backend: Backend) -> Stores:
    """The store under test, typed as the ports: contract tests use nothing else."""
    return backend.store


@pytest.fixture
def tasks(store: Stores) -> TaskFactory:
    return TaskFactory(store)


@pytest.fixture(params=store_params(lambda kind: kind.atomic))
def race_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A fresh store of each kind that stays atomic under real threads."""
    with _opened(request) as opened:
        yield opened


@pytest.fixture(params=store_params(lambda kind: kind.dynamodb))
def dynamo_backend(request: pytest.FixtureRequest) -> Iterator[DynamoBackend]:
    """A fresh store of each kind that is the DynamoDB adapter."""
    with _opened(request) as opened:
        assert isinstance(opened, DynamoBackend)
        yield opened
