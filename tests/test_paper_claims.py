"""The paper's statements checked on a run (`tflabench.analysis.paper_claims`), on hand-made tables."""

import pandas as pd
import pytest

from tflabench.analysis import paper_claims
from tflabench.analysis.paper_claims import EXP_LIMIT, EXP_XL, SIG_XL

SEQ_LENS = (512, 2048, 8192, 65536)
MLSTM_SHAPE = {"heads": 16, "head_dim_qk": 128, "head_dim_v": 256, "chunk_size": 128}


def fig4_rows(kernel: str, mode: str, times: dict[int, float], **shape) -> list[dict]:
    shape = MLSTM_SHAPE | shape
    return [{"kernel": kernel, "mode": mode, "seq_len": seq_len, "batch": 65536 // seq_len, "time_ms": time,
             "dtype": "bfloat16", **shape} for seq_len, time in times.items()]


def verdicts(rows: list[dict]) -> dict[str, paper_claims.Verdict]:
    return {claim.statement: verdict for claim, verdict in paper_claims.check_claims(pd.DataFrame(rows))}


def claim_of(check) -> str:
    return next(claim.statement for claim in paper_claims.CLAIMS if claim.check is check)


def test_xl_against_limit_and_sig_against_exp_at_t_8192():
    rows = (fig4_rows(EXP_XL, "fwdbw", {8192: 5.0}) + fig4_rows(EXP_LIMIT, "fwdbw", {8192: 6.5})
            + fig4_rows(EXP_XL, "fwd", {8192: 2.0}) + fig4_rows(SIG_XL, "fwd", {8192: 1.5}))
    checked = verdicts(rows)
    assert checked[claim_of(paper_claims._xl_vs_limit)].holds  # 1.3x
    sig_exp = checked[claim_of(paper_claims._sig_vs_exp)]
    assert not sig_exp.holds and "25% less time" in sig_exp.measured


def test_faster_than_attention_names_the_first_length_from_which_it_holds():
    sig = fig4_rows(SIG_XL, "fwdbw", dict(zip(SEQ_LENS, (5.0, 5.0, 5.0, 8.0), strict=True)))
    cudnn = fig4_rows("torch.sdpa.cudnn", "fwdbw", dict(zip(SEQ_LENS, (3.0, 9.0, 30.0, 225.0), strict=True)),
                      heads=32, head_dim_qk=128, head_dim_v=128, chunk_size=None)
    verdict = verdicts(sig + cudnn)[claim_of(paper_claims._faster_than_attention)]
    assert verdict.holds and "from T = 2048 on" in verdict.measured and "torch.sdpa.cudnn" in verdict.measured
    slower_at_the_end = fig4_rows("torch.sdpa.cudnn", "fwdbw", {512: 9.0, 65536: 4.0})
    assert not verdicts(sig + slower_at_the_end)[claim_of(paper_claims._faster_than_attention)].holds


@pytest.mark.parametrize("mamba_ms, holds", [
    ((11.0, 10.5, 10.2, 16.5), True),
    ((11.0, 9.0, 10.2, 16.5), False),
])
def test_twice_mamba_must_hold_at_every_length(mamba_ms, holds):
    sig = fig4_rows(SIG_XL, "fwdbw", dict(zip(SEQ_LENS, (5.0, 5.0, 5.0, 8.0), strict=True)))
    mamba = fig4_rows("mamba_ssm.mamba2_ssd", "fwdbw", dict(zip(SEQ_LENS, mamba_ms, strict=True)), heads=64)
    assert verdicts(sig + mamba)[claim_of(paper_claims._twice_mamba)].holds is holds


def test_forward_peers_must_be_faster_but_within_one_ms():
    sig = fig4_rows(SIG_XL, "fwd", {8192: 2.0})
    peers = (fig4_rows("mamba_ssm.mamba2_ssd", "fwd", {8192: 1.5}, heads=64)
             + fig4_rows("fla.chunk_simple_gla", "fwd", {8192: 1.2}))
    claim = claim_of(paper_claims._mamba_and_simple_gla_forward)
    assert verdicts(sig + peers)[claim].holds
    slower_peer = fig4_rows("fla.chunk_simple_gla", "fwd", {8192: 2.5})
    assert not verdicts(sig + peers[:1] + slower_peer)[claim].holds


def test_chunk_optimum_of_the_fig5_sweep_and_claims_without_rows_are_left_out():
    rows = [{"kernel": SIG_XL, "mode": "fwdbw", "seq_len": 8192, "batch": 8, "heads": 8, "head_dim_qk": 256,
             "head_dim_v": 512, "chunk_size": chunk, "time_ms": time, "dtype": "bfloat16"}
            for chunk, time in ((64, 9.0), (128, 8.5), (256, 9.2), (512, 11.0))]
    checked = verdicts(rows)
    assert list(checked) == [claim_of(paper_claims._chunk_optimum)]
    assert checked[claim_of(paper_claims._chunk_optimum)].measured.startswith("L = 128 (8.50 ms)")


def test_our_mlstm_rows_of_other_head_dims_do_not_count_for_fig4():
    wider = fig4_rows(EXP_LIMIT, "fwdbw", {8192: 6.5}, head_dim_v=512)
    rows = fig4_rows(EXP_XL, "fwdbw", {8192: 5.0}) + wider
    assert claim_of(paper_claims._xl_vs_limit) not in verdicts(rows)


def test_float32_rows_check_nothing():
    rows = fig4_rows(EXP_XL, "fwd", {8192: 2.0}) + fig4_rows(SIG_XL, "fwd", {8192: 1.5})
    assert verdicts(rows) and not verdicts([row | {"dtype": "float32"} for row in rows])
