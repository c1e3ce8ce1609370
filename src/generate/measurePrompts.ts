/**
 * The measuring loop of `specdraft generate`: every prompt generated `runs` times with the target alone and with
 * drafts, after `warmup` untimed generations of the first prompt in each mode, alternating the order so neither mode
 * always runs warm; where a speculative run parts from the target alone, both are replayed there (replayDifference.ts).
 */
import type { SpeculativeRun } from "./generateSpeculatively.js";
import { type LogitsReplayer, replayDifference } from "./replayDifference.js";
import { comparePromptRuns } from "./summarizeGeneration.js";
import type { GenerationRun, PromptResult, TargetCall } from "./types.js";

/**
 * The two ways one prompt is generated: the target alone and with drafts; a speculative run by specdraft's loop also
 * gives its target calls, which `replayer`'s target decodes again where the outputs part (absent: no replay).
 */
export interface GenerationModes {
    alone: (tokens: number[]) => Promise<GenerationRun>;
    speculate: (tokens: number[]) => Promise<SpeculativeRun | { run: GenerationRun; calls?: undefined }>;
    replayer?: () => Promise<LogitsReplayer>;
}

/** A prompt ready to generate from: token ids in the target's vocabulary. */
export interface TokenizedPrompt {
    id: string;
    category?: string;
    tokens: number[];
}

/** Each prompt's runs in both modes, compared (comparePromptRuns) and a first difference replayed where it can be. */
export async function measurePrompts(
    prompts: readonly TokenizedPrompt[],
    modes: GenerationModes,
    counts: { runs: number; warmup: number },
    onProgress: ((done: number, total: number) => void) | undefined,
): Promise<PromptResult[]> {
    await warmUp(prompts[0], modes, counts.warmup);
    const total = prompts.length * counts.runs * 2;
    let done = 0;
    const step = (): void => onProgress?.(++done, total);
    const results: PromptResult[] = [];
    for (const prompt of prompts) results.push(await measurePrompt(prompt, modes, counts.runs, step));
    return results;
}

/** `warmup` untimed generations of `first` per mode: the first generations after a load pay one-off costs. */
async function warmUp(first: TokenizedPrompt | undefined, modes: GenerationModes, warmup: number): Promise<void> {
    for (let w = 0; w < warmup && first !== undefined; w++) {
        await modes.alone(first.tokens);
        await modes.speculate(first.tokens);
    }
}

/** One prompt `runs` times per mode, alternating which goes first; `step` is called after each generation. */
async function measurePrompt(
    prompt: TokenizedPrompt,
    modes: GenerationModes,
    runs: number,
    step: () => void,
): Promise<PromptResult> {
    const alone: GenerationRun[] = [];
    const speculative: GenerationRun[] = [];
    const calls: (TargetCall[] | undefined)[] = [];
    const generateAlone = async (): Promise<void> => {
        alone.push(await modes.alone(prompt.tokens));
        step();
    };
    const speculate = async (): Promise<void> => {
        const generated = await modes.speculate(prompt.tokens);
        speculative.push(generated.run);
        calls.push(generated.calls);
        step();
    };
    for (let run = 0; run < runs; run++) {
        if (run % 2 === 0) {
            await generateAlone();
            await speculate();
        } else {
            await speculate();
            await generateAlone();
        }
    }
    const result = comparePromptRuns(prompt.id, prompt.category, prompt.tokens.length, alone, speculative);
    await replayFirstDifference(result, prompt.tokens, calls, modes.replayer);
    return result;
}

/** Adds the near-tie check's figures to `result`'s first difference, when it has one and the run's calls replay. */
async function replayFirstDifference(
    result: PromptResult,
    prompt: readonly number[],
    calls: readonly (TargetCall[] | undefined)[],
    replayer: GenerationModes["replayer"],
): Promise<void> {
    const d = result.firstDifference;
    const runCalls = d === undefined ? undefined : calls[d.run];
    if (d === undefined || runCalls === undefined || replayer === undefined) return;
    const alone = result.alone[d.run]?.tokens ?? [];
    Object.assign(d, await replayDifference(await replayer(), prompt, alone, runCalls, d));
}
