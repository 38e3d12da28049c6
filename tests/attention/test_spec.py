"""AttentionSpec refuses settings it would ignore and keeps what it uses; the command line's refusal of --sparse-layers
with softmax reads the same."""

import pytest

from attnkit.cli import main
from helpers import one_line_error


@pytest.mark.parametrize("kw,needle", [
    (dict(attention="softmax", sparse_layers="last"), "sparse_layers=last: needs a sparse attention"),
    (dict(attention="sparsemax", alpha=1.2), "alpha=1.2: only entmax-alpha has an alpha"),
    (dict(attention="sparsegen-lin", alpha_mix=0.5), "alpha_mix=0.5: only the entmax maps"),
])
def test_attention_spec_refuses_settings_it_would_ignore(kw, needle):
    from attnkit.attention.spec import AttentionSpec

    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        AttentionSpec(**kw)


def test_attention_spec_keeps_what_it_uses():
    from dataclasses import replace

    from attnkit.attention.spec import AttentionSpec

    assert AttentionSpec("sparsemax", sparse_layers="last").sparse_layers == "last"
    assert AttentionSpec("softmax", sparse_layers="all").sparse_layers is None  # softmax everywhere: nothing ignored
    assert AttentionSpec("entmax-alpha", alpha=1.2).alpha == 1.2
    assert AttentionSpec("entmax15", alpha_mix=0.5).alpha_mix == 0.5
    assert AttentionSpec("softmax", blur="value", blur_size=5).blur_size == 5
    # saved configs hold a shape without a blur: they load (without it; given anew it is refused, below)
    assert AttentionSpec.from_dict({"attention": "softmax", "blur_sigma": 0.5}) == AttentionSpec("softmax")
    with pytest.raises(ValueError, match="needs a sparse attention"):
        replace(AttentionSpec("sparsemax", sparse_layers="last"), attention="softmax")


@pytest.mark.parametrize("command", ["train", "adapt"])
def test_the_cli_refusal_of_sparse_layers_with_softmax_reads_as_before(command, tiny_bert, tiny_task, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([command, "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--attention", "softmax", "--sparse-layers", "last"]) == 2
    line = one_line_error(capsys)
    assert line == f"attnkit {command}: error: --sparse-layers last: needs a sparse --attention (softmax is softmax in every layer)"
    assert not out.exists()


def test_a_lam_for_a_map_without_one_is_refused_as_the_command_line_refuses_it():
    import torch

    import attnkit
    from attnkit.attention.spec import AttentionSpec
    from attnkit.errors import UserError

    with pytest.raises(UserError, match="only sparsegen-lin has a lam"):
        AttentionSpec("sparsemax", lam=-1.0)
    with pytest.raises(UserError, match="only sparsegen-lin has a lam"):
        AttentionSpec("entmax15", -4.0)
    assert AttentionSpec("sparsegen-lin", -4.0).lam == -4.0
    # a config an older attnkit saved with the task's paper lam beside 1.5-entmax still loads (the lam was ignored)
    assert AttentionSpec.from_dict({"attention": "entmax15", "lam": -4.0}) == AttentionSpec("entmax15")
    # a bool is not an alpha (True read as 1.0 ran softmax), as it is not a lam
    with pytest.raises(UserError, match="alpha must be a real number"):
        attnkit.entmax_bisect(torch.randn(2, 3), alpha=True)
    with pytest.raises(UserError, match="alpha must be a real number"):
        AttentionSpec("entmax-alpha", alpha=True)
    # nor is a string ('0.5' was read as 0.5 without a word, where topk='2' is refused)
    for bad in ("0.5", b"0.5", " -2 "):
        with pytest.raises(UserError, match="lam must be a real number"):
            attnkit.sparsegen_lin(torch.randn(2, 3), lam=bad)
        with pytest.raises(UserError, match="lam must be a real number"):
            AttentionSpec("sparsegen-lin", lam=bad)
    with pytest.raises(UserError, match="alpha must be a real number"):
        AttentionSpec("entmax-alpha", alpha="1.3")


def test_a_blurs_shape_without_a_blur_is_refused_as_the_command_line_refuses_it(tiny_bert):
    """AttentionSpec and sparsify accepted (and recorded) a blur's width and sigma with no blur, which the command
    line refuses; a config that recorded one still loads, without it."""
    from transformers import AutoModel

    import attnkit
    from attnkit.attention.spec import AttentionSpec
    from attnkit.errors import UserError
    from attnkit.training.config import TrainConfig

    for kw, said in (({"blur_size": 7}, "blur_size=7: it shapes"), ({"blur_sigma": 0.5}, "blur_sigma=0.5: it shapes"),
                     ({"blur_size": 5, "blur_sigma": 0.5}, "blur_size=5, blur_sigma=0.5: they shape")):
        # only what was given is named (blur_sigma's default 0.3 was named too: sweep -28p P)
        with pytest.raises(UserError, match=f"^{said} a blur, and there is none"):
            AttentionSpec("sparsemax", **kw)
        with pytest.raises(UserError, match=f"^{said} a blur, and there is none"):
            attnkit.sparsify(AutoModel.from_pretrained(tiny_bert), attention="softmax", **kw)
    assert AttentionSpec("sparsemax", blur="context", blur_size=7).blur_size == 7
    assert AttentionSpec.from_dict({"attention": "sparsemax", "blur": "none", "blur_sigma": 0.5}) == AttentionSpec("sparsemax")
    # a training config's default shape without a blur (as the studies give it) is no blur, not a refusal
    assert TrainConfig(attention="sparsemax", blur_sigma=0.5).spec() == AttentionSpec("sparsemax")


def test_a_blurred_model_first_run_under_inference_mode_still_takes_gradients(tiny_bert):
    """The blur's kernel is cached: built first under torch.inference_mode it was an inference tensor, and every later
    forward that needed gradients failed ("Inference tensors cannot be saved for backward"), so `faithfulness` on any
    blurred model was an internal error (sweep 2026-11-28y HA)."""
    import torch

    from attnkit.attention.blur import cached_kernel
    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier

    cached_kernel.cache_clear()
    for blur in ("context", "value"):
        model = build_classifier(str(tiny_bert), 2, AttentionSpec("sparsemax", blur=blur, blur_size=3, blur_sigma=0.7)).eval()
        ids = torch.tensor([[2, 5, 6, 7, 3]])
        with torch.inference_mode():
            model(input_ids=ids)
        emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        model(inputs_embeds=emb).logits.sum().backward()
        assert emb.grad is not None and emb.grad.abs().sum() > 0
