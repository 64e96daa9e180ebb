"""What fp32_tc reports as its method, for tests that know which method gemmlab.core.methods.choose
(one scale per matrix) picks for their data: on ec_wgmma's FOLD the pre-pass
(split_scaled.cu) scales each row of op(A) and column of op(B), so FP16 parts are always
reported scaled (fp16_ec_scaled); the input sets these tests use need TF32 parts either
way or neither (tests/test_ec_split_scaled.py: data where the two rules part)."""


def per_row(plan) -> bool:
    """Whether ``plan`` (fp32_tc's, as gemmlab.last_plan() reports it) chose per row."""
    return plan.spec.name == "ec_wgmma" and plan.params.get("FOLD") == 1


def fp32_tc_method(plan, method: str) -> str:
    """The method fp32_tc reports on ``plan``'s kernel where gemmlab.core.methods.choose picks ``method``."""
    return "fp16_ec_scaled" if per_row(plan) and method == "fp16_ec" else method
