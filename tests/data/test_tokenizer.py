"""Clover's tokenizer: byte-level round trip, copy-friendly segmentation, special ids, save/load."""

import json
import random

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from clover.airspace import decision_groups
from clover.airspace import tokenizer_corpus as corpus
from clover.airspace.calls import gold_calls
from clover.airspace.tokenizer import build_default_tokenizer
from clover.airspace.tools import TOOL_NAMES
from clover.data import chat
from clover.data import decision_chat as layout
from clover.data.tokenizer import SPECIAL_TOKENS, CloverTokenizer, train_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_default_tokenizer(n_texts=1500)


def _contains(seq: list[int], sub: list[int]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_round_trip_any_text(tok):
    rng = random.Random(0)
    alphabet = "aZ09 .,:;\"'{}[]-_\n\t\r°éüøß中文日本語✈🚁\u0301\x00\x7f<|>/"
    texts = [
        "héllo wörld ✈ 123 Zürich",
        "  two  spaces\n\nend ",
        "",
        "<|im_end|>x<|mask|>",
        "<tool_call>{}</tool_call>",
        '{"name": "recall_drone", "arguments": {"drone_id": "D-7"}}',
        "😀" * 3,
    ]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    texts += ["".join(chr(rng.randint(1, 0x2FFFF)) for _ in range(12)) for _ in range(50)]
    for t in texts:
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates are not text
            continue
        assert tok.decode(tok.encode(t)) == t, repr(t)


def test_digits_are_one_token_each(tok):
    assert [tok.id_to_token(i) for i in tok.encode("2025")] == ["2", "0", "2", "5"]
    ids = tok.encode("lat 47.3769 lon -8.5417 at 09:30, D-917")
    digits = [tok.decode([i]) for i in ids if tok.decode([i]).strip().isdigit()]
    assert digits == list("473769854170930917")


def test_a_name_is_the_same_tokens_in_the_message_and_in_the_json(tok):
    names = ["Alpha", "North Harbor", "Oslo Sierra", "Kraków Island", "wind farm 17", "Xray-4", "zone unseenword"]
    for name in names:
        ids = tok.encode(name)
        assert _contains(tok.encode(f"lift {name}, then recall d3"), ids)
        assert _contains(tok.encode(f'{{"zone_name": "{name}"}}'), ids)
        assert _contains(tok.encode(f'{{"lat": 1.5, "target": "{name}", "x": 1}}'), ids)
    # the same for every copied argument of the corpus (held-out names included)
    for e in corpus.generate("test", 200, seed=9):
        msgs = [m for m in e["messages"] if m["role"] != "system"]
        user = tok.encode(msgs[0]["content"])
        body = tok.encode(chat.assistant_text(msgs[1]))
        for c in gold_calls(e):
            for k in ("zone_name", "target"):
                if k in c["arguments"]:
                    v = tok.encode(c["arguments"][k])
                    assert _contains(user, v) and _contains(body, v), c["arguments"][k]


def test_json_fragments_and_tool_names_are_single_tokens(tok):
    frags = [
        '{"name": "',
        '", "arguments": {',
        '"zone_name": "',
        '"radius_m": ',
        ', "radius_m": ',
        '", "lat": ',
        ', "lon": ',
        '"drone_id": "',
        '", "target": "',
        ', "start_time": "',
        '"}}',
        "}}",
        *TOOL_NAMES,
    ]
    for f in frags:
        assert len(tok.encode(f)) == 1, f
    body = chat.tool_call_text("create_no_fly_zone", {"zone_name": "Alpha", "lat": 1.5, "lon": -2.25, "radius_m": 800})
    pieces = [tok.decode([i]) for i in tok.encode(body)]
    assert pieces == [
        "<tool_call>",
        '{"name": "',
        "create_no_fly_zone",
        '", "arguments": {',
        '"zone_name": "',
        "Alpha",
        '", "lat": ',
        "1",
        ".",
        "5",
        ', "lon": ',
        "-",
        "2",
        ".",
        "2",
        "5",
        ', "radius_m": ',
        "8",
        "0",
        "0",
        "}}",
        "</tool_call>",
    ]
    for t in corpus.AIRSPACE_TOOLS:  # the default tools block costs one token per tool
        assert len(tok.encode(chat.tool_signature(t))) == 1


def test_special_tokens_and_ids(tok):
    for s in SPECIAL_TOKENS:
        assert len(tok.encode(s)) == 1 and tok.id_to_token(tok.encode(s)[0]) == s
    assert tok.eos_token_id == tok.token_to_id("<|im_end|>") and tok.pad_token_id == tok.token_to_id("<|endoftext|>")
    assert tok.mask_token_id == tok.token_to_id("<|mask|>") and tok.eos_token_id in tok.eos_token_ids
    assert 1000 < tok.vocab_size <= 4096 and len(tok) == tok.vocab_size
    ids = tok.encode("<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|><|endoftext|>")
    assert tok.decode(ids, skip_special=True) == "assistant\n<tool_call>x</tool_call>"


def test_segments_tokenise_like_the_whole_text(tok):
    exs = corpus.generate("validation", 150, seed=4) + decision_groups.decision_examples("validation", 30)
    for e in exs:
        segs = chat.render_segments(e["messages"], e["tools"])
        ids, target = tok.encode_segments(segs)
        assert ids == tok.encode(chat.render(e["messages"], e["tools"]))
        assert tok.decode([i for i, t in zip(ids, target) if t]) == "".join(t for t, is_t in segs if is_t)
        assert target[-1] is False and ids[-2] == tok.eos_token_id and target[-2] is True


def test_decision_options_are_single_tokens_and_slots_concatenate(tok):
    for o in decision_groups.YES_NO + decision_groups.ACTIONS:
        assert len(tok.encode(o)) == 1, o
    for g in decision_groups.generate_groups("test", 20):
        slots = layout.answer_slots(g)
        ids = []
        for (prefix, opts), q in zip(slots, g.questions):
            ids += tok.encode(prefix) + tok.encode(opts[q.answer])
        assert ids == tok.encode(layout.answer_text(g))


def test_save_load_and_hugging_face_dirs(tok, tmp_path):
    tok.save(tmp_path / "clover")
    back = CloverTokenizer.from_pretrained(tmp_path / "clover")
    text = chat.render(corpus.generate("test", 1)[0]["messages"], corpus.AIRSPACE_TOOLS)
    assert back.encode(text) == tok.encode(text)
    assert (back.mask_token_id, back.eos_token_id, back.pad_token_id) == (
        tok.mask_token_id,
        tok.eos_token_id,
        tok.pad_token_id,
    )
    # a Hugging Face style dir without a mask token: tokens from tokenizer_config.json, mask None
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel()
    hf.add_special_tokens(["<|endoftext|>", "<|im_end|>", "<pad>"])
    d = tmp_path / "hf"
    d.mkdir()
    hf.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": {"content": "<|endoftext|>"}, "pad_token": "<pad>"})
    )
    t = CloverTokenizer.from_pretrained(d)
    assert t.mask_token_id is None and t.pad_token_id == hf.token_to_id("<pad>")
    assert t.eos_token_id == hf.token_to_id("<|im_end|>") and t.eos_token_ids == sorted(
        {hf.token_to_id("<|im_end|>"), hf.token_to_id("<|endoftext|>")}
    )
    with pytest.raises(FileNotFoundError):
        CloverTokenizer.load(tmp_path / "missing")


def test_transformers_reads_the_saved_dir(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok.save(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "Recall d17 and lift Alpha-2 ✈"
    assert hf.encode(text, add_special_tokens=False) == tok.encode(text)
    assert hf.mask_token == "<|mask|>" and hf.eos_token == "<|im_end|>"


def test_training_is_deterministic_and_small():
    texts = [chat.render(e["messages"], e["tools"]) for e in corpus.generate("train", 200, seed=1)]
    a, b = train_tokenizer(texts, 1024), train_tokenizer(texts, 1024)
    assert a.get_vocab() == b.get_vocab() and a.get_vocab_size() <= 1024


def test_token_categories_and_bytes():
    from pathlib import Path

    tok = CloverTokenizer.load(Path(__file__).parents[2] / "clover" / "assets" / "default")
    names, cats = tok.categories()
    kind = lambda text: names[cats[tok.encode(text)[0]]]
    assert kind("7") == "digit" and kind("Alpha") == "word" and kind("<tool_call>") == "markup"
    assert names[cats[tok.eos_token_id]] == "end" and kind(",") == "other" and len(cats) == tok.vocab_size
    text = 'Zone Ålesund 2.5 km «é» <tool_call>{"name": "x"}'
    assert b"".join(tok.token_bytes(i) for i in tok.encode(text)).decode() == text
    assert [tok.token_bytes(i) for i in tok.encode("é")] in ([b"\xc3\xa9"], [b"\xc3", b"\xa9"])
