/** The engine's tuning flags (serve's, and the benches'): parsed strictly, and mapped onto EngineTuning. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Command } from "commander";
import { addEngineTuningOptions, type EngineTuningFlags, engineTuningOf } from "../../src/cli/engineTuningOptions.js";

function parse(args: string[]): EngineTuningFlags {
    const command = addEngineTuningOptions(new Command("probe").exitOverride().configureOutput({ writeErr: () => {} }));
    command.parse(args, { from: "user" });
    return command.opts<EngineTuningFlags>();
}

test("each tuning flag reaches its EngineTuning field; flags not given stay the backend's default", () => {
    assert.deepEqual(engineTuningOf(parse([])), {
        lookahead: undefined,
        lookaheadStepTokens: undefined,
        lookaheadFill: undefined,
        kvType: undefined,
        flashAttention: undefined,
        padBatch: undefined,
        stepPrefill: undefined,
    });
    const flags = parse(
        "--lookahead 0 --lookahead-step-tokens 24 --lookahead-fill on --kv-type q8_0 --flash-attention off --pad-batch 0.5 --step-prefill 2".split(
            " ",
        ),
    );
    assert.deepEqual(engineTuningOf(flags), {
        lookahead: 0,
        lookaheadStepTokens: 24,
        lookaheadFill: true,
        kvType: "q8_0",
        flashAttention: false,
        padBatch: 0.5,
        stepPrefill: 2,
    });
});

test("a value the engine cannot use is refused, naming what was expected", () => {
    for (const [args, expected] of [
        [["--kv-type", "q4_0"], /Allowed choices are f16, q8_0, bf16, f32/],
        [["--flash-attention", "1"], /Allowed choices are on, off/],
        [["--lookahead-fill", "yes"], /Allowed choices are on, off/],
        [["--pad-batch", "1.5"], /expected a fraction 0–1, found "1.5"/],
        [["--step-prefill", "-1"], /expected an integer 0–1048576, found "-1"/],
        [["--lookahead", "99"], /expected an integer 0–32, found "99"/],
    ] as const) {
        assert.throws(() => parse([...args]), expected, args.join(" "));
    }
});
