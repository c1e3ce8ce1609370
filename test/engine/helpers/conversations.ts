/** Multi-round conversations for the engine tests: each next request = previous context + part of its draft + 1 token. */

import type { DraftEngine } from "../../../src/engine/types.js";
import { seededRandom } from "../../helpers/seededRandom.js";

/** The request a conversation sends next, given its last request and the draft it got. */
export function nextRequest(
    previous: readonly number[],
    draft: readonly number[],
    random: (max: number) => number,
    vocabSize: number,
): number[] {
    const accepted = random(draft.length + 1);
    return [...previous, ...draft.slice(0, accepted), random(vocabSize)];
}

/**
 * Drafts for every request of `rounds` rounds of `prompts.length` conversations, each request computed alone, one after
 * another, on `engine` (which must not reuse prefixes across conversations: one stream, conversations alternating).
 */
export async function draftConversationsAlone(
    engine: DraftEngine,
    prompts: readonly (readonly number[])[],
    rounds: number,
    n: number,
    seed: number,
): Promise<{ requests: number[][][]; drafts: number[][][] }> {
    const random = seededRandom(seed);
    const requests: number[][][] = [prompts.map((p) => [...p])];
    const drafts: number[][][] = [];
    for (let r = 0; r < rounds; r++) {
        const roundDrafts: number[][] = [];
        for (const request of requests[r]) roundDrafts.push(await engine.draft(request, n));
        drafts.push(roundDrafts);
        if (r + 1 < rounds) {
            requests.push(
                requests[r].map((request, i) => nextRequest(request, roundDrafts[i], random, engine.info.vocabSize)),
            );
        }
    }
    return { requests, drafts };
}
