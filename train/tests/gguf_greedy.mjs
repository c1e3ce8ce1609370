#!/usr/bin/env node
// Runs a GGUF through node-llama-cpp on the CPU for the training pipeline's parity tests: greedy drafts (with the
// first step's full-vocabulary probabilities) for token-id prompts, or llama.cpp's tokenization of strings.
//
//   UV_THREADPOOL_SIZE=1 node train/tests/gguf_greedy.mjs model.gguf [more.gguf ...] < request.json
//
// Several models answer the same request in one process, one after another (the answers as a JSON array): a node
// start-up and llama.cpp's backend loading cost ~1.6 s, most of a small model's run.
// request: {"prompts": [[ids], ...], "n": 16, "probabilities": true, "kvCacheType": "F32"?, "threads": 1?}
//            → {"drafts": [[ids]], "firstProbabilities": ["base64", ...]}   (KV cache type defaults to llama.cpp's F16)
//          each prompt's first-step probabilities over the whole vocabulary: little-endian float32, the probability of
//          token i at index i, NaN for an id node-llama-cpp gave none (compact: 49,152 [id, p] pairs are ~1 MB of JSON)
//          {"texts": ["...", ...], "specialTokens": false}              → {"tokens": [[ids], ...]}
// Every answer also says which CPU path ran: {"cpuBackend": ".../libggml-cpu-haswell.so", "systemInfo": "CPU : …"}
// (ggml loads the best libggml-cpu-<variant>.so this CPU runs; scripts/ggml_cpu_variant.c can pin another).
// Prompts run one at a time on one sequence whose history is cleared in between (UV_THREADPOOL_SIZE=1 avoids a known
// race between concurrent evaluations' logits in the addon). Greedy = temperature 0: ties go to the lowest id.

import { readFileSync } from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const defaultDraftLength = 16;
const defaultContextSize = 512;
const defaultThreads = 1; // tiny test models: a second thread only contends on a shared CPU

async function readStdin() {
    const chunks = [];
    for await (const chunk of process.stdin) chunks.push(chunk);
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

/** Greedy continuation of `prompt` for `n` tokens; the first step's probabilities (base64 float32) when asked. */
async function greedy(sequence, prompt, n, withProbabilities) {
    await sequence.clearHistory();
    const last = prompt.length - 1;
    const input = prompt.map((token, i) =>
        i === last ? [token, { generateNext: { token: true, probabilities: withProbabilities } }] : token,
    );
    const first = (await sequence.controlledEvaluate(input))[last];
    const draft = [first.next.token];
    const probabilities = withProbabilities ? denseProbabilities(first.next.probabilities) : undefined;
    while (draft.length < n) {
        const out = await sequence.controlledEvaluate([[draft.at(-1), { generateNext: { token: true } }]]);
        draft.push(out[0].next.token);
    }
    return { draft, probabilities };
}

/** A token → probability map as base64 of a float32 array indexed by token id (NaN where the map has no entry). */
function denseProbabilities(map) {
    let size = 0;
    for (const token of map.keys()) size = Math.max(size, token + 1);
    const dense = new Float32Array(size).fill(Number.NaN);
    for (const [token, p] of map) dense[token] = p;
    return Buffer.from(dense.buffer).toString("base64");
}

/** The libggml-cpu-<variant>.so mapped into this process: the CPU backend ggml chose (or was pinned to). */
function loadedCpuBackend() {
    const line = readFileSync("/proc/self/maps", "utf8")
        .split("\n")
        .find((l) => /libggml-cpu-[^/]*\.so/.test(l));
    return line ? line.slice(line.indexOf("/")) : null;
}

/** One model's answer to the request. */
async function answer(llama, modelPath, request) {
    const model = await llama.loadModel({ modelPath });
    const cpu = { cpuBackend: loadedCpuBackend(), systemInfo: llama.systemInfo };
    try {
        if (request.texts) {
            const tokens = request.texts.map((text) => model.tokenize(text, request.specialTokens ?? false));
            return { tokens, ...cpu };
        }
        const n = request.n ?? defaultDraftLength;
        const longest = Math.max(...request.prompts.map((p) => p.length));
        const context = await model.createContext({
            contextSize: Math.max(defaultContextSize, longest + n + 1),
            sequences: 1,
            threads: request.threads ?? defaultThreads,
            ...(request.flashAttention !== undefined ? { flashAttention: request.flashAttention } : {}),
            ...(request.kvCacheType
                ? { experimentalKvCacheKeyType: request.kvCacheType, experimentalKvCacheValueType: request.kvCacheType }
                : {}),
        });
        try {
            const sequence = context.getSequence();
            const drafts = [];
            const firstProbabilities = [];
            for (const prompt of request.prompts) {
                const { draft, probabilities } = await greedy(sequence, prompt, n, request.probabilities ?? false);
                drafts.push(draft);
                if (probabilities) firstProbabilities.push(probabilities);
            }
            return { drafts, firstProbabilities, ...cpu };
        } finally {
            await context.dispose();
        }
    } finally {
        await model.dispose();
    }
}

async function main() {
    const modelPaths = process.argv.slice(2);
    if (modelPaths.length === 0) {
        console.error("gguf_greedy: usage: node gguf_greedy.mjs MODEL.gguf [MORE.gguf ...] < request.json");
        process.exit(2);
    }
    const request = await readStdin();
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    try {
        const answers = [];
        for (const modelPath of modelPaths) answers.push(await answer(llama, modelPath, request));
        process.stdout.write(JSON.stringify(modelPaths.length === 1 ? answers[0] : answers));
    } finally {
        await llama.dispose();
    }
}

main().catch((error) => {
    console.error(`gguf_greedy: ${error?.stack ?? error}`);
    process.exit(1);
});
