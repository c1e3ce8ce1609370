/** The terminal table of `specdraft generate`: target alone and speculative side by side. */
import type { GenerateSummary } from "./types.js";

export function formatGenerateReport(summary: GenerateSummary): string {
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
        ["outputs identical", "", summary.identical ? "yes" : "NO"],
    ];
    const widths = [0, 1, 2].map((column) => Math.max(...rows.map((row) => row[column].length)));
    const lines = rows.map(
        (row) => `${row[0].padEnd(widths[0])}  ${row[1].padStart(widths[1])}  ${row[2].padStart(widths[2])}`,
    );
    const { maxTokens, draftLength, runs, gpu } = summary.settings;
    lines.push(`${summary.prompts.length} prompts × ${runs} runs, max ${maxTokens} tokens, k = ${draftLength}, ${gpu}`);
    return lines.join("\n");
}
