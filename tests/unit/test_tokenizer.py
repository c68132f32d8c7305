from rl_lab.tokenizer import build_tokenizer, load_tokenizer


def test_one_token_per_character_with_bos():
    tok = build_tokenizer()
    ids = tok("12+34=")["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert len(ids) == 1 + len("12+34=")
    assert tok.convert_ids_to_tokens(ids[1:]) == list("12+34=")


def test_round_trip_keeps_spaces_and_letters():
    tok = build_tokenizer()
    text = "rev:30417= cd:3,5>8"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_save_and_reload(tmp_path):
    tok = build_tokenizer()
    tok.save_pretrained(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.get_vocab() == tok.get_vocab()
    assert again("7+8=")["input_ids"] == tok("7+8=")["input_ids"]
    assert again.padding_side == "left"
    assert (again.pad_token_id, again.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)


def test_left_padding_and_unknown_characters():
    tok = build_tokenizer()
    enc = tok(["1+1=", "12+34="], padding=True)
    assert enc["input_ids"][0][:2] == [tok.pad_token_id] * 2
    assert enc["attention_mask"][0][:2] == [0, 0]
    assert tok("A")["input_ids"][1] == tok.unk_token_id  # upper case is not in the vocabulary


def test_special_tokens_are_dropped_on_decode():
    tok = build_tokenizer()
    ids = [tok.bos_token_id, *tok("42", add_special_tokens=False)["input_ids"], tok.eos_token_id,
           tok.pad_token_id, tok.convert_tokens_to_ids("<unused0>")]
    assert tok.decode(ids, skip_special_tokens=True) == "42"
