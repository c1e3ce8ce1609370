/**
 * Where the time of one speculative step goes, measured on this machine: what `specdraft generate` pays per target
 * step and per draft, so that its speed-up can be predicted (and explained) from τ:
 *
 *   speed-up(k) ≈ τ(k) · alone / (verify(k + 1) + draft(k))
 *
 * - alone: ms per token of the target generating by itself (node-llama-cpp `sequence.evaluate`, greedy);
 * - verify(m): ms for one `controlledEvaluate` of m tokens with the greedy next token asked at every position, plus the
 *   erasing of the rejected ones — the exact verifier's step; also with the next token asked at the last position only,
 *   which separates the decode from node-llama-cpp's per-position sampling;
 * - draft(n): ms per `POST /draft` of n tokens to a specdraft server (`--drafter`), the context growing by 8 tokens a
 *   request the way a generation grows it (so the server's prefix reuse is exercised).
 *
 *   node --import tsx bench/generateCosts.ts --target T.gguf [--drafter http://127.0.0.1:8000] [--gpu cuda] > costs.json
 */
import { Command, Option } from "commander";
import type { ControlledEvaluateInputItem, Token } from "node-llama-cpp";
import { parseIntegerOption } from "../src/cli/commandOptions.js";
import { createSpecdraftClient } from "../src/client/createDraftClient.js";
import { defaultThreads } from "../src/engine/defaultThreads.js";
import { readModelFileInfo } from "../src/engine/gguf.js";
import { type GpuChoice, gpuChoices, loadLlama } from "../src/generate/loadLlama.js";

const program = new Command("generateCosts")
    .description("Measure the target's per-token, per-verify-step and the drafter's per-draft costs.")
    .requiredOption("--target <gguf>", "target model")
    .option("--drafter <url>", "a specdraft server to time /draft against")
    .addOption(new Option("--gpu <where>", "where llama.cpp computes").choices(gpuChoices).default("auto"))
    .option("--repeats <n>", "measurements per figure", parseIntegerOption(1), 40)
    .action(async (options: { target: string; drafter?: string; gpu: GpuChoice; repeats: number }) => {
        const llama = await loadLlama(options.gpu);
        const model = await llama.loadModel({ modelPath: options.target });
        const context = await model.createContext({ contextSize: 2048, sequences: 1, threads: defaultThreads() });
        const sequence = context.getSequence();
        const vocab = Math.min((await readModelFileInfo(options.target)).vocabSize - 10, 4000);
        const prompt = Array.from({ length: 256 }, (_, i) => ((i * 7919) % vocab) + 10) as Token[];
        const greedy = { generateNext: { token: true, options: { temperature: 0 } } } as const;
        const ms = (started: number): number => performance.now() - started;

        // the target alone: tokens per second of a plain greedy evaluate, after the prompt
        await sequence.clearHistory();
        let produced = 0;
        let started = 0;
        for await (const _token of sequence.evaluate(prompt, { temperature: 0 })) {
            if (produced === 8) started = performance.now();
            if (++produced >= 8 + options.repeats * 4) break;
        }
        const alone = ms(started) / (produced - 8);

        const verify: Record<string, { all: number; last: number }> = {};
        for (const m of [1, 5, 9, 17]) {
            const row = { all: 0, last: 0 };
            for (const mode of ["all", "last"] as const) {
                await sequence.clearHistory();
                await sequence.controlledEvaluate(prompt);
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

        const draft: Record<string, number> = {};
        if (options.drafter) {
            const client = createSpecdraftClient(options.drafter, { name: options.drafter, timeoutMs: 10_000 });
            for (const n of [1, 4, 8, 16]) {
                let total = 0;
                const tokens: number[] = prompt.slice();
                await client.draft(tokens, n);
                for (let r = 0; r < options.repeats; r++) {
                    for (let j = 0; j < 8; j++) tokens.push(((r * 31 + j * 17) % vocab) + 10);
                    const t = performance.now();
                    const outcome = await client.draft(tokens, n);
                    total += ms(t);
                    if (!outcome.ok) throw new Error(`${options.drafter}: ${outcome.failure}: ${outcome.message}`);
                }
                draft[`n${n}`] = total / options.repeats;
            }
        }
        process.stdout.write(
            `${JSON.stringify(
                {
                    target: options.target,
                    gpu: llama.gpu,
                    drafter: options.drafter ?? null,
                    unit: "ms",
                    alone_per_token: alone,
                    verify,
                    draft,
                },
                null,
                2,
            )}\n`,
        );
        await context.dispose();
        await model.dispose();
        await llama.dispose();
    });

await program.parseAsync();
