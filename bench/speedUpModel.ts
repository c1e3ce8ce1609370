/**
 * The step-cost model's bench-only part (the model itself: src/speedup/speedUpModel.ts): drafts whose steps check
 * prompt-lookup candidates (the draft engine's `lookahead`) are composed from two measurements
 * made apart, since random weights (the GPU's real shapes) have no text statistics and a trained drafter on real text
 * has no real shape: a drafter step's cost at m tokens of one sequence, step(m) (generateCosts' draft_step_by_m), and
 * the steps a draft of n takes with M candidates a step on real text, s_M(n) (bench/lookaheadSteps.ts):
 *
 *   draft_M(n) ≈ draft(n) − n · step(1) + s_M(n) · step(1 + M)
 *
 * (what the plain draft costs beyond its n one-token steps — the request, HTTP, the prefill — kept as measured). It
 * pays when n / s_M(n), the tokens a step gives, exceeds step(1 + M) ÷ step(1), the break-even.
 */
import { interpolateCost, type StepCosts } from "../src/speedup/speedUpModel.js";

/** What candidates give and cost: the steps on real text and a step's cost by its tokens. */
export interface CandidateCosts {
    /** ms of a drafter step of m tokens of one sequence, by m (1: no candidates). */
    step: ReadonlyMap<number, number>;
    /** Candidates a step (M). */
    candidates: number;
    /** Steps a draft of n tokens takes with M candidates a step, by n (n / tokens per step). */
    stepsPerDraft: ReadonlyMap<number, number>;
}

/** The tokens a drafter step must give for M candidates to pay: step(1 + M) ÷ step(1). */
export function breakEvenTokensPerStep(step: ReadonlyMap<number, number>, candidates: number): number {
    return interpolateCost(step, 1 + candidates) / interpolateCost(step, 1);
}

/** draft_M(n) ≈ draft(n) − n · step(1) + s_M(n) · step(1 + M), for a measured plain draft of n tokens. */
export function composeDraftWithCandidates(plainDraftMs: number, n: number, given: CandidateCosts): number {
    if (n === 0) return 0;
    const steps = interpolateCost(given.stepsPerDraft, n);
    return (
        plainDraftMs - n * interpolateCost(given.step, 1) + steps * interpolateCost(given.step, 1 + given.candidates)
    );
}

/** `costs` with every measured draft size composed with candidates. */
export function withCandidates(costs: StepCosts, given: CandidateCosts): StepCosts {
    const draft = new Map<number, number>();
    for (const [n, ms] of costs.draft) draft.set(n, composeDraftWithCandidates(ms, n, given));
    return { ...costs, draft };
}
