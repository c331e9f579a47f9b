"""Caption maps (vitroll.caption_maps) on captioners built from small configs: every map equals a float64 reference
computed per image and per token from transformers' own eager attentions, by the documented rules (tests/reference.py:
reference_caption_relevance, each token from its own forward pass on the caption before it, as at generation time)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

import vitroll
from vitroll.errors import InputValueError, MethodOptionError, UnsupportedModelError
from vitroll.methods.caption import caption_lengths, caption_maps, chefer_relevance

from reference import reference_caption_relevance

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
START, END, PAD = 2, 3, 0
VOCABULARY = 40


def _encoder_config(kind: str):
    common = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, initializer_range=0.2)
    return transformers.DeiTConfig(**common) if kind == "deit" else transformers.ViTConfig(**common)


def _decoder_config(kind: str):
    if kind == "gpt2":
        return transformers.GPT2Config(vocab_size=VOCABULARY, n_embd=32, n_layer=2, n_head=2, n_positions=16,
                                       add_cross_attention=True, is_decoder=True, bos_token_id=START,
                                       eos_token_id=END, initializer_range=0.2)
    return transformers.BertConfig(vocab_size=VOCABULARY, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=64, max_position_embeddings=16, is_decoder=True,
                                   add_cross_attention=True, initializer_range=0.2)


def build_captioner(encoder: str = "vit", decoder: str = "gpt2", seed: int = 0):
    config = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(
        _encoder_config(encoder), _decoder_config(decoder))
    config.decoder_start_token_id, config.eos_token_id, config.pad_token_id = START, END, PAD
    torch.manual_seed(seed)
    return transformers.VisionEncoderDecoderModel(config).eval()


@pytest.fixture(scope="module")
def images():
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


CAPTIONS = torch.tensor([[5, 9, 14, 7, END, PAD], [11, 6, 6, 20, 8, 13]])
"""The first caption ends after 5 tokens (its end token), the second runs to K = 6 without one."""


@pytest.mark.parametrize("encoder, decoder", [("vit", "gpt2"), ("vit", "bert"), ("deit", "gpt2")])
@pytest.mark.parametrize("method", ["rollout", "chefer"])
def test_caption_maps_equal_the_per_token_float64_reference(encoder, decoder, method, images):
    model = build_captioner(encoder, decoder)
    prefix = 2 if encoder == "deit" else 1
    result = caption_maps(model, images, method=method, caption_ids=CAPTIONS)
    assert result.maps.shape == (2, 6, 4, 4) and result.maps.dtype == torch.float32
    assert result.lengths.tolist() == [5, 6]
    for index in range(2):
        length = int(result.lengths[index])
        expected = torch.from_numpy(reference_caption_relevance(
            model, images[index], CAPTIONS[index, :length].tolist(), START, method, num_prefix=prefix))
        got = result.maps[index].reshape(6, -1).double()
        torch.testing.assert_close(got[:length], expected[:length], rtol=1e-4, atol=1e-6)
        assert torch.all(got[length:] == 0)
        assert expected[:length].amax() > 10 * expected[:length].amin().clamp(min=1e-12) or method == "rollout"


def reference_occlusion(model, image: torch.Tensor, caption: torch.Tensor, window: int, grid: int = 4,
                        patch: int = 8) -> torch.Tensor:
    """(K, grid, grid) float64 for one image: each window × window block of patches zeroed by hand, every caption
    token's logit (teacher-forced, straight from transformers) compared with the full image's, the drops averaged
    over the blocks covering each patch, kept where positive."""
    reference = copy.deepcopy(model).double()
    decoder_input = torch.cat([torch.tensor([START]), caption[:-1]])[None]

    def token_logits(pixels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            logits = reference(pixel_values=pixels[None], decoder_input_ids=decoder_input).logits[0]
        return logits[torch.arange(len(caption)), caption]

    full = token_logits(image.double())
    total, count = torch.zeros(len(caption), grid, grid, dtype=torch.float64), torch.zeros(grid, grid)
    for top in range(grid - window + 1):
        for left in range(grid - window + 1):
            hidden = image.double().clone()
            hidden[:, top * patch:(top + window) * patch, left * patch:(left + window) * patch] = 0.0
            total[:, top:top + window, left:left + window] += (full - token_logits(hidden))[:, None, None]
            count[top:top + window, left:left + window] += 1
    return (total / count).clamp(min=0)


@pytest.mark.parametrize("encoder, decoder, window", [("vit", "gpt2", 1), ("deit", "bert", 2)])
def test_caption_occlusion_equals_the_per_token_float64_reference(encoder, decoder, window, images):
    model = build_captioner(encoder, decoder)
    result = caption_maps(model, images, method="occlusion", caption_ids=CAPTIONS, window=window)
    assert result.maps.shape == (2, 6, 4, 4) and result.maps.dtype == torch.float32
    for index in range(2):
        length = int(result.lengths[index])
        expected = reference_occlusion(model, images[index], CAPTIONS[index], window)
        got = result.maps[index].double()
        torch.testing.assert_close(got[:length], expected[:length], rtol=1e-4, atol=1e-5 * float(expected.max()))
        assert torch.all(got[length:] == 0) and expected[:length].amax() > 0


@pytest.mark.parametrize("head_fusion", ["max", "min"])
def test_caption_rollout_fuses_heads_as_asked(head_fusion, images):
    model = build_captioner("vit", "bert", seed=3)
    result = caption_maps(model, images[:1], method="rollout", caption_ids=CAPTIONS[1:], head_fusion=head_fusion,
                          attention_weight=0.7)
    expected = torch.from_numpy(reference_caption_relevance(model, images[0], CAPTIONS[1].tolist(), START, "rollout",
                                                            num_prefix=1, head_fusion=head_fusion,
                                                            attention_weight=0.7))
    torch.testing.assert_close(result.maps[0].reshape(6, -1).double(), expected, rtol=1e-4, atol=1e-7)


def test_each_token_gets_its_own_chefer_map(images):
    maps = caption_maps(build_captioner(), images[:1], caption_ids=CAPTIONS[1:]).maps[0].reshape(6, -1)
    normalised = maps / maps.sum(dim=-1, keepdim=True)
    assert (normalised[1:] - normalised[:-1]).abs().sum(dim=-1).min() > 1e-2


def test_the_generated_caption_is_the_greedy_one_and_capture_leaves_the_logits_unchanged(images):
    model = build_captioner("vit", "gpt2", seed=5)
    greedy = model.generate(pixel_values=images, max_new_tokens=5, do_sample=False, num_beams=1)[:, 1:]
    for method in ("rollout", "chefer"):
        result = caption_maps(model, images, method=method, max_new_tokens=5)
        assert torch.equal(result.token_ids, greedy)
        decoder_input = torch.cat([torch.full((2, 1), START), greedy[:, :-1]], dim=1)
        with torch.no_grad():
            plain = model(pixel_values=images, decoder_input_ids=decoder_input).logits
        torch.testing.assert_close(result.token_logits, plain.gather(2, greedy[..., None]).squeeze(-1),
                                   rtol=1e-5, atol=1e-5)
        assert model.config._attn_implementation == "sdpa"
        assert all(not parameter.requires_grad or parameter.grad is None for parameter in model.parameters())


def test_captioning_a_batch_with_a_decoder_whose_pad_is_its_end_token_asks_for_no_attention_mask(images):
    # GPT-2 captioners (nlpconnect/vit-gpt2-image-captioning) pad with their end token; generate then told the user
    # to pass an attention mask, which the pixels it captions have no use for, on every `vitroll caption` of 2 images
    import logging

    model = build_captioner("vit", "gpt2", seed=18)  # its second caption ends first: padded with END after it
    model.config.pad_token_id = END
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    library = logging.getLogger("transformers")
    library.addHandler(handler)
    try:
        logging.Logger.warning_once.cache_clear()  # transformers says it once a process
        result = caption_maps(model, images, method="rollout", max_new_tokens=6)
        assert [record.getMessage() for record in records] == []
        greedy = model.generate(pixel_values=images, max_new_tokens=6, do_sample=False, num_beams=1,
                                pad_token_id=END)[:, 1:]
        assert torch.equal(result.token_ids, greedy) and result.lengths.tolist() == [6, 3]
        assert greedy[1].tolist() == [33, 33, END, END, END, END]
        assert any("attention mask is not set" in record.getMessage() for record in records)  # it would have
    finally:
        library.removeHandler(handler)


@pytest.mark.parametrize("encoder", ["vit", "deit"])
@pytest.mark.parametrize(("size", "grid"), [((40, 40), (5, 5)), ((32, 48), (4, 6))])
def test_a_tensor_of_another_size_than_the_encoders_is_captioned_with_its_position_embeddings_interpolated(
        encoder, size, grid):
    """The encoder was called without interpolate_pos_encoding, so a (B, 3, 40, 40) batch for a 32 × 32 ViT failed
    inside transformers ("Input image size (40*40) doesn't match model (32*32)") while the classifiers take it."""
    model = build_captioner(encoder, "gpt2", seed=5)
    pixels = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(3))
    greedy = model.generate(pixel_values=pixels, max_new_tokens=5, do_sample=False, num_beams=1,
                            interpolate_pos_encoding=True)[:, 1:]
    decoder_input = torch.cat([torch.full((2, 1), START), greedy[:, :-1]], dim=1)
    with torch.no_grad():
        plain = model(pixel_values=pixels, decoder_input_ids=decoder_input, interpolate_pos_encoding=True).logits
    for method in ("rollout", "chefer", "occlusion"):
        result = caption_maps(model, pixels, method=method, max_new_tokens=5)
        assert torch.equal(result.token_ids, greedy)
        assert result.maps.shape == (2, 5, *grid)
        torch.testing.assert_close(result.token_logits, plain.gather(2, greedy[..., None]).squeeze(-1),
                                   rtol=1e-5, atol=1e-5)

def test_caption_lengths_stop_at_the_first_end_token():
    ids = torch.tensor([[END, 4, END], [4, 4, 4], [4, END, PAD]])
    assert caption_lengths(ids, END).tolist() == [1, 3, 2]


def test_captioner_mistakes_are_named(images):
    model = build_captioner()
    with pytest.raises(UnsupportedModelError, match="captioner: it has no class scores.*caption_maps"):
        vitroll.rollout(model, images)
    with pytest.raises(MethodOptionError, match="unknown caption method 'flow'"):
        caption_maps(model, images, method="flow")
    with pytest.raises(MethodOptionError, match="chefer does not fuse attention heads: head_fusion is for rollout"):
        caption_maps(model, images, head_fusion="max")
    with pytest.raises(MethodOptionError, match="rollout hides nothing: window is for occlusion"):
        caption_maps(model, images, method="rollout", window=2)
    with pytest.raises(ValueError, match=r"window must be between 1 and 4 \(the grid is 4 × 4\); got 5"):
        caption_maps(model, images, method="occlusion", window=5)
    with pytest.raises(ValueError, match=r"window must be between 1 and 4 \(the grid is 4 × 4\); got 0"):
        caption_maps(model, images, method="occlusion", window=0)  # not read as the default 1
    with pytest.raises(InputValueError, match=r"caption_ids must have shape \(B, K\) with B = 2"):
        caption_maps(model, images, caption_ids=CAPTIONS[:1])
    vit = transformers.ViTModel(_encoder_config("vit")).eval()
    with pytest.raises(UnsupportedModelError, match="ViTModel is not a captioner"):
        caption_maps(vit, images)


@pytest.mark.parametrize(("options", "message"), [
    (dict(max_new_tokens="3"), "option 'max_new_tokens' of caption_maps takes int; got '3' (str)"),
    (dict(max_new_tokens=2.5), "option 'max_new_tokens' of caption_maps takes int; got 2.5 (float)"),
    (dict(max_new_tokens=True), "option 'max_new_tokens' of caption_maps takes int; got True (bool)"),
    (dict(method="rollout", attention_weight="0.5"),
     "option 'attention_weight' of caption_maps takes float; got '0.5' (str)"),
    (dict(method="occlusion", window=2.0), "option 'window' of caption_maps takes int | None; got 2.0 (float)"),
], ids=["max_new_tokens-str", "max_new_tokens-float", "max_new_tokens-bool", "attention_weight-str", "window-float"])
def test_caption_options_of_the_wrong_type_are_named_as_the_methods_name_theirs(images, options, message):
    """A string failed deep in a comparison ("'<' not supported between instances of 'str' and 'int'"), a float
    window inside range(), and 2.5 or True tokens were taken as 2 and 1."""
    with pytest.raises(MethodOptionError) as raised:
        caption_maps(build_captioner(), images, **options)
    assert str(raised.value) == message

@pytest.mark.parametrize(("caption_ids", "message"), [
    (torch.tensor([[5, 9], [11, VOCABULARY]]), f"caption_ids[1, 1] = {VOCABULARY} is not a token id of the model's "
                                               f"vocabulary (0…{VOCABULARY - 1})"),
    (torch.tensor([[5, -1], [11, 6]]), f"caption_ids[0, 1] = -1 is not a token id of the model's vocabulary "
                                       f"(0…{VOCABULARY - 1})"),
    (torch.tensor([[5.0, 9.5], [11.0, 6.0]]), "caption_ids must be integer token ids; got torch.float32"),
    ([[5, 9], [11]], "caption_ids must be token ids (B, K): a tensor, or lists of ints of one length"),
    (torch.zeros(2, 0, dtype=torch.long),
     "caption_ids must have shape (B, K) with B = 2 images and K ≥ 1; got (2, 0)"),
    (torch.tensor([5, 9]), "caption_ids must have shape (B, K) with B = 2 images and K ≥ 1; got (2,)"),
], ids=["beyond-vocabulary", "negative", "float", "ragged", "empty", "one-dimensional"])
def test_caption_ids_that_no_caption_can_be_are_refused(images, caption_ids, message):
    with pytest.raises(InputValueError) as raised:
        caption_maps(build_captioner(), images, caption_ids=caption_ids)
    assert str(raised.value) == message


def test_caption_ids_as_lists_of_ints_are_taken(images):
    model = build_captioner()
    torch.testing.assert_close(caption_maps(model, images, caption_ids=CAPTIONS.tolist()).maps,
                               caption_maps(model, images, caption_ids=CAPTIONS).maps)


def test_one_caption_as_a_1d_tensor_or_list_is_the_caption_of_a_batch_of_one_image(images):
    """Refused as a shape (B, K) before, while text methods take (L,) for one text; with two images a 1-D caption
    stays refused (whose caption would it be?)."""
    model = build_captioner()
    expected = caption_maps(model, images[:1], caption_ids=CAPTIONS[:1])
    for one in (CAPTIONS[0], CAPTIONS[0].tolist()):
        got = caption_maps(model, images[:1], caption_ids=one)
        assert got.token_ids.tolist() == CAPTIONS[:1].tolist() and got.lengths.tolist() == [5]
        torch.testing.assert_close(got.maps, expected.maps, rtol=0, atol=0)
    with pytest.raises(InputValueError, match=r"shape \(B, K\) with B = 2 images and K ≥ 1; got \(6,\)"):
        caption_maps(model, images, caption_ids=CAPTIONS[0])


def test_a_target_class_or_an_unknown_option_is_one_line_naming_what_caption_maps_takes(images):
    """A bare TypeError from Python before (caption_maps() got an unexpected keyword argument), not a VitrollError."""
    model = build_captioner()
    with pytest.raises(MethodOptionError) as raised:
        vitroll.caption_maps(model, images, target_class=3)
    assert str(raised.value) == ("caption maps explain each token of the caption, the target of its own map: there "
                                 "is no class to choose; caption_ids= gives the caption (B, K) to explain instead of "
                                 "target_class")
    with pytest.raises(MethodOptionError) as raised:
        vitroll.caption_maps(model, images, discard_ratio=0.5)
    assert str(raised.value) == ("caption_maps takes no option 'discard_ratio' (it takes: method, caption_ids, "
                                 "max_new_tokens, head_fusion, attention_weight, window)")


def test_caption_words_group_wordpiece_and_byte_level_pieces(tmp_path):
    from small_tokenizers import bpe_tokenizer, wordpiece_tokenizer
    from vitroll.pipelines.caption import caption_words

    wordpiece = wordpiece_tokenizer(tmp_path)
    ids = wordpiece.convert_tokens_to_ids(["the", "cat", "##s", "play", "##ing", "!", "[SEP]", "[PAD]"])
    words = caption_words(ids, wordpiece, special_ids=[wordpiece.sep_token_id, wordpiece.pad_token_id])
    assert [(w.word, w.tokens) for w in words] == [("the", (0,)), ("cats", (1, 2)), ("playing!", (3, 4, 5))]
    bpe = bpe_tokenizer(tmp_path)
    ids = bpe.convert_tokens_to_ids(["cat", "s", "Ġsat", "Ġdog", "<|endoftext|>"])
    words = caption_words(ids, bpe, special_ids=[bpe.convert_tokens_to_ids("<|endoftext|>")])
    assert [(w.word, w.tokens) for w in words] == [("cats", (0, 1)), ("sat", (2,)), ("dog", (3,))]


def save_captioner(folder: Path, always: str = "") -> Path:
    """A BERT-decoder captioner saved with its WordPiece tokenizer and image processor, as a user's folder is;
    ``always``: a token it generates at every position, whatever the image."""
    from small_tokenizers import wordpiece_tokenizer

    tokenizer = wordpiece_tokenizer(folder)
    model = build_captioner("vit", "bert", seed=2)
    model.config.decoder_start_token_id = tokenizer.cls_token_id
    model.config.eos_token_id, model.config.pad_token_id = tokenizer.sep_token_id, tokenizer.pad_token_id
    model.config.decoder.vocab_size = VOCABULARY
    if always:
        with torch.no_grad():
            model.decoder.cls.predictions.bias[tokenizer.convert_tokens_to_ids(always)] = 100.0
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3,
                                   image_std=[0.5] * 3).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def saved_captioner(tmp_path_factory):
    return save_captioner(tmp_path_factory.mktemp("captioner"))


def test_the_cli_writes_a_strip_per_image_and_the_captions_json(saved_captioner, tmp_path, capsys):
    import json

    from PIL import Image

    from vitroll.cli import main
    from vitroll.io import load_image

    rng = np.random.default_rng(0)
    good = tmp_path / "good.png"
    Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(good)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    out = tmp_path / "out"
    code = main(["caption", str(good), str(broken), "--model", str(saved_captioner), "--out", str(out),
                 "--max-new-tokens", "5", "--method", "rollout"])
    captured = capsys.readouterr()
    assert code == 3 and "vitroll: failed:" in captured.err and "broken.png" in captured.err
    written = json.loads((out / "captions.json").read_text(encoding="utf-8"))
    first, second = written["images"]
    assert second["error"] and second["strip"] is None
    assert f"“{first['caption']}”" in captured.out

    model = vitroll.load_model(str(saved_captioner))
    expected = caption_maps(model, [load_image(good)], method="rollout", max_new_tokens=5)
    tokenizer = vitroll.adapters.tokenizers.registered_tokenizer(model)
    length = int(expected.lengths[0])
    assert first["caption"] == tokenizer.decode(expected.token_ids[0, :length], skip_special_tokens=True)
    pieces = [piece for word in first["words"] for piece in word["tokens"]]
    assert pieces == [piece for piece in tokenizer.convert_ids_to_tokens(expected.token_ids[0, :length])
                      if piece not in ("[SEP]", "[PAD]")]
    strip = np.asarray(Image.open(out / "good_caption_rollout.png"))
    assert strip.shape[1] > strip.shape[0] * (1 + len(first["words"])) / 2  # one panel per word beside the image


@pytest.mark.parametrize("size", [(1000, 20), (20, 1000)])
def test_the_strip_of_a_long_image_shows_it_as_the_model_saw_it(saved_captioner, tmp_path, capsys, size):
    """A ViT image processor squashes a 1000 × 20 image to its square input: the strip's panels were 6 px high (or
    the strip 16,080 px tall); they now show the image stretched to the input's square, as the model saw it."""
    from PIL import Image

    from vitroll.cli import main

    width, height = size
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    (pixels[:, :width // 2] if width > height else pixels[:height // 2])[...] = (255, 0, 0)  # red first half
    (pixels[:, width // 2:] if width > height else pixels[height // 2:])[...] = (0, 0, 255)  # blue second half
    Image.fromarray(pixels).save(tmp_path / "long.png")
    out = tmp_path / "out"
    assert main(["caption", str(tmp_path / "long.png"), "--model", str(saved_captioner), "--out", str(out),
                 "--max-new-tokens", "3"]) == 0, capsys.readouterr().err
    strip = np.asarray(Image.open(out / "long_caption_chefer.png").convert("RGB")).astype(int)
    assert 300 < strip.shape[0] < 500
    panel = strip[100:-20, 10:300]  # the image panel: half red, half blue, as wide as it is high
    red = (panel[..., 0] > 200) & (panel[..., 2] < 50)
    blue = (panel[..., 2] > 200) & (panel[..., 0] < 50)
    assert 0.4 < red.mean() < 0.6 and 0.4 < blue.mean() < 0.6


def test_the_cli_refuses_an_image_over_max_pixels_alone_as_it_tells(saved_captioner, tmp_path, capsys):
    """The limit's message names --max-pixels, which caption did not take."""
    from PIL import Image

    from vitroll.cli import main

    good = tmp_path / "good.png"
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(good)
    arguments = [str(good), "--model", str(saved_captioner), "--out", str(tmp_path / "out"), "--max-new-tokens", "3",
                 "--method", "rollout"]
    assert main(["caption", *arguments, "--max-pixels", "3000"]) == 3
    assert capsys.readouterr().err == (f"vitroll: failed: {good}: image too large: 0.00307 MP (64×48), over the limit "
                                       "of 0.003 MP; --max-pixels 1M reads it if the memory allows (an overlay "
                                       "takes about 20 bytes a pixel)\n")
    assert main(["caption", *arguments, "--max-pixels", "3072"]) == 0


def test_the_cli_runs_occlusion_with_its_window_and_refuses_a_window_elsewhere(saved_captioner, tmp_path, capsys):
    import json

    from PIL import Image

    from vitroll.cli import main
    from vitroll.io import load_image

    image = tmp_path / "image.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "out"
    assert main(["caption", str(image), "--model", str(saved_captioner), "--out", str(out), "--max-new-tokens", "4",
                 "--method", "occlusion", "--window", "2"]) == 0
    written = json.loads((out / "captions.json").read_text(encoding="utf-8"))["images"][0]
    expected = caption_maps(vitroll.load_model(str(saved_captioner)), [load_image(image)], method="occlusion",
                            max_new_tokens=4, window=2)
    assert written["strip"].endswith("image_caption_occlusion.png")
    logits = [logit for word in written["words"] for logit in word["token_logits"]]
    np.testing.assert_allclose(logits, expected.token_logits[0, :len(logits)].numpy(), atol=1e-3)
    assert expected.maps[0, :len(logits)].amax() > 0
    capsys.readouterr()
    assert main(["caption", str(image), "--model", str(saved_captioner), "--out", str(out), "--window", "2"]) == 2
    assert capsys.readouterr().err == "vitroll: error: chefer hides nothing: --window is for occlusion\n"
    assert main(["caption", str(image), "--model", str(saved_captioner), "--out", str(out), "--method", "occlusion",
                 "--window", "5"]) == 2
    assert capsys.readouterr().err == "vitroll: error: --window must be between 1 and 4 (the grid is 4 × 4); got 5\n"


def test_a_second_run_into_the_same_out_keeps_the_other_methods_and_images_captions(saved_captioner, tmp_path,
                                                                                    monkeypatch):
    import json
    from pathlib import Path

    from PIL import Image

    from vitroll.cli import main

    first, second = tmp_path / "first.png", tmp_path / "second.png"
    for seed, path in enumerate((first, second)):
        Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
    out = tmp_path / "out"
    common = ["--model", str(saved_captioner), "--out", str(out), "--max-new-tokens", "4"]
    assert main(["caption", str(first), str(second), *common, "--method", "rollout"]) == 0
    rollout = json.loads((out / "captions.json").read_text(encoding="utf-8"))["images"]
    read = []
    real_read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, **how: read.append(self.name) or real_read_text(self, **how))
    assert main(["caption", str(first), *common, "--method", "occlusion"]) == 0
    assert read.count("captions.json") == 1  # it was read twice per run: for the strips' names, then to merge
    monkeypatch.undo()
    assert main(["caption", str(second), *common, "--method", "rollout"]) == 0
    written = json.loads((out / "captions.json").read_text(encoding="utf-8"))["images"]
    assert [(Path(entry["path"]).name, entry["method"]) for entry in written] == [
        ("first.png", "rollout"), ("second.png", "rollout"), ("first.png", "occlusion")]
    assert written[:2] == rollout  # the rerun of second.png with rollout gave the same entry, in its place
    assert written[2]["strip"].endswith("first_caption_occlusion.png")
    assert all((out / entry["strip"]).is_file() for entry in written)


def test_an_image_named_in_latin1_is_captioned_and_kept_by_its_bytes_in_captions_json(saved_captioner, tmp_path,
                                                                                        capsys):
    import json
    import os

    from PIL import Image

    from vitroll.cli import main

    latin1 = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.png")
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(latin1)
    out = tmp_path / "out"
    argv = ["caption", latin1, "--model", str(saved_captioner), "--out", str(out), "--max-new-tokens", "4"]
    assert main(argv) == 0, capsys.readouterr().err  # was "vitroll: error: 'utf-8' codec can't encode character …"
    assert main([*argv, "--method", "rollout"]) == 0
    assert main(argv) == 0  # chefer again: its entry is replaced, not doubled
    written = json.loads((out / "captions.json").read_text(encoding="utf-8"))["images"]
    assert [(entry["path"], entry["method"]) for entry in written] == [(latin1, "chefer"), (latin1, "rollout")]
    assert all((out / entry["strip"]).is_file() and entry["strip"].startswith("caf\\xe9~") for entry in written)


def test_ctrl_c_keeps_the_captions_of_the_images_done_in_captions_json(saved_captioner, tmp_path, monkeypatch,
                                                                       capsys):
    import json

    from PIL import Image

    from interrupts import pressing_ctrl_c
    from vitroll.cli import main
    from vitroll.pipelines import caption as caption_pipeline

    paths = [tmp_path / f"{name}.png" for name in ("first", "second", "third")]
    for seed, path in enumerate(paths):
        Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
    out = tmp_path / "out"
    monkeypatch.setattr(caption_pipeline, "caption_maps",
                        pressing_ctrl_c(caption_pipeline.caption_maps, on_calls=(2,)))  # as the second batch starts
    assert main(["caption", *map(str, paths), "--model", str(saved_captioner), "--out", str(out),
                 "--max-new-tokens", "4", "--batch-size", "1"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "vitroll: interrupted"
    written = json.loads((out / "captions.json").read_text(encoding="utf-8"))["images"]  # was: no captions.json
    assert [entry["path"] for entry in written] == [str(paths[0])]
    assert sorted(path.name for path in out.iterdir()) == ["captions.json", "first_caption_chefer.png"]
    assert written[0]["strip"] == "first_caption_chefer.png" and written[0]["error"] is None


def test_ctrl_c_is_told_as_an_interruption_even_when_captions_json_cannot_be_written(saved_captioner, tmp_path,
                                                                                      monkeypatch, capsys):
    """captions.json was written in a finally: a full disk's OSError there replaced the KeyboardInterrupt, so Ctrl-C
    was told as 'vitroll: error: … No space left on device' with exit 1, not 'vitroll: interrupted' (130)."""
    import errno

    from PIL import Image

    from interrupts import pressing_ctrl_c
    from vitroll.cli import main
    from vitroll.pipelines import caption as caption_pipeline

    paths = [tmp_path / f"{name}.png" for name in ("first", "second")]
    for seed, path in enumerate(paths):
        Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
    out = tmp_path / "out"
    monkeypatch.setattr(caption_pipeline, "caption_maps",
                        pressing_ctrl_c(caption_pipeline.caption_maps, on_calls=(2,)))

    def full_disk_for_the_list(path, data, write=caption_pipeline.write_atomic):
        if path.name == "captions.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write(path, data)

    monkeypatch.setattr(caption_pipeline, "write_atomic", full_disk_for_the_list)
    assert main(["caption", *map(str, paths), "--model", str(saved_captioner), "--out", str(out),
                 "--max-new-tokens", "4", "--batch-size", "1"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "vitroll: interrupted"
    assert sorted(path.name for path in out.iterdir()) == ["first_caption_chefer.png"]


def test_captioners_and_other_models_are_sent_to_their_own_command(saved_captioner, tmp_path, capsys):
    from vitroll.cli import main

    image = tmp_path / "image.png"
    from PIL import Image

    Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8)).save(image)
    assert main(["overlay", str(image), "--model", str(saved_captioner), "--out", str(tmp_path)]) == 2
    assert "is a captioner (VisionEncoderDecoderModel); explain it with `vitroll caption`" in capsys.readouterr().err
    assert main(["caption", str(image), "--model", "vitroll-text-keyword", "--out", str(tmp_path)]) == 2
    assert ("vitroll-text-keyword is a text model (BertForSequenceClassification); explain it with `vitroll text`"
            in capsys.readouterr().err)
    assert main(["text", "a square", "--model", str(saved_captioner), "--out", str(tmp_path)]) == 2
    assert "is a captioner (VisionEncoderDecoderModel); explain it with `vitroll caption`" in capsys.readouterr().err
    assert main(["caption", str(image), "--model", "vitroll-clip-shapes", "--out", str(tmp_path)]) == 2
    assert ("vitroll-clip-shapes is an image–text model (CLIPModel); explain it with `vitroll overlay --text …`"
            in capsys.readouterr().err)


def test_the_caption_testbed_scores_each_shape_word_against_its_own_shape():
    from vitroll.pipelines.evaluate_captions import caption_ids, evaluate_captions
    from vitroll.pipelines.evaluate_pairs import pair_images

    model = vitroll.load_model("vitroll-caption-shapes")
    tokenizer = vitroll.adapters.tokenizers.registered_tokenizer(model)
    images = pair_images(24)
    rows = evaluate_captions(model, tokenizer, images, ["chefer", "random"], batch_size=12)
    assert [row["method"] for row in rows[:2]] == ["chefer"] * 2 and len(rows) == 48
    mean = {method: np.mean([row["pointing_game"] for row in rows if row["method"] == method])
            for method in ("chefer", "random")}
    assert mean["chefer"] > mean["random"] + 0.2
    assert all(row["both_follow"] <= row["pointing_game"] for row in rows)
    preferred = {method: np.mean([row["named_over_other"] for row in rows if row["method"] == method])
                 for method in ("chefer", "random")}
    assert preferred["chefer"] > 0.65 and 0.3 < preferred["random"] < 0.7
    ids = caption_ids(tokenizer, ["a disk above a cross"], end=3, pad=0)
    assert ids.tolist() == [tokenizer.convert_tokens_to_ids("a disk above a cross".split()) + [3]]
    with pytest.raises(ValueError, match="not flow"):
        evaluate_captions(model, tokenizer, images[:1], ["flow"])


@pytest.mark.parametrize("decoder", ["gpt2", "bert"])
def test_a_caption_is_no_longer_than_the_decoder_has_positions(decoder, images):
    model = build_captioner("vit", decoder)  # 16 decoder positions
    model.config.eos_token_id = model.generation_config.eos_token_id = VOCABULARY + 1  # never ends early
    longest = vitroll.caption_maps(model, images, method="rollout", max_new_tokens=40)  # crashed in the decoder
    assert longest.token_ids.shape == (2, 16) and longest.lengths.tolist() == [16, 16]
    torch.testing.assert_close(longest.maps, vitroll.caption_maps(model, images, method="rollout",
                                                                  max_new_tokens=16).maps)
    with pytest.raises(InputValueError, match="caption_ids have 17 tokens; the decoder reads at most 16 "
                                              r"\(its position embeddings\)"):
        vitroll.caption_maps(model, images, caption_ids=torch.ones(2, 17, dtype=torch.long))


def test_a_captioner_saved_without_its_tokenizer_is_named_a_captioner(saved_captioner, tmp_path, capsys):
    import shutil

    from vitroll.cli import main

    folder = tmp_path / "captioner"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        if (saved_captioner / name).is_file():
            shutil.copy(saved_captioner / name, folder / name)
    image = str(ROOT / "sample_images" / "cat.jpg")  # a missing image would be told first, before any model loads
    assert main(["caption", image, "--model", str(folder), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: {folder}: no tokenizer saved with the captioner (FileNotFoundError); save it beside the "
        "model with tokenizer.save_pretrained\n")  # was "with the text model"


def test_chefer_normalises_a_self_relevance_gain_below_float32_resolution_exactly():
    # caption position 1's self-attention gain is 1e-8 on itself and 1e-8 on position 0: R̄_tt's row 1 is
    # [0.5, 0.5] + I, but 1 + 1e-8 rounds to 1 in float32, and R − I would leave row 1 as [1, 0]
    image = torch.zeros(1, 2, 2)
    text = torch.tensor([[[0.0, 0.0], [1e-8, 1e-8]]])
    cross = torch.tensor([[[0.25, 0.75], [0.5, 0.5]]])
    relevance = chefer_relevance([image, text, cross], ["encoder", "self", "cross"])
    expected = torch.tensor([[[0.25 + 0.5 * 0.5, 0.75 + 0.5 * 0.5], [1.5 * 0.5, 1.5 * 0.5]]])
    torch.testing.assert_close(relevance, expected, rtol=1e-6, atol=0)


def test_chefer_maps_of_the_shipped_captioner_equal_the_float64_reference():
    from vitroll.testbed.captioner_model import CLS, load_caption_model
    from vitroll.testbed.captions import caption_for
    from vitroll.testbed.shape_pairs import samples
    from vitroll.testbed.training import to_tensor

    model, tokenizer = load_caption_model()
    drawn = list(samples(3, 2))  # image 0's position 4 has a text self-relevance gain of 8e-7
    pixels = to_tensor(np.stack([each.image for each in drawn]))
    caption_ids = tokenizer([caption_for(each) for each in drawn], padding=True, return_tensors="pt").input_ids[:, 1:]
    result = caption_maps(model, pixels, caption_ids=caption_ids)
    for index in range(len(drawn)):
        length = int(result.lengths[index])
        expected = reference_caption_relevance(model, pixels[index], caption_ids[index, :length].tolist(), CLS,
                                               "chefer", num_prefix=1)
        got = result.maps[index, :length].reshape(length, -1).double().numpy()
        np.testing.assert_array_less(np.abs(got - expected).max(axis=1), 3e-5 * np.abs(expected).max(axis=1))


def test_an_image_given_as_a_relative_and_as_an_absolute_path_keeps_one_entry(saved_captioner, tmp_path, monkeypatch):
    import json

    from PIL import Image

    from vitroll.cli import main

    monkeypatch.chdir(tmp_path)
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save("photo.png")
    common = ["--model", str(saved_captioner), "--out", "out", "--max-new-tokens", "3", "--method", "rollout"]
    assert main(["caption", "photo.png", *common]) == 0
    assert main(["caption", str(tmp_path / "photo.png"), *common]) == 0
    assert main(["caption", "./photo.png", *common]) == 0
    written = json.loads((tmp_path / "out" / "captions.json").read_text(encoding="utf-8"))["images"]
    assert [(entry["path"], entry["strip"]) for entry in written] == [
        (str(tmp_path / "photo.png"), "photo_caption_rollout.png")]


@pytest.mark.parametrize("encoder, decoder, message", [
    ("vit", "trocr", "the captioner's text decoder, model type 'trocr', is not supported: vitroll reads the "
                     "cross-attention of bert and gpt2 decoders"),
    ("vit", "roberta", "the captioner's text decoder, model type 'roberta', is not supported: vitroll reads the "
                       "cross-attention of bert and gpt2 decoders"),
    ("swin", "gpt2", "the captioner's image encoder, model type 'swin', is not supported: Swin attends within shifted "
                     "windows: a hierarchical model has no single token sequence that rollout could follow from layer "
                     "to layer; use Grad-CAM (pip install grad-cam)"),
])
def test_a_captioner_of_an_unread_encoder_or_decoder_is_refused_in_one_line_before_its_weights(
        encoder, decoder, message, tmp_path, capsys):
    """A TrOCR decoder failed on transformers' SDPA support (with an example about whisper), a RoBERTa one was said
    to lack the cross-attention it has; only the config is saved: the refusal comes before any weights are asked for."""
    from vitroll.cli import main

    encoders = {"vit": _encoder_config("vit"),
                "swin": transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                num_heads=[1, 2], window_size=4)}
    decoders = {"gpt2": _decoder_config("gpt2"),
                "trocr": transformers.TrOCRConfig(vocab_size=VOCABULARY, d_model=32, decoder_layers=2,
                                                  decoder_attention_heads=2, decoder_ffn_dim=64),
                "roberta": transformers.RobertaConfig(vocab_size=VOCABULARY, hidden_size=32, num_hidden_layers=2,
                                                      num_attention_heads=2, intermediate_size=64, is_decoder=True,
                                                      add_cross_attention=True)}
    config = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoders[encoder], decoders[decoder])
    folder = tmp_path / "captioner"
    config.save_pretrained(folder)
    capsys.readouterr()
    assert main(["caption", str(ROOT / "sample_images" / "cat.jpg"), "--model", str(folder),
                 "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"vitroll: error: {folder}: {message}"]


def test_same_named_images_of_two_folders_keep_their_own_entries_and_strips_across_runs(saved_captioner, tmp_path,
                                                                                         monkeypatch):
    """captions.json stored paths as given and compared them as absolute paths of the *current* folder: ``x.png``
    captioned from two folders was one entry (the second run replaced the first's), and its strip overwrote the
    first's; the same file reached by another relative path was a second entry."""
    import json

    from PIL import Image

    from vitroll.cli import main

    for seed, folder in enumerate(("a", "b")):
        (tmp_path / folder).mkdir()
        Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(
            tmp_path / folder / "x.png")
    out = tmp_path / "out"
    common = ["--model", str(saved_captioner), "--out", str(out), "--max-new-tokens", "3", "--method", "rollout"]
    monkeypatch.chdir(tmp_path / "a")
    assert main(["caption", "x.png", *common]) == 0
    first_strip = (out / "x_caption_rollout.png").read_bytes()
    monkeypatch.chdir(tmp_path / "b")
    assert main(["caption", "x.png", *common]) == 0
    assert main(["caption", "../b/x.png", *common]) == 0  # b/x.png again, by another relative path
    written = json.loads((out / "captions.json").read_text(encoding="utf-8"))["images"]
    assert [(entry["path"], entry["strip"]) for entry in written] == [
        (str(tmp_path / "a" / "x.png"), "x_caption_rollout.png"),
        (str(tmp_path / "b" / "x.png"), "x-2_caption_rollout.png")]
    assert (out / "x_caption_rollout.png").read_bytes() == first_strip
    assert sorted(path.name for path in out.glob("*.png")) == ["x-2_caption_rollout.png", "x_caption_rollout.png"]


def test_caption_words_give_tokens_that_decode_to_nothing_to_a_word_and_make_no_word_of_them_alone(tmp_path):
    """A caption opening with [MASK] (a special token of the tokenizer, not the captioner's start, end or pad) or a
    blank piece had a first word "" with a map of its own, a panel without a label under it."""
    from small_tokenizers import bpe_tokenizer, wordpiece_tokenizer
    from vitroll.pipelines.caption import caption_words

    wordpiece = wordpiece_tokenizer(tmp_path)
    special = [wordpiece.sep_token_id, wordpiece.pad_token_id]
    ids = wordpiece.convert_tokens_to_ids(["[MASK]", "cat", "[MASK]", "sat", "[SEP]"])
    assert [(w.word, w.tokens) for w in caption_words(ids, wordpiece, special)] == [("cat", (0, 1, 2)),
                                                                                    ("sat", (3,))]
    assert caption_words(wordpiece.convert_tokens_to_ids(["[MASK]", "[UNK]", "[SEP]"]), wordpiece, special) == []
    bpe = bpe_tokenizer(tmp_path)
    ids = bpe.convert_tokens_to_ids(["Ġ", "Ġdog", "Ġ"])
    assert [(w.word, w.tokens) for w in caption_words(ids, bpe, [])] == [("dog", (0, 1, 2))]
    assert caption_words(bpe.convert_tokens_to_ids(["Ġ", "Ġ"]), bpe, []) == []


@pytest.mark.parametrize("always, max_new_tokens, generated", [
    ("[SEP]", 5, "[SEP]"), ("[MASK]", 3, "[MASK] [MASK] [MASK]")], ids=["end-token-first", "only-special-tokens"])
def test_an_empty_caption_is_said_to_be_empty_on_the_terminal_and_in_the_strip(always, max_new_tokens, generated,
                                                                                tmp_path, capsys, monkeypatch):
    """An empty caption was printed as “” and the strip was the bare image without a title (the end token first),
    or titled “” over a panel with no label (only [MASK] tokens)."""
    import json

    from PIL import Image

    import vitroll.pipelines.explain as explain_pipeline
    from vitroll.cli import main

    (tmp_path / "captioner").mkdir()
    model = save_captioner(tmp_path / "captioner", always=always)
    image = tmp_path / "image.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(image)
    drawn, overlay_grid = [], explain_pipeline.overlay_grid

    def recording_grid(picture, overlays, titles, *, title, image_title):
        drawn.append((len(overlays), titles, title))
        return overlay_grid(picture, overlays, titles, title=title, image_title=image_title)

    monkeypatch.setattr(explain_pipeline, "overlay_grid", recording_grid)
    out = tmp_path / "out"
    assert main(["caption", str(image), "--model", str(model), "--out", str(out),
                 "--max-new-tokens", str(max_new_tokens)]) == 0
    strip = out / "image_caption_chefer.png"
    assert capsys.readouterr().out.splitlines()[0] == f"{image}: (empty caption: only {generated}) -> {strip}"
    assert drawn == [(0, [], f"image.png — chefer: (empty caption: only {generated})")]
    entry = json.loads((out / "captions.json").read_text(encoding="utf-8"))["images"][0]
    assert (entry["caption"], entry["words"], entry["strip"]) == ("", [], strip.name)
    assert np.asarray(Image.open(strip)).shape[0] > 32  # the figure with its title, not the bare 32 × 32 image


def test_the_cli_fails_the_image_whose_maps_are_not_finite_alone_naming_the_cause(saved_captioner, tmp_path,
                                                                                 monkeypatch, capsys):
    """One image of the batch gets a NaN in its tensor: its caption's maps are all NaN (its strip would show the bare
    image under every word); it fails in the wording of the batch stream, and the other image of its batch gets its
    strip. Then a captioner with a NaN weight: every image fails, the model named as the cause."""
    import json

    from PIL import Image

    from vitroll.cli import main
    from vitroll.preprocess import Preprocessing

    rng = np.random.default_rng(4)
    paths = []
    for name, width in {"a.png": 64, "b.png": 40}.items():
        Image.fromarray(rng.integers(0, 256, (48, width, 3), dtype=np.uint8)).save(tmp_path / name)
        paths.append(str(tmp_path / name))
    real = Preprocessing.__call__

    def poisoned(self, image):
        tensor, geometry = real(self, image)
        if image.width == 40:
            tensor = tensor.clone()
            tensor[0, 3, 3] = float("nan")
        return tensor, geometry

    monkeypatch.setattr(Preprocessing, "__call__", poisoned)
    out = tmp_path / "out"
    arguments = ["--model", str(saved_captioner), "--out", str(out), "--max-new-tokens", "3", "--method", "rollout"]
    assert main(["caption", *paths, *arguments]) == 3
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: failed: {paths[1]}: rollout's map holds no finite value: the input holds NaN or inf, which every "
        "method carries into the whole map"]
    entries = json.loads((out / "captions.json").read_text(encoding="utf-8"))["images"]
    assert [(entry["strip"], entry["error"] is None) for entry in entries] == [("a_caption_rollout.png", True),
                                                                              (None, False)]
    assert sorted(p.name for p in out.iterdir()) == ["a_caption_rollout.png", "captions.json"]
    monkeypatch.undo()

    broken = tmp_path / "broken"
    model = vitroll.load_model(str(saved_captioner))
    with torch.no_grad():
        model.encoder.get_parameter(next(name for name, _ in model.encoder.named_parameters()
                                         if "attention" in name and name.endswith("weight")))[0, 0] = float("nan")
    model.save_pretrained(broken)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                 "preprocessor_config.json"):
        if (saved_captioner / name).exists():
            (broken / name).write_bytes((saved_captioner / name).read_bytes())
    capsys.readouterr()  # save_pretrained's progress bar
    arguments[1], arguments[3] = str(broken), str(tmp_path / "out2")
    assert main(["caption", *paths, *arguments]) == 3
    cause = ("the input is finite, the model's output is not: does the model hold NaN or inf in its weights, or "
             "overflow at the precision it runs in?")
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: failed: {path}: rollout's map holds no finite value: {cause}" for path in paths]


def test_the_method_is_taken_positionally_as_by_keyword(images):
    """caption_maps(model, images, "rollout") raised Python's bare TypeError (takes 2 positional arguments)."""
    model = build_captioner()
    given, named = caption_maps(model, images, "rollout", max_new_tokens=3), caption_maps(
        model, images, method="rollout", max_new_tokens=3)
    assert torch.equal(given.maps, named.maps) and torch.equal(given.token_ids, named.token_ids)


def test_a_map_past_the_captions_end_is_zero_even_where_the_method_gave_nan(images, monkeypatch):
    """The maps past a caption's length were multiplied by 0, which leaves NaN NaN: the caption pipeline, which fails
    an image whose maps hold NaN, failed an image for a map it never shows."""
    import vitroll.methods.caption as caption

    def occlusion_with_nan_past_the_end(model, captioner, batch, caption_ids, windows, layout):
        maps = torch.ones(len(batch), caption_ids.shape[1], 4, 4)
        maps[0, 5] = float("nan")  # the first caption's length is 5: position 5 is past its end token
        return maps, torch.zeros(caption_ids.shape)

    monkeypatch.setattr(caption, "_occlusion", occlusion_with_nan_past_the_end)
    result = caption_maps(build_captioner(), images, "occlusion", caption_ids=CAPTIONS)
    assert result.lengths.tolist() == [5, 6]
    assert torch.equal(result.maps[0, 5], torch.zeros(4, 4)) and torch.equal(result.maps[0, :5], torch.ones(5, 4, 4))
    assert torch.equal(result.maps[1], torch.ones(6, 4, 4))
