/**
 * Turns a real-shape job's results (bench/gpu/real-shape.sh) into the markdown of docs/benchmarks.md: the measured
 * costs of every target and drafter, the speed-up the step-cost model projects for each pair (src/speedup/
 * speedUpModel.ts; k ∈ {2, 4, 6, 8, 16} × per-token agreement 0.75 / 0.81 / 0.87, the HTTP drafter and the in-process
 * drafter side by side), and each end-to-end `specdraft generate` run against the model's prediction for its own counts
 * (within 10 % is the goal).
 *
 *   node --import tsx bench/speedUpTable.ts RESULTS_DIR > table.md
 *
 * RESULTS_DIR holds bench/generateCosts.ts outputs named `target-<name>.json` (with --target) and
 * `drafter-<name>.json` (with --drafter and --draft-model; `<drafter>@<variant>` for an A/B of engine settings, listed
 * with the costs but not projected), and `specdraft generate --out` summaries named
 * `e2e-<target>--<drafter>--<http|in-process>.json`. With a `lookahead-steps.json` (bench/lookaheadSteps.ts: a trained
 * drafter's tokens per step on real text with candidates) and drafters measured with `--lookahead`, it adds the
 * tables of drafting with candidates (bench/candidateTables.ts).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import type { GenerateSummary } from "../src/generate/types.js";
import {
    expectedTokensPerStep,
    predictRunSpeedUp,
    projectSpeedUp,
    type StepCosts,
} from "../src/speedup/speedUpModel.js";
import {
    candidateChoices,
    candidateCostTable,
    candidateProjectionTable,
    type LookaheadStepsJson,
    type StepByM,
    tokensPerStepTable,
} from "./candidateTables.js";
import { withCandidates } from "./speedUpModel.js";

/** Drafts of k the table projects, and the per-token agreements (0.81: τ 5.1 at k = 16, the 1.7B → 8B estimate). */
export const tableDraftLengths = [2, 4, 6, 8, 16];
export const tableAgreements = [0.75, 0.81, 0.87];
/** The end-to-end goal: the model's prediction within this fraction of the measured speed-up. */
export const predictionTolerance = 0.1;

type DrafterPath = "http" | "in-process";

/** A drafter server's mean ms per decode step over the walk, from its /metrics (bench/generateCosts.ts). */
export interface DraftStepMs {
    decode: number;
    submit: number;
    wait: number;
    sample: number;
    host: number;
    steps: number;
    /** the share of steps that reused the previous step's graph */
    graph_reused: number;
}

/** The in-process drafter's mean ms per decode step, by the step's index within a request. */
export interface InProcessStepMs {
    steps: number;
    decode: number;
    submit: number;
    wait: number;
    graph_reused: number;
}

/** bench/generateCosts.ts's output (the parts read here). */
export interface CostsJson {
    target?: string | null;
    alone_per_token?: number | null;
    alone_native_per_token?: number | null;
    verify?: Record<string, { all: number; last: number }>;
    verify_native?: Record<
        string,
        { all: number; last: number; all_decodes_per_call?: number } & Record<string, number>
    >;
    verify_native_host?: Record<string, { all: number; last: number } & Record<string, number>>;
    draft?: Record<string, number>;
    draft_walk?: Record<string, number>;
    draft_step_ms?: DraftStepMs | null;
    draft_in_process?: Record<string, number>;
    draft_walk_in_process?: Record<string, number>;
    draft_walk_interleaved?: Record<string, number>;
    draft_walk_in_process_interleaved?: Record<string, number>;
    alone_native_fixed?: Record<string, number>;
    draft_first?: Record<string, number>;
    draft_first_in_process?: Record<string, number>;
    steps_in_process?: Record<string, InProcessStepMs>;
    draft_step_by_m?: StepByM;
    draft_model?: string | null;
}

/** `{ m1: x, m17: y }` or `{ n1: x }` → Map(1 → x, 17 → y). */
function bySize<T>(record: Record<string, T> | undefined, pick: (value: T) => number): Map<number, number> {
    const map = new Map<number, number>();
    for (const [key, value] of Object.entries(record ?? {})) map.set(Number(key.slice(1)), pick(value));
    return map;
}

/**
 * The model's costs for a target with a drafter path: the native verifier (every position asked) and the native
 * target alone, drafts grown the way a generation grows them (timed between a target's verifications where
 * generateCosts had --interleave-target), and (where measured) what a new prompt costs each: the target's F(P), and the
 * drafter's prefill D(P) = its first one-token draft on a new context less a steady one.
 */
export function stepCosts(target: CostsJson, drafter: CostsJson, path: DrafterPath): StepCosts {
    const alone = target.alone_native_per_token;
    if (alone == null) throw new Error(`target ${target.target}: no alone_native_per_token`);
    // the walk timed between a target's verifications (as a generation runs) where measured, else alone
    const walk =
        path === "http"
            ? (drafter.draft_walk_interleaved ?? drafter.draft_walk)
            : (drafter.draft_walk_in_process_interleaved ?? drafter.draft_walk_in_process);
    const draft = bySize(walk, (ms) => ms);
    const first = path === "http" ? drafter.draft_first : drafter.draft_first_in_process;
    const steadyOne = draft.get(1);
    const costs: StepCosts = { alone, verify: bySize(target.verify_native, (row) => row.all), draft };
    if (target.alone_native_fixed !== undefined) costs.promptFixed = bySize(target.alone_native_fixed, (ms) => ms);
    if (first !== undefined && steadyOne !== undefined)
        costs.draftPrefill = bySize(first, (ms) => Math.max(0, ms - steadyOne));
    return costs;
}

const f = (x: number | null | undefined, digits = 2): string => (x == null ? "–" : x.toFixed(digits));

function costTables(targets: Map<string, CostsJson>, drafters: Map<string, CostsJson>): string[] {
    const lines: string[] = [];
    const sizes = [1, 3, 5, 7, 9, 17];
    lines.push(
        "| target | alone ms/token (node-llama-cpp / native) | verify m = 1, 3, 5, 7, 9, 17: native, every position (ms) | native, argmax on the host | node-llama-cpp, every position | node-llama-cpp, last only | native verify(17) ÷ verify(1) (host argmax) |",
        "|---|---|---|---|---|---|---|",
    );
    for (const [name, t] of targets) {
        const native = bySize(t.verify_native, (r) => r.all);
        const host = bySize(t.verify_native_host, (r) => r.all);
        const all = bySize(t.verify, (r) => r.all);
        const last = bySize(t.verify, (r) => r.last);
        const row = (m: Map<number, number>) => sizes.map((s) => f(m.get(s))).join(" / ");
        const ratio = (m: Map<number, number>) => (m.get(17) ?? Number.NaN) / (m.get(1) ?? Number.NaN);
        lines.push(
            `| ${name} | ${f(t.alone_per_token)} / ${f(t.alone_native_per_token)} | ${row(native)} | ${row(host)} | ${row(all)} | ${row(last)} | **${f(ratio(native))}** (${f(ratio(host))}) |`,
        );
    }
    lines.push("");
    const nSizes = [1, 2, 4, 6, 8, 16];
    lines.push(
        "| drafter | path | draft n = 1, 2, 4, 6, 8, 16: generation-like growth (ms) | context +8 a request (ms) | ms per draft token at n = 8 (growth) |",
        "|---|---|---|---|---|",
    );
    for (const [name, d] of drafters) {
        for (const [path, walk, by8] of [
            ["HTTP (`specdraft serve`)", d.draft_walk, d.draft],
            ["in process", d.draft_walk_in_process, d.draft_in_process],
        ] as const) {
            if (walk === undefined && by8 === undefined) continue; // a path generateCosts did not time
            const w = bySize(walk, (x) => x);
            const e = bySize(by8, (x) => x);
            const row = (m: Map<number, number>) => nSizes.map((s) => f(m.get(s))).join(" / ");
            const perToken = w.has(8) ? (w.get(8) ?? 0) / 8 : undefined;
            lines.push(`| ${name} | ${path} | ${row(w)} | ${row(e)} | ${f(perToken, 3)} |`);
        }
    }
    lines.push("");
    lines.push(
        "| drafter | where a batch-1 step's time goes (server /metrics over the growth walk): decode = submit + wait, sample, host, graph reused | in process, by step of a request: decode ms (submit / wait), graph reused |",
        "|---|---|---|",
    );
    for (const [name, d] of drafters) {
        const s = d.draft_step_ms;
        const server = s
            ? `${f(s.decode, 3)} = ${f(s.submit, 3)} + ${f(s.wait, 3)}, ${f(s.sample, 3)}, ${f(s.host, 3)}, ${f(100 * s.graph_reused, 0)} % of ${s.steps}`
            : "–";
        const steps = Object.entries(d.steps_in_process ?? {})
            .map(
                ([k, r]) =>
                    `${k}: ${f(r.decode, 3)} (${f(r.submit, 3)} / ${f(r.wait, 3)}), ${f(100 * r.graph_reused, 0)} %`,
            )
            .join("; ");
        lines.push(`| ${name} | ${server} | ${steps || "–"} |`);
    }
    return lines;
}

function projectionTables(targets: Map<string, CostsJson>, drafters: Map<string, CostsJson>): string[] {
    const lines: string[] = [];
    const header = tableAgreements.flatMap((a) => [`a = ${a}: HTTP`, "in process"]);
    for (const [targetName, t] of targets) {
        for (const [drafterName, d] of drafters) {
            // <drafter>@<variant>: an A/B of engine settings, compared in the cost tables only
            if (drafterName.includes("@")) continue;
            lines.push(
                `**${targetName} ← ${drafterName}** (projected speed-up; τ(k) at each agreement in brackets)`,
                "",
            );
            lines.push(`| k | ${header.join(" | ")} |`, `|---|${header.map(() => "---|").join("")}`);
            // a drafter timed only in this process (generateCosts --draft-model without --drafter) has no HTTP path
            const http = (d.draft_walk_interleaved ?? d.draft_walk) ? stepCosts(t, d, "http") : undefined;
            const inProcess = stepCosts(t, d, "in-process");
            for (const k of tableDraftLengths) {
                const cells = tableAgreements.flatMap((a) => {
                    const tau = f(expectedTokensPerStep(a, k), 1);
                    const overHttp = http ? `${f(projectSpeedUp(http, a, k).speedUp)}×` : "–";
                    return [`${overHttp} (τ ${tau})`, `${f(projectSpeedUp(inProcess, a, k).speedUp)}×`];
                });
                lines.push(`| ${k} | ${cells.join(" | ")} |`);
            }
            lines.push("");
        }
    }
    return lines;
}

/** One end-to-end run against the prediction for its own counts. */
export function checkEndToEnd(summary: GenerateSummary, costs: StepCosts) {
    const s = summary.speculative;
    const predicted = predictRunSpeedUp(costs, {
        tokens: s.tokens,
        targetSteps: s.targetSteps,
        drafted: s.drafted,
        draftLength: summary.settings.draftLength,
        // every speculative generation starts a prompt (the untimed warm-ups are not in the summary)
        promptLengths: summary.prompts.flatMap((p) => p.speculative.map(() => p.promptLength)),
    });
    const error = predicted.speedUp / summary.speedUp - 1;
    return { measured: summary.speedUp, predicted, error, withinTolerance: Math.abs(error) <= predictionTolerance };
}

function endToEndTable(
    runs: Map<string, GenerateSummary>,
    targets: Map<string, CostsJson>,
    drafters: Map<string, CostsJson>,
    allSteps: LookaheadStepsJson[] = [],
): string[] {
    const lines = [
        "| target ← drafter (path), k | alone tok/s | speculative tok/s | τ | measured speed-up | predicted (own τ, costs above; the prompts' ms alone / speculative) | error | identical |",
        "|---|---|---|---|---|---|---|---|",
    ];
    for (const [name, summary] of runs) {
        // `<path>@<label>` names a second run of the same pair (e.g. in-process@off: without candidates)
        const [targetName = "", drafterName = "", pathLabel = ""] = name.split("--");
        const [path] = pathLabel.split("@");
        const t = targets.get(targetName);
        const d = drafters.get(drafterName);
        let predicted = "no costs for this pair";
        let error = "–";
        if (t && d && (path === "http" || path === "in-process")) {
            const plain = stepCosts(t, d, path);
            // a run whose drafter checked candidates: its drafts composed with the step costs at m and that drafter's
            // steps per draft on real text (the first data file of its lookahead-steps: the held-out set it drafted)
            const candidates = summary.settings.draftLookahead ?? 0;
            const steps = allSteps.find((s) => basename(s.model) === basename(d.draft_model ?? "")) ?? allSteps.at(0);
            const choice =
                candidates > 0 && d.draft_step_by_m && steps
                    ? candidateChoices(d.draft_step_by_m, steps, Object.keys(steps.files)[0] ?? "").find(
                          (c) => c.candidates === candidates,
                      )
                    : undefined;
            if (candidates > 0 && !choice) {
                lines.push(
                    `| ${targetName} ← ${drafterName} (${pathLabel}) | no step costs or tokens per step for M ${candidates} |`,
                );
                continue;
            }
            const check = checkEndToEnd(summary, choice ? withCandidates(plain, choice) : plain);
            const prompts = check.predicted.promptMs;
            predicted = `${f(check.predicted.speedUp)}×${prompts.alone > 0 ? ` (prompts: ${f(prompts.alone, 0)} / ${f(prompts.speculative, 0)} ms)` : ""}`;
            error = `${check.error >= 0 ? "+" : ""}${f(100 * check.error, 1)} %${check.withinTolerance ? "" : " (over 10 %)"}`;
        }
        lines.push(
            `| ${targetName} ← ${drafterName} (${pathLabel}${summary.settings.draftLookahead ? `, M ${summary.settings.draftLookahead}` : ""}), ${summary.settings.draftLength} | ${f(summary.alone.tokensPerSecond, 1)} | ${f(summary.speculative.tokensPerSecond, 1)} | ${f(summary.tau)} | ${f(summary.speedUp)}× | ${predicted} | ${error} | ${summary.identical ? "yes" : "**no**"} |`,
        );
    }
    return lines;
}

/** Reads RESULTS_DIR's files by their names' prefixes (see the header). */
export function readResults(dir: string) {
    const targets = new Map<string, CostsJson>();
    const drafters = new Map<string, CostsJson>();
    const runs = new Map<string, GenerateSummary>();
    for (const file of readdirSync(dir).sort()) {
        const [, kind, name] = /^(target|drafter|e2e)-(.+)\.json$/.exec(file) ?? [];
        if (kind === undefined || name === undefined) continue;
        const json = JSON.parse(readFileSync(join(dir, file), "utf8"));
        if (kind === "target") targets.set(name, json);
        else if (kind === "drafter") drafters.set(name, json);
        else runs.set(name, json);
    }
    // lookahead-steps.json: the reference drafter's tokens per step (the tables'); lookahead-steps-<label>.json: another
    // drafter's, for the end-to-end runs it drafted
    const stepsFile = join(dir, "lookahead-steps.json");
    const lookaheadSteps = existsSync(stepsFile)
        ? (JSON.parse(readFileSync(stepsFile, "utf8")) as LookaheadStepsJson)
        : undefined;
    const otherSteps = readdirSync(dir)
        .filter((file) => /^lookahead-steps-.+\.json$/.test(file))
        .map((file) => JSON.parse(readFileSync(join(dir, file), "utf8")) as LookaheadStepsJson);
    return {
        targets,
        drafters,
        runs,
        lookaheadSteps,
        allSteps: [...(lookaheadSteps ? [lookaheadSteps] : []), ...otherSteps],
    };
}

/** Drafting with candidates: each drafter's step cost at m with real text's tokens per step, and the projections. */
function candidateTables(
    targets: Map<string, CostsJson>,
    drafters: Map<string, CostsJson>,
    steps: LookaheadStepsJson,
): string[] {
    const lines = [
        "#### Drafting with candidates (step costs here, tokens per step of a trained drafter on real text)",
        "",
        ...tokensPerStepTable(steps),
        "",
    ];
    // the goal's figures: the last data file (the unseen prompts, by bench/lookaheadSteps.ts's default order)
    const file = Object.keys(steps.files).at(-1) ?? "";
    for (const [name, d] of drafters) {
        if (!d.draft_step_by_m) continue;
        const plain = {
            http: bySize(d.draft_walk, (ms) => ms),
            inProcess: bySize(d.draft_walk_in_process, (ms) => ms),
        };
        lines.push(...candidateCostTable(name, d.draft_step_by_m, plain, steps), "");
        const choices = candidateChoices(d.draft_step_by_m, steps, file);
        if (name.includes("@")) continue;
        for (const [targetName, t] of targets) {
            const costs = { http: stepCosts(t, d, "http"), inProcess: stepCosts(t, d, "in-process") };
            lines.push(
                ...candidateProjectionTable(
                    `${targetName} ← ${name}`,
                    costs,
                    choices,
                    tableDraftLengths,
                    tableAgreements,
                ),
                "",
            );
        }
    }
    return lines;
}

export function renderSpeedUpTables(dir: string): string {
    const { targets, drafters, runs, lookaheadSteps, allSteps } = readResults(dir);
    return [
        "#### Measured costs",
        "",
        ...costTables(targets, drafters),
        "",
        "#### Projected speed-up (native verifier, drafts grown as in a generation)",
        "",
        ...projectionTables(targets, drafters),
        ...(lookaheadSteps ? candidateTables(targets, drafters, lookaheadSteps) : []),
        "#### End to end: `specdraft generate` against the model",
        "",
        ...endToEndTable(runs, targets, drafters, allSteps),
        "",
    ].join("\n");
}

if (process.argv[1]?.endsWith("speedUpTable.ts") || process.argv[1]?.endsWith("speedUpTable.mjs")) {
    const dir = process.argv[2];
    if (!dir) {
        process.stderr.write("usage: speedUpTable.ts RESULTS_DIR\n");
        process.exit(2);
    }
    process.stdout.write(renderSpeedUpTables(dir));
}
