/**
 * The tables of drafting with prompt-lookup candidates (the draft engine's `lookahead`) for bench/speedUpTable.ts: a
 * drafter step's cost at m tokens of one sequence (generateCosts' draft_step_by_m, on the job's machine), the
 * break-even tokens per step step(m) ÷ step(1), the tokens per step a trained drafter gives on real text with M = m − 1
 * candidates (bench/lookaheadSteps.ts: a results folder's `lookahead-steps.json`), the drafts of 8 and 16 composed
 * from the two (bench/speedUpModel.ts), and the projected speed-up with the best M.
 */
import { expectedTokensPerStep, projectSpeedUp, type StepCosts } from "../src/speedup/speedUpModel.js";
import {
    breakEvenTokensPerStep,
    type CandidateCosts,
    composeDraftWithCandidates,
    withCandidates,
} from "./speedUpModel.js";

/** bench/lookaheadSteps.ts's output (the parts read here). */
export interface LookaheadStepsJson {
    model: string;
    date?: string;
    machine?: { cpu: string; cores: number };
    files: Record<
        string,
        {
            conversations: number;
            repeated_4gram_share: number;
            all: Record<string, Record<string, StepsCell>>;
            categories: Record<
                string,
                { conversations: number; repeated_4gram_share: number } & Record<string, unknown>
            >;
        }
    >;
}

/** One (candidates, draft length) figure of bench/lookaheadSteps.ts. */
interface StepsCell {
    tokens_per_step: number;
    steps_per_draft: number;
    ms_per_draft: number;
    differing?: number;
    drafts?: number;
}

/** generateCosts' draft_step_by_m: by `m<tokens>`. */
export type StepByM = Record<string, { candidates: number; step: number; submit?: number; wait?: number }>;

const f = (x: number | null | undefined, digits = 2): string =>
    x == null || !Number.isFinite(x) ? "–" : x.toFixed(digits);

/** The step costs by m, from draft_step_by_m. */
export function stepCostsByM(byM: StepByM): Map<number, number> {
    return new Map(Object.entries(byM).map(([key, row]) => [Number(key.slice(1)), row.step]));
}

/** Steps a draft of n takes with M candidates on `file`'s text, by n (a one-token draft: one step), or undefined. */
export function stepsPerDraft(
    steps: LookaheadStepsJson,
    file: string,
    candidates: number,
): Map<number, number> | undefined {
    const cells = steps.files[file]?.all[`M${candidates}`];
    if (!cells) return undefined;
    const map = new Map<number, number>([[1, 1]]);
    for (const [key, cell] of Object.entries(cells)) map.set(Number(key.slice(1)), cell.steps_per_draft);
    return map;
}

/** The candidate counts both measurements have, and for each its CandidateCosts on `file`'s text. */
export function candidateChoices(byM: StepByM, steps: LookaheadStepsJson, file: string): CandidateCosts[] {
    const step = stepCostsByM(byM);
    const choices: CandidateCosts[] = [];
    for (const m of [...step.keys()].sort((a, b) => a - b)) {
        const perDraft = stepsPerDraft(steps, file, m - 1);
        if (perDraft) choices.push({ step, candidates: m - 1, stepsPerDraft: perDraft });
    }
    return choices;
}

/** The choice with the cheapest composed draft of n (M = 0 among them), for a plain draft of `plainMs`. */
export function bestChoice(choices: CandidateCosts[], plainMs: number, n: number): CandidateCosts | undefined {
    let best: CandidateCosts | undefined;
    for (const choice of choices)
        if (!best || composeDraftWithCandidates(plainMs, n, choice) < composeDraftWithCandidates(plainMs, n, best))
            best = choice;
    return best;
}

/** Per drafter: the step cost at m, its break-even, real text's tokens per step at M = m − 1, and composed drafts. */
export function candidateCostTable(
    drafter: string,
    byM: StepByM,
    plain: { http?: Map<number, number>; inProcess?: Map<number, number> },
    steps: LookaheadStepsJson,
): string[] {
    const files = Object.keys(steps.files);
    const step = stepCostsByM(byM);
    const lines = [
        `**${drafter}**: a drafter step of m tokens of one sequence (own token + M = m − 1 candidates), and drafts of 16 / 8 composed with ${steps.model}'s tokens per step on real text (${files.join(", ")}; ${steps.machine?.cpu ?? "?"}, ${steps.date?.slice(0, 10) ?? "?"})`,
        "",
        `| m | step ms | break-even tokens/step | ${files.map((file) => `tokens/step, n = 16: ${file}`).join(" | ")} | draft 16 / 8 in process, ms | over HTTP, ms |`,
        `|---|---|---|${files.map(() => "---|").join("")}---|---|`,
    ];
    const unseen = files.at(-1) ?? "";
    for (const m of [...step.keys()].sort((a, b) => a - b)) {
        const tokens = files.map((file) => f(steps.files[file]?.all[`M${m - 1}`]?.n16?.tokens_per_step));
        const perDraft = stepsPerDraft(steps, unseen, m - 1);
        const composed = (measured: Map<number, number> | undefined) => {
            if (!measured || !perDraft) return "–";
            const given: CandidateCosts = { step, candidates: m - 1, stepsPerDraft: perDraft };
            return [16, 8]
                .map((n) => f(composeDraftWithCandidates(measured.get(n) ?? Number.NaN, n, given)))
                .join(" / ");
        };
        lines.push(
            `| ${m} | ${f(step.get(m), 3)} | ${f(breakEvenTokensPerStep(step, m - 1))} | ${tokens.join(" | ")} | ${composed(plain.inProcess)} | ${composed(plain.http)} |`,
        );
    }
    return lines;
}

/** Projected speed-up at each agreement for drafts of k with and without the best M (HTTP and in process). */
export function candidateProjectionTable(
    name: string,
    costs: { http: StepCosts; inProcess: StepCosts },
    choices: CandidateCosts[],
    draftLengths: number[],
    agreements: number[],
): string[] {
    const header = agreements.flatMap((a) => [`a = ${a}: HTTP`, "in process"]);
    const lines = [
        `**${name}** with candidates (the best M for each k and path; without candidates in brackets)`,
        "",
        `| k | ${header.join(" | ")} |`,
        `|---|${header.map(() => "---|").join("")}`,
    ];
    for (const k of draftLengths) {
        const cells = agreements.flatMap((a) =>
            [costs.http, costs.inProcess].map((plain) => {
                const best = bestChoice(choices, plain.draft.get(k) ?? Number.NaN, k);
                const without = projectSpeedUp(plain, a, k).speedUp;
                if (!best) return `${f(without)}×`;
                const speedUp = projectSpeedUp(withCandidates(plain, best), a, k).speedUp;
                return `${f(speedUp)}× (M ${best.candidates}; ${f(without)}×)`;
            }),
        );
        lines.push(
            `| ${k} (τ ${agreements.map((a) => f(expectedTokensPerStep(a, k), 1)).join(" / ")}) | ${cells.join(" | ")} |`,
        );
    }
    return lines;
}

/**
 * The trained drafter's tokens per step on real text: per data file and category (with its repeated-4-gram share),
 * drafts of 16 at each candidate count without fillers, the whole file's drafts of 8, and how many drafts of 16
 * differed from the walk's plain ones (M0: the plain engine again, from another cache history).
 */
export function tokensPerStepTable(steps: LookaheadStepsJson): string[] {
    const labels = Object.keys(Object.values(steps.files)[0]?.all ?? {}).filter((l) => /^M\d+$/.test(l) && l !== "M0");
    const lines = [
        `Tokens per drafter step, ${steps.model} on real text, drafts of 16 at the walk's points (${steps.machine?.cpu ?? "?"}, ${steps.date?.slice(0, 10) ?? "?"}):`,
        "",
        `| data / category | conversations | repeated 4-grams | ${labels.map((l) => `M = ${l.slice(1)}`).join(" | ")} |`,
        `|---|---|---|${labels.map(() => "---|").join("")}`,
    ];
    const row = (cells: Record<string, unknown>, n: number) =>
        labels
            .map((l) => f((cells[l] as Record<string, StepsCell> | undefined)?.[`n${n}`]?.tokens_per_step))
            .join(" | ");
    const notes: string[] = [];
    for (const [file, data] of Object.entries(steps.files)) {
        for (const [category, cells] of Object.entries(data.categories))
            lines.push(
                `| ${category} | ${cells.conversations} | ${f(100 * cells.repeated_4gram_share, 0)} % | ${row(cells, 16)} |`,
            );
        lines.push(
            `| **${file}** | ${data.conversations} | ${f(100 * data.repeated_4gram_share, 0)} % | ${row(data.all, 16)} |`,
            `| ${file}, drafts of 8 | | | ${row(data.all, 8)} |`,
        );
        const differing = ["M0", ...labels].map((l) => `${l} ${data.all[l]?.n16?.differing ?? "–"}`).join(", ");
        notes.push(
            `${file}: drafts of 16 (of ${data.all.M0?.n16?.drafts ?? "?"}) not the walk's plain ones: ${differing}.`,
        );
    }
    return [...lines, "", ...notes];
}
