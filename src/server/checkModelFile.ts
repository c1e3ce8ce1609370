/**
 * Checks a model file before the server listens, so a missing or corrupt file ends `specdraft serve` at once with a
 * one-line reason instead of after the port is open. Reads only the GGUF header and tensor table (node-llama-cpp's
 * readGgufFileInfo), then checks that every tensor's data lies inside the file (catches truncated downloads/copies).
 */

import { stat } from "node:fs/promises";
import { readGgufFileInfo } from "node-llama-cpp";

/** A model file that cannot be served; the message is one line naming the file and the problem. */
export class ModelFileError extends Error {
    constructor(message: string) {
        super(message);
        this.name = "ModelFileError";
    }
}

/** What the check learned, for the startup message. */
export interface ModelFileSummary {
    architecture: string;
    name: string | undefined;
    fileBytes: number;
    tensorCount: number;
}

/** Bytes per block and elements per block of the ggml types whose size we know (others are only offset-checked). */
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

export async function checkModelFile(path: string): Promise<ModelFileSummary> {
    let fileBytes: number;
    try {
        const stats = await stat(path);
        if (!stats.isFile()) throw new ModelFileError(`Model file ${path} is not a regular file.`);
        fileBytes = stats.size;
    } catch (error) {
        if (error instanceof ModelFileError) throw error;
        const code = (error as NodeJS.ErrnoException).code;
        throw new ModelFileError(
            code === "ENOENT" ? `Model file ${path} does not exist.` : `Model file ${path} cannot be read (${code}).`,
        );
    }

    let info: Awaited<ReturnType<typeof readGgufFileInfo>>;
    try {
        info = await readGgufFileInfo(path, { sourceType: "filesystem", logWarnings: false, spliceSplitFiles: false });
    } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        throw new ModelFileError(`Model file ${path} is not a valid GGUF file: ${oneLine(reason)}`);
    }

    if (info.infoEndOffset !== undefined && info.infoEndOffset > fileBytes) {
        throw new ModelFileError(
            `Model file ${path} is truncated: its header ends at byte ${info.infoEndOffset} but the file has ${fileBytes} bytes.`,
        );
    }
    const tensors = info.tensorInfo ?? [];
    if (tensors.length === 0) throw new ModelFileError(`Model file ${path} has no tensors.`);
    for (const tensor of tensors) {
        const start = Number(tensor.fileOffset);
        const block = ggmlTypeBlocks[tensor.ggmlType];
        const elements = tensor.dimensions.reduce<number>((product, d) => product * Number(d), 1);
        const end = block === undefined ? start + 1 : start + Math.ceil(elements / block[1]) * block[0];
        if (end > fileBytes) {
            throw new ModelFileError(
                `Model file ${path} is truncated: tensor ${tensor.name} ends at byte ${end} but the file has ${fileBytes} bytes.`,
            );
        }
    }

    return {
        architecture: String(info.metadata.general?.architecture ?? "unknown"),
        name: info.metadata.general?.name,
        fileBytes,
        tensorCount: tensors.length,
    };
}

/** The message on one printable line (a bad magic is quoted as raw bytes). */
function oneLine(text: string): string {
    return text
        .replace(/\s+/g, " ")
        .replace(/[^\x20-\x7e]/g, "?")
        .trim()
        .replace(/\.$/, "");
}
