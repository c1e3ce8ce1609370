/**
 * Where the time of one speculative step goes, measured on this machine: what `specdraft generate` pays per target
 * step and per draft, so that its speed-up can be predicted (and explained) from τ (bench/speedUpModel.ts):
 *
 *   speed-up(k) ≈ τ(k) · alone / (verify(k + 1) + draft(k))
 *
 * Target costs (`--target`):
 * - alone_per_token: ms per token of the target generating by itself through node-llama-cpp (`sequence.evaluate`);
 *   alone_native_per_token: the same through specdraft's native target (NativeTarget.generate, the loop native);
 * - verify[m]: ms for one node-llama-cpp `controlledEvaluate` of m tokens with the greedy next token asked at every
 *   position (`all`: the exact-node-llama-cpp verifier's step) or at the last only (`last`), plus erasing the m − 1;
 *   verify_native[m]: the native verifier's step (NativeTarget.verify: one decode, greedy tokens from llama.cpp's
 *   graph), with `all` and `last` as above, and their split (submit / wait / read ms, llama_decode calls, graph reuse);
 *   verify_native_host[m]: the same with the logits read back and the argmax taken on the host;
 * - alone_native_fixed[P]: what a new prompt of P tokens costs the native target beyond its tokens (prefill, and the
 *   first decodes after it): t(P, 8 tokens) − 8 · alone_native_per_token.
 * Drafter costs (`--drafter URL`, `--draft-model GGUF`):
 * - draft[n]: ms per `POST /draft` of n tokens to a specdraft server, the context growing by 8 random tokens a request
 *   (8 new tokens to evaluate, the measurement of 2026-12-01);
 * - draft_walk[n]: the same with the context growing as a generation grows it (the previous context + the accepted
 *   part of the draft + the target's token, accepting each draft token with probability 0.81): 1–2 new tokens a request;
 *   draft_step_ms: the server's /metrics over the walk (mean ms per decode step: decode = submit + wait, sample, host;
 *   share of steps whose graph llama.cpp reused);
 * - draft_walk_interleaved[n] (with --interleave-target T): the walk again with T, loaded in this process, verifying
 *   n + 1 tokens before each request (untimed), as `specdraft generate` alternates them: two processes sharing a GPU;
 * - draft_first[P]: ms of the first draft (n = 1) on a new context of P tokens: the drafter's prefill of a prompt;
 * - draft_in_process[n] / draft_walk_in_process[n] / draft_walk_in_process_interleaved[n] / draft_first_in_process[P]:
 *   the same with specdraft's draft engine loaded in this process (NativeDraftTokenPredictor's path: no HTTP), and
 *   steps_in_process: mean ms per decode step by its index within a request (1: the request's new tokens, 2, 3, 4+),
 *   which shows what a graph rebuild and CUDA-graph warm-up cost;
 * - draft_step_by_m[m] (with --lookahead-sweep M,…): a drafter step's cost when it decodes m = 1 + M tokens of one sequence —
 *   its own token and M prompt-lookup candidates, fillers where the lookup has none, so every step has exactly m — the
 *   mean decode ms (submit / wait) of the walk's steps of m tokens, and the walk's drafts of 8 and 16 with those
 *   candidates (their tokens per step are this synthetic text's; real text's come from bench/lookaheadSteps.ts, and
 *   bench/speedUpModel.ts composes the two); m1 is the same engine without candidates, in the same process.
 *
 *   node --import tsx bench/generateCosts.ts [--target T.gguf] [--drafter http://127.0.0.1:8000] [--draft-model D.gguf]
 *       [--interleave-target T.gguf] [--gpu cuda] [--repeats 20] [serve's engine options] > costs.json
 *
 * The in-process engine takes `specdraft serve`'s engine options (--lookahead, --step-prefill, --flash-attention, …:
 * src/cli/engineTuningOptions.ts), so a job gives the same flags to the server it times and to this process.
 */
import { Command, Option } from "commander";
import type { ControlledEvaluateInputItem, Token } from "node-llama-cpp";
import { parseIntegerListOption, parseIntegerOption } from "../src/cli/commandOptions.js";
import { addEngineTuningOptions, type EngineTuningFlags, engineTuningOf } from "../src/cli/engineTuningOptions.js";
import { createSpecdraftClient } from "../src/client/createDraftClient.js";
import { defaultThreads } from "../src/engine/defaultThreads.js";
import { defaultGpu, gpuChoices } from "../src/engine/engineDefaults.js";
import { readModelFileInfo } from "../src/engine/gguf.js";
import { loadEngine } from "../src/engine/loadEngine.js";
import type { DraftEngine, GpuChoice } from "../src/engine/types.js";
import { NativeTarget } from "../src/generate/NativeTarget.js";
import { loadLlama } from "../src/generate/runGenerate.js";
import {
    type Between,
    type DraftFn,
    makePrompt as makeSharedPrompt,
    measuredVocab,
    timeAloneNative,
    timeFirstDraft,
    timeNativeVerify,
    timePromptFixed,
    timeWalk,
    type WalkGrowth,
} from "../src/speedup/measureCosts.js";
import { seededRandom } from "./lib/seededRandom.js";
import type { DraftStepMs, InProcessStepMs } from "./speedUpTable.js";

/** Verify sizes m = k + 1 for the drafts of k the speed-up table projects (k ∈ {2, 4, 6, 8, 16}), and m = 1. */
const verifySizes = [1, 3, 5, 7, 9, 17];
/** Prompt lengths of the per-prompt costs (the held-out sets' prompts are 64–512 tokens). */
const promptLengths = [64, 256, 512];
/** Draft sizes n = k, and n = 1. */
const draftSizes = [1, 2, 4, 6, 8, 16];
/** Per-token agreement of the walk's simulated target (τ 5.1 at k = 16, the 1.7B → 8B pair's estimate). */
const walkAgreement = 0.81;
const contextSize = 2048;

interface Options extends EngineTuningFlags {
    target?: string;
    drafter?: string;
    draftModel?: string;
    interleaveTarget?: string;
    gpu: GpuChoice;
    repeats: number;
    lookaheadSweep?: number[];
}

type Prompt = number[];

const ms = (started: number): number => performance.now() - started;

/** 256 token ids over the measured vocabulary (the same prompt for every figure). */
const makePrompt = (vocab: number): Prompt => makeSharedPrompt(vocab, 256);

/**
 * The walks' growth: each draft token accepted with probability walkAgreement while the ones before it were, and a
 * random token of the target's (seeded: every run and peer walks the same contexts).
 */
function randomGrowth(vocab: number): WalkGrowth {
    const random = seededRandom(7);
    return {
        accepted: (draft) => {
            let accepted = 0;
            while (accepted < draft.length && random(1000) < walkAgreement * 1000) accepted++;
            return accepted;
        },
        nextToken: () => random(vocab - 10) + 10,
    };
}

/** A walk of every draft size with randomGrowth (see timeWalk). */
const walk = (
    draft: DraftFn,
    prompt: Prompt,
    vocab: number,
    repeats: number,
    hooks?: Parameters<typeof timeWalk>[4],
): Promise<Record<string, number>> => {
    const growth = randomGrowth(vocab); // one random stream over every size, as the walks were measured before
    return timeWalk(draft, [{ prompt, growth: () => growth }], draftSizes, repeats, hooks);
};
const round = (x: number): number => Math.round(x * 1000) / 1000;

async function measureTarget(path: string, options: Options): Promise<Record<string, unknown>> {
    const vocab = measuredVocab((await readModelFileInfo(path)).vocabSize);
    const prompt = makePrompt(vocab);
    const threads = defaultThreads();
    const llama = await loadLlama(options.gpu);
    // node-llama-cpp and the native addon share llama.cpp's libraries: keep node-llama-cpp loaded until the end
    const result: Record<string, unknown> = { gpu: llama.gpu };
    {
        const model = await llama.loadModel({ modelPath: path });
        const context = await model.createContext({ contextSize, sequences: 1, threads });
        const sequence = context.getSequence();
        const greedy = { generateNext: { token: true, options: { temperature: 0 } } } as const;

        // the target alone: a plain greedy evaluate, after the prompt and 8 tokens
        await sequence.clearHistory();
        let produced = 0;
        let started = 0;
        for await (const _token of sequence.evaluate(prompt.slice() as Token[], { temperature: 0 })) {
            if (produced === 8) started = performance.now();
            if (++produced >= 8 + options.repeats * 4) break;
        }
        result.alone_per_token = produced > 8 ? ms(started) / (produced - 8) : null;

        const verify: Record<string, { all: number; last: number }> = {};
        for (const m of verifySizes) {
            const row = { all: 0, last: 0 };
            for (const mode of ["all", "last"] as const) {
                await sequence.clearHistory();
                await sequence.controlledEvaluate(prompt.slice() as Token[]);
                let total = 0;
                for (let r = 0; r < options.repeats; r++) {
                    const input: ControlledEvaluateInputItem[] = [];
                    for (let j = 0; j < m; j++)
                        input.push(
                            mode === "all" || j === m - 1 ? [(100 + j + r) as Token, greedy] : ((100 + j + r) as Token),
                        );
                    const t = performance.now();
                    await sequence.controlledEvaluate(input);
                    if (m > 1)
                        await sequence.eraseContextTokenRanges([
                            { start: sequence.nextTokenIndex - (m - 1), end: sequence.nextTokenIndex },
                        ]);
                    total += ms(t);
                }
                row[mode] = total / options.repeats;
            }
            verify[`m${m}`] = row;
        }
        result.verify = verify;
        await context.dispose();
        await model.dispose();
    }

    // the native verifier twice: greedy tokens from llama.cpp's graph (backend sampling, what generate uses), and the
    // logits read back with the argmax on the host (rows split over threads)
    for (const backendSampling of [true, false]) {
        const target = await NativeTarget.load({
            modelPath: path,
            contextSize,
            maxOutputs: Math.max(...verifySizes),
            gpu: options.gpu,
            threads,
            backendSampling,
        });
        try {
            if (backendSampling) {
                result.native_gpu_device = target.gpuDevice || "cpu";
                const alone = await timeAloneNative(target, prompt, options.repeats);
                result.alone_native_per_token = alone;
                if (alone !== null)
                    result.alone_native_fixed = await timePromptFixed(target, vocab, alone, promptLengths);
                result.verify_native = await timeNativeVerify(target, prompt, verifySizes, options.repeats);
            } else {
                result.verify_native_host = await timeNativeVerify(target, prompt, verifySizes, options.repeats);
            }
        } finally {
            target.dispose();
        }
    }
    await llama.dispose();
    return result;
}

/** ms per draft of n, the context growing by 8 random tokens a request. */
async function timeGrowingBy8(draft: DraftFn, prompt: Prompt, vocab: number, repeats: number) {
    const out: Record<string, number> = {};
    for (const n of draftSizes) {
        const tokens = prompt.slice();
        await draft(tokens, n);
        let total = 0;
        for (let r = 0; r < repeats; r++) {
            for (let j = 0; j < 8; j++) tokens.push(((r * 31 + j * 17) % vocab) + 10);
            const t = performance.now();
            await draft(tokens, n);
            total += ms(t);
        }
        out[`n${n}`] = total / repeats;
    }
    return out;
}

interface StepCounters {
    count: number;
    decode: number;
    submit: number;
    wait: number;
    sample: number;
    host: number;
    reused: number;
}

/** The server's step counters from /metrics (sums in s, count), or undefined if it has none. */
async function readStepCounters(url: string): Promise<StepCounters | undefined> {
    const response = await fetch(new URL("metrics", url.endsWith("/") ? url : `${url}/`)).catch(() => undefined);
    if (!response?.ok) return undefined;
    const text = await response.text();
    const value = (name: string) => {
        const line = text.split("\n").find((l) => l.startsWith(`${name} `));
        return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1));
    };
    return {
        count: value("specdraft_step_decode_seconds_count"),
        decode: value("specdraft_step_decode_seconds_sum"),
        submit: value("specdraft_step_submit_seconds_sum"),
        wait: value("specdraft_step_wait_seconds_sum"),
        sample: value("specdraft_step_sample_seconds_sum"),
        host: value("specdraft_step_host_seconds_sum"),
        reused: value("specdraft_step_graph_reused_total"),
    };
}

async function measureHttpDrafter(url: string, prompt: Prompt, vocab: number, repeats: number, between?: Between) {
    const client = createSpecdraftClient(url, { name: url, timeoutMs: 10_000 });
    const draft: DraftFn = async (tokens, n) => {
        const outcome = await client.draft(tokens, n);
        if (!outcome.ok) throw new Error(`${url}: ${outcome.failure}: ${outcome.message}`);
        return outcome.draft;
    };
    const draftBy8 = await timeGrowingBy8(draft, prompt, vocab, repeats);
    const before = await readStepCounters(url);
    const draftWalk = await walk(draft, prompt, vocab, repeats);
    const after = await readStepCounters(url);
    let stepMs: DraftStepMs | null = null;
    if (before && after && after.count > before.count) {
        const steps = after.count - before.count;
        const mean = (key: keyof StepCounters) => round((1000 * (after[key] - before[key])) / steps);
        stepMs = {
            decode: mean("decode"),
            submit: mean("submit"),
            wait: mean("wait"),
            sample: mean("sample"),
            host: mean("host"),
            steps,
            graph_reused: round((after.reused - before.reused) / steps),
        };
    }
    const interleaved = between && {
        draft_walk_interleaved: await walk(draft, prompt, vocab, repeats, { between }),
    };
    return {
        draft: draftBy8,
        draft_walk: draftWalk,
        ...interleaved,
        draft_step_ms: stepMs,
        draft_first: await timeFirstDraft(draft, vocab, promptLengths),
    };
}

async function measureInProcessDrafter(
    path: string,
    options: Options,
    prompt: Prompt,
    vocab: number,
    between?: Between,
) {
    // per decode step, by its index within the request in flight (one stream: the steps of one request in order)
    const byIndex = new Map<number, { n: number; decode: number; submit: number; wait: number; reused: number }>();
    let stepIndex = 0;
    let recording = false;
    const engine: DraftEngine = await loadEngine({
        modelPath: path,
        streams: 1,
        contextSize,
        gpu: options.gpu,
        ...engineTuningOf(options),
        observer: {
            onStep: (step) => {
                if (!recording) return;
                const index = Math.min(++stepIndex, 4);
                const row = byIndex.get(index) ?? { n: 0, decode: 0, submit: 0, wait: 0, reused: 0 };
                row.n++;
                row.decode += step.decodeMs;
                row.submit += step.submitMs;
                row.wait += step.waitMs;
                row.reused += step.graphReused ? 1 : 0;
                byIndex.set(index, row);
            },
        },
    });
    try {
        const draft: DraftFn = (tokens, n) => engine.draft(tokens, n);
        const draftBy8 = await timeGrowingBy8(draft, prompt, vocab, options.repeats);
        recording = true;
        const draftWalk = await walk(draft, prompt, vocab, options.repeats, {
            onRequest: () => {
                stepIndex = 0;
            },
        });
        recording = false;
        const interleaved = between && {
            draft_walk_in_process_interleaved: await walk(draft, prompt, vocab, options.repeats, { between }),
        };
        const firstDraft = await timeFirstDraft(draft, vocab, promptLengths);
        const steps: Record<string, InProcessStepMs> = {};
        for (const [index, row] of [...byIndex.entries()].sort((a, b) => a[0] - b[0]))
            steps[index < 4 ? `step${index}` : "step4plus"] = {
                steps: row.n,
                decode: round(row.decode / row.n),
                submit: round(row.submit / row.n),
                wait: round(row.wait / row.n),
                graph_reused: round(row.reused / row.n),
            };
        return {
            draft_in_process: draftBy8,
            draft_walk_in_process: draftWalk,
            ...interleaved,
            draft_first_in_process: firstDraft,
            steps_in_process: steps,
            backend: engine.info.backend,
        };
    } finally {
        await engine.close();
    }
}

/**
 * A drafter step's cost at m = 1 + M tokens of one sequence, for each M: an engine with exactly M candidates a step
 * (one stream, a budget of 1 + M tokens, fillers), the walk's steps of m tokens timed, and its drafts of 8 and 16.
 */
async function measureStepCosts(path: string, options: Options, prompt: Prompt, vocab: number) {
    const out: Record<string, unknown> = {};
    for (const candidates of options.lookaheadSweep ?? []) {
        const m = 1 + candidates;
        const row = { steps: 0, decode: 0, submit: 0, wait: 0, reused: 0, drafted: 0, all: 0 };
        let recording = false;
        const engine = await loadEngine({
            modelPath: path,
            streams: 1,
            contextSize,
            gpu: options.gpu,
            ...engineTuningOf(options),
            lookahead: candidates,
            lookaheadStepTokens: m,
            lookaheadFill: true,
            observer: {
                onStep: (step) => {
                    if (!recording) return;
                    row.all++;
                    row.drafted += step.drafted;
                    // a request's first step also holds its new tokens: only the drafting steps are m tokens
                    if (step.tokens !== m) return;
                    row.steps++;
                    row.decode += step.decodeMs;
                    row.submit += step.submitMs;
                    row.wait += step.waitMs;
                    row.reused += step.graphReused ? 1 : 0;
                },
            },
        });
        try {
            const draft: DraftFn = (tokens, n) => engine.draft(tokens, n);
            await walk(draft, prompt, vocab, 2);
            recording = true;
            const steps = await walk(draft, prompt, vocab, options.repeats);
            recording = false;
            out[`m${m}`] = {
                candidates,
                step: round(row.decode / row.steps),
                submit: round(row.submit / row.steps),
                wait: round(row.wait / row.steps),
                graph_reused: round(row.reused / row.steps),
                steps: row.steps,
                synthetic_tokens_per_step: round(row.drafted / row.all),
                draft_walk: { n8: round(steps.n8 ?? 0), n16: round(steps.n16 ?? 0) },
            };
        } finally {
            await engine.close();
        }
    }
    return out;
}

const command = new Command("generateCosts")
    .description("Measure the target's per-token and per-verify-step costs and the drafter's per-draft costs.")
    .option("--target <gguf>", "target model")
    .option("--drafter <url>", "a specdraft server to time /draft against")
    .option("--draft-model <gguf>", "a drafter to time in this process (specdraft's draft engine, one stream)")
    .option(
        "--interleave-target <gguf>",
        "also time the drafts' walk with this target verifying k + 1 tokens between requests, as a generation does",
    )
    .addOption(new Option("--gpu <where>", "where llama.cpp computes").choices(gpuChoices).default(defaultGpu))
    .option("--repeats <n>", "measurements per figure", parseIntegerOption(1), 40)
    .option(
        "--lookahead-sweep <list>",
        "with --draft-model: a drafter step's cost at m = 1 + M tokens for each M (e.g. 0,1,2,…,15): M candidates a step",
        parseIntegerListOption(0),
    );
const program = addEngineTuningOptions(command).action(async (options: Options) => {
    if (!options.target && !options.drafter && !options.draftModel)
        throw new Error("nothing to measure: give --target, --drafter and/or --draft-model");
    const result: Record<string, unknown> = {
        target: options.target ?? null,
        drafter: options.drafter ?? null,
        draft_model: options.draftModel ?? null,
        unit: "ms",
        repeats: options.repeats,
    };
    if (options.target) Object.assign(result, await measureTarget(options.target, options));
    // drafter prompts: the target's vocabulary when given (the pair shares it), else the draft model's
    const vocabFrom = options.target ?? options.draftModel;
    const vocab = vocabFrom ? measuredVocab((await readModelFileInfo(vocabFrom)).vocabSize) : 4000;
    const prompt = makePrompt(vocab);
    // the generation's rhythm: a target on the same device verifies between draft requests (in this process, as
    // `specdraft generate` runs it), so the drafter's figures include sharing the GPU with it
    const target =
        options.interleaveTarget === undefined
            ? undefined
            : await NativeTarget.load({
                  modelPath: options.interleaveTarget,
                  contextSize,
                  maxOutputs: Math.max(...verifySizes),
                  gpu: options.gpu,
                  threads: defaultThreads(),
              });
    let between: Between | undefined;
    if (target) {
        const targetPrompt = makePrompt(measuredVocab(target.vocabSize));
        await target.verify(targetPrompt, 0, targetPrompt.length - 1);
        between = async (n) => {
            await target.verify(
                Array.from({ length: n + 1 }, (_, j) => 100 + j),
                targetPrompt.length,
                0,
            );
        };
        result.interleave_target = options.interleaveTarget;
    }
    try {
        if (options.drafter)
            Object.assign(result, await measureHttpDrafter(options.drafter, prompt, vocab, options.repeats, between));
        if (options.draftModel)
            Object.assign(result, await measureInProcessDrafter(options.draftModel, options, prompt, vocab, between));
        if (options.draftModel && options.lookaheadSweep)
            result.draft_step_by_m = await measureStepCosts(options.draftModel, options, prompt, vocab);
    } finally {
        target?.dispose();
    }
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
});

await program.parseAsync();
