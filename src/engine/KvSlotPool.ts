/**
 * Which KV-cache slot (llama.cpp sequence) serves a request, so consecutive requests of one conversation reuse its
 * cached prefix: a conversation's next request is its previous context + the accepted part of its draft + 1 token.
 *
 * Pure bookkeeping, no llama.cpp: the pool remembers the tokens each slot's cache holds, gives a request the free slot
 * with the longest common prefix (ties and misses go to the least recently used slot) and is told afterwards what the
 * slot holds now.
 */

/** Common prefixes shorter than this do not count as a match. Defaults to `8`. */
const defaultMinPrefixReuse = 8;

export interface SlotLease {
    slot: number;
    /** Leading tokens of the request already in the slot's KV cache (kept; the rest is evaluated). */
    reuse: number;
}

export interface KvSlotPoolOptions {
    /**
     * A common prefix shorter than this counts as no match, so a new conversation that happens to share a few tokens
     * (a chat template's first tokens) with a live one takes the least recently used slot instead of evicting it.
     * Defaults to `8`.
     */
    minPrefixReuse?: number;
}

/** What the pool knows of one slot. */
interface SlotState {
    /** The tokens its KV cache holds. */
    cached: readonly number[];
    /** The pool's clock when it was last leased or released (0: never). */
    lastUsed: number;
    leased: boolean;
}

export class KvSlotPool {
    private readonly slots: SlotState[];
    private readonly minPrefixReuse: number;
    private clock = 0;

    constructor(slots: number, options: KvSlotPoolOptions = {}) {
        if (!Number.isInteger(slots) || slots < 1) throw new RangeError(`Expected at least 1 slot, got ${slots}.`);
        this.slots = Array.from({ length: slots }, () => ({ cached: [], lastUsed: 0, leased: false }));
        this.minPrefixReuse = options.minPrefixReuse ?? defaultMinPrefixReuse;
    }

    get size(): number {
        return this.slots.length;
    }

    /** Slots not leased right now. */
    get free(): number {
        return this.slots.filter((s) => !s.leased).length;
    }

    /** The tokens slot `slot`'s KV cache holds. */
    tokensOf(slot: number): readonly number[] {
        return this.slotAt(slot).cached;
    }

    /**
     * Leases the free slot whose cache shares the longest prefix with `tokens` (the least recently used one when none
     * shares at least `minPrefixReuse` tokens). At least the last token is always left to evaluate, since its logits
     * give the first draft token. Returns undefined when every slot is leased.
     */
    acquire(tokens: readonly number[]): SlotLease | undefined {
        let best: { slot: number; state: SlotState; score: number; prefix: number } | undefined;
        for (const [slot, state] of this.slots.entries()) {
            if (state.leased) continue;
            const prefix = Math.min(commonPrefixLength(state.cached, tokens), tokens.length - 1);
            const score = prefix >= this.minPrefixReuse ? prefix : 0;
            if (
                best === undefined ||
                score > best.score ||
                (score === best.score && state.lastUsed < best.state.lastUsed)
            )
                best = { slot, state, score, prefix };
        }
        if (best === undefined) return undefined;
        const { state, prefix } = best;
        state.leased = true;
        state.lastUsed = ++this.clock;
        // the slot's cache beyond the kept prefix is about to be overwritten
        state.cached = state.cached.slice(0, prefix);
        return { slot: best.slot, reuse: prefix };
    }

    /** Ends a lease: the slot's cache now holds `tokens` (pass [] when its content is unknown, e.g. after an error). */
    release(slot: number, tokens: readonly number[]): void {
        const state = this.slotAt(slot);
        if (!state.leased) throw new Error(`Slot ${slot} is not leased.`);
        state.leased = false;
        state.cached = tokens.slice();
        state.lastUsed = ++this.clock;
    }

    private slotAt(slot: number): SlotState {
        const state = this.slots[slot];
        if (state === undefined) throw new RangeError(`No slot ${slot}: expected 0 ≤ slot < ${this.slots.length}.`);
        return state;
    }
}

function commonPrefixLength(a: readonly number[], b: readonly number[]): number {
    const n = Math.min(a.length, b.length);
    let i = 0;
    while (i < n && a[i] === b[i]) i++;
    return i;
}
