"""The pool pass's ledger I/O against the real master: the rendered policy seed is what the master
loads, ceilings converge and read back as grants, and release refuses while a domain holds data."""

from __future__ import annotations

import mooncake

from controllers.kvcache import admin, quota
from tests.mooncake.conftest import port
from tests.webhooks.kvcache_objects import backend, binding, external

MiB = 1 << 20


def test_the_master_loads_the_rendered_seed(tmp_path) -> None:
    seed = quota.policy_document(
        [
            binding("a", "team-a", domain_name="qwen", ceiling="32Mi"),
            binding("b", "team-b", domain_name="llama", ceiling="1Gi"),
        ]
    )
    master = mooncake.Master(
        tmp_path, rpc_port=port("SEEDED_RPC"), admin_port=port("SEEDED_ADMIN"), name="seeded"
    )
    master.state_dir.mkdir(parents=True, exist_ok=True)
    master.policy_file.write_text(seed)
    master.start()
    try:
        ledger = master.tenant_quotas()
        assert {t: q["requested_quota_bytes"] for t, q in ledger.items()} == {
            "qwen": 32 * MiB,
            "llama": 1 << 30,
        }
    finally:
        master.stop()


def test_converge_reads_back_grants_and_release_waits_for_data(store) -> None:
    master, _ = store
    ext = external(admin=master.admin_address, client=master.client_address)
    client = admin.AdminClient(master.admin_address)
    ledger = quota.read_ledger(client, ext)
    assert ledger.state == quota.AVAILABLE and ledger.allocatable == 64 * MiB
    quota.converge(client, ledger, {"conv-a": 16 * MiB, "conv-b": 8 * MiB})
    assert ledger.snapshots["conv-a"].effective_bytes == 16 * MiB and not ledger.errors
    assert master.tenant_quotas()["conv-b"]["requested_quota_bytes"] == 8 * MiB
    quota.converge(client, ledger, {"conv-a": 24 * MiB})  # a changed ceiling is written again
    assert master.tenant_quotas()["conv-a"]["requested_quota_bytes"] == 24 * MiB
    assert mooncake.tenant_write(master, "conv-a", ["x"]) == {"x": 0}
    held = quota.release(client, ext, "conv-a", leader_started=True)
    assert not held.done and held.reason == "LedgerNotReleased" and "conv-a" in held.message
    assert "conv-b" in master.tenant_quotas()
    assert quota.release(client, ext, "conv-b", leader_started=True).done
    assert "conv-b" not in master.tenant_quotas() and "conv-a" in master.tenant_quotas()
    mooncake.tenant_remove(master, "conv-a", ["x"])
    assert quota.release(client, ext, "conv-a", leader_started=True).done


def test_single_tenant_and_unreachable(single_tenant) -> None:
    ext = external(admin=single_tenant.admin_address)
    assert quota.read_ledger(admin.AdminClient(single_tenant.admin_address), ext).state == quota.DISABLED
    declared = backend()
    declared["spec"]["connection"]["managed"]["leader"]["multiTenancy"] = False
    assert quota.read_ledger(None, declared).state == quota.DISABLED  # no request at all
    assert quota.release(None, declared, "x", leader_started=True).done
    down = quota.read_ledger(admin.AdminClient("127.0.0.1:1", timeout=1), ext)
    assert down.state == quota.UNREACHABLE
    failed = quota.release(admin.AdminClient("127.0.0.1:1", timeout=1), ext, "x", leader_started=True)
    assert not failed.done and failed.reason == "LedgerRequestFailed"
