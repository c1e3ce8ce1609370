/**
 * The step-cost model of speculative decoding: what a target step and a draft cost (measured by
 * src/speedup/measureCosts.ts) and how many tokens a step yields (τ) give the speed-up over the target alone,
 *
 *   speed-up(k) ≈ τ(k) · alone ÷ (verify(k + 1) + draft(k)),   τ(k) = (1 − a^(k+1)) ÷ (1 − a)
 *
 * for a per-token agreement a (the chance that the drafter's next greedy token is the target's, independently at each
 * position): the steady state of a long generation. `predictRunSpeedUp` applies the same costs to a measured
 * generation's own counts, so a cost table can be checked against an end-to-end `specdraft generate` run; given the
 * per-prompt costs it also counts what each new prompt costs, which a short generation feels (on the H200 a 64-token
 * prompt cost the lab target ≈ 7 ms beyond its tokens, 10 % of a 128-token generation):
 *
 *   alone       = Σ_prompts F(P) + tokens · alone
 *   speculative = Σ_prompts [F(P) + alone − verify(1) + D(P)] + steps · (verify(m̄) + draft(k))
 *
 * F(P): the target's cost of a new P-token prompt beyond its tokens, t(P, n) − n · alone (its prefill, less the one
 * decode it stands for, and the decodes after it warming again); D(P): the drafter's prefill of the prompt (its first
 * draft less a steady one-token draft). The speculative run's first step is the prefill of the prompt and its first
 * drafts, P + k tokens: taken as prefill(P) + verify(m̄) − verify(1), it costs F(P) + alone − verify(1) more than a
 * steady step.
 *
 * `specdraft speedup` (src/speedup/runSpeedUp.ts) measures the costs on the user's machine and projects with it;
 * bench/generateCosts.ts and bench/speedUpTable.ts measure and tabulate with the same functions.
 */

/** Measured costs in ms, each a function of a size given at measured points (linear in between). */
export interface StepCosts {
    /** ms per token of the target generating alone. */
    alone: number;
    /** ms of one verification step of m tokens (pending token + drafts), by m. */
    verify: ReadonlyMap<number, number>;
    /** ms of one draft request of n tokens, by n (0 tokens: 0 ms). */
    draft: ReadonlyMap<number, number>;
    /** F(P): ms a new prompt of P tokens costs the target beyond its tokens, by P (absent: not counted). */
    promptFixed?: ReadonlyMap<number, number>;
    /** D(P): ms of the drafter's prefill of a new P-token prompt, by P (absent: not counted). */
    draftPrefill?: ReadonlyMap<number, number>;
}

/** Expected tokens per target step for drafts of k at per-token agreement a: 1 + a + … + a^k. */
export function expectedTokensPerStep(agreement: number, draftLength: number): number {
    if (!(agreement >= 0 && agreement <= 1)) throw new RangeError(`agreement must be in [0, 1], got ${agreement}.`);
    if (!Number.isInteger(draftLength) || draftLength < 0)
        throw new RangeError(`draft length must be an integer ≥ 0, got ${draftLength}.`);
    if (agreement === 1) return draftLength + 1;
    return (1 - agreement ** (draftLength + 1)) / (1 - agreement);
}

/**
 * The per-token agreement a at which drafts of k give τ tokens a step: τ(k) = (1 − a^(k+1)) ÷ (1 − a) inverted (by
 * bisection; τ grows with a). Throws unless 1 ≤ τ ≤ k + 1, the tokens a step of k drafts can give.
 */
export function agreementFromTau(tau: number, draftLength: number): number {
    if (!Number.isInteger(draftLength) || draftLength < 1)
        throw new RangeError(`draft length must be an integer ≥ 1, got ${draftLength}.`);
    if (!(tau >= 1 && tau <= draftLength + 1))
        throw new RangeError(`τ(${draftLength}) must be in [1, ${draftLength + 1}], got ${tau}.`);
    if (tau === 1) return 0;
    if (tau === draftLength + 1) return 1;
    let low = 0;
    let high = 1;
    // 60 halvings: far below any τ's precision
    for (let i = 0; i < 60; i++) {
        const middle = (low + high) / 2;
        if (expectedTokensPerStep(middle, draftLength) < tau) low = middle;
        else high = middle;
    }
    return (low + high) / 2;
}

/**
 * The value at `x` of a function known at `points` (size → ms): exact at a point, linear between the two around x,
 * and outside them the line through the two nearest (a cost grows about linearly with tokens). Throws with no points,
 * or for x outside when there is only one.
 */
export function interpolateCost(points: ReadonlyMap<number, number>, x: number): number {
    if (points.size === 0) throw new RangeError("no measured costs to interpolate");
    const exact = points.get(x);
    if (exact !== undefined) return exact;
    // the two points around x: the first pair whose upper size exceeds x, else (x beyond them all) the last pair
    let lower: [number, number] | undefined;
    let segment: [[number, number], [number, number]] | undefined;
    for (const point of [...points].sort(([a], [b]) => a - b)) {
        if (lower !== undefined) {
            segment = [lower, point];
            if (point[0] > x) break;
        }
        lower = point;
    }
    if (segment === undefined) throw new RangeError(`only size ${lower?.[0]} measured; cannot estimate size ${x}`);
    const [[x0, y0], [x1, y1]] = segment;
    return y0 + ((y1 - y0) * (x - x0)) / (x1 - x0);
}

/** ms of a draft request of n tokens (0 for n = 0: no request). */
function draftCost(costs: StepCosts, n: number): number {
    return n === 0 ? 0 : interpolateCost(costs.draft, n);
}

/** One projected point of the model. */
export interface SpeedUpProjection {
    draftLength: number;
    agreement: number;
    /** Expected tokens per target step. */
    tau: number;
    /** ms of one speculative step: verify(k + 1) + draft(k). */
    stepMs: number;
    /** Speculative tokens/s ÷ target-alone tokens/s. */
    speedUp: number;
}

/** speed-up(k) ≈ τ(k) · alone ÷ (verify(k + 1) + draft(k)), for τ(k) as given (e.g. measured on held-out data). */
export function speedUpAtTau(costs: StepCosts, tau: number, draftLength: number): { stepMs: number; speedUp: number } {
    const stepMs = interpolateCost(costs.verify, draftLength + 1) + draftCost(costs, draftLength);
    return { stepMs, speedUp: (tau * costs.alone) / stepMs };
}

/** speed-up(k) ≈ τ(k) · alone ÷ (verify(k + 1) + draft(k)), τ(k) from a per-token agreement. */
export function projectSpeedUp(costs: StepCosts, agreement: number, draftLength: number): SpeedUpProjection {
    const tau = expectedTokensPerStep(agreement, draftLength);
    return { draftLength, agreement, tau, ...speedUpAtTau(costs, tau, draftLength) };
}

/** The counts of a measured speculative generation (GenerationRun totals) the prediction needs. */
export interface RunCounts {
    /** Tokens generated. */
    tokens: number;
    /** Target steps (verify calls). */
    targetSteps: number;
    /** Draft tokens offered in all. */
    drafted: number;
    /** Draft tokens asked for per request (k). */
    draftLength: number;
    /** The prompt length of every generation in the run (counted with costs.promptFixed). */
    promptLengths?: readonly number[];
}

/** What the model predicts for a measured run, and how. */
export interface RunPrediction {
    /** tokens ÷ targetSteps. */
    tau: number;
    /** Mean tokens per verify step: 1 + drafted ÷ targetSteps. */
    meanVerifyTokens: number;
    /** Predicted ms of the speculative run: steps × (verify(mean tokens) + draft(k)), plus the prompts' costs. */
    speculativeMs: number;
    /** Predicted ms of the target alone for the same tokens: tokens × alone, plus the prompts' costs. */
    aloneMs: number;
    /** Of both: ms the prompts cost (0 when the costs or the run have no per-prompt figures). */
    promptMs: { alone: number; speculative: number };
    speedUp: number;
}

/**
 * The model applied to a run's own counts: every step verifies 1 + drafted/steps tokens on average and asks one draft
 * of k (the last step's draft included: a predictor is asked before each step); with per-prompt costs and the run's
 * prompt lengths, each generation's prompt is counted as in the header.
 */
export function predictRunSpeedUp(costs: StepCosts, run: RunCounts): RunPrediction {
    if (run.targetSteps <= 0) throw new RangeError(`a run needs target steps, got ${run.targetSteps}.`);
    const meanVerifyTokens = 1 + run.drafted / run.targetSteps;
    const verify = interpolateCost(costs.verify, meanVerifyTokens);
    const promptMs = { alone: 0, speculative: 0 };
    // what a prompt's first step costs beyond a steady step, but the prefill itself (see the header)
    const firstStepExtra = costs.alone - interpolateCost(costs.verify, 1);
    if (costs.promptFixed !== undefined && run.promptLengths !== undefined) {
        for (const length of run.promptLengths) {
            const fixed = interpolateCost(costs.promptFixed, length);
            const draftPrefill = costs.draftPrefill === undefined ? 0 : interpolateCost(costs.draftPrefill, length);
            promptMs.alone += fixed;
            promptMs.speculative += fixed + firstStepExtra + draftPrefill;
        }
    }
    const speculativeMs = promptMs.speculative + run.targetSteps * (verify + draftCost(costs, run.draftLength));
    const aloneMs = promptMs.alone + run.tokens * costs.alone;
    return {
        tau: run.tokens / run.targetSteps,
        meanVerifyTokens,
        speculativeMs,
        aloneMs,
        promptMs,
        speedUp: aloneMs / speculativeMs,
    };
}
