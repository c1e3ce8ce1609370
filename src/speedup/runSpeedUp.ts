/**
 * What speed-up to expect on this machine: measures, through the paths `specdraft generate --draft-model` runs (the
 * native target, the draft engine in process behind NativeDraftTokenPredictor), the target's cost per token alone, its
 * verification of k + 1 tokens and the drafter's draft of k tokens timed between such verifications, and projects the
 * speed-up per k with the step-cost model (speedUpModel.ts) and τ(k) from the evaluation (readTauFile.ts).
 */

import type { Token } from "node-llama-cpp";
import { defaultThreads } from "../engine/defaultThreads.js";
import { defaultGpu } from "../engine/engineDefaults.js";
import { readModelFileInfo } from "../engine/gguf.js";
import { loadEngine } from "../engine/loadEngine.js";
import type { DraftEngine, GpuChoice } from "../engine/types.js";
import { NativeDraftTokenPredictor } from "../generate/NativeDraftTokenPredictor.js";
import { NativeTarget } from "../generate/NativeTarget.js";
import { checkVocabularies } from "../generate/openDraftSource.js";
import { defaultMaxTokens } from "../generate/runGenerate.js";
import type { NativeTargetStats } from "../generate/types.js";
import type { Conversation } from "../validate/types.js";
import {
    conversationSource,
    type DraftFn,
    makePrompt,
    measuredVocab,
    pickConversations,
    steadyGrowth,
    timeAloneNative,
    timeFirstDraft,
    timeNativeVerify,
    timePromptFixed,
    timeWalk,
    type WalkSource,
} from "./measureCosts.js";
import type { TauByK } from "./readTauFile.js";
import { interpolateCost, predictRunSpeedUp, type StepCosts, speedUpAtTau } from "./speedUpModel.js";

/** Drafts of k projected when none are named. Defaults to `[1, 2, 4, 8, 16]`. */
export const defaultSpeedUpDraftLengths: readonly number[] = [1, 2, 4, 8, 16];
/** Tokens of the prompt the costs are measured after and the projection starts from. Defaults to `256`. */
export const defaultPromptTokens = 256;
/** Timed calls per figure. Defaults to `20`. */
export const defaultSpeedUpRepeats = 20;

export interface RunSpeedUpOptions {
    target: string;
    draftModel: string;
    /** τ(k) for every k of draftLengths (readTauFile). */
    tau: TauByK;
    /** The file τ was read from, for the report. */
    tauFile?: string;
    /** The k to project. Defaults to defaultSpeedUpDraftLengths. */
    draftLengths?: readonly number[];
    /** Defaults to `auto`. */
    gpu?: GpuChoice;
    /** CPU threads per llama.cpp context. Defaults to the CPUs less one, 1 to 8 (defaultThreads). */
    threads?: number;
    /** Defaults to defaultPromptTokens. */
    promptTokens?: number;
    /** Tokens of the generation the projection is for. Defaults to generate's, `256`. */
    maxTokens?: number;
    /** Defaults to defaultSpeedUpRepeats. */
    repeats?: number;
    /**
     * Held-out conversations (the target's continuations) the drafter's drafts are timed along, as a generation drafts
     * on the user's text (measureCosts.ts: pickConversations, conversationSource). Defaults to none: a synthetic text
     * with no repeats, on which the drafter's prompt-lookup candidates find nothing, so drafts cost more than on text
     * that repeats itself.
     */
    conversations?: readonly Conversation[];
    /**
     * Also time the drafts without prompt-lookup candidates (lookahead 0) where the backend's default checks some,
     * project both, and report the faster: each candidate adds a row to the drafter's step, which costs little where a
     * step is launch-bound or the drafter's layers outweigh its output head, and much where the head is large (the
     * SmolLM2 drafters' 49,152-row head on a CPU, docs/benchmarks.md). Defaults to `false`.
     */
    compareLookahead?: boolean;
    /** Called after each measured figure. */
    onProgress?: (done: number, total: number) => void;
}

/** One k of the report. */
export interface SpeedUpRow {
    k: number;
    tau: number;
    /** τ(k) derived from another k's (readTauFile.ts), not read. */
    tauDerived: boolean;
    /** ms of the target's verification of k + 1 tokens. */
    verifyMs: number;
    /** ms of the drafter's draft of k tokens, between verifications as in a generation. */
    draftMs: number;
    /** τ(k) · alone ÷ (verify(k + 1) + draft(k)): a long generation's speed-up. */
    steadySpeedUp: number;
    /** The same for a generation of maxTokens after a new prompt of promptTokens, its prompt's costs counted. */
    speedUp: number;
}

/** One prompt-lookup setting timed by compareLookahead: its best k and projected speed-up, and its draft(k) ms. */
export interface ComparedLookahead {
    k: number;
    speedUp: number;
    draftMsByK: Record<string, number>;
}

/** What `specdraft speedup` prints and writes with --json. */
export interface SpeedUpReport {
    target: string;
    draftModel: string;
    /** `cpu`, or the target's GPU (`CUDA:NVIDIA H200`). */
    device: string;
    threads: number;
    repeats: number;
    promptTokens: number;
    maxTokens: number;
    /** ms per token of the target alone. */
    aloneMsPerToken: number;
    /** ms a new prompt of promptTokens costs beyond its tokens: the target's F(P) and the drafter's prefill D(P). */
    promptMs: { target: number; drafter: number };
    /** ms of a verification by its tokens m (m = 1 and k + 1 for every k). */
    verifyMsByM: Record<string, number>;
    /** The text the drafts were timed on: held-out conversations (how many), or the synthetic one. */
    draftText: { source: "held-out" | "synthetic"; contexts: number };
    /**
     * A verification's native calls by m, per call: llama_decode calls, tokens, submit / wait / read ms, graphs
     * reused. `specdraft generate --out` records the same fields per generation (its modes' `target`), so a projection
     * that parts from a generation can be traced to the calls that cost more.
     */
    verifySplitByM: Record<string, NativeTargetStats>;
    /** Where τ came from: the file, and the τ the derived ones come from. */
    tau: { file?: string; derivedFrom?: TauByK["derivedFrom"] };
    rows: SpeedUpRow[];
    /** The k with the largest projected speedUp. */
    bestK: number;
    /**
     * Prompt-lookup candidates per drafter step the rows' drafts were timed with, whether that is the backend's
     * default, and (compareLookahead) each setting timed with its best k and projected speed-up, by candidates.
     */
    lookahead: { candidates: number; isDefault: boolean; compared?: Record<string, ComparedLookahead> };
    /** The command lines that use the best k. */
    commands: { serve: string; llamaServer: string; generate: string };
}

/** Measures on this machine and projects; a pair of two vocabularies: GenerateError `vocab_mismatch`, no weights loaded. */
export async function runSpeedUp(options: RunSpeedUpOptions): Promise<SpeedUpReport> {
    const draftLengths = [...new Set(options.draftLengths ?? defaultSpeedUpDraftLengths)].sort((a, b) => a - b);
    const gpu = options.gpu ?? defaultGpu;
    const threads = options.threads ?? defaultThreads();
    const promptTokens = options.promptTokens ?? defaultPromptTokens;
    const maxTokens = options.maxTokens ?? defaultMaxTokens;
    const repeats = options.repeats ?? defaultSpeedUpRepeats;
    const tauOf = (k: number): number => {
        const tau = options.tau.tau.get(k);
        if (tau === undefined) throw new RangeError(`no τ for k = ${k}`);
        return tau;
    };

    const targetFile = await readModelFileInfo(options.target);
    const draftFile = await readModelFileInfo(options.draftModel);
    checkVocabularies(
        { label: options.target, fingerprint: targetFile.vocabFingerprint },
        { label: options.draftModel, fingerprint: draftFile.vocabFingerprint },
    );
    const maxK = Math.max(...draftLengths);
    // the longest context any timing builds: the walk adds up to k + 1 tokens a draft, the target alone 8 + 4 · repeats
    const contextSize = promptTokens + Math.max(repeats * (maxK + 1), 16 + 4 * repeats) + maxK + 16;
    // the drafter's walks along held-out conversations hold a whole conversation and a draft
    const held = pickConversations(options.conversations ?? [], repeats);
    const drafterContext = Math.max(
        contextSize,
        ...held.map((c) => c.promptTokens.length + c.continuationTokens.length + maxK + 16),
    );
    const vocab = measuredVocab(targetFile.vocabSize);
    const prompt = makePrompt(vocab, promptTokens);
    const verifySizes = [...new Set([1, ...draftLengths.map((k) => k + 1)])];
    // drafts of 1 too: the drafter's prefill is its first draft of 1 less a draft of 1 (and one k alone is no line)
    const draftSizes = [...new Set([1, ...draftLengths])];
    const timings = options.compareLookahead ? 2 : 1; // the second skipped where the default checks no candidates
    let total = 2 + verifySizes.length + timings * (draftSizes.length + 1);
    let done = 0;
    const step = () => options.onProgress?.(++done, total);

    let target: NativeTarget | undefined;
    let engine: DraftEngine | undefined;
    try {
        target = await NativeTarget.load({
            modelPath: options.target,
            contextSize,
            maxOutputs: maxK + 1,
            gpu,
            threads,
        });
        const load = (lookahead?: number) =>
            loadEngine({
                modelPath: options.draftModel,
                modelFile: draftFile,
                streams: 1,
                contextSize: drafterContext,
                gpu,
                threads,
                lookahead,
            });
        engine = await load();
        const alone = await timeAloneNative(target, prompt, repeats);
        if (alone === null) throw new Error(`${options.target} ended every generation at once: no cost per token`);
        step();
        const fixed = await timePromptFixed(target, vocab, alone, [promptTokens]);
        step();
        const verify = await timeNativeVerify(target, prompt, verifySizes, repeats, ["all"], step);

        const verifyMs = new Map(verifySizes.map((m) => [m, verify[`m${m}`]?.ms.all ?? 0]));
        const targetPromptMs = fixed[`p${promptTokens}`] ?? 0;
        const liveTarget = target;
        // a synthetic walk accepts as a target would at τ(k); a draft of 1 not asked for, as at the smallest k asked
        const walkTau = (k: number): number => tauOf(draftLengths.includes(k) ? k : (draftLengths[0] ?? k));
        const sourcesFor = (k: number): WalkSource[] =>
            held.length > 0
                ? held.map(conversationSource)
                : [{ prompt, growth: () => steadyGrowth(walkTau(k), vocab) }];

        /** generate's drafter: the draft engine behind NativeDraftTokenPredictor, a draft of k after each verification;
         * its costs, and the projection per k with them. */
        const timeDrafter = async (drafter: DraftEngine) => {
            const drafts = new Map<number, number>();
            await liveTarget.verify(prompt, 0, prompt.length - 1);
            const between = async (n: number) => {
                await liveTarget.verify(
                    Array.from({ length: n + 1 }, (_, j) => 100 + j),
                    prompt.length,
                    0,
                );
            };
            const draftWith = (k: number): DraftFn => {
                const predictor = new NativeDraftTokenPredictor(drafter, k, liveTarget.eogIds);
                return (tokens) => {
                    predictor.reset({ stateTokens: tokens as Token[] });
                    return predictor.predictTokens();
                };
            };
            for (const k of draftSizes) {
                const walk = await timeWalk(draftWith(k), sourcesFor(k), [k], repeats, { between, onSize: step });
                drafts.set(k, walk[`n${k}`] ?? 0);
            }
            const first = await timeFirstDraft(draftWith(1), vocab, [promptTokens]);
            step();
            const drafterPromptMs = Math.max(0, (first[`p${promptTokens}`] ?? 0) - interpolateCost(drafts, 1));
            const costs: StepCosts = {
                alone,
                verify: verifyMs,
                draft: drafts,
                promptFixed: new Map([[promptTokens, targetPromptMs]]),
                draftPrefill: new Map([[promptTokens, drafterPromptMs]]),
            };
            const rows = draftLengths.map((k): SpeedUpRow => {
                const tau = tauOf(k);
                // generate's first step decodes the prompt alone (one token), every later one gives τ with k drafts
                const drafting = (maxTokens - 1) / tau;
                const run = predictRunSpeedUp(costs, {
                    tokens: maxTokens,
                    targetSteps: 1 + drafting,
                    drafted: drafting * k,
                    draftLength: k,
                    promptLengths: [promptTokens],
                });
                return {
                    k,
                    tau,
                    tauDerived: options.tau.derived.has(k),
                    verifyMs: verifyMs.get(k + 1) ?? 0,
                    draftMs: drafts.get(k) ?? 0,
                    steadySpeedUp: speedUpAtTau(costs, tau, k).speedUp,
                    speedUp: run.speedUp,
                };
            });
            const best = rows.reduce((a, b) => (b.speedUp > a.speedUp ? b : a));
            return { candidates: drafter.info.lookahead.candidates, rows, best, drafterPromptMs };
        };

        const timed = [await timeDrafter(engine)];
        if (options.compareLookahead && (timed[0]?.candidates ?? 0) > 0) {
            await engine.close();
            engine = undefined;
            engine = await load(0);
            timed.push(await timeDrafter(engine));
        } else if (options.compareLookahead) {
            total -= draftSizes.length + 1; // nothing to compare: the default checks no candidates
            options.onProgress?.(done, total);
        }
        const chosen = timed.reduce((a, b) => (b.best.speedUp > a.best.speedUp ? b : a));
        const { rows, best, drafterPromptMs } = chosen;
        const defaultCandidates = timed[0]?.candidates ?? chosen.candidates;
        const lookahead: SpeedUpReport["lookahead"] = {
            candidates: chosen.candidates,
            isDefault: chosen.candidates === defaultCandidates,
            ...(timed.length > 1
                ? {
                      compared: Object.fromEntries(
                          timed.map((t): [string, ComparedLookahead] => [
                              String(t.candidates),
                              {
                                  k: t.best.k,
                                  speedUp: t.best.speedUp,
                                  draftMsByK: Object.fromEntries(t.rows.map((row) => [String(row.k), row.draftMs])),
                              },
                          ]),
                      ),
                  }
                : {}),
        };
        return {
            target: options.target,
            draftModel: options.draftModel,
            device: target.gpuDevice || "cpu",
            threads,
            repeats,
            promptTokens,
            maxTokens,
            aloneMsPerToken: alone,
            promptMs: { target: targetPromptMs, drafter: drafterPromptMs },
            verifyMsByM: Object.fromEntries(verifySizes.map((m) => [`m${m}`, verifyMs.get(m) ?? 0])),
            draftText:
                held.length > 0 ? { source: "held-out", contexts: held.length } : { source: "synthetic", contexts: 1 },
            verifySplitByM: Object.fromEntries(
                verifySizes.flatMap((m) => {
                    const split = verify[`m${m}`]?.perCall.all;
                    return split ? [[`m${m}`, split]] : [];
                }),
            ),
            tau: { file: options.tauFile, derivedFrom: options.tau.derivedFrom },
            rows,
            bestK: best.k,
            lookahead,
            commands: commandLines(options.target, options.draftModel, best.k, {
                gpu,
                threads,
                maxTokens,
                lookahead: lookahead.isDefault ? undefined : lookahead.candidates,
            }),
        };
    } finally {
        await engine?.close();
        target?.dispose();
    }
}

/** `word` as one shell word: as it is when it needs no quoting, else in single quotes. */
function shellWord(word: string): string {
    return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}

/** The lines that use drafts of k: specdraft's drafter server, llama.cpp's own speculative server, and the check. */
export function commandLines(
    target: string,
    draftModel: string,
    k: number,
    settings: { gpu: GpuChoice; threads: number; maxTokens: number; lookahead?: number },
): SpeedUpReport["commands"] {
    const [t, d] = [shellWord(target), shellWord(draftModel)];
    const gpu = settings.gpu === defaultGpu ? "" : ` --gpu ${settings.gpu}`;
    // candidates other than the backend's default: serve's --lookahead, generate's --draft-lookahead
    const lookahead = settings.lookahead === undefined ? "" : ` --lookahead ${settings.lookahead}`;
    const draftLookahead = settings.lookahead === undefined ? "" : ` --draft-lookahead ${settings.lookahead}`;
    return {
        serve: `specdraft serve --model ${d} --draft-len ${k}${gpu}${lookahead}`,
        // llama.cpp drafts with -md only under --spec-type draft-simple; n-min 0 lets it draft to the end of a reply
        llamaServer:
            `llama-server -m ${t} -md ${d} --spec-type draft-simple --spec-draft-n-max ${k} --spec-draft-n-min 0` +
            ` -t ${settings.threads} -td ${settings.threads}`,
        generate:
            `specdraft generate --target ${t} --draft-model ${d} --draft-len ${k} --data HELD_OUT.jsonl` +
            ` --max-tokens ${settings.maxTokens}${gpu}${draftLookahead} --threads ${settings.threads}`,
    };
}

const fixed = (x: number, digits: number): string => x.toFixed(digits);

/** Which prompt-lookup candidates the drafts were timed with, and what each setting compared would give. */
function lookaheadLine(lookahead: SpeedUpReport["lookahead"]): string {
    const setting = `${lookahead.candidates} prompt-lookup candidate${lookahead.candidates === 1 ? "" : "s"} a drafter step`;
    const said = `drafts timed with ${setting}${lookahead.isDefault ? " (serve's default here)" : ""}`;
    if (lookahead.compared === undefined) return said;
    const each = Object.entries(lookahead.compared).map(
        ([candidates, best]) => `${candidates}: ${fixed(best.speedUp, 2)}× at k = ${best.k}`,
    );
    return `${said}; best projected by candidates ${each.join(", ")}`;
}

/** The report as the terminal shows it: the costs, the table by k, the best k and the lines that use it. */
export function formatSpeedUpReport(report: SpeedUpReport): string {
    const lines = [
        `target ${report.target}, drafter ${report.draftModel}: ${report.device}, ${report.threads} thread${report.threads === 1 ? "" : "s"}`,
        `target alone ${fixed(report.aloneMsPerToken, 3)} ms/token; a new ${report.promptTokens}-token prompt costs the target ` +
            `${fixed(report.promptMs.target, 2)} ms beyond its tokens and the drafter ${fixed(report.promptMs.drafter, 2)} ms`,
        report.draftText.source === "held-out"
            ? `drafts timed along ${report.draftText.contexts} held-out conversations`
            : "drafts timed on a synthetic text without repeats (--data times them on your conversations)",
        lookaheadLine(report.lookahead),
    ];
    const from = report.tau.derivedFrom;
    if (from !== undefined)
        lines.push(
            `τ(k) marked * derived from τ(${from.k}) = ${fixed(from.tau, 2)}: per-token agreement a = ${fixed(from.agreement, 3)}, ` +
                "τ(k) = (1 − a^(k+1)) ÷ (1 − a)",
        );
    const header = [
        "k",
        "τ(k)",
        "verify(k+1) ms",
        "draft(k) ms",
        "steady speed-up",
        `speed-up (${report.promptTokens}-token prompt, ${report.maxTokens} tokens)`,
    ];
    const cells = report.rows.map((row) => [
        String(row.k),
        `${fixed(row.tau, 2)}${row.tauDerived ? "*" : ""}`,
        fixed(row.verifyMs, 3),
        fixed(row.draftMs, 3),
        `${fixed(row.steadySpeedUp, 2)}×`,
        `${fixed(row.speedUp, 2)}×${row.k === report.bestK ? "  best" : ""}`,
    ]);
    const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? "").length)));
    const format = (row: string[]) =>
        row.map((cell, i) => (i === row.length - 1 ? cell : cell.padStart(widths[i] ?? 0))).join("  ");
    lines.push("", format(header), ...cells.map(format), "");
    const best = report.rows.find((row) => row.k === report.bestK);
    lines.push(
        `best k: ${report.bestK} (projected ${fixed(best?.speedUp ?? 0, 2)}× over the target alone)`,
        "",
        "use it:",
        `  ${report.commands.serve}`,
        `  ${report.commands.llamaServer}`,
        "check it (speed-up measured end to end on your prompts):",
        `  ${report.commands.generate}`,
    );
    return lines.join("\n");
}
