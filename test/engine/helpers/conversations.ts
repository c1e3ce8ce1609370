/** Multi-round conversations for the engine tests: each next request = previous context + part of its draft + 1 token. */

import { seededRandom } from "../../../bench/lib/seededRandom.js";
import type { DraftEngine } from "../../../src/engine/types.js";
import type { DraftPair } from "../../helpers/nearTies.js";

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

/** One round of conversations: each conversation's request and the draft it got. */
export interface ConversationRound {
    requests: number[][];
    drafts: number[][];
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
): Promise<ConversationRound[]> {
    const random = seededRandom(seed);
    const result: ConversationRound[] = [];
    let requests = prompts.map((p) => [...p]);
    for (let r = 0; r < rounds; r++) {
        const drafted: { request: number[]; draft: number[] }[] = [];
        for (const request of requests) drafted.push({ request, draft: await engine.draft(request, n) });
        result.push({ requests, drafts: drafted.map(({ draft }) => draft) });
        if (r + 1 < rounds) {
            requests = drafted.map(({ request, draft }) => nextRequest(request, draft, random, engine.info.vocabSize));
        }
    }
    return result;
}

/**
 * Each conversation's draft in `other` beside the reference's for the same request, every round: once a conversation's
 * drafts part (at a near tie, where the two engines decoded in other shapes), its next requests differ and are left out.
 */
export function roundPairs(reference: readonly ConversationRound[], other: readonly ConversationRound[]): DraftPair[] {
    return reference.flatMap((round, r) =>
        round.requests.flatMap((request, i) => {
            const [otherRequest, expected, actual] = [other[r]?.requests[i], round.drafts[i], other[r]?.drafts[i]];
            const same = otherRequest !== undefined && otherRequest.join(",") === request.join(",");
            return same && expected && actual ? [{ context: request, expected, actual }] : [];
        }),
    );
}
