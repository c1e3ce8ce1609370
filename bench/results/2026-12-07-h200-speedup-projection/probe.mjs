// Ad-hoc GPU diagnosis (not part of the product): verify(m) of the native target under the conditions a generation
// and speedup's probe differ in. node .gd4/probe.mjs TARGET DRAFT > out.json
import { readModelFileInfo } from "../dist/engine/gguf.js";
import { loadEngine } from "../dist/engine/loadEngine.js";
import { NativeDraftTokenPredictor } from "../dist/generate/NativeDraftTokenPredictor.js";
import { NativeTarget } from "../dist/generate/NativeTarget.js";
import { perCall, statsSince } from "../dist/generate/targetStats.js";

const [targetPath, draftPath] = process.argv.slice(2);
const N = Number(process.env.PROBE_N ?? 60);
const target = await NativeTarget.load({ modelPath: targetPath, contextSize: 2048, maxOutputs: 17, gpu: "auto", threads: Number(process.env.PROBE_THREADS ?? 8) });
const engine = await loadEngine({ modelPath: draftPath, modelFile: await readModelFileInfo(draftPath), streams: 1, contextSize: 2048, gpu: "auto", threads: Number(process.env.PROBE_THREADS ?? 8) });
const prompt = Array.from({ length: 256 }, (_, i) => ((i * 7919) % 4000) + 10);
const out = { device: target.gpuDevice, rows: [] };

async function alone() {
    await target.generate(prompt, 8);
    const t0 = performance.now();
    const a = await target.generate(prompt, 8);
    const t1 = performance.now();
    const b = await target.generate(prompt, 8 + 80);
    const t2 = performance.now();
    return (t2 - t1 - (t1 - t0)) / (b.length - a.length);
}

// m tokens per verify; advance: keep grows by `advance` each call; draftK: a draft of k between verifications (untimed
// or timed separately); mode all/last
async function probe(name, m, { advance = 0, draftK = 0, last = false } = {}) {
    await target.verify(prompt, 0, prompt.length - 1);
    const predictor = draftK ? new NativeDraftTokenPredictor(engine, draftK, target.eogIds) : null;
    let ctx = prompt.slice();
    let keep = prompt.length;
    const walls = [];
    const drafts = [];
    let before;
    for (let r = 0; r < N + 5; r++) {
        if (r === 5) before = { ...target.stats };
        if (predictor) {
            const t = performance.now();
            predictor.reset({ stateTokens: ctx });
            await predictor.predictTokens();
            if (r >= 5) drafts.push(performance.now() - t);
        }
        const input = Array.from({ length: m }, (_, j) => 100 + ((j + r) % 3000));
        const t = performance.now();
        await target.verify(input, keep, last ? m - 1 : 0);
        if (r >= 5) walls.push(performance.now() - t);
        if (advance) {
            for (let j = 0; j < advance; j++) ctx.push(input[j]);
            keep += advance;
        }
    }
    const mean = (v) => v.reduce((a, b) => a + b, 0) / Math.max(1, v.length);
    const sorted = [...walls].sort((a, b) => a - b);
    const row = {
        name, m, advance, draftK, last,
        wallMean: mean(walls), wallMedian: sorted[Math.floor(sorted.length / 2)], wallMin: sorted[0],
        draftMean: drafts.length ? mean(drafts) : null,
        split: perCall(statsSince(target.stats, before), N),
    };
    out.rows.push(row);
    process.stderr.write(`${JSON.stringify(row)}\n`);
}

out.alone1 = await alone();
for (const m of (process.env.PROBE_MS ?? "1,3,5").split(",").map(Number)) {
    await probe(`same-m${m}`, m);
    await probe(`adv-m${m}`, m, { advance: 1 });
    await probe(`draft-same-m${m}`, m, { draftK: m - 1 || 1 });
    await probe(`draft-adv-m${m}`, m, { draftK: m - 1 || 1, advance: Math.min(2, m) });
}
await probe("same-m3-again", 3);
out.alone2 = await alone();
process.stdout.write(`${JSON.stringify(out, null, 1)}\n`);
await engine.close();
target.dispose();
