/**
 * Throughput and latency of a draft server under a speculative-decoding walk: `--streams` conversations at once, each
 * asking for a draft of its whole context, then growing by `--accepted` drafted tokens + 1 corrected token (a target
 * that accepts 5 of 16 moves 6 tokens), `--steps` times. Works against any specdraft `/draft` server and, with a
 * `llama-server+http://…` URL, against llama.cpp's `/completion` (same clients as `specdraft validate`).
 *
 * Run (the server must be up):
 *   npm run bench:serve -- --url http://127.0.0.1:8000 --streams 32
 *   npm run bench:serve -- --url llama-server+http://127.0.0.1:8080 --streams 32 --vocab-size 151936
 * Prints one JSON object: requests/s, p50/p95 latency, and for a specdraft server the tokens evaluated and reused per
 * request, the mean decode batch and the mean ms per decode step in llama_decode, in fetching results and outside
 * llama.cpp (`step_ms`; from its /metrics, before vs after the measured steps).
 *
 * Behind a proxy (docs/deploy.md) each stream sends its own conversation key (`--no-conversation-key`: none, so the
 * proxy spreads a stream's requests over the replicas), and `--metrics` names every replica, whose counters are summed:
 *   npm run bench:serve -- --url http://127.0.0.1:8000 --metrics http://127.0.0.1:8001 --metrics http://127.0.0.1:8002
 */

import cliProgress from "cli-progress";
import { Command } from "commander";
import { parseIntegerOption } from "../src/cli/commandOptions.js";
import { newConversationKey } from "../src/client/conversationKey.js";
import { createDraftClient } from "../src/client/createDraftClient.js";
import { defaultDraftLength, defaultStreams } from "../src/engine/engineDefaults.js";
import { percentile } from "../src/validate/summarizeWalk.js";

/** Measured steps per conversation. Defaults to `20`. */
const defaultSteps = 20;
/** Unmeasured first steps per conversation (the first one prefills the whole start context). Defaults to `1`. */
const defaultWarmupSteps = 1;
/** Tokens each conversation starts with. Defaults to `512`. */
const defaultStartContext = 512;
/** Draft tokens the imagined target accepts per step (it then adds 1 token of its own). Defaults to `5`. */
const defaultAccepted = 5;
/** Per-request timeout in ms. Defaults to `60000`. */
const defaultTimeoutMs = 60_000;

interface BenchOptions {
    url: string;
    streams: number;
    steps: number;
    warmupSteps: number;
    startContext: number;
    accepted: number;
    draftLen: number;
    vocabSize?: number;
    seed: number;
    timeoutMs: number;
    conversationKey: boolean;
    metrics: string[];
    progress: boolean;
}

/** Counters read from a specdraft server's /metrics. */
interface ServerCounters {
    evaluated: number;
    reused: number;
    drafts: number;
    decodeSequencesSum: number;
    decodeCount: number;
    /** Sums (s) and count of the per-step time histograms. */
    stepDecodeSum: number;
    stepSampleSum: number;
    stepHostSum: number;
    stepSubmitSum: number;
    stepWaitSum: number;
    stepCount: number;
    stepGraphReused: number;
}

const program = new Command("serveBench")
    .description(
        "Replay a many-stream speculative-decoding walk against a draft server; print requests/s and latency as JSON.",
    )
    .requiredOption("--url <url>", "http://host:port (specdraft /draft) or llama-server+http://host:port (/completion)")
    .option(
        "--streams <n>",
        "conversations walked at once (default: serve's streams)",
        parseIntegerOption(1),
        defaultStreams,
    )
    .option("--steps <n>", "measured steps per conversation", parseIntegerOption(1), defaultSteps)
    .option("--warmup-steps <n>", "unmeasured first steps per conversation", parseIntegerOption(0), defaultWarmupSteps)
    .option(
        "--start-context <tokens>",
        "tokens each conversation starts with",
        parseIntegerOption(1),
        defaultStartContext,
    )
    .option(
        "--accepted <n>",
        "draft tokens accepted per step (context grows by accepted + 1)",
        parseIntegerOption(0),
        defaultAccepted,
    )
    .option("--draft-len <k>", "tokens asked for per draft", parseIntegerOption(1), defaultDraftLength)
    .option(
        "--vocab-size <n>",
        "ids are drawn below this (default: /info's vocab_size, else llama-server's n_vocab)",
        parseIntegerOption(2),
    )
    .option("--seed <n>", "seed of the random contexts", parseIntegerOption(0), 1)
    .option("--timeout-ms <ms>", "per-request timeout", parseIntegerOption(1), defaultTimeoutMs)
    .option("--no-conversation-key", "send no conversation key (a proxy then spreads a stream over its replicas)")
    .option(
        "--metrics <url>",
        "a server whose /metrics counters are read, summed over all given; repeat for each replica behind a proxy (default: --url)",
        (url: string, urls: string[]) => [...urls, url],
        [],
    )
    .option("--no-progress", "no progress bar")
    .action(async (options: BenchOptions) => {
        process.stdout.write(`${JSON.stringify(await runBench(options), null, 2)}\n`);
    });

await program.parseAsync();

async function runBench(options: BenchOptions) {
    const client = createDraftClient(options.url, options.timeoutMs);
    const isLlamaServer = options.url.startsWith("llama-server+");
    const baseUrl = isLlamaServer ? options.url.slice("llama-server+".length) : options.url;
    const info = isLlamaServer ? undefined : await getJson(new URL("/info", baseUrl));
    const metricsUrls = options.metrics.length > 0 ? options.metrics : [baseUrl];
    const vocabSize = options.vocabSize ?? numberField(info, "vocab_size") ?? (await llamaServerVocabSize(baseUrl));
    if (vocabSize === undefined) throw new Error("cannot tell the vocabulary size: pass --vocab-size");

    const random = mulberry32(options.seed);
    const randomId = () => Math.floor(random() * vocabSize);
    // each stream starts with its own random context, so streams share no prefix
    const contexts = Array.from({ length: options.streams }, () =>
        Array.from({ length: options.startContext }, randomId),
    );
    const keys = contexts.map(() => (options.conversationKey ? newConversationKey() : undefined));

    const bar = options.progress
        ? new cliProgress.SingleBar(
              { format: "steps {bar} {value}/{total} requests | {phase}", stream: process.stderr },
              cliProgress.Presets.shades_classic,
          )
        : undefined;
    bar?.start(options.streams * (options.warmupSteps + options.steps), 0, { phase: "warm-up" });

    const walk = async (steps: number, latencies: number[] | undefined, failures: { count: number }) =>
        Promise.all(
            contexts.map(async (context, stream) => {
                for (let step = 0; step < steps; step++) {
                    const outcome = await client.draft(context, options.draftLen, keys[stream]);
                    latencies?.push(outcome.latencyMs);
                    if (!outcome.ok) failures.count++;
                    const drafted = outcome.ok ? outcome.draft : [];
                    const accepted = drafted.slice(0, options.accepted);
                    while (accepted.length < options.accepted) accepted.push(randomId());
                    context.push(...accepted, randomId());
                    bar?.increment();
                }
            }),
        );

    const warmupFailures = { count: 0 };
    await walk(options.warmupSteps, undefined, warmupFailures);
    bar?.update({ phase: "measuring" });

    const before = isLlamaServer ? undefined : await readAllCounters(metricsUrls);
    const latencies: number[] = [];
    const failures = { count: 0 };
    const started = performance.now();
    await walk(options.steps, latencies, failures);
    const seconds = (performance.now() - started) / 1000;
    const after = isLlamaServer ? undefined : await readAllCounters(metricsUrls);
    bar?.stop();

    const sorted = [...latencies].sort((a, b) => a - b);
    const round = (x: number | null | undefined, digits = 2) =>
        x === null || x === undefined || !Number.isFinite(x) ? null : Number(x.toFixed(digits));
    const delta = before !== undefined && after !== undefined ? combine(after, before, -1) : undefined;
    return {
        date: new Date().toISOString(),
        url: client.url,
        protocol: isLlamaServer ? "llama-server" : "specdraft",
        model: info === undefined ? null : ((info as Record<string, unknown>).model ?? null),
        engine: info === undefined ? null : ((info as Record<string, unknown>).engine ?? null),
        streams: options.streams,
        steps: options.steps,
        warmup_steps: options.warmupSteps,
        start_context: options.startContext,
        context_growth_per_step: options.accepted + 1,
        draft_length: options.draftLen,
        conversation_key: options.conversationKey,
        metrics_from: isLlamaServer ? [] : metricsUrls,
        requests: latencies.length,
        failures: failures.count,
        warmup_failures: warmupFailures.count,
        seconds: round(seconds, 3),
        requests_per_s: round(latencies.length / seconds),
        latency_ms: {
            p50: round(percentile(sorted, 50)),
            p95: round(percentile(sorted, 95)),
            mean: round(sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length)),
            max: round(sorted.at(-1)),
        },
        tokens_evaluated_per_request: delta && delta.drafts > 0 ? round(delta.evaluated / delta.drafts) : null,
        tokens_reused_per_request: delta && delta.drafts > 0 ? round(delta.reused / delta.drafts) : null,
        decode_batch_mean: delta && delta.decodeCount > 0 ? round(delta.decodeSequencesSum / delta.decodeCount) : null,
        // mean ms per decode step: in llama_decode + sync, fetching results, and outside llama.cpp (JS, batch building)
        step_ms:
            delta && delta.stepCount > 0
                ? {
                      decode: round((1000 * delta.stepDecodeSum) / delta.stepCount, 3),
                      sample: round((1000 * delta.stepSampleSum) / delta.stepCount, 3),
                      host: round((1000 * delta.stepHostSum) / delta.stepCount, 3),
                      // decode = submit (the llama_decode call: the host's part on a GPU) + wait (llama_synchronize)
                      submit: round((1000 * delta.stepSubmitSum) / delta.stepCount, 3),
                      wait: round((1000 * delta.stepWaitSum) / delta.stepCount, 3),
                      steps: delta.stepCount,
                      // share of steps whose compute graph llama.cpp reused (the only ones that can replay a CUDA graph)
                      graph_reused: round(delta.stepGraphReused / delta.stepCount, 3),
                  }
                : null,
    };
}

/** The specdraft counters summed over `baseUrls`, or undefined when one of them has no (specdraft) /metrics. */
async function readAllCounters(baseUrls: readonly string[]): Promise<ServerCounters | undefined> {
    let total: ServerCounters | undefined;
    for (const url of baseUrls) {
        const counters = await readCounters(url);
        if (counters === undefined) return undefined;
        total = total === undefined ? counters : combine(total, counters, 1);
    }
    return total;
}

/** The specdraft counters, or undefined when the server has no (specdraft) /metrics. */
async function readCounters(baseUrl: string): Promise<ServerCounters | undefined> {
    let text: string;
    try {
        const res = await fetch(new URL("/metrics", baseUrl));
        if (!res.ok) return undefined;
        text = await res.text();
    } catch {
        return undefined;
    }
    const value = (name: string, labels = "") => {
        const line = text.split("\n").find((l) => l.startsWith(`${name}${labels} `));
        return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1));
    };
    const evaluated = value("specdraft_prefix_tokens_evaluated_total");
    if (evaluated === undefined) return undefined;
    return {
        evaluated,
        reused: value("specdraft_prefix_tokens_reused_total") ?? 0,
        drafts: value("specdraft_http_requests_total", '{route="/draft",method="POST",status="200"}') ?? 0,
        decodeSequencesSum: value("specdraft_decode_batch_sequences_sum") ?? 0,
        decodeCount: value("specdraft_decode_batch_sequences_count") ?? 0,
        stepDecodeSum: value("specdraft_step_decode_seconds_sum") ?? 0,
        stepSampleSum: value("specdraft_step_sample_seconds_sum") ?? 0,
        stepHostSum: value("specdraft_step_host_seconds_sum") ?? 0,
        stepSubmitSum: value("specdraft_step_submit_seconds_sum") ?? 0,
        stepWaitSum: value("specdraft_step_wait_seconds_sum") ?? 0,
        stepCount: value("specdraft_step_decode_seconds_count") ?? 0,
        stepGraphReused: value("specdraft_step_graph_reused_total") ?? 0,
    };
}

/** `a + sign × b`, counter by counter (sign −1: the difference between two reads). */
function combine(a: ServerCounters, b: ServerCounters, sign: 1 | -1): ServerCounters {
    const result = { ...a };
    for (const key of Object.keys(result) as (keyof ServerCounters)[]) result[key] = a[key] + sign * b[key];
    return result;
}

/** llama-server's vocabulary size from `GET /v1/models` (`data[0].meta.n_vocab`), if it says. */
async function llamaServerVocabSize(baseUrl: string): Promise<number | undefined> {
    const models = (await getJson(new URL("/v1/models", baseUrl))) as
        | { data?: { meta?: { n_vocab?: unknown } }[] }
        | undefined;
    const nVocab = models?.data?.[0]?.meta?.n_vocab;
    return typeof nVocab === "number" ? nVocab : undefined;
}

async function getJson(url: URL): Promise<unknown> {
    try {
        const res = await fetch(url);
        return res.ok ? await res.json() : undefined;
    } catch {
        return undefined;
    }
}

function numberField(value: unknown, key: string): number | undefined {
    const field = (value as Record<string, unknown> | undefined)?.[key];
    return typeof field === "number" ? field : undefined;
}

/** A small seeded PRNG (mulberry32), so runs replay the same contexts. */
function mulberry32(seed: number): () => number {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}
