/**
 * What a GGUF file's header says about a drafter, for `EngineInfo`: name, architecture, vocabulary (size and
 * fingerprint) and weight format. Pure JS (node-llama-cpp's readGgufFileInfo reads only the header and tensor table),
 * so a missing, corrupt or truncated file is reported in one line before llama.cpp is touched — `specdraft serve`
 * calls it before it listens.
 */

import { stat } from "node:fs/promises";
import { basename } from "node:path";
import { GgmlType, readGgufFileInfo } from "node-llama-cpp";
import { EngineLoadError } from "./errors.js";
import { vocabFingerprint } from "./vocabFingerprint.js";

export interface ModelFileInfo {
    modelName: string;
    architecture: string;
    vocabSize: number;
    vocabFingerprint: string;
    /** The ggml type of most 2-D weight tensors, e.g. `Q4_0`. */
    quantization: string;
    fileBytes: number;
}

export async function readModelFileInfo(modelPath: string): Promise<ModelFileInfo> {
    let fileBytes: number;
    try {
        const stats = await stat(modelPath);
        if (!stats.isFile()) throw new EngineLoadError(`Model file ${modelPath} is not a regular file.`);
        fileBytes = stats.size;
    } catch (error) {
        if (error instanceof EngineLoadError) throw error;
        const code = (error as NodeJS.ErrnoException).code;
        throw new EngineLoadError(
            code === "ENOENT"
                ? `Model file ${modelPath} does not exist.`
                : `Model file ${modelPath} cannot be read (${code}).`,
        );
    }

    let info: Awaited<ReturnType<typeof readGgufFileInfo>>;
    try {
        info = await readGgufFileInfo(modelPath, {
            sourceType: "filesystem",
            logWarnings: false,
            spliceSplitFiles: false,
        });
    } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        throw new EngineLoadError(`Model file ${modelPath} is not a valid GGUF file: ${oneLine(reason)}`);
    }
    checkTensorsInside(modelPath, info.tensorInfo ?? [], fileBytes);

    const tokens = info.metadata.tokenizer?.ggml?.tokens;
    if (!Array.isArray(tokens) || tokens.length === 0) {
        throw new EngineLoadError(`Model file ${modelPath} has no vocabulary (tokenizer.ggml.tokens).`);
    }
    return {
        modelName: info.metadata.general?.name ?? basename(modelPath),
        architecture: String(info.metadata.general?.architecture ?? "unknown"),
        vocabSize: tokens.length,
        vocabFingerprint: vocabFingerprint(tokens),
        quantization: mainWeightType(info.tensorInfo ?? []),
        fileBytes,
    };
}

/** Bytes and elements per block of the ggml types whose size we know (others are only offset-checked). */
const ggmlTypeBlocks: Readonly<Record<number, readonly [bytes: number, elements: number]>> = {
    0: [4, 1], // F32
    1: [2, 1], // F16
    2: [18, 32], // Q4_0
    3: [20, 32], // Q4_1
    6: [22, 32], // Q5_0
    7: [24, 32], // Q5_1
    8: [34, 32], // Q8_0
    10: [84, 256], // Q2_K
    11: [110, 256], // Q3_K
    12: [144, 256], // Q4_K
    13: [176, 256], // Q5_K
    14: [210, 256], // Q6_K
    30: [2, 1], // BF16
};

/** Every tensor's data must lie inside the file: catches truncated downloads and copies. */
function checkTensorsInside(
    modelPath: string,
    tensors: readonly {
        name: string;
        fileOffset: number | bigint;
        dimensions: readonly (number | bigint)[];
        ggmlType: GgmlType;
    }[],
    fileBytes: number,
): void {
    if (tensors.length === 0) throw new EngineLoadError(`Model file ${modelPath} has no tensors.`);
    for (const tensor of tensors) {
        const start = Number(tensor.fileOffset);
        const block = ggmlTypeBlocks[tensor.ggmlType];
        const elements = tensor.dimensions.reduce<number>((product, d) => product * Number(d), 1);
        const end = block === undefined ? start + 1 : start + Math.ceil(elements / block[1]) * block[0];
        if (end > fileBytes) {
            throw new EngineLoadError(
                `Model file ${modelPath} is truncated: tensor ${tensor.name} ends at byte ${end} but the file has ${fileBytes} bytes.`,
            );
        }
    }
}

/** The message on one printable line (a bad magic is quoted as raw bytes). */
function oneLine(text: string): string {
    return text
        .replace(/\s+/g, " ")
        .replace(/[^\x20-\x7e]/g, "?")
        .trim()
        .replace(/\.$/, "");
}

/** The type most 2-D tensors have (ties: the one covering more elements); norms and biases are 1-D and do not count. */
function mainWeightType(tensors: readonly { dimensions: readonly (number | bigint)[]; ggmlType: GgmlType }[]): string {
    const byType = new Map<GgmlType, { count: number; elements: number }>();
    for (const t of tensors) {
        if (t.dimensions.length < 2) continue;
        const entry = byType.get(t.ggmlType) ?? { count: 0, elements: 0 };
        entry.count++;
        entry.elements += t.dimensions.reduce<number>((p, d) => p * Number(d), 1);
        byType.set(t.ggmlType, entry);
    }
    let best: GgmlType | undefined;
    for (const [type, entry] of byType) {
        const current = best === undefined ? undefined : byType.get(best);
        if (
            !current ||
            entry.count > current.count ||
            (entry.count === current.count && entry.elements > current.elements)
        ) {
            best = type;
        }
    }
    return best === undefined ? "unknown" : (GgmlType[best] ?? `ggml type ${best}`);
}
