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
        lookahead: Type.Object(
            {
                candidates: Type.Integer({
                    description:
                        "Prompt-lookup guesses each drafting sequence checks per decode step, at most (0: off; `--lookahead`). They come from the request's own tokens only, and only those equal to the drafter's own greedy token are kept.",
                }),
                step_tokens: Type.Integer({
                    description:
                        "The step's token budget they share (`--lookahead-step-tokens`): each of a step's S sequences gets min(candidates, ⌊step_tokens / S⌋ − 1).",
                }),
                fill: Type.Boolean({
                    description:
                        "Whether every step decodes that many candidate positions (fillers where the lookup has none).",
                }),
            },
            { additionalProperties: false, description: "How drafter steps check prompt-lookup candidates." },
        ),
    },
    { $id: "InfoResponse", additionalProperties: false },
);
export type InfoResponse = Static<typeof InfoResponse>;
