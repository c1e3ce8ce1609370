/** KvSlotPool: slot choice by longest cached prefix, LRU for misses, and leases. */

import assert from "node:assert/strict";
import { test } from "node:test";
import { KvSlotPool, type SlotLease } from "../../src/engine/KvSlotPool.js";

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

/** `pool.acquire(tokens)`, failing the test when every slot is leased. */
function acquire(pool: KvSlotPool, tokens: readonly number[]): SlotLease {
    const lease = pool.acquire(tokens);
    assert.ok(lease, "expected a free slot");
    return lease;
}

test("a conversation's next request gets its own slot back and reuses its prefix", () => {
    const pool = new KvSlotPool(4);
    const a = range(0, 20);
    const b = range(100, 120);
    const leaseA = acquire(pool, a);
    const leaseB = acquire(pool, b);
    assert.notEqual(leaseA.slot, leaseB.slot);
    assert.equal(leaseA.reuse, 0);
    pool.release(leaseA.slot, [...a, 50, 51, 52]);
    pool.release(leaseB.slot, b);
    // a + accepted part of its draft + 1 new token
    const next = acquire(pool, [...a, 50, 51, 99]);
    assert.equal(next.slot, leaseA.slot);
    assert.equal(next.reuse, 22);
});

test("at least the last token is left to evaluate", () => {
    const pool = new KvSlotPool(1);
    const a = range(0, 12);
    pool.release(acquire(pool, a).slot, a);
    assert.equal(acquire(pool, a).reuse, 11);
});

test("misses take the least recently used slot, and evict it", () => {
    const pool = new KvSlotPool(3);
    const [zero, one, two] = [range(0, 10), range(10, 20), range(20, 30)].map((tokens) => ({
        tokens,
        slot: acquire(pool, tokens).slot,
    }));
    assert.ok(zero && one && two);
    for (const { slot, tokens } of [zero, one, two]) pool.release(slot, tokens);
    // touch conversation 0 again: conversation 1 is now the least recently used
    const again = acquire(pool, [...zero.tokens, 7]);
    pool.release(again.slot, [...zero.tokens, 7]);
    const fresh = acquire(pool, range(500, 510));
    assert.equal(fresh.slot, one.slot);
    assert.equal(fresh.reuse, 0);
    assert.deepEqual(pool.tokensOf(fresh.slot), []);
});

test("a short common prefix does not steal a live conversation's slot", () => {
    const pool = new KvSlotPool(2, { minPrefixReuse: 8 });
    const live = [1, 2, 3, ...range(100, 120)];
    const lease = acquire(pool, live);
    pool.release(lease.slot, live);
    const other = acquire(pool, [1, 2, 3, ...range(300, 310)]);
    assert.notEqual(other.slot, lease.slot);
    assert.equal(other.reuse, 0);
});

test("leased slots are not handed out twice; all leased gives undefined", () => {
    const pool = new KvSlotPool(2);
    const a = range(0, 10);
    const first = acquire(pool, a);
    const second = acquire(pool, a);
    assert.notEqual(first.slot, second.slot);
    assert.equal(pool.acquire(a), undefined);
    assert.equal(pool.free, 0);
    pool.release(first.slot, a);
    assert.equal(pool.free, 1);
    assert.throws(() => pool.release(first.slot, a), /not leased/);
});

test("acquire trims the slot's remembered tokens to the kept prefix", () => {
    const pool = new KvSlotPool(1);
    const a = range(0, 30);
    pool.release(acquire(pool, a).slot, a);
    const lease = acquire(pool, [...range(0, 10), 999, 998]);
    assert.equal(lease.reuse, 10);
    assert.deepEqual(pool.tokensOf(lease.slot), range(0, 10));
});
