/**
 * engineBench — the draft engine's own throughput, without HTTP: the same walk as serveBench (`--streams`
 * conversations from `--start-context` random ids, each step drafting `--draft-len` tokens and growing by `--accepted`
 * drafted tokens + 1), run twice on one loaded engine: one request at a time (round-robin over the conversations),
 * then all conversations at once (each sends its next request as soon as its draft returns). Prints one JSON object
 * with one entry in `runs` per `--max-steps-per-run` value (each loads the engine afresh), so the native loop's
 * multi-step runs (0) and the old JS round trip per step (1) are compared in one process. Each phase reports the mean
 * ms per decode step in llama_decode, in fetching results and outside llama.cpp (`step_ms`: decode, sample, host).
 *
 *   node --import tsx bench/engineBench.ts --model test/fixtures/tiny-qwen3.gguf --gpu cpu --streams 32 --max-steps-per-run 1,0
 *   node --import tsx bench/engineBench.ts --model drafter.gguf --gpu cuda --streams 32 --start-context 512
 */

import cliProgress from "cli-progress";
import { Command, Option } from "commander";
import { parseIntegerListOption, parseIntegerOption } from "../src/cli/commandOptions.js";
import { defaultDraftLength, defaultGpu, defaultStreams, gpuChoices, kvTypes } from "../src/engine/engineDefaults.js";
import { loadEngine } from "../src/engine/loadEngine.js";
import type { DraftEngine, EngineInfo, GpuChoice, KvType } from "../src/engine/types.js";
import { percentile } from "../src/validate/summarizeWalk.js";
import { seededRandom } from "./lib/seededRandom.js";

interface BenchFlags {
    model: string;
    gpu: GpuChoice;
    streams: number;
    context: number;
    startContext: number;
    draftLen: number;
    accepted: number;
    steps: number;
    threads?: number;
    kvUnified: boolean;
    flashAttention?: boolean;
    backendSampling?: boolean;
    kvType?: KvType;
    padBatch: number;
    maxStepsPerRun: number[];
    seed: number;
    progress: boolean;
}

interface PhaseResult {
    requests: number;
    seconds: number;
    requests_per_s: number;
    latency_ms: { p50: number; p95: number; mean: number };
    tokens_evaluated_per_request: number;
    tokens_reused_per_request: number;
    decodes_per_request: number;
    decode_batch_mean: number;
    /** Mean ms per decode step: in llama_decode + sync, fetching results, outside llama.cpp. */
    step_ms: { decode: number; sample: number; host: number; graph_reused: number };
}

/** Every integer option of this bench is ≥ 0. */
const integer = parseIntegerOption(0);

const counters = {
    evaluated: 0,
    reused: 0,
    decodes: 0,
    decodeSequences: 0,
    decodeMs: 0,
    sampleMs: 0,
    hostMs: 0,
    steps: 0,
    graphReused: 0,
};

async function runPhase(
    engine: DraftEngine,
    flags: BenchFlags,
    contexts: number[][],
    concurrent: boolean,
    random: (max: number) => number,
    label: string,
): Promise<PhaseResult> {
    const latencies: number[] = [];
    const before = { ...counters };
    const total = flags.steps * contexts.length;
    const bar = flags.progress
        ? new cliProgress.SingleBar(
              { format: `${label} {bar} {value}/{total} requests`, clearOnComplete: true },
              cliProgress.Presets.shades_classic,
          )
        : undefined;
    bar?.start(total, 0);
    const step = async (i: number) => {
        let context = contexts[i] ?? [];
        if (context.length + flags.draftLen + flags.accepted + 1 > flags.context)
            context = Array.from({ length: flags.startContext }, () => random(engine.info.vocabSize));
        const started = performance.now();
        const draft = await engine.draft(context, flags.draftLen);
        latencies.push(performance.now() - started);
        contexts[i] = [...context, ...draft.slice(0, flags.accepted), random(engine.info.vocabSize)];
        bar?.increment();
    };
    const started = performance.now();
    if (concurrent) {
        await Promise.all(
            contexts.map(async (_, i) => {
                for (let s = 0; s < flags.steps; s++) await step(i);
            }),
        );
    } else {
        for (let s = 0; s < flags.steps; s++) for (let i = 0; i < contexts.length; i++) await step(i);
    }
    const seconds = (performance.now() - started) / 1000;
    bar?.stop();
    const requests = latencies.length;
    latencies.sort((a, b) => a - b);
    const decodes = counters.decodes - before.decodes;
    return {
        requests,
        seconds: round(seconds),
        requests_per_s: round(requests / seconds),
        latency_ms: {
            p50: round(percentile(latencies, 50) ?? 0),
            p95: round(percentile(latencies, 95) ?? 0),
            mean: round(latencies.reduce((a, b) => a + b, 0) / requests),
        },
        tokens_evaluated_per_request: round((counters.evaluated - before.evaluated) / requests),
        tokens_reused_per_request: round((counters.reused - before.reused) / requests),
        decodes_per_request: round(decodes / requests),
        decode_batch_mean: round((counters.decodeSequences - before.decodeSequences) / decodes),
        step_ms: {
            decode: round((counters.decodeMs - before.decodeMs) / (counters.steps - before.steps), 3),
            sample: round((counters.sampleMs - before.sampleMs) / (counters.steps - before.steps), 3),
            host: round((counters.hostMs - before.hostMs) / (counters.steps - before.steps), 3),
            graph_reused: round((counters.graphReused - before.graphReused) / (counters.steps - before.steps), 3),
        },
    };
}

function round(x: number, digits = 2): number {
    return Number(x.toFixed(digits));
}

async function runEngine(flags: BenchFlags, maxStepsPerRun: number) {
    const engine = await loadEngine({
        modelPath: flags.model,
        gpu: flags.gpu,
        streams: flags.streams,
        contextSize: flags.context,
        threads: flags.threads,
        kvUnified: flags.kvUnified,
        flashAttention: flags.flashAttention,
        backendSampling: flags.backendSampling,
        kvType: flags.kvType,
        padBatch: flags.padBatch,
        testing: { maxStepsPerRun },
        observer: {
            onPrefix: (evaluated, reused) => {
                counters.evaluated += evaluated;
                counters.reused += reused;
            },
            onStep: (step) => {
                counters.decodes++;
                counters.decodeSequences += step.sequences;
                counters.steps++;
                if (step.graphReused) counters.graphReused++;
                counters.decodeMs += step.decodeMs;
                counters.sampleMs += step.sampleMs;
                counters.hostMs += step.hostMs;
            },
        },
    });
    try {
        const random = seededRandom(flags.seed);
        const contexts = Array.from({ length: flags.streams }, () =>
            Array.from({ length: flags.startContext }, () => random(engine.info.vocabSize)),
        );
        // warm-up: one step of every conversation, so both phases measure the walk's steady state (prefix reuse)
        await runPhase(engine, { ...flags, steps: 1, progress: false }, contexts, true, random, "warm-up");
        const sequential = await runPhase(engine, flags, contexts, false, random, "one at a time");
        const concurrent = await runPhase(engine, flags, contexts, true, random, `${flags.streams} at once`);
        return {
            info: engine.info,
            result: {
                max_steps_per_run: maxStepsPerRun,
                one_at_a_time: sequential,
                concurrent,
                concurrent_over_one_at_a_time: round(concurrent.requests_per_s / sequential.requests_per_s),
            },
        };
    } finally {
        await engine.close();
    }
}

async function main(flags: BenchFlags): Promise<void> {
    const runs = [];
    let info: EngineInfo | undefined;
    for (const maxStepsPerRun of flags.maxStepsPerRun) {
        const run = await runEngine(flags, maxStepsPerRun);
        info = run.info;
        runs.push(run.result);
    }
    if (info === undefined) throw new Error("--max-steps-per-run: expected at least one value");
    const { modelName, quantization, backend, flashAttention, streams, contextSize } = info;
    console.log(
        JSON.stringify(
            {
                date: new Date().toISOString(),
                model: modelName,
                quantization,
                backend,
                flash_attention: flashAttention,
                kv_unified: flags.kvUnified,
                kv_type: flags.kvType ?? "default",
                pad_batch: flags.padBatch,
                backend_sampling: flags.backendSampling ?? "default",
                streams,
                context_size: contextSize,
                start_context: flags.startContext,
                draft_len: flags.draftLen,
                accepted: flags.accepted,
                runs,
            },
            null,
            2,
        ),
    );
}

const program = new Command("engineBench")
    .description("Draft engine throughput without HTTP: one request at a time vs all streams at once")
    .requiredOption("--model <path>", "GGUF drafter")
    .addOption(new Option("--gpu <choice>", "where llama.cpp computes").choices(gpuChoices).default(defaultGpu))
    .option("--streams <n>", "conversations (and engine streams)", integer, defaultStreams)
    .option("--context <n>", "tokens per sequence", integer, 2048)
    .option("--start-context <n>", "random tokens each conversation starts from", integer, 512)
    .option("--draft-len <n>", "tokens per draft", integer, defaultDraftLength)
    .option("--accepted <n>", "drafted tokens accepted per step (then +1 target token)", integer, 5)
    .option("--steps <n>", "requests per conversation per phase", integer, 10)
    .option("--threads <n>", "llama.cpp CPU threads (default: the engine's)", integer)
    .option("--kv-unified", "one KV buffer for all sequences", false)
    .option("--flash-attention", "force flash attention on")
    .option("--no-flash-attention", "force flash attention off")
    .option("--backend-sampling", "force greedy sampling inside llama.cpp's graph on")
    .option("--no-backend-sampling", "force it off (argmax over host logits)")
    .addOption(new Option("--kv-type <type>", "KV cache element type (default: llama.cpp's f16)").choices(kvTypes))
    .option("--pad-batch <fraction>", "pad decode steps to all streams when this fraction drafts (0: never)", Number, 0)
    .option(
        "--max-steps-per-run <list>",
        "decode steps per native run, comma-separated to compare (0: no limit, 1: a JS round trip per step)",
        parseIntegerListOption(0),
        [0],
    )
    .option("--seed <n>", "random seed", integer, 1)
    .option("--no-progress", "no progress bars");

program.parse();
await main(program.opts<BenchFlags>());
