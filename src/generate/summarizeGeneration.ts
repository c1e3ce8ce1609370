/** Totals and ratios over all prompts and runs: tokens/s of each mode, speed-up, τ, draft time share, equality. */
import type { GenerateSummary, GenerationRun, ModeTotals, PromptResult } from "./types.js";

export function summarizeGeneration(
    prompts: PromptResult[],
    about: Pick<GenerateSummary, "target" | "draft" | "verifier" | "settings" | "warnings">,
): GenerateSummary {
    const alone = totals(prompts.flatMap((p) => p.alone));
    const speculative = totals(prompts.flatMap((p) => p.speculative));
    return {
        ...about,
        prompts,
        alone,
        speculative,
        speedUp: ratio(speculative.tokensPerSecond, alone.tokensPerSecond),
        tau: ratio(speculative.tokens, speculative.targetSteps),
        draftTimeShare: ratio(speculative.draftSeconds, speculative.seconds),
        identical: prompts.every((p) => p.identical),
        finishedAt: new Date().toISOString(),
    };
}

function totals(runs: GenerationRun[]): ModeTotals {
    const sum = (pick: (run: GenerationRun) => number): number => runs.reduce((total, run) => total + pick(run), 0);
    const tokens = sum((run) => run.tokens.length);
    const seconds = sum((run) => run.seconds);
    return {
        tokens,
        seconds,
        tokensPerSecond: ratio(tokens, seconds),
        targetSteps: sum((run) => run.targetSteps),
        drafted: sum((run) => run.drafted),
        accepted: sum((run) => run.accepted),
        draftSeconds: sum((run) => run.draftSeconds),
    };
}

/** a ÷ b, or 0 when b is 0 (no tokens generated at all). */
function ratio(a: number, b: number): number {
    return b === 0 ? 0 : a / b;
}
