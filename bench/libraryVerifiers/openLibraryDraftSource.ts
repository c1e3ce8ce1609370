/**
 * The draft sources of node-llama-cpp's verifiers (bench/libraryVerifiers.ts): a draft GGUF loaded through
 * node-llama-cpp, drafting in lock-step (GreedyDraftTokenPredictor, for `exact-node-llama-cpp`) or beside the target's
 * sequence (the library's DraftSequenceTokenPredictor, for `node-llama-cpp`); a server or prompt lookup opens as
 * `specdraft generate` opens it (src/generate/openDraftSource.ts).
 */
import {
    DraftSequenceTokenPredictor,
    type Llama,
    type LlamaContextSequence,
    type TokenPredictor,
} from "node-llama-cpp";
import type { ModelFileInfo } from "../../src/engine/gguf.js";
import {
    type DraftSource,
    type DraftSourceCommon,
    type DraftSourceSpec,
    openStateDraftSource,
    readDraftModelFile,
} from "../../src/generate/openDraftSource.js";
import type { StateOnlyTokenPredictor } from "../../src/generate/StateTokenPredictor.js";
import { GreedyDraftTokenPredictor } from "./GreedyDraftTokenPredictor.js";

/** A source's options, and the llama.cpp that loads a draft GGUF. */
export interface LibraryDraftSourceOptions extends DraftSourceCommon {
    llama: Llama;
}

/** For the exact-node-llama-cpp verifier: a draft GGUF drafts k greedy tokens in lock-step with the loop. */
export function openLockStepDraftSource(
    spec: DraftSourceSpec,
    options: LibraryDraftSourceOptions,
): Promise<DraftSource<StateOnlyTokenPredictor>> {
    return openDraftSourceWith(
        spec,
        options,
        (sequence) => new GreedyDraftTokenPredictor(sequence, options.draftLength),
    );
}

/** For the node-llama-cpp verifier: a draft GGUF drafts through the library's DraftSequenceTokenPredictor. */
export function openLibraryDraftSource(
    spec: DraftSourceSpec,
    options: LibraryDraftSourceOptions,
): Promise<DraftSource> {
    return openDraftSourceWith(
        spec,
        options,
        (sequence) =>
            new DraftSequenceTokenPredictor(sequence, {
                // a full draft every step, as a drafter server gives, and no confidence cut-off: greedy drafts like the
                // others
                minTokens: options.draftLength,
                maxTokens: options.draftLength,
                minConfidence: 0,
            }),
    );
}

/** A draft GGUF through node-llama-cpp with `makePredictor`'s predictor (vocabulary checked first); else as generate. */
async function openDraftSourceWith<P extends TokenPredictor>(
    spec: DraftSourceSpec,
    options: LibraryDraftSourceOptions,
    makePredictor: (sequence: LlamaContextSequence) => P,
): Promise<DraftSource<P | StateOnlyTokenPredictor>> {
    if (spec.kind !== "model") return openStateDraftSource(spec, options);
    const file = await readDraftModelFile(spec.path, options.target);
    return openLlamaDraftModel(spec.path, file, options, makePredictor);
}

/** A draft GGUF loaded through node-llama-cpp, one sequence, drafting through the predictor `makePredictor` makes. */
async function openLlamaDraftModel<P extends TokenPredictor>(
    path: string,
    file: ModelFileInfo,
    options: LibraryDraftSourceOptions,
    makePredictor: (sequence: LlamaContextSequence) => P,
): Promise<DraftSource<P>> {
    const model = await options.llama.loadModel({ modelPath: path });
    try {
        const context = await model.createContext({
            contextSize: options.contextSize,
            sequences: 1,
            threads: options.threads,
        });
        const predictor = makePredictor(context.getSequence());
        return {
            kind: "model",
            label: path,
            vocabFingerprint: file.vocabFingerprint,
            quantization: file.quantization,
            predictor,
            close: async () => {
                predictor.dispose();
                await context.dispose();
                await model.dispose();
            },
        };
    } catch (error) {
        await model.dispose();
        throw error;
    }
}
