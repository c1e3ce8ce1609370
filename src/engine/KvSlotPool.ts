/**
 * Which KV-cache slot (llama.cpp sequence) serves a request, so consecutive requests of one conversation reuse its
 * cached prefix: a conversation's next request is its previous context + the accepted part of its draft + 1 token.
 *
 * Pure bookkeeping, no llama.cpp: the pool remembers the tokens each slot's cache holds, gives a request the free slot
 * with the longest common prefix (ties and misses go to the least recently used slot) and is told afterwards what the
 * slot holds now.
 */

/** Common prefixes shorter than this do not count as a match. Defaults to `8`. */
export const defaultMinPrefixReuse = 8;

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

export class KvSlotPool {
    private readonly cached: (readonly number[])[];
    private readonly lastUsed: number[];
    private readonly leased: boolean[];
    private readonly minPrefixReuse: number;
    private clock = 0;

    constructor(slots: number, options: KvSlotPoolOptions = {}) {
        if (!Number.isInteger(slots) || slots < 1) throw new RangeError(`Expected at least 1 slot, got ${slots}.`);
        this.cached = Array.from({ length: slots }, () => []);
        this.lastUsed = new Array<number>(slots).fill(0);
        this.leased = new Array<boolean>(slots).fill(false);
        this.minPrefixReuse = options.minPrefixReuse ?? defaultMinPrefixReuse;
    }

    get size(): number {
        return this.cached.length;
    }

    /** Slots not leased right now. */
    get free(): number {
        return this.leased.filter((l) => !l).length;
    }

    /** The tokens slot `slot`'s KV cache holds. */
    tokensOf(slot: number): readonly number[] {
        return this.cached[slot];
    }

    /**
     * Leases the free slot whose cache shares the longest prefix with `tokens` (the least recently used one when none
     * shares at least `minPrefixReuse` tokens). At least the last token is always left to evaluate, since its logits
     * give the first draft token. Returns undefined when every slot is leased.
     */
    acquire(tokens: readonly number[]): SlotLease | undefined {
        let best = -1;
        let bestScore = -1;
        let bestPrefix = 0;
        for (let slot = 0; slot < this.cached.length; slot++) {
            if (this.leased[slot]) continue;
            const prefix = Math.min(commonPrefixLength(this.cached[slot], tokens), tokens.length - 1);
            const score = prefix >= this.minPrefixReuse ? prefix : 0;
            if (score > bestScore || (score === bestScore && this.lastUsed[slot] < this.lastUsed[best])) {
                best = slot;
                bestScore = score;
                bestPrefix = prefix;
            }
        }
        if (best < 0) return undefined;
        this.leased[best] = true;
        this.lastUsed[best] = ++this.clock;
        // the slot's cache beyond the kept prefix is about to be overwritten
        this.cached[best] = this.cached[best].slice(0, bestPrefix);
        return { slot: best, reuse: bestPrefix };
    }

    /** Ends a lease: the slot's cache now holds `tokens` (pass [] when its content is unknown, e.g. after an error). */
    release(slot: number, tokens: readonly number[]): void {
        if (!this.leased[slot]) throw new Error(`Slot ${slot} is not leased.`);
        this.leased[slot] = false;
        this.cached[slot] = tokens.slice();
        this.lastUsed[slot] = ++this.clock;
    }
}

function commonPrefixLength(a: readonly number[], b: readonly number[]): number {
    const n = Math.min(a.length, b.length);
    let i = 0;
    while (i < n && a[i] === b[i]) i++;
    return i;
}
