/** `GET /info`: what the loaded drafter is, so clients can check that its token ids match their target's. */

import { type Static, Type } from "@sinclair/typebox";

export const InfoResponse = Type.Object(
    {
        model: Type.String({ description: "`general.name` from the GGUF, or the file name." }),
        architecture: Type.String({ description: "`general.architecture`, e.g. `qwen3`." }),
        vocab_size: Type.Integer({ description: "Token ids the model accepts: 0 ≤ id < vocab_size." }),
        vocab_fingerprint: Type.String({
            description: "sha256 (hex) over the vocabulary; equal fingerprints mean the same token ids.",
        }),
        draft_length: Type.Integer({ description: "Tokens drafted when a request does not say (`--draft-len`)." }),
        max_draft_length: Type.Integer({ description: "Largest `n` a request may ask for." }),
        context_size: Type.Integer({ description: "Tokens one sequence can hold: prompt + draft." }),
        quantization: Type.String({ description: "Weight format of most tensors, e.g. `Q4_0`." }),
        file_bytes: Type.Integer({ description: "Model file size in bytes." }),
        backend: Type.String({ description: "Where llama.cpp computes: `cpu`, `cuda`, `vulkan` or `metal`." }),
        streams: Type.Integer({ description: "Sequences held at once, each with its own KV cache." }),
        engine: Type.String({ description: "Which engine implementation serves drafts." }),
        flash_attention: Type.Boolean(),
    },
    { $id: "InfoResponse", additionalProperties: false },
);
export type InfoResponse = Static<typeof InfoResponse>;
