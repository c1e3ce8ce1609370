/**
 * The differential check behind the engine tests: every draft a test asks of its engine is asked, at the same moment,
 * of a twin engine that drafts with prompt-lookup candidates (lookahead), and the twin's draft must be the plain
 * engine's, token for token, or part from it only at a near tie of the drafter's own logits (the twin decodes two or
 * more tokens a sequence where the plain engine decodes one: ../../helpers/nearTies.ts), in at most a quarter of the
 * drafts. The test itself sees only the plain engine (its drafts, errors, counters), so every draft the engine tests
 * make — alone, batched, with step-wise prefill, padding, reordered outputs — is also a test that candidates leave the
 * draft as it is.
 */

import assert, { AssertionError } from "node:assert/strict";
import { type LoadEngineOptions, loadEngine } from "../../../src/engine/loadEngine.js";
import type { DraftEngine, DraftOptions, EngineInfo, LookaheadSettings } from "../../../src/engine/types.js";
import { judgeParting, maxPartedShare, type Parting } from "../../helpers/nearTies.js";

/**
 * The twin's candidates: 4 per sequence for every step of up to 32 sequences (stepTokens 5 × 32), fillers included, so
 * its steps carry candidates wherever the plain engine's carry one token (and pad and feed prefills step-wise alike).
 */
export const everyStepLookahead: LookaheadSettings = { candidates: 4, stepTokens: 160, fill: true };

export class DifferentialEngine implements DraftEngine {
    /** Drafts the twin answered and that were compared. */
    compared = 0;
    /** Where the twin's drafts parted from the plain ones, each at a near tie. */
    readonly partings: Parting[] = [];

    constructor(
        private readonly plain: DraftEngine,
        private readonly twin: DraftEngine,
        private readonly model: Pick<LoadEngineOptions, "modelPath" | "gpu">,
    ) {}

    get info(): EngineInfo {
        return this.plain.info;
    }

    async draft(tokens: readonly number[], n: number, options: DraftOptions = {}): Promise<number[]> {
        const [plain, twin] = await Promise.allSettled([
            this.plain.draft(tokens, n, options),
            this.twin.draft(tokens, n, options),
        ]);
        if (plain.status === "rejected") throw plain.reason;
        // an abort may reach the twin after the plain engine finished: nothing to compare then
        if (twin.status === "rejected") {
            if (options.signal?.aborted) return plain.value;
            throw new AssertionError({
                message: `the lookahead twin failed where the plain engine drafted: ${twin.reason}`,
            });
        }
        this.compared++;
        const pair = { context: tokens, expected: plain.value, actual: twin.value };
        const parting = await judgeParting(this.model.modelPath, pair, this.model.gpu);
        if (parting !== undefined && !parting.nearTie)
            throw new AssertionError({
                message:
                    `a draft with candidates differs from the plain one (${tokens.length} tokens, n ${n}) at position ` +
                    `${parting.position}, not a near tie (logit gap ${parting.gap}, disagreement ${parting.disagreement})`,
                actual: twin.value,
                expected: plain.value,
                operator: "deepStrictEqual",
            });
        if (parting !== undefined) this.partings.push(parting);
        return plain.value;
    }

    async close(): Promise<void> {
        await Promise.all([this.plain.close(), this.twin.close()]);
        const allowed = Math.max(1, Math.floor(maxPartedShare * this.compared));
        assert.ok(
            this.partings.length <= allowed,
            `${this.partings.length} of ${this.compared} drafts with candidates parted from the plain ones at near ties`,
        );
    }
}

/**
 * The plain engine `options` describe (lookahead 0 unless they set it), wrapped with its lookahead twin (the same
 * options but the observer, with `twin`'s candidates).
 */
export async function loadDifferentialEngine(
    options: LoadEngineOptions,
    twin: LookaheadSettings = everyStepLookahead,
): Promise<DifferentialEngine> {
    const plain = await loadEngine({ ...options, lookahead: options.lookahead ?? 0 });
    const withCandidates = await loadEngine({
        ...options,
        observer: undefined,
        lookahead: twin.candidates,
        lookaheadStepTokens: twin.stepTokens,
        lookaheadFill: twin.fill,
    });
    return new DifferentialEngine(plain, withCandidates, options);
}
