/**
 * `POST /draft` bodies and answers, in two forms on one route:
 * - specdraft's own: `{"tokens": [...], "n"?}` → `{"draft": [...]}`;
 * - TensorRT-LLM's external drafter API: `{"prefix": [...], "request_id"?, "end_id"?, "max_sequence_length"?}` →
 *   `{"draft_tokens": [...], "request_id"?}` (its default `response_field` is `draft_tokens`).
 * A body with a `prefix` key is read as the TensorRT-LLM form.
 */

import { type Static, Type } from "@sinclair/typebox";
import { maxDraftLength } from "../serveDefaults.js";
import { refTo } from "./refTo.js";

/** A token id; the upper bound (the vocabulary size) is checked per model by the route. */
const TokenId = Type.Integer({ minimum: 0 });

const DraftLength = Type.Integer({
    minimum: 1,
    maximum: maxDraftLength,
    description: `Tokens to draft, 1 ≤ n ≤ ${maxDraftLength}. Defaults to the server's \`--draft-len\`.`,
});

export const DraftRequest = Type.Object(
    {
        tokens: Type.Array(TokenId, {
            minItems: 1,
            description: "The context so far as token ids of the drafter's vocabulary (see `GET /info`).",
        }),
        n: Type.Optional(DraftLength),
    },
    { $id: "DraftRequest" },
);
export type DraftRequest = Static<typeof DraftRequest>;

export const TrtDraftRequest = Type.Object(
    {
        prefix: Type.Array(TokenId, { minItems: 1, description: "The sequence so far: prompt + generated tokens." }),
        // JSON Schema type lists (not anyOf) so a wrong type is reported as "must be integer,null"
        request_id: Type.Optional(
            Type.Unsafe<number | string | null>({
                type: ["integer", "string", "null"],
                description: "Echoed in the answer.",
            }),
        ),
        end_id: Type.Optional(
            Type.Unsafe<number | null>({
                type: ["integer", "null"],
                description: "End-of-sequence id: the draft stops right after it. Negative or null: none.",
            }),
        ),
        max_sequence_length: Type.Optional(
            Type.Unsafe<number | null>({
                type: ["integer", "null"],
                description:
                    "Longest the sequence may grow: the draft is cut to max_sequence_length − prefix length (≥ 0).",
            }),
        ),
        n: Type.Optional(DraftLength),
    },
    { $id: "TrtDraftRequest", description: "TensorRT-LLM's external drafter request; other keys are ignored." },
);
export type TrtDraftRequest = Static<typeof TrtDraftRequest>;

/**
 * Either form, told apart by the `prefix` key. if/then/else (rather than anyOf) makes the validator report only the
 * errors of the form the client meant.
 */
export const DraftBody = Type.Unsafe<DraftRequest | TrtDraftRequest>({
    $id: "DraftBody",
    description: "A body with a `prefix` key is a TrtDraftRequest, otherwise a DraftRequest.",
    if: { type: "object", required: ["prefix"] },
    // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then/else keyword, not a thenable
    then: refTo(TrtDraftRequest),
    else: refTo(DraftRequest),
});

export const DraftResponse = Type.Object(
    {
        draft: Type.Array(Type.Integer(), { description: "The greedy continuation: n token ids." }),
    },
    { $id: "DraftResponse", additionalProperties: false },
);
export type DraftResponse = Static<typeof DraftResponse>;

export const TrtDraftResponse = Type.Object(
    {
        draft_tokens: Type.Array(Type.Integer(), {
            description: "The greedy continuation, ending at end_id if drafted; may be empty.",
        }),
        request_id: Type.Optional(Type.Unsafe<number | string>({ type: ["integer", "string"] })),
    },
    { $id: "TrtDraftResponse", additionalProperties: false },
);
export type TrtDraftResponse = Static<typeof TrtDraftResponse>;

/** The 200 answer: the form that matches the request's. */
export const DraftAnswer = Type.Union([refTo(DraftResponse), refTo(TrtDraftResponse)]);
