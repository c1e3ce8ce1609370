/**
 * What a generate run reports: each prompt's speculative runs checked against the target alone (lossless or the first
 * difference), totals and ratios over all prompts (tokens/s, speed-up, τ, draft time share), and the terminal table.
 */
import { sumStats } from "./targetStats.js";
import type { GenerateSummary, GenerationRun, ModeTotals, NativeTargetStats, PromptResult } from "./types.js";

// Checks speculation was lossless for one prompt, and says where it was not.

/** Each speculative run against the target-alone run of the same round. */
export function comparePromptRuns(
    id: string,
    category: string | undefined,
    promptLength: number,
    alone: GenerationRun[],
    speculative: GenerationRun[],
): PromptResult {
    const result: PromptResult = { id, promptLength, alone, speculative, identical: true };
    if (category !== undefined) result.category = category;
    for (const [run, speculativeRun] of speculative.entries()) {
        // a missing target-alone run compares as an empty output: a mismatch, not a pass
        const difference = firstDifference(alone[run]?.tokens ?? [], speculativeRun.tokens);
        if (difference !== undefined) {
            result.identical = false;
            result.firstDifference = { run, ...difference };
            break;
        }
    }
    return result;
}

/**
 * One line naming the prompt, the run and the first differing position, and what the near-tie check found there;
 * `undefined` when the outputs are identical.
 */
export function describeMismatch(prompt: PromptResult): string | undefined {
    const d = prompt.firstDifference;
    if (prompt.identical || d === undefined) return undefined;
    return (
        `output mismatch: prompt ${JSON.stringify(prompt.id)}, run ${d.run + 1}: speculative output differs from the target alone ` +
        `at position ${d.position} (expected token ${d.expected ?? "end of output"}, found ${d.actual ?? "end of output"}${replayNote(d)})`
    );
}

/** What the near-tie check found at a first difference, as the tail of describeMismatch's line ("" if it did not run). */
function replayNote(d: NonNullable<PromptResult["firstDifference"]>): string {
    if (d.otherContext !== undefined) {
        const { position, expected, found } = d.otherContext;
        return `; not a near tie: the speculative run's cache held token ${found} at context position ${position} where the target alone had ${expected}`;
    }
    if (d.replayedTokens === undefined || d.logitGap === undefined || d.speculativeLogitGap === undefined)
        return d.nearTie === false ? "; not a near tie: the speculative run computed no token there" : "";
    const signed = (x: number): string => (x >= 0 ? "+" : "") + x.toPrecision(2);
    const figures =
        `logit[expected] − logit[found] is ${signed(d.logitGap)} as the target alone computed it and ` +
        `${signed(-d.speculativeLogitGap)} as the speculative run did; their logits differ by up to ${d.kernelDisagreement?.toPrecision(2)}`;
    if (d.nearTie) return `; a near tie: ${figures}`;
    const { alone, speculative } = d.replayedTokens;
    return `; not a near tie: decoded again in the same shapes, the target alone gives token ${alone} and the speculative run ${speculative} there (${figures})`;
}

/**
 * What a run's differences mean for its exit: a difference at a near tie is the decode shapes' rounding, not an error of
 * speculation (a warning naming it); any other is a failure (the first one's line).
 */
export function judgeDifferences(summary: GenerateSummary<string>): { warnings: string[]; failure?: string } {
    const differing = summary.prompts.filter((p) => !p.identical);
    const warnings = differing
        .filter((p) => p.firstDifference?.nearTie === true)
        .map((p) => `warning: ${describeMismatch(p)}`);
    const failing = differing.find((p) => p.firstDifference?.nearTie !== true);
    return failing === undefined ? { warnings } : { warnings, failure: describeMismatch(failing) };
}

/** The first index where `expected` and `actual` differ (a missing token counts as `null`), or `undefined` if equal. */
export function firstDifference(
    expected: readonly number[],
    actual: readonly number[],
): { position: number; expected: number | null; actual: number | null } | undefined {
    const length = Math.max(expected.length, actual.length);
    for (let i = 0; i < length; i++)
        if (expected[i] !== actual[i]) return { position: i, expected: expected[i] ?? null, actual: actual[i] ?? null };
    return undefined;
}

// Totals and ratios over all prompts and runs: tokens/s of each mode, speed-up, τ, draft time share, equality.

export function summarizeGeneration<Verifier extends string>(
    prompts: PromptResult[],
    about: Pick<GenerateSummary<Verifier>, "target" | "draft" | "verifier" | "settings" | "warnings">,
): GenerateSummary<Verifier> {
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
        nearTies: prompts.filter((p) => p.firstDifference?.nearTie === true).length,
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
        ...targetTotals(runs),
    };
}

/** The runs' native target stats summed, where every run has them. */
function targetTotals(runs: GenerationRun[]): Pick<ModeTotals, "target"> {
    const stats = runs.map((run) => run.target);
    if (stats.length === 0 || stats.some((s) => s === undefined)) return {};
    return { target: sumStats(stats as NativeTargetStats[]) };
}

/** a ÷ b, or 0 when b is 0 (no tokens generated at all). */
function ratio(a: number, b: number): number {
    return b === 0 ? 0 : a / b;
}

/** The terminal table of `specdraft generate`: target alone and speculative side by side. */
export function formatGenerateReport(summary: GenerateSummary<string>): string {
    const { alone, speculative } = summary;
    const draftName = `${summary.draft.kind} (${summary.draft.source}), ${summary.verifier} verifier`;
    const rows: [string, string, string][] = [
        ["", "target alone", `speculative: ${draftName}`],
        ["weights (target / drafter)", summary.target.quantization, summary.draft.quantization ?? "–"],
        ["tokens", String(alone.tokens), String(speculative.tokens)],
        ["seconds", alone.seconds.toFixed(3), speculative.seconds.toFixed(3)],
        ["tokens/s", alone.tokensPerSecond.toFixed(1), speculative.tokensPerSecond.toFixed(1)],
        ["speed-up", "1.00×", `${summary.speedUp.toFixed(2)}×`],
        ["target steps", String(alone.targetSteps), String(speculative.targetSteps)],
        ["τ (tokens per target step)", "1.00", summary.tau.toFixed(2)],
        ["draft tokens accepted / offered", "–", `${speculative.accepted} / ${speculative.drafted}`],
        ["draft time share", "–", `${(summary.draftTimeShare * 100).toFixed(1)} %`],
        [
            "outputs identical",
            "",
            summary.identical
                ? "yes"
                : summary.nearTies > 0
                  ? `NO (${summary.nearTies} of ${summary.prompts.filter((p) => !p.identical).length} at near ties)`
                  : "NO",
        ],
    ];
    const width = (column: 0 | 1 | 2): number => Math.max(...rows.map((row) => row[column].length));
    const [labelWidth, aloneWidth, speculativeWidth] = [width(0), width(1), width(2)];
    const lines = rows.map(
        ([label, aloneCell, speculativeCell]) =>
            `${label.padEnd(labelWidth)}  ${aloneCell.padStart(aloneWidth)}  ${speculativeCell.padStart(speculativeWidth)}`,
    );
    const { maxTokens, draftLength, runs, gpu } = summary.settings;
    lines.push(`${summary.prompts.length} prompts × ${runs} runs, max ${maxTokens} tokens, k = ${draftLength}, ${gpu}`);
    return lines.join("\n");
}
