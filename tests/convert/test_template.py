"""A converted checkpoint is prompted with its own chat template, token for token as
transformers' ``apply_chat_template`` renders it, and its tool-call format is parsed."""

import shutil

from clover.data.chat import parse_assistant
from clover.data.tokenizer import CloverTokenizer

# a Qwen-style template: tools as JSON lines in the system turn (not Clover's compact signatures)
TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nw1 w2\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n"
    "</tools><|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = [{"type": "function", "function": {"name": "w7", "parameters": {"type": "object", "properties": {}}}}]
MESSAGES = [{"role": "user", "content": "w3 w4 w5"}]


def test_a_converted_checkpoint_prompts_with_its_own_template(sources, tmp_path):
    from transformers import AutoTokenizer

    from clover import LLM
    from clover.convert import convert

    src = tmp_path / "src"
    shutil.copytree(sources["text"], src)
    (src / "chat_template.jinja").write_text(TEMPLATE)
    convert(src, tmp_path / "c", dtype="fp32", block_size=4, calib_seqs=0, progress=False)
    hf = AutoTokenizer.from_pretrained(tmp_path / "c")
    want = hf.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True)
    want = list(want["input_ids"] if hasattr(want, "keys") else want)
    tok = CloverTokenizer.load(tmp_path / "c")
    assert tok.chat_template == TEMPLATE
    assert tok.encode(tok.render_chat(MESSAGES, TOOLS, add_generation_prompt=True)) == want
    out = LLM(model=str(tmp_path / "c")).chat(MESSAGES, tools=TOOLS, max_tokens=2, policy="ar")
    assert out["usage"]["prompt_tokens"] == len(want)  # the server path renders the same prompt


def test_qwen_xml_tool_calls_parse():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    assert parse_assistant(text)[1] == [{"name": "get_weather", "arguments": {"city": "San Francisco", "days": 3}}]
    assert parse_assistant("<tool_call><function=f></function></tool_call>")[1] == [{"name": "f", "arguments": {}}]
