"""The causal LMs (built, loaded, saved), attention over packed rows, and τ, what a drafter is measured by."""
