/**
 * lookaheadSteps — how many draft tokens one drafter step gives when each step also checks prompt-lookup candidates
 * (the engine's `lookahead`), on real text with a trained drafter, and whether the drafts stay the plain ones.
 *
 * The drafter walks each held-out conversation as the validator does (drafts of the largest `--draft-len` at every
 * point the walk reaches; src/validate/walkHeldOut.ts), one request at a time on a one-stream engine without
 * candidates, recording every context it drafts from. The same contexts are then drafted, in the same order, by an
 * engine with M candidates a step for every M of `--candidates` (a step of one sequence gets exactly M; `--fill`:
 * without fillers, `M<m>`, or with them, `M<m>+fill`) and by a plain one (`M0`), for every draft length, the engines
 * taking turns point by point: the steps each draft took (the engine's step counter), its time, and whether it equals
 * the walk's plain draft (the plain replay's `differing` shows how much the cache's history alone changes). Printed per data file and category, beside the repeated-4-gram share of its conversations (the share
 * of continuation 4-grams that already occurred earlier in the prompt + continuation: text that repeats itself is
 * what prompt lookup finds). One JSON object on stdout.
 *
 *   node --import tsx bench/lookaheadSteps.ts --data data/lab-heldout.jsonl data/lab-unseen-heldout.jsonl \
 *       [--model models/specdraft-default.gguf] [--candidates 1,2,3,4,8,15] [--draft-len 16,8] [--limit N] > steps.json
 */

import { cpus } from "node:os";
import cliProgress from "cli-progress";
import { Command, Option } from "commander";
import { parseIntegerListOption, parseIntegerOption } from "../src/cli/commandOptions.js";
import type { DraftClient } from "../src/client/types.js";
import { defaultGpu, gpuChoices } from "../src/engine/engineDefaults.js";
import { type LoadEngineOptions, loadEngine } from "../src/engine/loadEngine.js";
import type { DraftEngine, GpuChoice } from "../src/engine/types.js";
import { NativeTarget } from "../src/generate/NativeTarget.js";
import { readHeldOutFile } from "../src/validate/readHeldOutFile.js";
import type { Conversation } from "../src/validate/types.js";
import { walkHeldOut } from "../src/validate/walkHeldOut.js";

interface Flags {
    model: string;
    data: string[];
    candidates: number[];
    draftLen: number[];
    fill: boolean[];
    classify?: boolean;
    limit?: number;
    gpu: GpuChoice;
    threads: number;
    progress: boolean;
}

/** One context the walk drafted from, and the plain drafter's draft of the largest length. */
interface Point {
    category: string;
    context: number[];
    draft: number[];
}

/** Totals of one (candidates, draft length) cell over a set of points. */
interface Cell {
    drafts: number;
    tokens: number;
    steps: number;
    ms: number;
    /** Drafts that differ from the plain engine's. */
    differing: number;
}

const round = (x: number, digits = 3): number => Math.round(x * 10 ** digits) / 10 ** digits;

/** (repeated, total) continuation n-grams of a conversation: those ending inside the continuation, seen earlier. */
export function repeatedNgrams(conversation: Conversation, n: number): [repeated: number, total: number] {
    const text = [...conversation.promptTokens, ...conversation.continuationTokens];
    const seen = new Set<string>();
    let repeated = 0;
    let total = 0;
    for (let end = n; end <= text.length; end++) {
        const gram = text.slice(end - n, end).join(",");
        if (end - 1 >= conversation.promptTokens.length) {
            total++;
            if (seen.has(gram)) repeated++;
        }
        seen.add(gram);
    }
    return [repeated, total];
}

/** A DraftClient over an engine in this process, recording every context and draft (the walk's requests). */
function recordingClient(engine: DraftEngine, record: (context: number[], draft: number[]) => void): DraftClient {
    return {
        name: "engine",
        url: "in-process",
        timeoutMs: 60_000,
        async draft(tokens, n) {
            const started = performance.now();
            const draft = await engine.draft(tokens, n);
            record(tokens.slice(), draft);
            return { ok: true, draft, latencyMs: performance.now() - started };
        },
    };
}

async function walkPoints(engine: DraftEngine, conversations: Conversation[], k: number, bar?: cliProgress.SingleBar) {
    const points: Point[] = [];
    for (const conversation of conversations) {
        const category = conversation.category ?? "uncategorized";
        const client = recordingClient(engine, (context, draft) => points.push({ category, context, draft }));
        await walkHeldOut([conversation], client, { draftLength: k, concurrency: 1 });
        bar?.increment();
    }
    return points;
}

/** A draft that is not the walk's plain one: where, and what the two tokens were. */
interface Difference {
    label: string;
    n: number;
    context: number[];
    /** The plain draft's tokens before the first difference. */
    before: number[];
    plain: number;
    other: number;
}

/**
 * Each difference's logit gap on the plain (one-token) path and the two kernel paths' disagreement there
 * (NativeTarget.logitGap with the drafter loaded as a target, the draft engine's CPU settings): a near tie when the
 * gap is within twice the disagreement (docs/engine.md, "Candidates and the CPU's kernels"). Differences at the same
 * context and position are classified once.
 */
async function classify(differences: Difference[], flags: Flags) {
    const target = await NativeTarget.load({
        modelPath: flags.model,
        contextSize: 4096,
        maxOutputs: 17,
        gpu: flags.gpu,
        threads: flags.threads,
        flashAttention: "off",
        backendSampling: false,
    });
    const seen = new Map<string, { gap: number; disagreement: number }>();
    const rows: Record<string, unknown>[] = [];
    let nearTies = 0;
    let widest = 0;
    try {
        for (const d of differences) {
            const key = `${d.context.length}:${d.context.slice(-8).join(",")}:${d.before.length}:${d.plain}:${d.other}`;
            let result = seen.get(key);
            if (!result) {
                result = await target.logitGap(d.context, d.before, d.plain, d.other);
                seen.set(key, result);
            }
            const nearTie = result.gap <= 2 * result.disagreement;
            if (nearTie) nearTies++;
            if (result.gap > widest) widest = result.gap;
            rows.push({
                config: d.label,
                n: d.n,
                position: d.before.length,
                gap: round(result.gap, 5),
                disagreement: round(result.disagreement, 5),
                near_tie: nearTie,
            });
        }
    } finally {
        target.dispose();
    }
    return { total: differences.length, near_ties: nearTies, widest_gap: round(widest, 5), cases: rows.slice(0, 60) };
}

/** One engine configuration the points are drafted with. */
interface Config {
    /** `M<m>`, and `+fill` with fillers. */
    label: string;
    engine: DraftEngine;
    /** Decode steps the engine has run. */
    steps: () => number;
    /** Per category and draft length. */
    cells: Map<string, Map<number, Cell>>;
}

/**
 * Drafts every point with every configuration for each length, configuration after configuration for the same point
 * (so a drifting machine load falls on all of them alike); each engine sees the points in the walk's order.
 */
async function replay(
    configs: Config[],
    points: Point[],
    lengths: number[],
    differences: Difference[],
    bar?: cliProgress.SingleBar,
) {
    for (const point of points) {
        for (const config of configs) {
            const byLength = config.cells.get(point.category) ?? new Map<number, Cell>();
            config.cells.set(point.category, byLength);
            for (const n of lengths) {
                const before = config.steps();
                const started = performance.now();
                const draft = await config.engine.draft(point.context, n);
                const ms = performance.now() - started;
                const cell = byLength.get(n) ?? { drafts: 0, tokens: 0, steps: 0, ms: 0, differing: 0 };
                cell.drafts++;
                cell.tokens += draft.length;
                cell.steps += config.steps() - before;
                cell.ms += ms;
                const plain = point.draft.slice(0, n);
                const at = plain.findIndex((token, j) => token !== draft[j]);
                if (at >= 0) {
                    cell.differing++;
                    differences.push({
                        label: config.label,
                        n,
                        context: point.context,
                        before: plain.slice(0, at),
                        plain: plain[at] ?? -1,
                        other: draft[at] ?? -1,
                    });
                }
                byLength.set(n, cell);
            }
        }
        bar?.increment();
    }
}

function summarize(cells: Map<number, Cell>[], lengths: number[]) {
    const out: Record<string, unknown> = {};
    for (const n of lengths) {
        const total = { drafts: 0, tokens: 0, steps: 0, ms: 0, differing: 0 };
        for (const byLength of cells) {
            const cell = byLength.get(n);
            if (!cell) continue;
            for (const key of Object.keys(total) as (keyof Cell)[]) total[key] += cell[key];
        }
        out[`n${n}`] = {
            drafts: total.drafts,
            tokens_per_step: round(total.tokens / total.steps),
            steps_per_draft: round(total.steps / total.drafts),
            ms_per_draft: round(total.ms / total.drafts),
            differing: total.differing,
        };
    }
    return out;
}

async function main(flags: Flags): Promise<void> {
    const lengths = [...flags.draftLen].sort((a, b) => b - a);
    const k = lengths[0] ?? 16;
    const candidates = [0, ...flags.candidates.filter((m) => m > 0)];
    const common: LoadEngineOptions = {
        modelPath: flags.model,
        streams: 1,
        contextSize: 4096,
        gpu: flags.gpu,
        threads: flags.threads,
    };
    // exactly m candidates a step: one sequence and a budget of 1 + m tokens; without fillers, and with them if asked
    const settings = [
        { label: "M0", m: 0, fill: false },
        ...candidates
            .filter((m) => m > 0)
            .flatMap((m) => flags.fill.map((fill) => ({ label: `M${m}${fill ? "+fill" : ""}`, m, fill }))),
    ];
    const result: Record<string, unknown> = {
        model: flags.model,
        draft_lengths: lengths,
        candidates,
        configurations: settings.map((c) => c.label),
        machine: {
            cpu: cpus()[0]?.model ?? "?",
            cores: cpus().length,
            cpu_variant: process.env.SPECDRAFT_GGML_CPU_VARIANT ?? "auto",
        },
        date: new Date().toISOString(),
    };
    const files: Record<string, unknown> = {};
    for (const file of flags.data) {
        const { conversations } = await readHeldOutFile(file, flags.limit === undefined ? {} : { limit: flags.limit });
        const bar = flags.progress
            ? new cliProgress.SingleBar(
                  { format: `${file} {task} [{bar}] {value}/{total}`, stream: process.stderr },
                  cliProgress.Presets.shades_classic,
              )
            : undefined;
        bar?.start(conversations.length, 0, { task: "walk" });
        const plain = await loadEngine({ ...common, lookahead: 0 });
        const points = await walkPoints(plain, conversations, k, bar);
        await plain.close();
        const configs: Config[] = [];
        for (const { label, m, fill } of settings) {
            let steps = 0;
            const engine = await loadEngine({
                ...common,
                lookahead: m,
                lookaheadStepTokens: m + 1,
                lookaheadFill: fill,
                observer: { onStep: () => steps++ },
            });
            configs.push({ label, engine, steps: () => steps, cells: new Map() });
        }
        bar?.setTotal(points.length);
        bar?.update(0, { task: `${configs.length} configurations` });
        const differences: Difference[] = [];
        await replay(configs, points, lengths, differences, bar);
        for (const config of configs) await config.engine.close();
        bar?.stop();
        const categories = [...new Set(conversations.map((c) => c.category ?? "uncategorized"))];
        const share = (subset: Conversation[]) => {
            let repeated = 0;
            let total = 0;
            for (const c of subset) {
                const [r, t] = repeatedNgrams(c, 4);
                repeated += r;
                total += t;
            }
            return round(repeated / Math.max(1, total));
        };
        const table = (pick: (cells: Map<string, Map<number, Cell>>) => Map<number, Cell>[]) =>
            Object.fromEntries(configs.map((config) => [config.label, summarize(pick(config.cells), lengths)]));
        files[file] = {
            conversations: conversations.length,
            points: points.length,
            ...(flags.classify ? { differences: await classify(differences, flags) } : {}),
            repeated_4gram_share: share(conversations),
            all: table((cells) => [...cells.values()]),
            categories: Object.fromEntries(
                categories.map((category) => [
                    category,
                    {
                        conversations: conversations.filter((c) => (c.category ?? "uncategorized") === category).length,
                        repeated_4gram_share: share(
                            conversations.filter((c) => (c.category ?? "uncategorized") === category),
                        ),
                        ...table((cells) => [cells.get(category) ?? new Map()]),
                    },
                ]),
            ),
        };
    }
    result.files = files;
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
}

const program = new Command("lookaheadSteps")
    .description(
        "Tokens per drafter step with prompt-lookup candidates, on held-out text, and whether drafts stay plain",
    )
    .option("--model <gguf>", "the drafter", "models/specdraft-default.gguf")
    .option("--data <files...>", "held-out JSONL files", ["data/lab-heldout.jsonl", "data/lab-unseen-heldout.jsonl"])
    .option(
        "--candidates <list>",
        "candidates per step to measure (0, no candidates, always)",
        parseIntegerListOption(0),
        [1, 2, 3, 4, 8, 15],
    )
    .option("--draft-len <list>", "draft lengths (the walk drafts the largest)", parseIntegerListOption(1), [16, 8])
    .option(
        "--fill <list>",
        "for each M: without fillers (false), with them (true: every step 1 + M tokens), or both (false,true)",
        (value: string) => value.split(",").map((part) => part.trim() === "true"),
        [false],
    )
    .option("--limit <n>", "first N conversations of each file", parseIntegerOption(1))
    .addOption(new Option("--gpu <where>", "where llama.cpp computes").choices(gpuChoices).default(defaultGpu))
    .option("--threads <n>", "llama.cpp CPU threads", parseIntegerOption(1), 1)
    .option(
        "--classify",
        "classify every draft that differs from the plain one: a near tie of the two kernel paths or not",
    )
    .option("--no-progress", "no progress bars");

program.parse();
await main(program.opts<Flags>());
